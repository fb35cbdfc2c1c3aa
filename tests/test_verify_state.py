"""``verify`` re-derives the state around the fold (DESIGN D14): tombstones, record rows, the index.

Each backend holds one scope whose journal is::

    1 capture c1   2 accept c1 → r1   3 capture c2   4 accept c2 → r2
    5 capture c3   6 accept c3 → r3   7 forget r1

Each test alters state that the journal events do not carry but the fold and the opened bodies
derive — the tombstones the forgotten-content guard reads (D7), a record row's payload digest,
trust or eligibility times, the indexed documents, the postings — and checks that ``verify`` is
``JOURNAL_CORRUPT`` at the altered record's last event. The in-memory store is altered through a
unit of work or its raw partition, the SQLite file with ``sqlite3`` while the service is closed;
the untampered world verifies (checked when it is built).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.canonical import ZERO_DIGEST
from engram_memory.connect import connect
from engram_memory.errors import ErrorCode
from engram_memory.journal import VerifyReport
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import IndexedDocument, JournalEvent, RecordRow, Store
from engram_memory.records import record_context
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import Harness, capture_args, distinctive_words, make_binding, ok
from engram_memory.testing.fakes import CAPTURE

A: Final = make_binding("tenant-verify", "workspace-state")
HIGH_WATER: Final = 7
CURSORS: Final = {"r1": 7, "r2": 4, "r3": 6}
"""The cursor each record is reported at: its last event (r1 was forgotten at 7)."""


def _build(harness: Harness) -> dict[str, str]:
    records: dict[str, str] = {}
    for name in ("r1", "r2", "r3"):
        _, records[name] = harness.accepted(A, f"idempotency-key:verify-{name}", words=distinctive_words(name))
    assert harness.forget(A, records["r1"], "idempotency-key:verify-forget-r1")["ok"]
    return records


def _verify(service: MemoryService) -> VerifyReport:
    return MemoryAdmin(service).verify(tenant_id=A.tenant_id, workspace_id=A.workspace_id)


def _assert_corrupt_at(report: VerifyReport, cursor: int) -> None:
    assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, cursor), report


# --------------------------------------------------------------------------- in-memory store


@attrs.frozen
class _MemoryWorld:
    store: InMemoryStore
    service: MemoryService
    records: dict[str, str]

    def row(self, name: str) -> RecordRow:
        with self.store.read(A.scope) as reader:
            row = reader.record(self.records[name])
        assert row is not None
        return row

    def put(self, name: str, **changes: Any) -> None:
        row = attrs.evolve(self.row(name), **changes)
        with self.store.write(A.scope) as unit:
            unit.put_record(row)

    def index_again(self, name: str) -> None:
        """Put the record back in the lexical index (one word), whatever its state."""
        row = self.row(name)
        document = IndexedDocument(
            record_id=row.record_id,
            lengths=(1, 0, 0, 0, 0),
            terms={"zebra": (1, 0, 0, 0, 0)},
            valid_from=row.valid_from,
            valid_to=row.valid_to,
            expires_at_ms=row.expires_at_ms,
        )
        with self.store.write(A.scope) as unit:
            unit.index_document(document)


@pytest.fixture
def memory() -> _MemoryWorld:
    store = InMemoryStore(secret=b"v" * 32)
    clock = ManualClock()
    service = MemoryService(
        store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    records = _build(Harness(service, clock))
    assert _verify(service) == VerifyReport(ok=True, high_water=HIGH_WATER)
    return _MemoryWorld(store=store, service=service, records=records)


def test_memory_lost_tombstones_are_journal_corrupt_at_the_forget(memory: _MemoryWorld) -> None:
    memory.store.raw_partition(A.scope).tombstones.clear()
    _assert_corrupt_at(_verify(memory.service), CURSORS["r1"])


def test_memory_tombstoned_row_with_another_payload_digest(memory: _MemoryWorld) -> None:
    memory.put("r1", payload_digest=ZERO_DIGEST)
    _assert_corrupt_at(_verify(memory.service), CURSORS["r1"])


@pytest.mark.parametrize(
    "changes",
    [
        {"payload_digest": ZERO_DIGEST},
        {"trust_valid": False},
        {"valid_from": 0},
        {"valid_to": 1},
        {"expires_at_ms": 1},
        {"accepted_cursor": 2},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_memory_live_row_that_its_body_does_not_hold(memory: _MemoryWorld, changes: dict[str, Any]) -> None:
    memory.put("r3", **changes)
    _assert_corrupt_at(_verify(memory.service), CURSORS["r3"])


@pytest.mark.parametrize(
    "changes", [{"state": "historical"}, {"record_digest": ZERO_DIGEST}], ids=lambda changes: next(iter(changes))
)
def test_memory_a_record_row_whose_state_or_digest_the_fold_does_not_derive(
    memory: _MemoryWorld, changes: dict[str, Any]
) -> None:
    memory.put("r2", **changes)
    report = _verify(memory.service)
    _assert_corrupt_at(report, CURSORS["r2"])
    assert report.detail == "record state differs from the fold"


def test_memory_a_record_row_that_vanished_is_journal_corrupt_at_its_last_event(memory: _MemoryWorld) -> None:
    del memory.store.raw_partition(A.scope).records[memory.records["r3"]]
    report = _verify(memory.service)
    _assert_corrupt_at(report, CURSORS["r3"])
    assert report.detail == "record state differs from the fold"


def test_memory_a_live_record_without_its_sealed_body_is_blob_missing(memory: _MemoryWorld) -> None:
    memory.put("r3", sealed=None)
    report = _verify(memory.service)
    assert (report.ok, report.code, report.cursor, report.detail) == (
        False,
        ErrorCode.BLOB_MISSING,
        CURSORS["r3"],
        "sealed body is missing",
    )


@pytest.mark.parametrize("plaintext", [b"\xff not JSON", b'{"record_id": "mem_x"} trailing', b"[1, 2]"])
def test_memory_a_body_that_authenticates_but_is_no_record_is_journal_corrupt(
    memory: _MemoryWorld, plaintext: bytes
) -> None:
    """A body sealed under the record's own key and context (it opens) that does not parse as a record."""
    record_id = memory.records["r3"]
    memory.put("r3", sealed=memory.service.vault.seal(record_context(A.scope, record_id), plaintext))
    report = _verify(memory.service)
    _assert_corrupt_at(report, CURSORS["r3"])
    assert report.detail == "record body does not re-derive its row"


