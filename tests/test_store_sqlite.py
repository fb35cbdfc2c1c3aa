"""SQLiteStore: the Store semantics (checked against InMemoryStore too), durability, migrations."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
from hypothesis import HealthCheck, settings

from engram_memory import (
    ALL_TOOLS,
    Confirmation,
    DefaultPolicy,
    HostBinding,
    ManualClock,
    MemoryAdmin,
    MemoryService,
    connect,
)
from engram_memory.canonical import canonical_bytes
from engram_memory.errors import (
    EngramError,
    ErrorCode,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.ports import (
    FIELDS,
    CandidateRow,
    Clock,
    IdempotencyRow,
    IndexedDocument,
    IndexStats,
    JournalEvent,
    RankingQuery,
    RecordRow,
    SealedEnvelope,
    Store,
)
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.stores import sqlite as sqlite_store
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import (
    MigrationLedgerError,
    SchemaVersionError,
    SQLiteStore,
    _document_numbers,
    _errors,
    _schema,
)
from engram_memory.testing import (
    Harness,
    PersistedBytes,
    ServiceConformance,
    ServiceFactory,
    StoreConformance,
    TermTraces,
    distinctive_words,
    make_binding,
    service_machine,
)
from engram_memory.testing.fakes import CAPTURE, capture_args, make_key, ok
from engram_memory.testing.service import ReplaceEventBody
from tests.sqlite_faults import corrupt_table

REPO = Path(__file__).resolve().parents[1]
SCOPE = "scope-a"
OTHER = "scope-b"


# --------------------------------------------------------------------------- fixtures and builders


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: Store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "store.db")
    yield backend
    backend.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def sqlite(db_path: Path) -> Iterator[SQLiteStore]:
    backend = SQLiteStore(db_path)
    yield backend
    backend.close()


def event(cursor: int, tag: str = "") -> JournalEvent:
    return JournalEvent(cursor=cursor, event_digest=f"digest-{tag}-{cursor}", body=b'{"c":%d}' % cursor)


def sealed(marker: bytes = b"x") -> SealedEnvelope:
    return SealedEnvelope(key_ref="key_" + marker.hex(), nonce=b"n" * 12, ciphertext=b"ciphertext:" + marker)


def candidate(cid: str, state: Any = "pending", **changes: Any) -> CandidateRow:
    row = CandidateRow(
        candidate_id=cid,
        state=state,
        created_cursor=1,
        record_digest="sha256:" + "1" * 64,
        sealed=sealed(cid.encode()) if state == "pending" else None,
        policy_id="policy",
        policy_version="1",
    )
    return attrs.evolve(row, **changes)


def record(rid: str, **changes: Any) -> RecordRow:
    row = RecordRow(
        record_id=rid,
        state="accepted_current",
        record_digest="sha256:" + "2" * 64,
        payload_digest="sha256:" + "3" * 64,
        sealed=sealed(rid.encode()),
        recorded_cursor=1,
        accepted_cursor=2,
        valid_from=1_000,
        valid_to=None,
        expires_at_ms=None,
    )
    return attrs.evolve(row, **changes)


def document(rid: str, terms: dict[str, tuple[int, ...]], **changes: Any) -> IndexedDocument:
    lengths = tuple(sum(freqs[i] for freqs in terms.values()) for i in range(len(FIELDS)))
    doc = IndexedDocument(record_id=rid, lengths=lengths, terms=terms, valid_from=5, valid_to=None, expires_at_ms=None)
    return attrs.evolve(doc, **changes)


def snapshot(backend: Store, scope: str, terms: tuple[str, ...] = ()) -> dict[str, Any]:
    """Everything a reader can observe in ``scope`` (values compare equal across backends)."""
    with backend.read(scope) as reader:
        return {
            "high_water": reader.high_water(),
            "last": reader.last_event_digest(),
            "events": list(reader.events()),
            "candidates": list(reader.candidates()),
            "records": list(reader.records()),
            "stats": reader.index_stats(),
            "indexed": list(reader.indexed_ids()),
            "postings": {term: list(reader.postings(term)) for term in terms},
            "entries": {term: sorted(reader.index_entries(reader.term_postings(term)[0]).values()) for term in terms},
            "doomed": reader.doomed_keys(),
        }


def test_sqlite_store_satisfies_the_store_protocol(sqlite: SQLiteStore) -> None:
    typed: Store = sqlite  # checked by mypy
    assert typed.scopes() == []


# --------------------------------------------------------------------------- Store semantics (both backends)


def test_empty_scope_reads_nothing(store: Store) -> None:
    with store.read(SCOPE) as reader:
        assert reader.high_water() == 0
        assert reader.last_event_digest() is None
        assert list(reader.events()) == []
        assert reader.idempotency("p", "k") is None
        assert reader.candidate("c") is None
        assert reader.record("r") is None
        assert list(reader.candidates()) == []
        assert list(reader.records()) == []
        assert not reader.is_tombstoned_payload("d")
        assert not reader.confirmation_used("c")
        assert reader.index_stats() == IndexStats(documents=0, total_lengths=(0, 0, 0, 0, 0))
        assert reader.postings("term") == []
        assert list(reader.indexed_ids()) == []
        assert reader.doomed_keys() == []
    assert store.scopes() == []


def test_journal_is_dense_and_ordered(store: Store) -> None:
    for cursor in range(1, 6):
        with store.write(SCOPE) as unit:
            unit.append_event(event(cursor))
    with store.read(SCOPE) as reader:
        assert reader.high_water() == 5
        assert reader.last_event_digest() == event(5).event_digest
        assert [e.cursor for e in reader.events()] == [1, 2, 3, 4, 5]
        assert [e.cursor for e in reader.events(after=3)] == [4, 5]
        assert [e.cursor for e in reader.events(after=-7)] == [1, 2, 3, 4, 5]
        assert list(reader.events(after=5)) == []
        assert list(reader.events()) == [event(c) for c in range(1, 6)]


@pytest.mark.parametrize("cursor", [0, 1, 3, -1])
def test_append_event_refuses_a_cursor_that_is_not_next(store: Store, cursor: int) -> None:
    with store.write(SCOPE) as unit:
        unit.append_event(event(1))
    with pytest.raises(StoreConflictError), store.write(SCOPE) as unit:
        unit.append_event(event(cursor, "again"))
    with store.read(SCOPE) as reader:
        assert reader.high_water() == 1


def test_a_caught_conflict_leaves_the_unit_usable(store: Store) -> None:
    with store.write(SCOPE) as unit:
        unit.append_event(event(1))
        with pytest.raises(StoreConflictError):
            unit.append_event(event(1, "dup"))
        unit.append_event(event(2))
    assert snapshot(store, SCOPE)["events"] == [event(1), event(2)]


class BoomError(Exception):
    pass


def test_an_exception_rolls_back_every_write_of_the_unit(store: Store) -> None:
    with store.write(SCOPE) as unit:
        unit.append_event(event(1))
        unit.put_candidate(candidate("c1"))
        unit.put_record(record("mem_a"))
        unit.index_document(document("mem_a", {"alpha": (1, 0, 0, 0, 0)}))
        unit.doom_key("key_old")
    before = snapshot(store, SCOPE, ("alpha", "beta"))

    def failing_unit() -> None:
        with store.write(SCOPE) as unit:
            unit.append_event(event(2))
            unit.put_idempotency("p", "k", IdempotencyRow(intent_digest="i", response=b"{}"))
            unit.put_candidate(candidate("c1", "withdrawn"))
            unit.put_candidate(candidate("c2"))
            unit.put_record(record("mem_a", state="tombstoned", sealed=None))
            unit.add_tombstone("sha256:dead")
            unit.consume_confirmation("conf")
            unit.index_document(document("mem_a", {"beta": (0, 2, 0, 0, 0)}))
            unit.index_document(document("mem_b", {"beta": (1, 1, 1, 1, 1)}))
            unit.unindex("mem_b")
            unit.doom_key("key_new")
            unit.clear_doomed_key("key_old")
            assert unit.high_water() == 2  # the unit sees its own writes
            assert unit.candidate("c1") == candidate("c1", "withdrawn")
            raise BoomError

    def failing_first_unit() -> None:
        with store.write(OTHER) as unit:
            unit.append_event(event(1))
            raise BoomError

    with pytest.raises(BoomError):
        failing_unit()
    assert snapshot(store, SCOPE, ("alpha", "beta")) == before
    with store.read(SCOPE) as reader:
        assert reader.idempotency("p", "k") is None
        assert not reader.is_tombstoned_payload("sha256:dead")
        assert not reader.confirmation_used("conf")
    with pytest.raises(BoomError):
        failing_first_unit()
    assert store.scopes() == [SCOPE]


def test_idempotency_row_is_never_overwritten(store: Store) -> None:
    first = IdempotencyRow(intent_digest="intent-1", response=b'{"a":1}')
    with store.write(SCOPE) as unit:
        unit.put_idempotency("p", "key-1", first)
        with pytest.raises(StoreConflictError):
            unit.put_idempotency("p", "key-1", IdempotencyRow(intent_digest="intent-1", response=b"{}"))
    with pytest.raises(StoreConflictError), store.write(SCOPE) as unit:
        unit.put_idempotency("p", "key-1", IdempotencyRow(intent_digest="intent-2", response=b"{}"))
    with store.write(SCOPE) as unit:  # other principal, other scope: independent bindings
        unit.put_idempotency("q", "key-1", IdempotencyRow(intent_digest="intent-q", response=b"{}"))
    with store.write(OTHER) as unit:
        unit.put_idempotency("p", "key-1", IdempotencyRow(intent_digest="intent-o", response=b"{}"))
    with store.read(SCOPE) as reader:
        assert reader.idempotency("p", "key-1") == first
        assert reader.idempotency("q", "key-1") == IdempotencyRow(intent_digest="intent-q", response=b"{}")
        assert reader.idempotency("p", "key-2") is None
    with store.read(OTHER) as reader:
        assert reader.idempotency("p", "key-1") == IdempotencyRow(intent_digest="intent-o", response=b"{}")


def test_candidates_insert_replace_and_order(store: Store) -> None:
    ids = ["b", "a", "Z", "é", "中", "😀", "a\u0301", "candidate_10", "candidate_9"]
    with store.write(SCOPE) as unit:
        for cid in ids:
            unit.put_candidate(candidate(cid))
    admitted = candidate("a", "admitted", record_id="mem_x", outcome=b'{"status":"accepted"}', created_cursor=7)
    with store.write(SCOPE) as unit:
        unit.put_candidate(admitted)
    with store.read(SCOPE) as reader:
        assert [row.candidate_id for row in reader.candidates()] == sorted(ids)
        assert reader.candidate("a") == admitted
        assert reader.candidate("b") == candidate("b")
        assert reader.candidate("missing") is None
    with store.read(OTHER) as reader:
        assert reader.candidate("a") is None


def test_records_insert_replace_and_order(store: Store) -> None:
    with store.write(SCOPE) as unit:
        unit.put_record(record("mem_b", valid_to=9_000, expires_at_ms=10_000))
        unit.put_record(record("mem_a", trust_valid=False))
    tombstoned = record("mem_b", state="tombstoned", sealed=None, valid_to=9_000, expires_at_ms=10_000)
    with store.write(SCOPE) as unit:
        unit.put_record(tombstoned)
    with store.read(SCOPE) as reader:
        assert [row.record_id for row in reader.records()] == ["mem_a", "mem_b"]
        assert reader.record("mem_a") == record("mem_a", trust_valid=False)
        assert reader.record("mem_b") == tombstoned
    with store.read(OTHER) as reader:
        assert reader.record("mem_a") is None


def test_iterators_page_through_many_rows_in_order(store: Store) -> None:
    rng = random.Random(7)  # noqa: S311 - a reproducible trace
    ids = [f"c{rng.randrange(10**9):09d}" for _ in range(600)]
    with store.write(SCOPE) as unit:
        for cursor, cid in enumerate(ids, start=1):
            unit.append_event(event(cursor))
            unit.put_candidate(candidate(cid))
            unit.put_record(record(f"mem_{cid}"))
            unit.index_document(document(f"mem_{cid}", {"common": (1, 0, 0, 0, 0)}))
    with store.read(SCOPE) as reader:
        assert [row.candidate_id for row in reader.candidates()] == sorted(set(ids))
        assert [row.record_id for row in reader.records()] == sorted({f"mem_{c}" for c in ids})
        assert list(reader.indexed_ids()) == sorted({f"mem_{c}" for c in ids})
        assert [e.cursor for e in reader.events(after=100)] == list(range(101, 601))
        assert [p.record_id for p in reader.postings("common")] == sorted({f"mem_{c}" for c in ids})


def test_tombstones_confirmations_and_doomed_keys(store: Store) -> None:
    with store.write(SCOPE) as unit:
        unit.add_tombstone("sha256:t1")
        unit.add_tombstone("sha256:t1")
        unit.consume_confirmation("conf-1")
        with pytest.raises(StoreConflictError):
            unit.consume_confirmation("conf-1")
        for key in ("key_c", "key_a", "key_b", "key_a"):
            unit.doom_key(key)
        unit.clear_doomed_key("key_b")
        unit.clear_doomed_key("key_unknown")
    with pytest.raises(StoreConflictError), store.write(SCOPE) as unit:
        unit.consume_confirmation("conf-1")
    with store.write(OTHER) as unit:
        unit.consume_confirmation("conf-1")  # confirmations are per scope
    with store.read(SCOPE) as reader:
        assert reader.is_tombstoned_payload("sha256:t1")
        assert not reader.is_tombstoned_payload("sha256:t2")
        assert reader.confirmation_used("conf-1")
        assert reader.doomed_keys() == ["key_a", "key_c"]
    with store.read(OTHER) as reader:
        assert not reader.is_tombstoned_payload("sha256:t1")
        assert reader.doomed_keys() == []


def test_lexical_index_postings_stats_and_unindex(store: Store) -> None:
    doc_b = document("mem_b", {"alpha": (1, 0, 2, 0, 0), "gamma": (0, 0, 0, 0, 3)}, valid_to=50, expires_at_ms=99)
    doc_a = document("mem_a", {"alpha": (2, 1, 0, 0, 0), "beta": (0, 0, 0, 1, 0)})
    with store.write(SCOPE) as unit:
        unit.index_document(doc_b)
        unit.index_document(doc_a)
    with store.read(SCOPE) as reader:
        postings = reader.postings("alpha")
        assert [p.record_id for p in postings] == ["mem_a", "mem_b"]
        assert postings[0].frequencies == (2, 1, 0, 0, 0)
        assert postings[0].lengths == doc_a.lengths
        assert (postings[1].valid_from, postings[1].valid_to, postings[1].expires_at_ms) == (5, 50, 99)
        assert reader.postings("ALPHA") == []
        stats = reader.index_stats()
        assert stats.documents == 2
        assert stats.total_lengths == tuple(a + b for a, b in zip(doc_a.lengths, doc_b.lengths, strict=True))
        assert list(reader.indexed_ids()) == ["mem_a", "mem_b"]
    replacement = document("mem_b", {"delta": (1, 1, 1, 1, 1)})
    with store.write(SCOPE) as unit:
        unit.index_document(replacement)  # replaces the older entry of mem_b
    with store.read(SCOPE) as reader:
        assert [p.record_id for p in reader.postings("alpha")] == ["mem_a"]
        assert reader.postings("gamma") == []
        assert [p.record_id for p in reader.postings("delta")] == ["mem_b"]
        assert reader.index_stats().total_lengths == tuple(
            a + b for a, b in zip(doc_a.lengths, replacement.lengths, strict=True)
        )
    with store.write(SCOPE) as unit:
        unit.unindex("mem_a")
        unit.unindex("mem_a")
        unit.unindex("mem_never")
    with store.read(SCOPE) as reader:
        assert reader.postings("alpha") == []
        assert reader.postings("beta") == []
        assert list(reader.indexed_ids()) == ["mem_b"]
        assert reader.index_stats() == IndexStats(documents=1, total_lengths=replacement.lengths)
    with store.write(SCOPE) as unit:
        unit.unindex("mem_b")
    with store.read(SCOPE) as reader:
        assert reader.index_stats() == IndexStats(documents=0, total_lengths=(0, 0, 0, 0, 0))
        assert list(reader.indexed_ids()) == []
    with store.read(OTHER) as reader:
        assert reader.postings("delta") == []


def test_scopes_are_isolated_and_listed_sorted(store: Store) -> None:
    for scope in ("scope-z", "scope-a", "scope-m"):
        with store.write(scope) as unit:
            unit.append_event(event(1, scope))
            unit.put_candidate(candidate(f"c-{scope}"))
            unit.index_document(document(f"mem_{scope}", {"shared": (1, 0, 0, 0, 0)}))
    with store.write("scope-without-events") as unit:
        unit.put_candidate(candidate("c"))
    assert store.scopes() == ["scope-a", "scope-m", "scope-z"]
    with store.read("scope-m") as reader:
        assert [e.event_digest for e in reader.events()] == [event(1, "scope-m").event_digest]
        assert [row.candidate_id for row in reader.candidates()] == ["c-scope-m"]
        assert [p.record_id for p in reader.postings("shared")] == ["mem_scope-m"]
        assert reader.index_stats().documents == 1


def test_secret_is_32_bytes(store: Store) -> None:
    assert len(store.secret()) == 32
    assert store.secret() == store.secret()


NESTED: Final = r"^a unit of work is open on this thread$"
CLOSED: Final = r"^the store is closed$"


def test_a_unit_opened_inside_an_open_unit_is_refused_and_the_open_unit_commits(store: Store) -> None:
    """Both stores refuse a nested unit (any scope) from its ``with`` statement; the caller may go on and commit.

    SQLite runs with its default busy timeout: the refusal does not wait for it (it used to, then
    said another writer held the store).
    """
    entered: list[str] = []

    def nested(scope: str) -> None:
        with store.write(scope) as inner:
            entered.append(scope)  # never runs
            inner.append_event(event(1, "inner"))

    with store.write(SCOPE) as outer:
        outer.append_event(event(1))
        outer.put_candidate(candidate("c-outer"))
        for scope in (SCOPE, OTHER):
            with pytest.raises(StoreUnavailableError, match=NESTED):
                nested(scope)
        outer.append_event(event(2))
    assert entered == []
    assert snapshot(store, SCOPE)["events"] == [event(1), event(2)]
    assert [row.candidate_id for row in snapshot(store, SCOPE)["candidates"]] == ["c-outer"]
    assert snapshot(store, OTHER) == snapshot(store, "scope-never-written")
    assert store.scopes() == [SCOPE]
    with store.write(OTHER) as unit:  # the thread's next unit is not nested
        unit.append_event(event(1, "later"))
    assert store.scopes() == [SCOPE, OTHER]


def test_a_nested_unit_refused_inside_a_unit_that_rolls_back_leaves_nothing(store: Store) -> None:
    def rolled_back() -> None:
        with store.write(SCOPE) as outer:
            outer.append_event(event(1))
            with pytest.raises(StoreUnavailableError, match=NESTED), store.write(OTHER):
                pass
            raise BoomError

    with pytest.raises(BoomError):
        rolled_back()
    assert store.scopes() == []
    with store.write(SCOPE) as unit:  # the rolled-back unit left the thread free to write
        unit.append_event(event(1, "again"))
    assert snapshot(store, SCOPE)["events"] == [event(1, "again")]


def test_a_closed_store_refuses_read_write_and_scopes_and_keeps_its_secret(store: Store) -> None:
    """Both stores: after ``close`` (idempotent) the port methods raise StoreUnavailableError; ``secret`` answers."""
    with store.write(SCOPE) as unit:
        unit.append_event(event(1))
    secret = store.secret()
    store.close()
    store.close()
    for _ in range(2):
        with pytest.raises(StoreUnavailableError, match=CLOSED), store.read(SCOPE):
            pass
        with pytest.raises(StoreUnavailableError, match=CLOSED), store.write(SCOPE):
            pass
        with pytest.raises(StoreUnavailableError, match=CLOSED):
            store.scopes()
        assert store.secret() == secret
        store.close()


def test_a_view_and_a_unit_open_when_the_store_closes_finish_normally(store: Store) -> None:
    """``close`` refuses what starts after it; what is open goes on (the unit commits).

    The SQLite unit's commit is read back through another store on the same file.
    """
    with store.write(SCOPE) as unit:
        unit.append_event(event(1))
    with store.read(SCOPE) as reader, store.write(SCOPE) as unit:
        store.close()
        assert reader.high_water() == 1
        unit.append_event(event(2))
        assert unit.high_water() == 2
    with pytest.raises(StoreUnavailableError, match=CLOSED), store.read(SCOPE):
        pass
    if isinstance(store, InMemoryStore):
        assert [e.cursor for e in store.raw_partition(SCOPE).events] == [1, 2]
    else:
        assert isinstance(store, SQLiteStore)
        again = SQLiteStore(store.path)
        try:
            assert [e.cursor for e in snapshot(again, SCOPE)["events"]] == [1, 2]
        finally:
            again.close()


def test_random_traces_match_the_in_memory_reference(tmp_path: Path) -> None:
    vocabulary = ("alpha", "beta", "gamma", "delta", "épée", "数据", "x_1")
    rids = [f"mem_{i}" for i in range(8)]
    for seed in range(3):
        rng = random.Random(seed)  # noqa: S311 - a reproducible trace
        reference = InMemoryStore()
        durable = SQLiteStore(tmp_path / f"trace-{seed}.db")
        try:
            for _ in range(60):
                scope = rng.choice((SCOPE, OTHER))
                operations = [_random_operation(rng, vocabulary, rids) for _ in range(rng.randrange(1, 5))]
                fail = rng.random() < 0.2
                outcomes = [_apply(backend, scope, operations, fail) for backend in (reference, durable)]
                assert outcomes[0] == outcomes[1]
                for name in (SCOPE, OTHER):
                    assert snapshot(reference, name, vocabulary) == snapshot(durable, name, vocabulary)
                assert reference.scopes() == durable.scopes()
        finally:
            durable.close()


def _random_operation(rng: random.Random, vocabulary: tuple[str, ...], rids: list[str]) -> tuple[str, Any]:
    kind = rng.choice(("index", "index", "unindex", "event", "candidate", "doom", "clear", "idem", "confirm"))
    if kind == "index":
        terms = {t: tuple(rng.randrange(3) for _ in FIELDS) for t in rng.sample(vocabulary, rng.randrange(1, 4))}
        terms = {t: f if any(f) else (1, 0, 0, 0, 0) for t, f in terms.items()}
        return kind, document(rng.choice(rids), terms, valid_from=rng.randrange(100))
    if kind in {"unindex", "candidate"}:
        return kind, rng.choice(rids)
    return kind, f"{kind}-{rng.randrange(4)}"


def _apply(backend: Store, scope: str, operations: list[tuple[str, Any]], fail: bool) -> list[str]:
    outcome: list[str] = []
    try:
        with backend.write(scope) as unit:
            for kind, value in operations:
                try:
                    _operate(unit, kind, value)
                    outcome.append("ok")
                except StoreConflictError:
                    outcome.append("conflict")
            if fail:
                raise RuntimeError("rollback")  # noqa: TRY301
    except RuntimeError:
        outcome.append("rolled back")
    return outcome


def _operate(unit: Any, kind: str, value: Any) -> None:
    if kind == "index":
        unit.index_document(value)
    elif kind == "unindex":
        unit.unindex(value)
    elif kind == "event":
        unit.append_event(event(unit.high_water() + 1, value))
    elif kind == "candidate":
        unit.put_candidate(candidate(value, "pending", created_cursor=unit.high_water()))
    elif kind == "doom":
        unit.doom_key(value)
    elif kind == "clear":
        unit.clear_doomed_key(value)
    elif kind == "idem":
        unit.put_idempotency("p", value, IdempotencyRow(intent_digest=value, response=b"{}"))
    else:
        unit.consume_confirmation(value)


# --------------------------------------------------------------------------- SQLite: durability and settings


def test_reopen_persists_everything(db_path: Path) -> None:
    terms = ("alpha", "beta")
    first = SQLiteStore(db_path)
    with first.write(SCOPE) as unit:
        unit.append_event(event(1))
        unit.append_event(event(2))
        unit.put_idempotency("p", "k", IdempotencyRow(intent_digest="i", response=b'{"v":1}'))
        unit.put_candidate(candidate("c1"))
        unit.put_record(record("mem_a", valid_to=77))
        unit.add_tombstone("sha256:t")
        unit.consume_confirmation("conf")
        unit.index_document(document("mem_a", {"alpha": (1, 2, 3, 4, 5), "beta": (0, 0, 0, 0, 1)}))
        unit.doom_key("key_1")
    before, secret = snapshot(first, SCOPE, terms), first.secret()
    first.close()
    second = SQLiteStore(db_path)
    try:
        assert snapshot(second, SCOPE, terms) == before
        assert second.secret() == secret
        assert second.scopes() == [SCOPE]
        with second.read(SCOPE) as reader:
            assert reader.idempotency("p", "k") == IdempotencyRow(intent_digest="i", response=b'{"v":1}')
            assert reader.is_tombstoned_payload("sha256:t")
            assert reader.confirmation_used("conf")
        with second.write(SCOPE) as unit:  # the journal continues where it stopped
            unit.append_event(event(3))
    finally:
        second.close()


def test_two_stores_have_different_secrets(tmp_path: Path) -> None:
    a, b = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    try:
        assert a.secret() != b.secret()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(("level", "code"), [("FULL", 2), ("NORMAL", 1)])
def test_pragmas_are_as_configured(tmp_path: Path, level: Any, code: int) -> None:
    backend = SQLiteStore(tmp_path / f"{level}.db", synchronous=level, busy_timeout_ms=1234)
    try:
        with backend.read(SCOPE):  # a second pooled connection gets the same settings
            pragmas = backend.pragmas()
        assert pragmas == {
            "journal_mode": "wal",
            "synchronous": code,
            "secure_delete": 1,
            "foreign_keys": 1,
            "busy_timeout": 1234,
        }
    finally:
        backend.close()


def test_default_synchronous_is_full(sqlite: SQLiteStore) -> None:
    assert sqlite.pragmas()["synchronous"] == 2


@pytest.mark.parametrize("kwargs", [{"synchronous": "OFF"}, {"busy_timeout_ms": -1}])
def test_invalid_settings_are_refused(tmp_path: Path, kwargs: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        SQLiteStore(tmp_path / "x.db", **kwargs)


def test_memory_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="file path"):
        SQLiteStore(":memory:")


def test_tables_are_strict_and_postings_clustered(sqlite: SQLiteStore, db_path: Path) -> None:
    with sqlite3.connect(db_path) as raw:
        tables = {row[1]: (row[4], row[5]) for row in raw.execute("PRAGMA table_list") if row[0] == "main"}
    raw.close()
    ours = {name: flags for name, flags in tables.items() if not name.startswith("sqlite_")}
    assert all(strict == 1 for _, strict in ours.values()), ours
    for name in ("postings", "tombstones", "confirmations", "doomed_keys", "meta"):
        assert ours[name][0] == 1, name  # WITHOUT ROWID
    assert ours["events"][0] == 0  # large rows stay in rowid tables


def test_secure_delete_scrubs_replaced_ciphertext(sqlite: SQLiteStore, db_path: Path) -> None:
    marker = b"MARKER-" + os.urandom(8).hex().encode()
    with sqlite.write(SCOPE) as unit:
        unit.put_candidate(candidate("c1", sealed=sealed(marker)))
    with sqlite.write(SCOPE) as unit:
        unit.put_candidate(candidate("c1", "withdrawn"))
    assert marker in _file_bytes(db_path)  # still in the WAL frame of the first commit
    _checkpoint(db_path)
    assert marker not in _file_bytes(db_path)


def test_index_terms_are_never_stored_in_clear(sqlite: SQLiteStore, db_path: Path) -> None:
    word = "zanzibarite" + os.urandom(4).hex()
    with sqlite.write(SCOPE) as unit:
        unit.index_document(document("mem_a", {word: (3, 0, 0, 0, 0)}))
    _checkpoint(db_path)
    with sqlite.read(SCOPE) as reader:
        assert [p.record_id for p in reader.postings(word)] == ["mem_a"]
    assert word.encode() not in _file_bytes(db_path)


def test_compact_keeps_the_data_and_empties_the_wal(sqlite: SQLiteStore, db_path: Path) -> None:
    with sqlite.write(SCOPE) as unit:
        for cursor in range(1, 41):
            rid = f"mem_{cursor:03d}"
            unit.append_event(event(cursor))
            unit.put_record(record(rid))
            unit.index_document(document(rid, {"alpha": (1, 0, 0, 0, 0), f"only{cursor}": (0, 1, 0, 0, 0)}))
    with sqlite.write(SCOPE) as unit:
        for cursor in range(1, 41, 2):
            unit.unindex(f"mem_{cursor:03d}")
    terms = ("alpha", "only1", "only2")
    before = snapshot(sqlite, SCOPE, terms)
    sqlite.compact()
    assert Path(f"{db_path}-wal").stat().st_size == 0
    assert snapshot(sqlite, SCOPE, terms) == before
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(41))


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _checkpoint(path: Path) -> None:
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        raw.close()


def test_reads_never_write(sqlite: SQLiteStore, db_path: Path) -> None:
    with sqlite.read("never-written") as reader:
        reader.high_water()
        list(reader.candidates())
        reader.postings("alpha")
    with sqlite.write("written-but-empty") as unit:
        unit.candidate("c")
        unit.clear_doomed_key("key")
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("SELECT count(*) FROM scopes").fetchone()[0] == 0
    finally:
        raw.close()


def test_a_view_is_dead_outside_its_block(sqlite: SQLiteStore) -> None:
    with sqlite.read(SCOPE) as reader:
        pass
    with pytest.raises(StoreUnavailableError):
        reader.high_water()
    with pytest.raises(StoreUnavailableError):
        list(reader.events())


def test_closed_store_is_unavailable(db_path: Path) -> None:
    backend = SQLiteStore(db_path)
    backend.close()
    with pytest.raises(StoreUnavailableError), backend.read(SCOPE):
        pass
    with pytest.raises(StoreUnavailableError), backend.write(SCOPE):
        pass
    assert "closed" in repr(backend)


def test_a_read_snapshot_does_not_see_later_commits(sqlite: SQLiteStore) -> None:
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1))
    with sqlite.read(SCOPE) as reader:
        assert reader.high_water() == 1
        with sqlite.write(SCOPE) as unit:  # a write inside a read works (another connection)
            unit.append_event(event(2))
        assert reader.high_water() == 1
        assert [e.cursor for e in reader.events()] == [1]
    with sqlite.read(SCOPE) as reader:
        assert reader.high_water() == 2


def test_locked_database_is_unavailable_and_retriable(db_path: Path) -> None:
    backend = SQLiteStore(db_path, busy_timeout_ms=50)
    with backend.write(SCOPE) as unit:
        unit.append_event(event(1))
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError, match="locked"), backend.write(SCOPE) as unit:
            unit.append_event(event(2))
        with backend.read(SCOPE) as reader:  # WAL: readers are not blocked by the writer
            assert reader.high_water() == 1
        blocker.execute("ROLLBACK")
        with backend.write(SCOPE) as unit:
            unit.append_event(event(2))
    finally:
        blocker.close()
        backend.close()


def test_a_nested_write_is_refused_before_it_touches_the_database(
    sqlite: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal takes no connection and leaves the writer lock to the open unit."""
    acquired: list[sqlite3.Connection] = []
    acquire = sqlite._acquire

    def counting_acquire() -> sqlite3.Connection:
        acquired.append(conn := acquire())
        return conn

    monkeypatch.setattr(sqlite, "_acquire", counting_acquire)
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1))
        assert len(acquired) == 1
        with pytest.raises(StoreUnavailableError, match=NESTED), sqlite.write(OTHER):
            pass
        assert len(acquired) == 1
        assert sqlite._writer_lock.locked()
        unit.append_event(event(2))
    assert not sqlite._writer_lock.locked()
    assert snapshot(sqlite, SCOPE)["high_water"] == 2
    assert sqlite.scopes() == [SCOPE]


