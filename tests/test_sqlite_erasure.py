"""Erasure on disk (DESIGN D6): after withdraw and forget, the content is gone from every file.

One SQLite service (store file, its WAL, the vault file and its WAL) holds a kept record, a
record that is forgotten and a candidate that is withdrawn. The scanner reads the raw bytes of
every file of the service (``<db>``, ``<db>-wal``, ``<db>.vault``, ``<db>.vault-wal``, …).

* Before: the content is really there — a pending candidate's sealed envelope opens to its words;
  an admitted record is found by ``search`` and ``get`` and ``postings(word)`` returns it — and the
  scanner finds what *is* stored in clear bytes (the idempotency key strings, the record body's
  ciphertext, the wrapped data keys in the vault), which proves it can fail.
* After withdraw / forget returned, before and after ``PRAGMA wal_checkpoint(TRUNCATE)`` from a
  separate connection (no ``compact()``): no distinctive word of either content is in any file;
  the forgotten record's body ciphertext and the withdrawn candidate's are gone from the rows and
  from the bytes of every file, and so are their wrapped keys; ``vault.open`` of the envelopes
  captured before raises ``KeyUnavailableError``; postings, search and get no longer find them;
  the kept record is untouched and the control markers are still found.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.connect import connect
from engram_memory.errors import KeyUnavailableError, StoreUnavailableError
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.ports import SealedEnvelope
from engram_memory.records import candidate_context, record_context
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing import capture_args, confirm, distinctive_words, make_binding, ok
from engram_memory.testing.fakes import ADMISSION, CAPTURE, FORGET, GET, PURPOSE, SEARCH, WITHDRAW

BINDING: Final = make_binding("tenant-erasure", "workspace-1")
FORGOTTEN_WORDS: Final = distinctive_words("erasure-forgotten")
WITHDRAWN_WORDS: Final = distinctive_words("erasure-withdrawn")
KEPT_WORDS: Final = distinctive_words("erasure-kept")
FORGOTTEN_ATTESTATION: Final = "zqattestationforgottenxyzzy"
WITHDRAWN_ATTESTATION: Final = "zqattestationwithdrawnxyzzy"
CONTROL_KEY: Final = "idempotency-key:erasure-control-marker-7f3a"
"""The capture key of the kept record: the idempotency table keeps key strings in clear."""


class _Files:
    """Raw bytes of every file of one SQLite service."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def paths(self) -> list[Path]:
        return sorted(p for p in self.db.parent.iterdir() if p.name.startswith(self.db.name) and p.is_file())

    def holding(self, needles: dict[str, bytes]) -> list[str]:
        """``file: name`` for every needle found in any file."""
        found: list[str] = []
        for path in self.paths():
            data = path.read_bytes()
            found += [f"{path.name}: {name}" for name, needle in needles.items() if needle in data]
        return found

    def checkpoint(self) -> None:
        """``PRAGMA wal_checkpoint(TRUNCATE)`` on the store file through a separate connection."""
        raw = sqlite3.connect(self.db)
        try:
            busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            raw.close()
        assert busy == 0
        assert Path(f"{self.db}-wal").stat().st_size == 0