def test_a_record_without_any_index_term_verifies(tmp_path: Path) -> None:
    """Texts of one- and two-letter words only: the record is indexed with no postings, and that is its state."""
    arguments = capture_args("idempotency-key:verify-no-terms")
    for component in arguments["payload"]["components"]:
        component["text"] = "a b, cd: ef."
    arguments["payload"]["citations"][0]["source_ref"] = "x:y"
    clock = ManualClock()
    accept = DefaultPolicy(admission="accept")
    services = {
        "memory": MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=accept, clock=clock),
        "sqlite": connect("sqlite:///" + str(tmp_path / "no-terms.db"), policy=accept, clock=clock),
    }
    for name, service in services.items():
        harness = Harness(service, clock)
        candidate_id = ok(harness.call(CAPTURE, arguments, A))["candidate_id"]
        ok(harness.admit(A, candidate_id, "idempotency-key:verify-no-terms-admit"))
        with service.store.read(A.scope) as reader:
            assert reader.index_stats().documents == 1
            assert reader.index_stats().total_lengths == (0, 0, 0, 0, 0)
        assert _verify(service) == VerifyReport(ok=True, high_water=2), name
        service.close()


def test_memory_trust_revoked_on_a_tombstoned_row(memory: _MemoryWorld) -> None:
    memory.put("r1", trust_valid=False)
    _assert_corrupt_at(_verify(memory.service), CURSORS["r1"])


def test_memory_current_record_missing_from_the_index(memory: _MemoryWorld) -> None:
    with memory.store.write(A.scope) as unit:
        unit.unindex(memory.records["r2"])
    _assert_corrupt_at(_verify(memory.service), CURSORS["r2"])


def test_memory_forgotten_record_back_in_the_index(memory: _MemoryWorld) -> None:
    memory.index_again("r1")
    _assert_corrupt_at(_verify(memory.service), CURSORS["r1"])