class _WatchedLock:
    """The store's writer lock, noting when a thread asks for it while another holds it."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.contended = threading.Event()

    def acquire(self, timeout: float = -1) -> bool:
        if self._lock.locked():
            self.contended.set()
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


def test_a_unit_open_on_another_thread_still_makes_a_writer_wait(
    sqlite: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast refusal is for the thread that holds the unit: a writer on another thread waits, then commits."""
    lock = _WatchedLock(sqlite._writer_lock)
    monkeypatch.setattr(sqlite, "_writer_lock", lock)
    finished = threading.Event()
    order: list[str] = []
    errors: list[BaseException] = []

    def second_writer() -> None:
        try:
            with sqlite.write(SCOPE) as unit:
                order.append(f"second sees {unit.high_water()}")
                unit.append_event(event(unit.high_water() + 1, "second"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            finished.set()

    thread = threading.Thread(target=second_writer)
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1, "first"))
        thread.start()
        while not (lock.contended.wait(0.01) or finished.is_set()):
            pass  # until the second writer waits for the lock (or, wrongly, gave up without waiting)
        order.append("first commits")
    thread.join()
    assert errors == []
    assert lock.contended.is_set()
    assert order == ["first commits", "second sees 1"]
    assert [e.event_digest for e in snapshot(sqlite, SCOPE)["events"]] == [
        event(1, "first").event_digest,
        event(2, "second").event_digest,
    ]