def _words(*groups: tuple[str, ...], extra: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {word: word.encode() for group in groups for word in group} | {word: word.encode() for word in extra}


def _search(service: MemoryService, query: str) -> list[str]:
    value = ok(service.call_tool(SEARCH, {"query": query, "purpose_ref": PURPOSE, "limit": 50}, BINDING))
    return [packet["record"]["record_id"] for packet in value["records"]]


def _get(service: MemoryService, record_id: str) -> dict[str, Any]:
    return service.call_tool(GET, {"record_id": record_id, "purpose_ref": PURPOSE}, BINDING)


def _raw_row(db: Path, sql: str, *params: str) -> tuple[Any, ...] | None:
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row: tuple[Any, ...] | None = raw.execute(sql, params).fetchone()
    finally:
        raw.close()
    return row


def _wrapped_key(db: Path, key_ref: str) -> bytes:
    row = _raw_row(Path(f"{db}.vault"), "SELECT wrapped FROM data_keys WHERE key_ref = ?", key_ref)
    assert row is not None
    return bytes(row[0])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    clock = ManualClock()
    service = connect(
        "sqlite:///" + str(tmp_path / "erasure.db"), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    yield service
    service.close()


def _capture(service: MemoryService, key: str, words: tuple[str, ...], attestation: str | None = None) -> str:
    value = ok(service.call_tool(CAPTURE, capture_args(key, words=words, attestation=attestation), BINDING))
    assert value["status"] == "committed_pending"
    candidate_id: str = value["candidate_id"]
    return candidate_id


def _admit(service: MemoryService, candidate_id: str, key: str) -> str:
    value = ok(service.call_tool(ADMISSION, {"candidate_id": candidate_id, "idempotency_key": key}, BINDING))
    assert value["outcome"]["status"] == "accepted"
    record_id: str = value["outcome"]["record_id"]
    return record_id


def _confirmed(service: MemoryService, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(service.clock, ManualClock)
    return ok(service.call_tool(tool, arguments, confirm(service, tool, arguments, BINDING, service.clock)))


def _sealed_candidate(service: MemoryService, candidate_id: str) -> SealedEnvelope:
    with service.store.read(BINDING.scope) as reader:
        row = reader.candidate(candidate_id)
    assert row is not None
    assert row.sealed is not None
    return row.sealed


def _sealed_record(service: MemoryService, record_id: str) -> SealedEnvelope:
    with service.store.read(BINDING.scope) as reader:
        row = reader.record(record_id)
        assert row is not None
        assert row.sealed is not None
        for word in FORGOTTEN_WORDS:  # the index holds the record under each of its words
            assert [posting.record_id for posting in reader.postings(word)] == [record_id]
    return row.sealed


class _Scenario:
    """A kept record, a record to forget and a candidate to withdraw, and what was seen of them."""

    def __init__(self, service: MemoryService) -> None:
        store, vault = service.store, service.vault
        assert isinstance(store, SQLiteStore)
        assert isinstance(vault, SQLiteKeyVault)
        self.service, self.vault, self.db = service, vault, Path(store.path)
        self.files = _Files(self.db)
        scope = BINDING.scope
        self.kept = _admit(service, _capture(service, CONTROL_KEY, KEPT_WORDS), CONTROL_KEY + ":admit")
        self.forgotten_candidate = _capture(
            service, "idempotency-key:erasure-forgotten", FORGOTTEN_WORDS, attestation=FORGOTTEN_ATTESTATION
        )
        self.withdrawn = _capture(
            service, "idempotency-key:erasure-withdrawn", WITHDRAWN_WORDS, attestation=WITHDRAWN_ATTESTATION
        )
        # before: the pending contents are in their sealed envelopes, whose keys are in the vault
        self.candidate_envelope = _sealed_candidate(service, self.forgotten_candidate)
        self.withdrawn_envelope = _sealed_candidate(service, self.withdrawn)
        opened = vault.open(self.withdrawn_envelope, candidate_context(scope, self.withdrawn))
        assert all(word.encode() in opened for word in (*WITHDRAWN_WORDS, WITHDRAWN_ATTESTATION))
        opened = vault.open(self.candidate_envelope, candidate_context(scope, self.forgotten_candidate))
        assert all(word.encode() in opened for word in (*FORGOTTEN_WORDS, FORGOTTEN_ATTESTATION))
        self.withdrawn_wrapped = _wrapped_key(self.db, self.withdrawn_envelope.key_ref)
        # and once admitted, search, get and the index find the record
        self.forgotten = _admit(service, self.forgotten_candidate, "idempotency-key:erasure-forgotten:admit")
        self.record_envelope = _sealed_record(service, self.forgotten)
        assert _search(service, FORGOTTEN_WORDS[0]) == [self.forgotten]
        got = ok(_get(service, self.forgotten))
        assert FORGOTTEN_WORDS[1] in got["record"]["components"][0]["text"]
        self.record_wrapped = _wrapped_key(self.db, self.record_envelope.key_ref)
        term_key = store._term_key  # the postings' on-disk key of a word
        self.term_keys = {f"term key of {word}": term_key(word) for word in FORGOTTEN_WORDS}
        assert len(self.files.holding(self.term_keys)) >= len(self.term_keys)  # the index holds them

    def check_controls(self) -> None:
        """The scanner finds what is stored in clear bytes; the words are not (sealed design)."""
        names = {path.name for path in self.files.paths()}
        assert {"erasure.db", "erasure.db-wal", "erasure.db.vault", "erasure.db.vault-wal"} <= names, names
        self.files.checkpoint()
        controls = {
            "control idempotency key": CONTROL_KEY.encode(),
            "forgotten record ciphertext": self.record_envelope.ciphertext,
            "withdrawn candidate ciphertext": self.withdrawn_envelope.ciphertext,
            "forgotten record wrapped key": self.record_wrapped,
            "withdrawn candidate wrapped key": self.withdrawn_wrapped,
        }
        assert sorted(name.split(": ")[1] for name in self.files.holding(controls)) == sorted(controls)
        assert self.files.holding(_words(FORGOTTEN_WORDS, WITHDRAWN_WORDS, KEPT_WORDS)) == []

    def withdraw(self) -> dict[str, bytes]:
        """Withdraw; check the files, the row and the vault; return what must stay gone."""
        arguments = {
            "candidate_id": self.withdrawn,
            "idempotency_key": "idempotency-key:erasure-w",
            "reason_ref": "reason:obsolete",
        }
        assert _confirmed(self.service, WITHDRAW, arguments)["key_destruction"] == "complete"
        gone = _words(WITHDRAWN_WORDS, extra=(WITHDRAWN_ATTESTATION,))
        assert self.files.holding(gone) == []  # as soon as withdraw returned
        self.files.checkpoint()
        gone |= {
            "withdrawn candidate ciphertext": self.withdrawn_envelope.ciphertext,
            "withdrawn candidate wrapped key": self.withdrawn_wrapped,
        }
        assert self.files.holding(gone) == []
        with pytest.raises(KeyUnavailableError):
            self.vault.open(self.withdrawn_envelope, candidate_context(BINDING.scope, self.withdrawn))
        assert not self.vault.holds(self.withdrawn_envelope.key_ref)
        sql = "SELECT state, key_ref, nonce, ciphertext FROM candidates WHERE candidate_id = ?"
        assert _raw_row(self.db, sql, self.withdrawn) == ("withdrawn", None, None, None)
        return gone

    def forget(self) -> dict[str, bytes]:
        """Forget; check the files, the rows, the index and the vault; return what must stay gone."""
        arguments = {
            "record_id": self.forgotten,
            "idempotency_key": "idempotency-key:erasure-f",
            "reason_ref": "reason:erasure",
        }
        assert _confirmed(self.service, FORGET, arguments)["projection_invalidation"] == "complete"
        gone = _words(FORGOTTEN_WORDS, extra=(FORGOTTEN_ATTESTATION,)) | self.term_keys
        assert self.files.holding(gone) == []  # as soon as forget returned: the store's WAL was truncated
        self.files.checkpoint()
        gone |= {
            "forgotten record ciphertext": self.record_envelope.ciphertext,
            "forgotten record wrapped key": self.record_wrapped,
            "forgotten candidate ciphertext": self.candidate_envelope.ciphertext,
        }
        assert self.files.holding(gone) == []
        sql = "SELECT state, key_ref, nonce, ciphertext FROM records WHERE record_id = ?"
        assert _raw_row(self.db, sql, self.forgotten) == ("tombstoned", None, None, None)
        assert _raw_row(self.db, "SELECT count(*) FROM documents WHERE record_id = ?", self.forgotten) == (0,)
        orphans = (
            "SELECT (SELECT count(*) FROM postings WHERE doc NOT IN (SELECT doc FROM documents)),"
            " (SELECT count(*) FROM document_terms WHERE doc NOT IN (SELECT doc FROM documents))"
        )
        assert _raw_row(self.db, orphans) == (0, 0)  # no posting or term list outlives its document
        counts = "SELECT (SELECT count(*) FROM postings), (SELECT sum(term_count) FROM document_terms)"
        held = _raw_row(self.db, counts)
        assert held is not None
        assert held[0] == held[1]
        scope = BINDING.scope
        for envelope, context in (
            (self.record_envelope, record_context(scope, self.forgotten)),
            (self.candidate_envelope, candidate_context(scope, self.forgotten_candidate)),
        ):
            with pytest.raises(KeyUnavailableError):
                self.vault.open(envelope, context)
            assert not self.vault.holds(envelope.key_ref)
        with self.service.store.read(scope) as reader:
            for word in FORGOTTEN_WORDS:
                assert reader.postings(word) == []
            assert list(reader.indexed_ids()) == [self.kept]
            assert reader.doomed_keys() == []
        assert _search(self.service, FORGOTTEN_WORDS[0]) == []
        assert _get(self.service, self.forgotten)["error"]["code"] == "NOT_FOUND"
        return gone


def test_withdraw_and_forget_leave_no_trace_of_the_content_in_any_file(service: MemoryService) -> None:
    scenario = _Scenario(service)
    scenario.check_controls()
    gone = scenario.withdraw()
    gone |= scenario.forget()
    assert scenario.files.holding(gone) == []
    # the kept record and the control marker are untouched; the journal still verifies
    assert _search(service, KEPT_WORDS[0]) == [scenario.kept]
    control = {"control idempotency key": CONTROL_KEY.encode()}
    assert scenario.files.holding(control) == ["erasure.db: control idempotency key"]
    report = MemoryAdmin(service).verify(tenant_id=BINDING.tenant_id, workspace_id=BINDING.workspace_id)
    assert report.ok, report
    assert report.high_water == 7


def test_compact_reports_a_wal_a_reader_keeps_in_use_and_a_retry_truncates_it(service: MemoryService) -> None:
    """``compact`` never reports success while the WAL still holds old page images: it raises, and a retry finishes."""
    record_id = _admit(service, _capture(service, CONTROL_KEY, KEPT_WORDS), "idempotency-key:erasure-compact-admit")
    assert isinstance(service.store, SQLiteStore)
    db = Path(service.store.path)
    store = SQLiteStore(db, busy_timeout_ms=50)
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 2  # holds a snapshot on the WAL
        with pytest.raises(StoreUnavailableError, match="retry"):
            store.compact()
        assert Path(f"{db}-wal").stat().st_size > 0
        reader.execute("ROLLBACK")
        store.compact()
        assert Path(f"{db}-wal").stat().st_size == 0
    finally:
        reader.close()
        store.close()
    assert _search(service, KEPT_WORDS[0]) == [record_id]


def test_an_erasure_under_a_reader_commits_and_the_next_one_scrubs_both(
    service: MemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    """A reader holding the WAL only delays the scrub: forget still answers, and says so in the log;
    the next erasure truncates the WAL and both records' term digests are gone from every file."""
    store = service.store
    assert isinstance(store, SQLiteStore)
    files = _Files(Path(store.path))
    words = {name: distinctive_words(f"erasure-{name}") for name in ("first", "second")}
    records = {
        name: _admit(
            service, _capture(service, f"idempotency-key:{name}", words[name]), f"idempotency-key:{name}:admit"
        )
        for name in words
    }
    term_key = store._term_key  # the postings' on-disk key of a word
    digests = {name: {f"{name} {word}": term_key(word) for word in words[name]} for name in words}
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM events").fetchone()[0] == 4  # a snapshot on the WAL
        with caplog.at_level("WARNING", logger="engram_memory"):
            forget = {"record_id": records["first"], "idempotency_key": "idempotency-key:forget-1", "reason_ref": "r:1"}
            assert _confirmed(service, FORGET, forget)["projection_invalidation"] == "complete"
        assert "write-ahead log in use after an erasure; it is truncated later" in caplog.messages
        assert files.holding(digests["first"])  # the old pages are still in the main file
    finally:
        reader.close()
    caplog.clear()
    forget = {"record_id": records["second"], "idempotency_key": "idempotency-key:forget-2", "reason_ref": "r:2"}
    assert _confirmed(service, FORGET, forget)["projection_invalidation"] == "complete"
    assert caplog.messages == []
    assert files.holding(digests["first"] | digests["second"]) == []
    assert store.pragmas()["busy_timeout"] == 5000  # the scrub's own timeout of 0 was restored


_KILLED_AFTER_AN_ERASURE: Final = """
import os, sqlite3, sys
from engram_memory import DefaultPolicy, ManualClock
from engram_memory.connect import connect
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.testing import capture_args, confirm, make_binding, ok
from engram_memory.testing.fakes import ADMISSION, CAPTURE, FORGET

db, words = sys.argv[1], tuple(sys.argv[2:])
clock = ManualClock()
service = connect("sqlite:///" + db, policy=DefaultPolicy(admission="accept"), clock=clock)
binding = make_binding("tenant-erasure", "workspace-1")
captured = ok(service.call_tool(CAPTURE, capture_args("idempotency-key:killed-1", words=words), binding))
admission = {"candidate_id": captured["candidate_id"], "idempotency_key": "idempotency-key:killed-2"}
record_id = ok(service.call_tool(ADMISSION, admission, binding))["outcome"]["record_id"]
reader = sqlite3.connect(db, isolation_level=None)  # a snapshot on the log: the forget cannot truncate it
reader.execute("BEGIN")
reader.execute("SELECT count(*) FROM events").fetchone()
forget = {"record_id": record_id, "idempotency_key": "idempotency-key:killed-3", "reason_ref": "r:1"}
ok(service.call_tool(FORGET, forget, confirm(service, FORGET, forget, binding, clock)))
vault = service.vault
assert isinstance(vault, SQLiteKeyVault)
key_ref = vault.seal("context", b"zqkilledvaultplaintext").key_ref
with open(db + ".wrapped", "wb") as out:  # the wrapped key, as the vault file holds it
    out.write(sqlite3.connect(db + ".vault").execute(
        "SELECT wrapped FROM data_keys WHERE key_ref = ?", (key_ref,)).fetchone()[0])
vault_reader = sqlite3.connect(db + ".vault", isolation_level=None)
vault_reader.execute("BEGIN")
vault_reader.execute("SELECT count(*) FROM data_keys").fetchone()
vault._conn.execute("PRAGMA busy_timeout = 50")  # the truncation fails at once rather than in 5 s
try:
    vault.destroy(key_ref)  # deleted, but the log keeps the old page: the truncation is busy
except Exception:
    pass
os._exit(0)  # killed: no close, no checkpoint
"""


def test_a_reopen_truncates_the_logs_a_killed_erasure_left(tmp_path: Path) -> None:
    """A process killed after an erasure's commit, before its log truncation, leaves the old pages in
    ``-wal`` (term digests of the forgotten record; a destroyed wrapped key): the next read-write
    open truncates both logs at once, not at the next erasure or the last close."""
    db = tmp_path / "erasure.db"
    words = distinctive_words("killed-erasure")
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_AN_ERASURE, str(db), *words], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    files = _Files(db)
    wrapped = (tmp_path / "erasure.db.wrapped").read_bytes()
    (tmp_path / "erasure.db.wrapped").unlink()
    with SQLiteStore(db, read_only=True) as peek:  # reads through the logs, truncates nothing
        digests = {f"term key of {word}": peek._term_key(word) for word in words}
    left = digests | {"destroyed wrapped key": wrapped}
    found = files.holding(left)
    assert {f"erasure.db-wal: {name}" for name in digests} <= set(found), found
    assert any(place.endswith(": destroyed wrapped key") for place in found), found  # the log's old page

    service = connect("sqlite:///" + str(db))
    try:
        assert files.holding(left) == []  # while the reopened service runs
        assert Path(f"{db}-wal").stat().st_size == 0
        assert Path(f"{db}.vault-wal").stat().st_size == 0
        assert MemoryAdmin(service).verify_scope(BINDING.scope).ok
    finally:
        service.close()