def test_memory_record_dropped_from_the_postings(memory: _MemoryWorld) -> None:
    for bucket in memory.store.raw_partition(A.scope).occurrences.values():
        bucket.pop(memory.records["r3"], None)
    _assert_corrupt_at(_verify(memory.service), CURSORS["r3"])


def test_memory_postings_with_other_occurrences(memory: _MemoryWorld) -> None:
    for bucket in memory.store.raw_partition(A.scope).occurrences.values():
        if memory.records["r2"] in bucket:
            bucket[memory.records["r2"]] = "0:9:9"
    _assert_corrupt_at(_verify(memory.service), CURSORS["r2"])


def test_memory_index_statistics_that_differ_from_the_documents(memory: _MemoryWorld) -> None:
    memory.store.raw_partition(A.scope).total_lengths[0] += 1
    _assert_corrupt_at(_verify(memory.service), HIGH_WATER)


# --------------------------------------------------------------------------- SQLite file


@attrs.frozen
class _SqliteWorld:
    db: Path
    records: dict[str, str]

    def execute(self, sql: str, record: str) -> int:
        """One statement (``:record``, ``:digest``) through a separate ``sqlite3`` connection; rows changed."""
        raw = sqlite3.connect(self.db)
        try:
            with raw:
                changed = raw.execute(sql, {"record": self.records[record], "digest": ZERO_DIGEST}).rowcount
        finally:
            raw.close()
        return changed

    def verify(self) -> VerifyReport:
        service = _open(self.db)
        try:
            return _verify(service)
        finally:
            service.close()


def _open(db: Path) -> MemoryService:
    return connect("sqlite:///" + str(db), policy=DefaultPolicy(admission="accept"), clock=ManualClock())


@pytest.fixture
def on_disk(tmp_path: Path) -> _SqliteWorld:
    db = tmp_path / "verify.db"
    service = _open(db)
    try:
        assert isinstance(service.clock, ManualClock)
        records = _build(Harness(service, service.clock))
        assert _verify(service) == VerifyReport(ok=True, high_water=HIGH_WATER)
    finally:
        service.close()
    return _SqliteWorld(db=db, records=records)


SQLITE_TAMPERS: Final = {  # name: (statement, the record it alters); the file holds one scope
    "delete-tombstones": ("DELETE FROM tombstones", "r1"),
    "tombstoned-payload-digest": ("UPDATE records SET payload_digest = :digest WHERE record_id = :record", "r1"),
    "live-payload-digest": ("UPDATE records SET payload_digest = :digest WHERE record_id = :record", "r2"),
    "live-trust-invalid": ("UPDATE records SET trust_valid = 0 WHERE record_id = :record", "r3"),
    "live-valid-from": ("UPDATE records SET valid_from = 0 WHERE record_id = :record", "r3"),
    "live-valid-to": ("UPDATE records SET valid_to = 1 WHERE record_id = :record", "r2"),
    "live-expires-at": ("UPDATE records SET expires_at_ms = 1 WHERE record_id = :record", "r3"),
    "delete-postings": ("DELETE FROM postings", "r2"),  # reported at the first current record
    "delete-postings-of-one-record": (
        "DELETE FROM postings WHERE doc = (SELECT doc FROM records WHERE record_id = :record)",
        "r3",
    ),
    "other-occurrences": (
        "UPDATE postings SET occurrence = '0:9:9' WHERE doc = (SELECT doc FROM records WHERE record_id = :record)",
        "r2",
    ),
    "delete-document": ("DELETE FROM documents WHERE record_id = :record", "r3"),
    "live-state": ("UPDATE records SET state = 'historical' WHERE record_id = :record", "r2"),
    "delete-record-row": ("DELETE FROM records WHERE record_id = :record", "r3"),
}


@pytest.mark.parametrize("name", sorted(SQLITE_TAMPERS))
def test_sqlite_tampered_state_is_journal_corrupt_at_the_record(on_disk: _SqliteWorld, name: str) -> None:
    statement, record = SQLITE_TAMPERS[name]
    assert on_disk.execute(statement, record) >= 1
    _assert_corrupt_at(on_disk.verify(), CURSORS[record])


# --------------------------------------------------------------------------- the chain, forged consistently

EVENT_DOMAIN: Final = b"graphify-memory/memory-journal-event/v1\x00"
FOLD_DOMAIN: Final = b"graphify-memory/memory-fold-state/v1\x00"
"""The domain strings of docs/contract.md, spelled out here rather than taken from the library."""