def test_a_unit_of_another_store_on_the_file_still_waits_for_the_busy_timeout(db_path: Path) -> None:
    """Another store object (as another process would) is not this store's nested unit: SQLite's lock refuses it."""
    backend = SQLiteStore(db_path)
    other = SQLiteStore(db_path, busy_timeout_ms=50)
    try:
        with backend.write(SCOPE) as unit:
            unit.append_event(event(1))
            with pytest.raises(StoreUnavailableError, match="locked"), other.write(SCOPE) as nested:
                nested.append_event(event(1, "other"))
            unit.append_event(event(2))
        assert snapshot(other, SCOPE)["events"] == [event(1), event(2)]
    finally:
        other.close()
        backend.close()


def test_threads_share_one_store(sqlite: SQLiteStore) -> None:
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            for i in range(20):
                with sqlite.write(SCOPE) as unit:
                    unit.append_event(event(unit.high_water() + 1, f"{name}{i}"))
                with sqlite.read(SCOPE) as reader:
                    assert reader.high_water() >= 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"t{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with sqlite.read(SCOPE) as reader:
        assert [e.cursor for e in reader.events()] == list(range(1, 121))


_CHILD = """
import sys
import tempfile
from engram_memory.errors import StoreUnavailableError
from engram_memory.ports import JournalEvent
from engram_memory.stores.sqlite import SQLiteStore

path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = SQLiteStore(path, busy_timeout_ms=20000)
done = 0
while done < count:
    try:
        with store.write("shared") as unit:
            cursor = unit.high_water() + 1
            unit.append_event(JournalEvent(cursor=cursor, event_digest=f"{name}-{done}", body=b"{}"))
        done += 1
    except StoreUnavailableError:
        continue
store.close()
"""


def test_several_processes_share_one_file(db_path: Path) -> None:
    SQLiteStore(db_path).close()  # create the schema first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD, str(db_path), f"p{n}", "25"], env=env) for n in range(3)
    ]
    assert [child.wait(timeout=60) for child in children] == [0, 0, 0]
    backend = SQLiteStore(db_path)
    try:
        with backend.read("shared") as reader:
            events = list(reader.events())
        assert [e.cursor for e in events] == list(range(1, 76))
        assert len({e.event_digest for e in events}) == 75
    finally:
        backend.close()


# --------------------------------------------------------------------------- SQLite: migrations


def test_new_database_is_at_the_latest_version_with_a_ledger(sqlite: SQLiteStore, db_path: Path) -> None:
    assert sqlite.schema_version() == _schema.STORE_SCHEMA.latest == 4
    raw = sqlite3.connect(db_path)
    try:
        ledger = raw.execute("SELECT version, name, checksum FROM schema_migrations ORDER BY version").fetchall()
        application_id = raw.execute("PRAGMA application_id").fetchone()[0]
    finally:
        raw.close()
    assert ledger == [(m.version, m.name, m.checksum) for m in _schema.STORE_SCHEMA.migrations]
    assert application_id == _schema.STORE_APPLICATION_ID


def test_an_older_database_is_upgraded_on_open(db_path: Path) -> None:
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:  # a version-1 database, as the previous release left it
        assert _schema.migrate(raw, _schema.STORE_SCHEMA, target=1, seed=sqlite_store._seed_secret) == 1
        raw.execute("INSERT INTO scopes (scope) VALUES (?)", (SCOPE,))
        raw.execute("INSERT INTO events VALUES (1, 1, 'sha256:e1', CAST('{}' AS BLOB))")
        raw.execute(
            "INSERT INTO candidates (scope_id, candidate_id, state, created_cursor, record_digest, policy_id,"
            " policy_version) VALUES (1, 'c1', 'rejected', 1, 'sha256:r', 'policy', '1')"
        )
        assert _schema.schema_version(raw) == 1
        assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'postings'").fetchone()[0] == 0
    finally:
        raw.close()
    backend = SQLiteStore(db_path)
    try:
        assert backend.schema_version() == 4
        with backend.read(SCOPE) as reader:
            assert [e.event_digest for e in reader.events()] == ["sha256:e1"]
            assert reader.candidate("c1") == candidate("c1", "rejected", record_digest="sha256:r")
        with backend.write(SCOPE) as unit:
            unit.index_document(document("mem_a", {"alpha": (1, 0, 0, 0, 0)}))
        with backend.read(SCOPE) as reader:
            assert [p.record_id for p in reader.postings("alpha")] == ["mem_a"]
    finally:
        backend.close()


_V2_VOCABULARY = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")
_V2_STATS = (
    "INSERT INTO index_stats VALUES (?, 1, ?, ?, ?, ?, ?) ON CONFLICT (scope_id) DO UPDATE SET"  # noqa: S608 - constants
    " documents = documents + 1, " + ", ".join(f"total_{f} = total_{f} + excluded.total_{f}" for f in FIELDS)
)