def _plain_json(value: Any) -> bytes:
    """Canonical JSON for the ASCII-only bodies of this world (sorted keys, no spaces), independent of the library."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _hashed(domain: bytes, value: Any) -> str:
    return "sha256:" + hashlib.sha256(domain + _plain_json(value)).hexdigest()


def _rechain(store: InMemoryStore, edit: Callable[[int, dict[str, Any]], None]) -> None:
    """Rewrite the scope's events: ``edit(cursor, body)`` alters a body, every digest and link is recomputed.

    The result is a chain whose every event hashes to its digest and links to the one before, so
    only a check of the altered field itself can find the forgery.
    """
    events = store.raw_partition(A.scope).events
    previous = ZERO_DIGEST
    for index, event in enumerate(events):
        body = json.loads(event.body)
        assert _plain_json(body) == event.body  # the stored bytes are the canonical form
        assert _hashed(EVENT_DOMAIN, {k: v for k, v in body.items() if k != "event_digest"}) == event.event_digest
        body["previous_event_digest"] = previous
        edit(event.cursor, body)
        body.pop("event_digest")
        body["event_digest"] = _hashed(EVENT_DOMAIN, body)
        events[index] = JournalEvent(cursor=event.cursor, event_digest=body["event_digest"], body=_plain_json(body))
        previous = body["event_digest"]


def test_memory_an_unchanged_rechain_still_verifies(memory: _MemoryWorld) -> None:
    """The forging helper reproduces the stored chain byte for byte (the tests below change one field)."""
    before = list(memory.store.raw_partition(A.scope).events)
    _rechain(memory.store, lambda _cursor, _body: None)
    assert memory.store.raw_partition(A.scope).events == before
    assert _verify(memory.service) == VerifyReport(ok=True, high_water=HIGH_WATER)


def test_memory_an_event_naming_another_cursor_is_journal_corrupt_there(memory: _MemoryWorld) -> None:
    def edit(cursor: int, body: dict[str, Any]) -> None:
        if cursor == 3:
            body["cursor"] = "9"

    _rechain(memory.store, edit)
    _assert_corrupt_at(_verify(memory.service), 3)


def test_memory_an_event_linked_to_another_predecessor_is_journal_corrupt_there(memory: _MemoryWorld) -> None:
    def edit(cursor: int, body: dict[str, Any]) -> None:
        if cursor == 4:
            body["previous_event_digest"] = ZERO_DIGEST  # as if it were the first event

    _rechain(memory.store, edit)
    _assert_corrupt_at(_verify(memory.service), 4)


def test_memory_a_non_canonical_spelling_of_a_body_is_journal_corrupt_there(memory: _MemoryWorld) -> None:
    """The same JSON value with spaces hashes the same once parsed, but the stored bytes must be canonical."""
    events = memory.store.raw_partition(A.scope).events
    event = events[1]
    spaced = json.dumps(json.loads(event.body), sort_keys=True).encode("ascii")
    assert spaced != event.body
    events[1] = JournalEvent(cursor=event.cursor, event_digest=event.event_digest, body=spaced)
    _assert_corrupt_at(_verify(memory.service), 2)


# --------------------------------------------------------------------------- rows the journal never made


def test_memory_a_record_row_without_an_event_is_journal_corrupt_at_the_high_water(memory: _MemoryWorld) -> None:
    ghost = attrs.evolve(memory.row("r2"), record_id="mem_" + "b" * 52)
    with memory.store.write(A.scope) as unit:
        unit.put_record(ghost)
    _assert_corrupt_at(_verify(memory.service), HIGH_WATER)


def test_memory_a_candidate_row_without_an_event_is_journal_corrupt_at_the_high_water(memory: _MemoryWorld) -> None:
    with memory.store.read(A.scope) as reader:
        rows = list(reader.candidates())
    assert [row.state for row in rows] == ["admitted"] * 3
    ghost = attrs.evolve(rows[0], candidate_id="candidate_" + "0" * 64, state="rejected", sealed=None)
    with memory.store.write(A.scope) as unit:
        unit.put_candidate(ghost)
    _assert_corrupt_at(_verify(memory.service), HIGH_WATER)


def test_memory_a_posting_of_a_document_that_is_not_indexed_is_journal_corrupt(memory: _MemoryWorld) -> None:
    partition = memory.store.raw_partition(A.scope)
    buckets = [bucket for bucket in partition.occurrences.values() if memory.records["r2"] in bucket]
    assert buckets
    for bucket in buckets:  # every term of r2, so whichever term verify reads holds the dangling entry
        bucket["mem_" + "c" * 52] = "0:1:1"
    _assert_corrupt_at(_verify(memory.service), HIGH_WATER)


def test_memory_an_indexed_record_is_reported_at_its_own_last_event(memory: _MemoryWorld) -> None:
    """A forgotten record back in the index is reported at its forget, not at a later high water."""
    assert isinstance(memory.service.clock, ManualClock)
    Harness(memory.service, memory.service.clock).pending(A, "idempotency-key:verify-later")
    memory.index_again("r1")
    report = _verify(memory.service)
    assert report.high_water == HIGH_WATER + 1
    _assert_corrupt_at(report, CURSORS["r1"])


SQLITE_HIGH_WATER_TAMPERS: Final = {  # name: statement (``:record`` names r2); reported at the high water
    "index-stats-documents": "UPDATE index_stats SET documents = documents + 1",
    "dangling-postings": (
        "INSERT INTO postings (scope_id, term, doc, occurrence)"
        " SELECT scope_id, term, 999999, occurrence FROM postings"
        " WHERE doc = (SELECT doc FROM records WHERE record_id = :record)"
    ),
    "record-row-without-event": (
        "INSERT INTO records (scope_id, record_id, state, record_digest, payload_digest, recorded_cursor,"
        " accepted_cursor, valid_from, trust_valid)"
        " SELECT scope_id, 'mem_' || substr(record_id, 5, 51) || 'z', 'historical', record_digest, payload_digest,"
        " recorded_cursor, accepted_cursor, valid_from, trust_valid FROM records WHERE record_id = :record"
    ),
}


@pytest.mark.parametrize("name", sorted(SQLITE_HIGH_WATER_TAMPERS))
def test_sqlite_tampered_index_or_rows_are_journal_corrupt_at_the_high_water(on_disk: _SqliteWorld, name: str) -> None:
    assert on_disk.execute(SQLITE_HIGH_WATER_TAMPERS[name], "r2") >= 1
    _assert_corrupt_at(on_disk.verify(), HIGH_WATER)


# --------------------------------------------------------------------------- the folded state's digest


def _expected_state_digest(store: Store) -> str:
    """``FOLD_STATE`` digest of the world's fold, built from the journal's bytes and the states the trace leads to."""
    with store.read(A.scope) as reader:
        events = [json.loads(event.body) for event in reader.events()]
        last = list(reader.events())[-1].event_digest
    candidates = sorted(body["candidate_id"] for body in events if body["operation"] == "capture")
    accepted = {body["record_id"]: body["record_digest"] for body in events if body["operation"] == "accept"}
    forgotten = {body["record_id"] for body in events if body["operation"] == "tombstone"}
    assert (len(candidates), len(accepted), len(forgotten)) == (3, 3, 1)
    return _hashed(
        FOLD_DOMAIN,
        {
            "high_water_cursor": str(HIGH_WATER),
            "journal_root": last,
            "candidates": [[cid, "admitted"] for cid in candidates],
            "records": [
                [rid, "tombstoned" if rid in forgotten else "accepted_current", accepted[rid]]
                for rid in sorted(accepted)
            ],
        },
    )


def _state_digest(service: MemoryService) -> str:
    return MemoryAdmin(service).state_digest(tenant_id=A.tenant_id, workspace_id=A.workspace_id)


def test_the_state_digest_hashes_the_head_and_every_candidate_and_record_state(
    memory: _MemoryWorld, on_disk: _SqliteWorld
) -> None:
    expected = _expected_state_digest(memory.store)
    assert _state_digest(memory.service) == expected
    service = _open(on_disk.db)
    try:
        assert _state_digest(service) == _expected_state_digest(service.store) == expected  # the same trace
    finally:
        service.close()
    memory.put("r2", state="historical")  # one record state changes: so does the digest
    assert _state_digest(memory.service) != expected