def _v2_corpus(seed: int) -> list[tuple[RecordRow | None, IndexedDocument]]:
    """Record rows and index documents with every eligibility case (a row may be missing)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible corpus
    items: list[tuple[RecordRow | None, IndexedDocument]] = []
    for index in range(60):
        rid = f"mem_{rng.getrandbits(64):016x}"
        terms = {word: tuple(rng.choice((0, 0, 0, 1, 2, 5)) for _ in FIELDS) for word in rng.sample(_V2_VOCABULARY, 4)}
        terms = {word: tf for word, tf in terms.items() if any(tf)} if index % 17 else {}
        lengths = tuple(sum(tf[i] for tf in terms.values()) + rng.randrange(0, 9) for i in range(len(FIELDS)))
        doc = IndexedDocument(
            record_id=rid,
            lengths=lengths,
            terms=terms,
            valid_from=rng.choice((5, 5, 5, 900)),
            valid_to=rng.choice((None, None, 400, 600)),
            expires_at_ms=rng.choice((None, None, 700)),
        )
        row = record(
            rid,
            state=rng.choice(("accepted_current",) * 5 + ("historical",)),
            trust_valid=rng.random() > 0.1,
            valid_from=doc.valid_from,
            valid_to=doc.valid_to,
            expires_at_ms=doc.expires_at_ms,
        )
        items.append((None if index % 23 == 5 else row, doc))
    return items


def _write_v2_index(conn: sqlite3.Connection, term_keys: dict[str, bytes], scope_id: int, doc: IndexedDocument) -> None:
    """Index ``doc`` into the version-2 tables exactly as the version-2 store wrote it."""
    keyed = sorted((term_keys[term], tf) for term, tf in doc.terms.items())
    tail = (*doc.lengths, doc.valid_from, doc.valid_to, doc.expires_at_ms)
    conn.executemany(
        "INSERT INTO postings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(scope_id, key, doc.record_id, *tf, *tail) for key, tf in keyed],
    )
    conn.execute(
        "INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (scope_id, doc.record_id, *doc.lengths, len(keyed), b"".join(key for key, _ in keyed)),
    )
    conn.execute(_V2_STATS, (scope_id, *doc.lengths))


def _ranked(backend: Store, scope: str, queries: list[tuple[str, ...]]) -> list[list[Any]]:
    ranker = LexicalRanker()
    with backend.read(scope) as reader:
        return [
            [(h.record_id, h.score.hex(), h.recency.hex(), h.lexical.hex()) for h in ranker.rank(reader, query)]
            for query in (RankingQuery(terms=terms, valid_as_of=500, now_ms=650) for terms in queries)
        ]


def _build_v2_file(path: Path, corpora: dict[str, list[tuple[RecordRow | None, IndexedDocument]]]) -> None:
    """A version-2 file: schema and state through a v2-only store, index rows as version 2 wrote them."""
    v2_only = attrs.evolve(_schema.STORE_SCHEMA, migrations=_schema.STORE_SCHEMA.migrations[:2])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_store, "STORE_SCHEMA", v2_only)
        with SQLiteStore(path) as old:
            assert old.schema_version() == 2
            term_keys = {word: old._term_key(word) for word in _V2_VOCABULARY}
            for scope in corpora:
                with old.write(scope) as unit:
                    unit.append_event(event(1, scope))
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("BEGIN")
        for scope_id, items in enumerate(corpora.values(), start=1):
            for row, doc in items:
                if row is not None:  # the record row as version 1 wrote it
                    raw.execute(
                        f"INSERT INTO records (scope_id, {sqlite_store._RECORD_COLUMNS})"  # noqa: S608 - constants
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (scope_id, *sqlite_store._record_values(row)),
                    )
                _write_v2_index(raw, term_keys, scope_id, doc)
        raw.execute("COMMIT")
    finally:
        raw.close()


def _load(backend: Store, corpora: dict[str, list[tuple[RecordRow | None, IndexedDocument]]]) -> Store:
    for scope, items in corpora.items():
        with backend.write(scope) as unit:
            unit.append_event(event(1, scope))
            for row, doc in items:
                if row is not None:
                    unit.put_record(row)
                unit.index_document(doc)
    return backend


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_index_migrates_and_searches_identically(db_path: Path, version: int) -> None:
    """A version-2 index (and the version-3 file its migration makes) opens at 4 and answers as a fresh store.

    Version 4 gives each indexed record row its document number: every hit resolves to its row
    through the covering index ``records_by_document``, one lookup per hit.
    """
    corpora = {SCOPE: _v2_corpus(1), OTHER: _v2_corpus(2)}
    _build_v2_file(db_path, corpora)
    if version == 3:
        raw = sqlite3.connect(db_path, isolation_level=None)
        try:
            assert _schema.migrate(raw, _schema.STORE_SCHEMA, target=3) == 3
            assert "doc" not in [column[1] for column in raw.execute("PRAGMA table_info(records)")]
        finally:
            raw.close()
    reference = _load(InMemoryStore(), corpora)
    fresh = _load(SQLiteStore(db_path.with_name("fresh.db")), corpora)
    rng = random.Random(3)  # noqa: S311 - reproducible queries
    queries = [tuple(rng.sample(_V2_VOCABULARY, rng.randrange(1, 4))) for _ in range(12)]
    queries.append(("alpha", "alpha", "absent"))
    migrated = SQLiteStore(db_path)
    try:
        assert migrated.schema_version() == 4
        raw = sqlite3.connect(db_path)
        try:
            named = raw.execute("SELECT scope_id, record_id, doc FROM records WHERE doc IS NOT NULL").fetchall()
            indexed = raw.execute(
                "SELECT d.scope_id, d.record_id, d.doc FROM documents AS d"
                " JOIN records AS r ON r.scope_id = d.scope_id AND r.record_id = d.record_id"
            ).fetchall()
            plan = raw.execute("EXPLAIN QUERY PLAN " + sqlite_store._INDEX_ENTRIES, ('["1", "2"]', 1)).fetchall()
        finally:
            raw.close()
        assert sorted(named) == sorted(indexed)
        assert len(named) == sum(row is not None for items in corpora.values() for row, _ in items)
        assert any("COVERING INDEX records_by_document" in row[3] for row in plan), plan
        for backend in (migrated, fresh):
            for scope in corpora:
                assert snapshot(backend, scope, _V2_VOCABULARY) == snapshot(reference, scope, _V2_VOCABULARY)
                assert _ranked(backend, scope, queries) == _ranked(reference, scope, queries)
        assert all(_ranked(reference, SCOPE, queries)[:12])
        for backend in (migrated, reference):  # and the migrated index keeps working
            with backend.write(SCOPE) as unit:
                unit.unindex(corpora[SCOPE][0][1].record_id)
                unit.index_document(document("mem_new", {"alpha": (1, 0, 2, 0, 0)}))
        assert snapshot(migrated, SCOPE, _V2_VOCABULARY) == snapshot(reference, SCOPE, _V2_VOCABULARY)
        assert _ranked(migrated, SCOPE, queries) == _ranked(reference, SCOPE, queries)
    finally:
        migrated.close()
        fresh.close()


def test_a_newer_database_is_refused(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute("PRAGMA user_version = 5")
    raw.close()
    with pytest.raises(SchemaVersionError) as caught:
        SQLiteStore(db_path)
    error = caught.value
    assert isinstance(error, EngramError)
    assert error.code is ErrorCode.MIGRATION_LEDGER_INVALID
    assert not error.retriable
    assert (error.found, error.supported) == (5, 4)
    assert "newer" in " ".join(error.__notes__)


def test_a_tampered_ledger_is_refused(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    raw = sqlite3.connect(db_path)
    with raw:
        raw.execute("UPDATE schema_migrations SET checksum = 'sha256:0' WHERE version = 2")
    raw.close()
    with pytest.raises(MigrationLedgerError):
        SQLiteStore(db_path)


def test_a_foreign_database_is_refused(db_path: Path) -> None:
    raw = sqlite3.connect(db_path)
    with raw:
        raw.execute("CREATE TABLE unrelated (x)")
    raw.close()
    with pytest.raises(MigrationLedgerError):
        SQLiteStore(db_path)


def test_a_failing_migration_leaves_the_file_unchanged(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SQLiteStore(db_path).close()
    broken = _schema.SchemaSpec(
        kind="store",
        application_id=_schema.STORE_APPLICATION_ID,
        migrations=(
            *_schema.STORE_SCHEMA.migrations,
            _schema.Migration(5, "broken", "CREATE TABLE half_done (x INTEGER) STRICT; THIS IS NOT SQL"),
        ),
    )
    monkeypatch.setattr(sqlite_store, "STORE_SCHEMA", broken)
    with pytest.raises(StoreUnavailableError):
        SQLiteStore(db_path)
    monkeypatch.undo()
    raw = sqlite3.connect(db_path)
    try:
        assert _schema.schema_version(raw) == 4
        assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0
        assert raw.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 4
    finally:
        raw.close()
    SQLiteStore(db_path).close()


def test_not_a_database_is_corrupt(db_path: Path) -> None:
    db_path.write_bytes(b"this is not an SQLite file, just bytes" * 200)
    with pytest.raises(StoreCorruptError):
        SQLiteStore(db_path)


def test_an_unknown_record_state_is_corrupt_to_every_reader(sqlite: SQLiteStore, db_path: Path) -> None:
    """A state outside the schema's CHECK (written past it) is JOURNAL_CORRUPT to ``record`` and ``index_entries``."""
    with sqlite.write(SCOPE) as unit:
        unit.put_record(record("mem_a"))
        unit.index_document(document("mem_a", {"alpha": (1, 0, 0, 0, 0)}))
    raw = sqlite3.connect(db_path, isolation_level=None)
    try:
        raw.execute("PRAGMA ignore_check_constraints = ON")
        assert raw.execute("UPDATE records SET state = 'limbo' WHERE record_id = 'mem_a'").rowcount == 1
    finally:
        raw.close()
    with sqlite.read(SCOPE) as reader:
        keys = reader.term_postings("alpha")[0]
        assert len(keys) == 1
        with pytest.raises(StoreCorruptError) as caught:
            reader.index_entries(keys)
        assert caught.value.code is ErrorCode.JOURNAL_CORRUPT
        with pytest.raises(StoreCorruptError):
            reader.record("mem_a")


def test_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        SQLiteStore(tmp_path / "missing-dir" / "store.db")


# --------------------------------------------------------------------------- SQLite: error translation


def _error(kind: type[sqlite3.Error], code: int, name: str) -> sqlite3.Error:
    error = kind("message")
    error.sqlite_errorcode = code
    error.sqlite_errorname = name
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_error(sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY"), StoreUnavailableError),
        (_error(sqlite3.OperationalError, sqlite3.SQLITE_BUSY_SNAPSHOT, "SQLITE_BUSY_SNAPSHOT"), StoreUnavailableError),
        (_error(sqlite3.OperationalError, sqlite3.SQLITE_LOCKED, "SQLITE_LOCKED"), StoreUnavailableError),
        (_error(sqlite3.OperationalError, sqlite3.SQLITE_IOERR, "SQLITE_IOERR"), StoreUnavailableError),
        (_error(sqlite3.OperationalError, sqlite3.SQLITE_FULL, "SQLITE_FULL"), StoreUnavailableError),
        (_error(sqlite3.DatabaseError, sqlite3.SQLITE_CORRUPT, "SQLITE_CORRUPT"), StoreCorruptError),
        (_error(sqlite3.DatabaseError, sqlite3.SQLITE_NOTADB, "SQLITE_NOTADB"), StoreCorruptError),
        (_error(sqlite3.IntegrityError, sqlite3.SQLITE_CONSTRAINT, "SQLITE_CONSTRAINT"), StoreConflictError),
        (sqlite3.ProgrammingError("Cannot operate on a closed database."), StoreUnavailableError),
    ],
)
def test_sqlite_errors_are_translated(error: sqlite3.Error, expected: type[Exception]) -> None:
    translated = _errors.translate(error, "test")
    assert type(translated) is expected
    assert not isinstance(translated, sqlite3.Error)


def test_commit_failures_are_busy_or_unknown() -> None:
    busy = _error(sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY")
    io = _error(sqlite3.OperationalError, sqlite3.SQLITE_IOERR, "SQLITE_IOERR")
    assert type(_errors.commit_failure(busy, still_in_transaction=True)) is StoreUnavailableError
    assert type(_errors.commit_failure(busy, still_in_transaction=False)) is StoreOutcomeUnknownError
    assert type(_errors.commit_failure(io, still_in_transaction=True)) is StoreOutcomeUnknownError


class _FailingCommit:
    """A connection whose COMMIT fails after the transaction ended (the outcome is unknown)."""

    in_transaction = False

    def execute(self, sql: str) -> None:
        raise _error(sqlite3.OperationalError, sqlite3.SQLITE_IOERR, "SQLITE_IOERR")


def test_an_io_error_during_commit_is_an_unknown_outcome() -> None:
    with pytest.raises(StoreOutcomeUnknownError) as caught:
        SQLiteStore._commit(_FailingCommit())  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, sqlite3.Error)


# --------------------------------------------------------------------------- a full service on SQLite

TENANT, WORKSPACE = "tenant-1", "workspace-1"
DISTINCTIVE_WORD = "zanzibarite"
CAPTURE_ARGS: dict[str, Any] = {
    "idempotency_key": "capture-key-000001",
    "payload": {
        "schema_version": 2,
        "purpose_ref": "purpose:test",
        "valid_time": {"t": 1_767_225_600_000},
        "components": [
            {
                "component_id": "c1",
                "kind": "decision",
                "text": f"We chose the {DISTINCTIVE_WORD} quorum protocol for the ledger",
                "citation_ids": ["cit1"],
            }
        ],
        "primary_component_id": "c1",
        "primary_event": {"at": 1_767_225_600_000, "type_ref": "type:decision", "citation_id": "cit1"},
        "citations": [
            {
                "citation_id": "cit1",
                "source_ref": "doc:1",
                "locator": {"scheme": "line", "value": "1"},
                "content_digest": "sha256:" + "a" * 64,
            }
        ],
    },
    "evidence": {"evidence_ref": "ev:1", "evidence_digest": "sha256:" + "b" * 64, "citation_ids": ["cit1"]},
}


def _service(tmp_path: Path, clock: ManualClock) -> MemoryService:
    return MemoryService(
        store=SQLiteStore(tmp_path / "memory.db"),
        vault=SQLiteKeyVault(tmp_path / "vault.db", master_key_file=tmp_path / "master.key"),
        policy=DefaultPolicy(admission="accept"),
        clock=clock,
    )


def _close(service: MemoryService) -> None:
    service.store.close()
    closer = getattr(service.vault, "close", None)
    if closer is not None:
        closer()


def test_a_memory_service_runs_on_sqlite_and_survives_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    binding = HostBinding(
        tenant_id=TENANT,
        workspace_id=WORKSPACE,
        principal="principal-1",
        agent_id="agent-1",
        session="session-1",
        purpose_ref="purpose:test",
        tools=ALL_TOOLS,
    )
    service = _service(tmp_path, clock)
    try:
        captured = service.call_tool("engram_memory_capture", CAPTURE_ARGS, binding)
        assert captured["ok"], captured
        candidate_id = captured["output"]["value"]["candidate_id"]
        admitted = service.call_tool(
            "engram_memory_request_admission",
            {"candidate_id": candidate_id, "idempotency_key": "admit-key-0000001"},
            binding,
        )
        assert admitted["ok"], admitted
        outcome = admitted["output"]["value"]["outcome"]
        assert outcome["status"] == "accepted"
        record_id = outcome["record_id"]
        forget_args = {"record_id": record_id, "idempotency_key": "forget-key-000001", "reason_ref": "reason:user"}
        now = clock.now()
        confirmation = Confirmation(
            id="confirmation-1",
            tool="engram_memory_forget",
            target=record_id,
            operation_digest=service.operation_digest("engram_memory_forget", forget_args, binding),
            requested_at=now,
            approved_at=now,
        )
        forgotten = service.call_tool(
            "engram_memory_forget", forget_args, attrs.evolve(binding, confirmation=confirmation)
        )
        assert forgotten["ok"], forgotten
        assert forgotten["output"]["value"]["projection_invalidation"] == "complete"
        with service.store.read(binding.scope) as reader:
            assert reader.record(record_id) is not None
            assert reader.index_stats().documents == 0
            assert reader.doomed_keys() == []
        # forget leaves no plaintext anywhere: store, vault, their WALs
        files = [p for p in tmp_path.iterdir() if p.name.startswith(("memory.db", "vault.db"))]
        assert all(DISTINCTIVE_WORD.encode() not in p.read_bytes() for p in files)
    finally:
        _close(service)

    clock.advance(timedelta(hours=1))
    reopened = _service(tmp_path, clock)
    try:
        replay = reopened.call_tool("engram_memory_capture", CAPTURE_ARGS, binding)
        assert replay["ok"], replay
        expected = {**captured["output"]["value"], "status": "duplicate_exact"}
        assert canonical_bytes(replay["output"]["value"]) == canonical_bytes(expected)
        report = MemoryAdmin(reopened).verify(tenant_id=TENANT, workspace_id=WORKSPACE)
        assert report.ok, report
        assert report.high_water == 3
        replayed_forget = reopened.call_tool(
            "engram_memory_forget", forget_args, attrs.evolve(binding, confirmation=confirmation)
        )
        assert replayed_forget["ok"], replayed_forget
        assert replayed_forget["output"]["value"]["replayed"] is True
    finally:
        _close(reopened)


# --------------------------------------------------------------------------- shipped conformance suites


class TestSQLiteStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteStore]:
        backend = SQLiteStore(tmp_path / "conformance.db")
        yield backend
        backend.close()

    @pytest.fixture
    def persists_across_reopen(self) -> bool:
        return True

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], Store]:
        return lambda: SQLiteStore(tmp_path / "conformance.db")

    @pytest.fixture
    def term_traces(self) -> TermTraces | None:
        return _term_traces

    @pytest.fixture
    def persisted_bytes(self) -> PersistedBytes | None:
        return _persisted_bytes


def _persisted_bytes(store: Store) -> bytes:
    """The store file and its -wal and -shm files, as they lie on disk."""
    assert isinstance(store, SQLiteStore)
    files = [Path(store.path + suffix) for suffix in ("", "-wal", "-shm")]
    return b"".join(path.read_bytes() for path in files if path.exists())


def _term_traces(store: Store, scope: str, term: str) -> bool:
    """Whether the file holds the term's keyed digest for ``scope``: in a posting, or in a document's term list
    (the list of a document that no longer exists counts, whatever its scope)."""
    assert isinstance(store, SQLiteStore)
    key = store._term_key(term)
    raw = sqlite3.connect(store.path)
    try:
        (found,) = raw.execute(
            "SELECT EXISTS (SELECT 1 FROM postings AS p JOIN scopes AS s USING (scope_id)"
            "  WHERE s.scope = ? AND p.term = ?)"
            " OR EXISTS (SELECT 1 FROM document_terms AS t LEFT JOIN documents AS d USING (doc)"
            "  LEFT JOIN scopes AS s USING (scope_id)"
            "  WHERE (d.doc IS NULL OR s.scope = ?) AND instr(t.term_keys, ?) > 0)",
            (scope, key, scope, key),
        ).fetchone()
    finally:
        raw.close()
    return bool(found)


def _replace_event_body(store: Store, scope: str, cursor: int, body: bytes) -> None:
    assert isinstance(store, SQLiteStore)
    raw = sqlite3.connect(store.path)
    try:
        with raw:
            changed = raw.execute(
                "UPDATE events SET body = ?"
                " WHERE cursor = ? AND scope_id = (SELECT scope_id FROM scopes WHERE scope = ?)",
                (body, cursor, scope),
            ).rowcount
    finally:
        raw.close()
    assert changed == 1


class TestSQLiteService(ServiceConformance):
    @pytest.fixture
    def service_factory(self, tmp_path: Path) -> Iterator[ServiceFactory]:
        store = SQLiteStore(tmp_path / "service.db")
        vault = SQLiteKeyVault(tmp_path / "service-vault.db", master_key_file=tmp_path / "service.key")

        def factory(clock: Clock) -> MemoryService:
            return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

        yield factory
        store.close()
        vault.close()

    @pytest.fixture
    def replace_event_body(self) -> ReplaceEventBody | None:
        return _replace_event_body

    @pytest.fixture
    def term_traces(self) -> TermTraces | None:
        return _term_traces

    def test_no_file_ever_holds_the_words_of_the_content(self, harness: Harness, tmp_path: Path) -> None:
        """D6 on disk: store, vault and their WALs hold sealed bodies and keyed term digests only."""
        binding = make_binding()
        kept, withdrawn = distinctive_words("sqlite-kept"), distinctive_words("sqlite-withdrawn")
        attested = "zqattestationonlyinsqlite"
        candidate_id = harness.pending(binding, make_key("sqlite-kept"), words=kept, attestation=attested)
        other = harness.pending(binding, make_key("sqlite-withdrawn"), words=withdrawn)
        everything = (*kept, *withdrawn, attested)
        assert _files_holding(tmp_path, everything) == []
        admitted = ok(harness.admit(binding, candidate_id, make_key("sqlite-kept-admit")))
        record_id = admitted["outcome"]["record_id"]
        with harness.service.store.read(binding.scope) as reader:
            assert [p.record_id for p in reader.postings(kept[0])] == [record_id]  # indexed, by digest
        assert _files_holding(tmp_path, everything) == []
        ok(harness.forget(binding, record_id, make_key("sqlite-kept-forget")))
        ok(harness.withdraw(binding, other, make_key("sqlite-withdrawn-withdraw")))
        with harness.service.store.read(binding.scope) as reader:
            assert reader.postings(kept[0]) == []
        assert _files_holding(tmp_path, everything) == []


class _SQLiteBackend:
    """A fresh SQLite store and vault in their own temporary directory (a ServiceFactory)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="engram-sqlite-machine-"))
        self.store = SQLiteStore(self.directory / "machine.db", synchronous="NORMAL")
        self.vault = SQLiteKeyVault(self.directory / "machine-vault.db", os.urandom(32))

    def __call__(self, clock: Clock) -> MemoryService:
        return MemoryService(store=self.store, vault=self.vault, policy=DefaultPolicy(), clock=clock)

    def close(self) -> None:
        self.store.close()
        self.vault.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class SQLiteServiceMachine(service_machine(_SQLiteBackend)):  # type: ignore[misc]
    def teardown(self) -> None:
        self.factory.close()


TestSQLiteServiceMachine = SQLiteServiceMachine.TestCase
TestSQLiteServiceMachine.settings = settings(
    max_examples=12,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _files_holding(directory: Path, words: tuple[str, ...]) -> list[str]:
    """``file: word`` for every word found in any file of ``directory`` (databases, WALs, keys)."""
    found = []
    for path in sorted(directory.iterdir()):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {word}" for word in words if word.encode() in data]
    return found


def test_database_vault_and_key_files_are_owner_only(tmp_path: Path) -> None:
    service = connect(f"sqlite:///{tmp_path / 'private.db'}")
    service.close()
    for name in ("private.db", "private.db.vault", "private.db.key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name


def test_files_reached_through_a_dangling_symlink_are_owner_only(tmp_path: Path) -> None:
    """A store or vault path that is a link to a file not made yet: the file is created 0600, whatever the umask."""
    (tmp_path / "real").mkdir()
    (tmp_path / "store.db").symlink_to(tmp_path / "real" / "target.db")
    (tmp_path / "vault.db").symlink_to(tmp_path / "real" / "target.vault")
    old_umask = os.umask(0o022)
    try:
        store = SQLiteStore(tmp_path / "store.db")
        vault = SQLiteKeyVault(tmp_path / "vault.db", bytes(range(32)))
        service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=ManualClock())
        ok(service.call_tool(CAPTURE, capture_args(make_key("through-a-link")), make_binding()))
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "real").iterdir()}
        service.close()
    finally:
        os.umask(old_umask)
    assert {"target.db", "target.db-wal", "target.vault"} <= set(modes)
    assert modes == dict.fromkeys(modes, 0o600)


def test_a_sqlite_without_json_functions_is_refused_before_any_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Search resolves its hits with ``json_each``: without it the store does not open, and writes nothing."""
    monkeypatch.setattr(sqlite_store, "_sqlite_has_json_each", lambda: False)
    path = tmp_path / "store.db"
    with pytest.raises(StoreUnavailableError, match="JSON functions"):
        SQLiteStore(path)
    assert list(tmp_path.iterdir()) == []


def test_this_sqlite_has_json_functions() -> None:
    assert sqlite_store._sqlite_has_json_each()


def test_a_failing_settle_of_a_held_key_is_a_port_error(sqlite: SQLiteStore) -> None:
    """A SQLite error while settling a provisional binding leaves ``put_idempotency`` as a port error."""
    held = IdempotencyRow(intent_digest="sha256:" + "0" * 64, response=b"")
    with sqlite.write(SCOPE) as unit:
        unit.put_idempotency("principal-1", "key-held-0000000", held)

    def deny_update(action: int, table: str | None, *_: object) -> int:
        return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_UPDATE and table == "idempotency" else sqlite3.SQLITE_OK

    def settle_denied() -> None:
        with sqlite.write(SCOPE) as unit:
            connection = unit._live()
            connection.set_authorizer(deny_update)
            try:
                unit.put_idempotency("principal-1", "key-held-0000000", attrs.evolve(held, response=b'{"n":1}'))
            finally:
                connection.set_authorizer(None)

    with pytest.raises(StoreUnavailableError):
        settle_denied()
    with sqlite.read(SCOPE) as reader:
        assert reader.idempotency("principal-1", "key-held-0000000") == held


# --------------------------------------------------------------------------- SQLite: faults on a live store


def _in_view(read: Callable[[Any], object]) -> Callable[[SQLiteStore], object]:
    def run(backend: SQLiteStore) -> object:
        with backend.read(SCOPE) as reader:
            return read(reader)

    return run


CORRUPTED_READS: dict[str, tuple[str, str, Callable[[SQLiteStore], object]]] = {
    # name: (the corrupted table, the action the error names, a read that reaches it)
    "listing-scopes": ("scopes", "scopes", lambda backend: backend.scopes()),
    "looking-up-the-scope": ("scopes", "read", _in_view(lambda reader: reader.high_water())),
    "the-journal-head": ("events", "read", _in_view(lambda reader: reader.high_water())),
    "a-page-of-candidates": ("candidates", "read", _in_view(lambda reader: list(reader.candidates()))),
}


@pytest.mark.parametrize("name", sorted(CORRUPTED_READS))
def test_a_corrupted_table_is_journal_corrupt_to_its_reader(db_path: Path, name: str) -> None:
    """A page the disk garbled is reported as corruption (not retriable), naming the action, whichever read
    reaches it first; a read that does not touch it still works."""
    table, action, read = CORRUPTED_READS[name]
    with SQLiteStore(db_path) as backend, backend.write(SCOPE) as unit:
        unit.append_event(event(1))
        unit.put_candidate(candidate("c1"))
    assert not Path(f"{db_path}-wal").exists()  # everything is in the database file
    corrupt_table(db_path, table)
    with SQLiteStore(db_path) as backend:
        with pytest.raises(StoreCorruptError) as caught:
            read(backend)
        assert caught.value.code is ErrorCode.JOURNAL_CORRUPT
        assert caught.value.__notes__ == [f"sqlite {action} failed: SQLITE_CORRUPT"]
        assert backend.schema_version() == _schema.STORE_SCHEMA.latest


def test_a_failed_confirmation_insert_is_unavailable_never_already_consumed(sqlite: SQLiteStore) -> None:
    """Only a duplicate id is ``StoreConflictError`` (a used confirmation, GATE_FAILED above); any other
    failure of the insert is retriable and leaves the confirmation unused."""

    def deny_confirmations(action: int, table: str | None, *_: object) -> int:
        refused = action == sqlite3.SQLITE_INSERT and table == "confirmations"
        return sqlite3.SQLITE_DENY if refused else sqlite3.SQLITE_OK

    def consume_denied() -> None:
        with sqlite.write(SCOPE) as unit:
            connection = unit._live()
            connection.set_authorizer(deny_confirmations)
            try:
                unit.consume_confirmation("confirmation-1")
            finally:
                connection.set_authorizer(None)

    with pytest.raises(StoreUnavailableError) as caught:
        consume_denied()
    assert type(caught.value) is StoreUnavailableError
    assert str(caught.value) == "sqlite consume_confirmation failed: SQLITE_AUTH"
    with sqlite.read(SCOPE) as reader:
        assert not reader.confirmation_used("confirmation-1")
    with sqlite.write(SCOPE) as unit:
        unit.consume_confirmation("confirmation-1")
    with pytest.raises(StoreConflictError), sqlite.write(SCOPE) as unit:
        unit.consume_confirmation("confirmation-1")


def test_a_sqlite_older_than_3_37_is_refused_before_any_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 36, 0))
    with pytest.raises(StoreUnavailableError, match=r"SQLite 3\.37 or newer"):
        SQLiteStore(tmp_path / "store.db")
    assert list(tmp_path.iterdir()) == []


def test_the_json_probe_answers_no_for_a_sqlite_without_json_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe catches what such a library raises (``no such table: json_each``) and says no."""

    class _WithoutJson(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if "json_each" in sql:
                raise sqlite3.OperationalError("no such table: json_each")
            return super().execute(sql, *args)

    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *args, **kwargs: real_connect(*args, factory=_WithoutJson, **kwargs))
    sqlite_store._sqlite_has_json_each.cache_clear()
    try:
        assert sqlite_store._sqlite_has_json_each() is False
    finally:
        monkeypatch.undo()
        sqlite_store._sqlite_has_json_each.cache_clear()
    assert sqlite_store._sqlite_has_json_each() is True


def test_a_forked_child_sets_its_parents_connections_aside_and_opens_its_own(
    sqlite: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite forbids using a connection across ``fork``: the child neither uses nor closes a connection its
    parent opened, idle (taken from the pool) or in use at the fork (released by the child's unwinding)."""
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1))
    with sqlite.read(SCOPE) as in_use:
        with sqlite.read(SCOPE) as other:
            idle = other._live()  # back in the pool when this block ends
        monkeypatch.setattr(os, "getpid", lambda: -1)  # the fork happens here
        with sqlite.read(SCOPE) as child_view:
            assert child_view.high_water() == 1
            childs = child_view._live()
        parents_in_use = in_use._live()
    monkeypatch.undo()
    try:
        assert childs is not idle
        assert childs is not parents_in_use
        assert sqlite._pool == [childs]
        assert sqlite._inherited == [idle, parents_in_use]  # kept, never closed: still the parent's
        for connection in (idle, parents_in_use):
            assert connection.execute("SELECT count(*) FROM events").fetchone() == (1,)
    finally:
        for connection in (idle, parents_in_use, childs):  # one process plays both here
            connection.close()


def test_a_connection_in_use_when_the_store_closes_is_closed_when_released(db_path: Path) -> None:
    backend = SQLiteStore(db_path)
    with backend.read(SCOPE) as reader:
        connection = reader._live()
        backend.close()
        assert reader.high_water() == 0  # an open view still reads
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        connection.execute("SELECT 1")
    with pytest.raises(StoreUnavailableError, match="closed"), backend.read(SCOPE):
        pass


def _drops(connection: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        connection.execute("SELECT 1")


def test_a_pooled_connection_that_cannot_begin_is_dropped_and_the_next_read_works(sqlite: SQLiteStore) -> None:
    def deny_begin(action: int, argument: str | None, *_: object) -> int:
        refused = action == sqlite3.SQLITE_TRANSACTION and argument == "BEGIN"
        return sqlite3.SQLITE_DENY if refused else sqlite3.SQLITE_OK

    with sqlite.read(SCOPE) as reader:
        broken = reader._live()
        broken.set_authorizer(deny_begin)  # back in the pool, this connection cannot start a transaction
    with pytest.raises(StoreUnavailableError, match=r"^sqlite begin read failed: SQLITE_AUTH$"), sqlite.read(SCOPE):
        pass
    _drops(broken)
    with sqlite.read(SCOPE) as reader:
        assert reader.high_water() == 0


def test_a_read_whose_snapshot_cannot_be_released_drops_its_connection(sqlite: SQLiteStore) -> None:
    """A connection whose ROLLBACK failed may still hold its snapshot: it is closed, never pooled."""
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1))
    with sqlite.read(SCOPE) as reader:
        assert reader.high_water() == 1
        stuck = reader._live()
        stuck.set_progress_handler(lambda: 1, 1)  # every statement is interrupted from now on, ROLLBACK too
    _drops(stuck)
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(2))
    with sqlite.read(SCOPE) as reader:
        assert reader.high_water() == 2


def test_an_interrupted_unit_is_rolled_back_whole_and_its_connection_dropped(sqlite: SQLiteStore) -> None:
    """An interrupt (``Connection.interrupt()``, here a progress handler) makes SQLite roll the whole unit back
    itself; the unit's own ROLLBACK then fails, the interruption is reported and the connection is closed."""
    with sqlite.write(SCOPE) as unit:
        unit.append_event(event(1))
    before = snapshot(sqlite, SCOPE)
    connections: list[sqlite3.Connection] = []

    def interrupted_unit() -> None:
        with sqlite.write(SCOPE) as unit:
            unit.append_event(event(2))
            connections.append(unit._live())
            connections[0].set_progress_handler(lambda: 1, 1)
            unit.put_candidate(candidate("c1"))

    with pytest.raises(StoreUnavailableError, match=r"^sqlite put_candidate failed: SQLITE_INTERRUPT$"):
        interrupted_unit()
    (interrupted,) = connections
    assert snapshot(sqlite, SCOPE) == before  # event 2 went with the interrupted statement
    _drops(interrupted)
    with sqlite.write(SCOPE) as unit:  # the writer lock was released
        unit.append_event(event(2))


def test_an_erasure_whose_wal_scrub_fails_is_committed_logged_and_its_connection_dropped(
    sqlite: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The scrub after an erasure's commit is best effort: if it cannot run, the erasure stands, a warning
    says the WAL is truncated later, and a connection whose busy timeout could not be restored is closed."""
    with sqlite.write(SCOPE) as unit:
        unit.put_record(record("mem_a"))
        unit.index_document(document("mem_a", {"alpha": (1, 0, 0, 0, 0)}))

    def deny_pragmas(action: int, *_: object) -> int:
        return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_PRAGMA else sqlite3.SQLITE_OK

    with caplog.at_level("WARNING", logger="engram_memory"), sqlite.write(SCOPE) as unit:
        unit.unindex("mem_a")
        scrubbing = unit._live()
        scrubbing.set_authorizer(deny_pragmas)  # neither the checkpoint's busy timeout nor its restore can be set
    assert [record.getMessage() for record in caplog.records] == [
        "write-ahead log in use after an erasure; it is truncated later"
    ]
    _drops(scrubbing)
    with sqlite.read(SCOPE) as reader:
        assert list(reader.indexed_ids()) == []
        assert reader.postings("alpha") == []


def test_compact_inside_a_unit_of_its_own_thread_is_refused_and_the_unit_commits(db_path: Path) -> None:
    backend = SQLiteStore(db_path)  # the default 5 s busy timeout: the refusal does not wait for it
    try:
        with backend.write(SCOPE) as unit:
            unit.append_event(event(1))
            with pytest.raises(StoreUnavailableError, match=r"^a unit of work is open on this thread$"):
                backend.compact()
        backend.compact()  # once the unit committed
        assert snapshot(backend, SCOPE)["high_water"] == 1
    finally:
        backend.close()


def test_compact_gives_up_while_a_writer_on_another_thread_holds_the_store(db_path: Path) -> None:
    backend = SQLiteStore(db_path, busy_timeout_ms=50)
    inside, done = threading.Event(), threading.Event()

    def hold_a_unit() -> None:
        with backend.write(SCOPE) as unit:
            unit.append_event(event(1))
            inside.set()
            done.wait(timeout=30)

    writer = threading.Thread(target=hold_a_unit)
    writer.start()
    try:
        assert inside.wait(timeout=30)
        with pytest.raises(StoreUnavailableError, match=r"^another writer of this process holds the store$"):
            backend.compact()
    finally:
        done.set()
        writer.join()
    try:
        backend.compact()  # once the unit committed
        assert snapshot(backend, SCOPE)["high_water"] == 1
    finally:
        backend.close()


def test_a_failing_diagnostic_probe_is_a_port_error(sqlite: SQLiteStore) -> None:
    def deny_pragmas(action: int, *_: object) -> int:
        return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_PRAGMA else sqlite3.SQLITE_OK

    with sqlite.read(SCOPE) as reader:
        pooled = reader._live()
    pooled.set_authorizer(deny_pragmas)
    for probe in (sqlite.pragmas, sqlite.schema_version):
        with pytest.raises(StoreUnavailableError, match=r"^sqlite inspect failed: SQLITE_AUTH$"):
            probe()
    pooled.set_authorizer(None)
    assert sqlite.schema_version() == _schema.STORE_SCHEMA.latest  # the probe's connection went back to the pool


@pytest.mark.parametrize(
    ("key", "names_a_document"),
    [
        ("0", True),
        ("7", True),
        ("120", True),
        ("9223372036854775807", True),  # the largest INTEGER PRIMARY KEY
        ("9223372036854775808", False),
        ("10000000000000000000", False),
        ("", False),
        ("07", False),
        ("00", False),
        ("-1", False),
        ("+1", False),
        (" 1", False),
        ("1 ", False),
        ("1e3", False),
        ("1.0", False),
        ("\u0661", False),  # ARABIC-INDIC DIGIT ONE: a digit to str.isdigit, not a document number
        ("\u00b9", False),  # SUPERSCRIPT ONE
    ],
)
def test_only_canonical_decimals_in_integer_range_name_a_document(key: str, names_a_document: bool) -> None:
    """The spelling check of a hit's key, before it is sent to SQL as a JSON integer."""
    expected = f"[{key}]" if names_a_document else None
    assert _document_numbers([key]) == expected
    assert _document_numbers(["5", key, "6"]) == ("[5," + key + ",6]" if names_a_document else "[5,6]")
