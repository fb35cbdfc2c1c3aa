"""Tamper evidence on disk (DESIGN D14): altered SQLite files are reported, never served.

A service on SQLite holds two scopes. Scope A's journal is::

    1 capture c1   2 accept c1 → r1   3 capture c2 (stays pending)   4 capture c3
    5 accept c3 → r3   6 capture c4   7 withdraw c4

and scope B has a capture and an accept. Each test alters the files from outside the library,
then checks what ``MemoryAdmin.verify`` and the read path report:

* one byte of an event body flipped **in the database file itself** (found by its bytes after a
  checkpoint, the service closed) → ``JOURNAL_CORRUPT`` at exactly that cursor, for every cursor
  and several seeded byte positions; scope B still verifies; restoring the byte restores ``ok``;
* one byte of a record's sealed body (ciphertext or nonce column) flipped → ``JOURNAL_CORRUPT`` at
  the record's accept cursor, and ``get`` and a ``search`` that reaches the record fail with a
  ``JOURNAL_CORRUPT`` envelope (not altered data, not ``NOT_FOUND``, not an empty success); a
  search that does not reach it still succeeds; a pending candidate's flipped ciphertext →
  ``JOURNAL_CORRUPT`` at its capture cursor, and its admission is refused the same way;
* an event row deleted → ``CURSOR_GAP`` at that cursor;
* a vault key row deleted for a live record or a pending candidate → ``BLOB_MISSING`` at its
  accept / capture cursor, with ``get`` and ``search`` answering ``BLOB_MISSING``.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any, Final

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.connect import connect
from engram_memory.errors import ErrorCode, StoreCorruptError
from engram_memory.journal import VerifyReport
from engram_memory.testing import capture_args, confirm, distinctive_words, make_binding, ok
from engram_memory.testing.fakes import ADMISSION, CAPTURE, GET, PURPOSE, SEARCH, WITHDRAW

A: Final = make_binding("tenant-tamper", "workspace-a")
B: Final = make_binding("tenant-tamper", "workspace-b")
WORDS: Final = {name: distinctive_words(f"tamper-{name}") for name in ("c1", "c2", "c3", "c4", "b1")}
POSITIONS_PER_EVENT: Final = 4


@attrs.frozen
class _World:
    db: Path
    candidates: dict[str, str]
    records: dict[str, str]


def _open(db: Path) -> MemoryService:
    return connect("sqlite:///" + str(db), policy=DefaultPolicy(admission="accept"), clock=ManualClock())


def _capture(service: MemoryService, binding: Any, name: str) -> str:
    arguments = capture_args(f"idempotency-key:tamper-{name}", words=WORDS[name])
    value = ok(service.call_tool(CAPTURE, arguments, binding))
    candidate_id: str = value["candidate_id"]
    return candidate_id


def _admit(service: MemoryService, binding: Any, candidate_id: str, name: str) -> str:
    arguments = {"candidate_id": candidate_id, "idempotency_key": f"idempotency-key:tamper-{name}-admit"}
    record_id: str = ok(service.call_tool(ADMISSION, arguments, binding))["outcome"]["record_id"]
    return record_id


@pytest.fixture
def world(tmp_path: Path) -> _World:
    db = tmp_path / "tamper.db"
    service = _open(db)
    try:
        candidates = {"c1": _capture(service, A, "c1")}
        records = {"r1": _admit(service, A, candidates["c1"], "c1")}
        candidates["c2"] = _capture(service, A, "c2")
        candidates["c3"] = _capture(service, A, "c3")
        records["r3"] = _admit(service, A, candidates["c3"], "c3")
        candidates["c4"] = _capture(service, A, "c4")
        arguments = {
            "candidate_id": candidates["c4"],
            "idempotency_key": "idempotency-key:tamper-c4-withdraw",
            "reason_ref": "reason:obsolete",
        }
        assert isinstance(service.clock, ManualClock)
        ok(service.call_tool(WITHDRAW, arguments, confirm(service, WITHDRAW, arguments, A, service.clock)))
        candidates["b1"] = _capture(service, B, "b1")
        records["rb"] = _admit(service, B, candidates["b1"], "b1")
        assert _verify(service, A) == VerifyReport(ok=True, high_water=7)
        assert _verify(service, B) == VerifyReport(ok=True, high_water=2)
    finally:
        service.close()
    return _World(db=db, candidates=candidates, records=records)


def _verify(service: MemoryService, binding: Any) -> VerifyReport:
    return MemoryAdmin(service).verify(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id)


def _failure(envelope: dict[str, Any], code: ErrorCode) -> None:
    assert envelope["ok"] is False, envelope
    assert envelope["error"]["code"] == code.value, envelope
    assert "output" not in envelope


def _search(service: MemoryService, binding: Any, query: str) -> dict[str, Any]:
    return service.call_tool(SEARCH, {"query": query, "purpose_ref": PURPOSE}, binding)


def _get(service: MemoryService, binding: Any, record_id: str) -> dict[str, Any]:
    return service.call_tool(GET, {"record_id": record_id, "purpose_ref": PURPOSE}, binding)


def _execute(path: Path, sql: str, *params: Any) -> int:
    """One statement through a separate ``sqlite3`` connection; return the changed row count."""
    raw = sqlite3.connect(path)
    try:
        with raw:
            changed = raw.execute(sql, params).rowcount
    finally:
        raw.close()
    return changed


def _scope_id(db: Path, binding: Any) -> int:
    raw = sqlite3.connect(db)
    try:
        row = raw.execute("SELECT scope_id FROM scopes WHERE scope = ?", (binding.scope,)).fetchone()
    finally:
        raw.close()
    assert row is not None
    return int(row[0])


def _checkpoint(db: Path) -> None:
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        raw.close()


def _flip(data: bytes, position: int) -> bytes:
    mutated = bytearray(data)
    mutated[position] ^= 0x01
    return bytes(mutated)


# --------------------------------------------------------------------------- journal bytes in the file


def test_a_byte_flipped_in_the_database_file_is_journal_corrupt_at_its_cursor(world: _World) -> None:
    rng = random.Random(14)  # noqa: S311 - reproducible byte positions
    service = _open(world.db)
    try:
        with service.store.read(A.scope) as reader:
            events = list(reader.events())
    finally:
        service.close()
    assert [event.cursor for event in events] == list(range(1, 8))
    _checkpoint(world.db)
    pristine = world.db.read_bytes()
    tried = 0
    for event in events:
        assert pristine.count(event.body) == 1, event.cursor  # one copy of the row, in the main file
        where = pristine.index(event.body)
        positions = {0, len(event.body) - 1} | {rng.randrange(len(event.body)) for _ in range(POSITIONS_PER_EVENT)}
        for position in sorted(positions):
            world.db.write_bytes(_flip(pristine, where + position))
            service = _open(world.db)
            try:
                report = _verify(service, A)
                assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, event.cursor), (
                    event.cursor,
                    position,
                    report,
                )
                assert _verify(service, B).ok  # another scope's journal is not affected
            finally:
                service.close()
            tried += 1
        world.db.write_bytes(pristine)
    service = _open(world.db)
    try:
        assert _verify(service, A) == VerifyReport(ok=True, high_water=7)
    finally:
        service.close()
    assert tried >= 3 * len(events)


# --------------------------------------------------------------------------- sealed bodies


@pytest.mark.parametrize("column", ["ciphertext", "nonce"])
def test_a_flipped_byte_of_a_sealed_record_body_is_reported_and_never_served(world: _World, column: str) -> None:
    record_id = world.records["r1"]
    sid = _scope_id(world.db, A)
    raw = sqlite3.connect(world.db)
    try:
        row = raw.execute(
            f"SELECT {column} FROM records WHERE scope_id = ? AND record_id = ?",  # noqa: S608 - fixed column names
            (sid, record_id),
        ).fetchone()
    finally:
        raw.close()
    original = bytes(row[0])
    flipped = _flip(original, len(original) // 2)
    sql = f"UPDATE records SET {column} = ? WHERE scope_id = ? AND record_id = ?"  # noqa: S608 - fixed column names
    assert _execute(world.db, sql, flipped, sid, record_id) == 1
    service = _open(world.db)
    try:
        report = _verify(service, A)
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, 2), report
        assert _verify(service, B).ok
        _failure(_get(service, A, record_id), ErrorCode.JOURNAL_CORRUPT)
        _failure(_search(service, A, WORDS["c1"][0]), ErrorCode.JOURNAL_CORRUPT)
        _failure(_search(service, A, "convention"), ErrorCode.JOURNAL_CORRUPT)  # r1 is on the first page
        # what the tamper does not reach is still served
        found = ok(_search(service, A, WORDS["c3"][0]))
        assert [packet["record"]["record_id"] for packet in found["records"]] == [world.records["r3"]]
        assert ok(_get(service, A, world.records["r3"]))["record"]["record_id"] == world.records["r3"]
    finally:
        service.close()
    assert _execute(world.db, sql, original, sid, record_id) == 1
    service = _open(world.db)
    try:
        assert _verify(service, A).ok
        assert ok(_get(service, A, record_id))["record"]["record_id"] == record_id
    finally:
        service.close()


def test_a_flipped_byte_of_a_pending_candidate_is_reported_and_refused(world: _World) -> None:
    candidate_id = world.candidates["c2"]
    sid = _scope_id(world.db, A)
    raw = sqlite3.connect(world.db)
    try:
        row = raw.execute(
            "SELECT ciphertext FROM candidates WHERE scope_id = ? AND candidate_id = ?", (sid, candidate_id)
        ).fetchone()
    finally:
        raw.close()
    sql = "UPDATE candidates SET ciphertext = ? WHERE scope_id = ? AND candidate_id = ?"
    assert _execute(world.db, sql, _flip(bytes(row[0]), 7), sid, candidate_id) == 1
    service = _open(world.db)
    try:
        report = _verify(service, A)
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, 3), report
        before = _verify(service, A).high_water
        arguments = {"candidate_id": candidate_id, "idempotency_key": "idempotency-key:tamper-c2-admit"}
        _failure(service.call_tool(ADMISSION, arguments, A), ErrorCode.JOURNAL_CORRUPT)
        assert _verify(service, A).high_water == before  # nothing was written
    finally:
        service.close()


# --------------------------------------------------------------------------- deleted rows


@pytest.mark.parametrize("cursor", [1, 3, 6])
def test_a_deleted_event_row_is_a_cursor_gap_at_its_cursor(world: _World, cursor: int) -> None:
    sid = _scope_id(world.db, A)
    assert _execute(world.db, "DELETE FROM events WHERE scope_id = ? AND cursor = ?", sid, cursor) == 1
    service = _open(world.db)
    try:
        report = _verify(service, A)
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.CURSOR_GAP, cursor), report
        assert _verify(service, B).ok
    finally:
        service.close()


def test_a_deleted_vault_key_of_a_live_record_is_blob_missing(world: _World) -> None:
    record_id = world.records["r3"]
    service = _open(world.db)
    try:
        with service.store.read(A.scope) as reader:
            row = reader.record(record_id)
        assert row is not None
        assert row.sealed is not None
        key_ref = row.sealed.key_ref
    finally:
        service.close()
    assert _execute(Path(f"{world.db}.vault"), "DELETE FROM data_keys WHERE key_ref = ?", key_ref) == 1
    service = _open(world.db)
    try:
        report = _verify(service, A)
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.BLOB_MISSING, 5), report
        assert _verify(service, B).ok
        _failure(_get(service, A, record_id), ErrorCode.BLOB_MISSING)
        _failure(_search(service, A, WORDS["c3"][0]), ErrorCode.BLOB_MISSING)
        assert ok(_get(service, A, world.records["r1"]))["record"]["record_id"] == world.records["r1"]
    finally:
        service.close()


def test_a_deleted_vault_key_of_a_pending_candidate_is_blob_missing(world: _World) -> None:
    candidate_id = world.candidates["c2"]
    service = _open(world.db)
    try:
        with service.store.read(A.scope) as reader:
            row = reader.candidate(candidate_id)
        assert row is not None
        assert row.sealed is not None
        key_ref = row.sealed.key_ref
    finally:
        service.close()
    assert _execute(Path(f"{world.db}.vault"), "DELETE FROM data_keys WHERE key_ref = ?", key_ref) == 1
    service = _open(world.db)
    try:
        report = _verify(service, A)
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.BLOB_MISSING, 3), report
        arguments = {"candidate_id": candidate_id, "idempotency_key": "idempotency-key:tamper-c2-admit"}
        _failure(service.call_tool(ADMISSION, arguments, A), ErrorCode.BLOB_MISSING)
    finally:
        service.close()


# --------------------------------------------------------------------------- states outside the schema


def test_a_candidate_state_outside_the_schema_is_journal_corrupt_never_a_lifecycle_answer(world: _World) -> None:
    """A row written past the CHECK constraint is corruption, not an ended candidate (ALREADY_TERMINAL)."""
    candidate_id = world.candidates["c2"]
    sid = _scope_id(world.db, A)
    raw = sqlite3.connect(world.db, isolation_level=None)
    try:
        raw.execute("PRAGMA ignore_check_constraints = ON")
        changed = raw.execute(
            "UPDATE candidates SET state = 'limbo' WHERE scope_id = ? AND candidate_id = ?", (sid, candidate_id)
        ).rowcount
    finally:
        raw.close()
    assert changed == 1
    service = _open(world.db)
    try:
        with service.store.read(A.scope) as reader, pytest.raises(StoreCorruptError) as caught:
            reader.candidate(candidate_id)
        assert caught.value.code is ErrorCode.JOURNAL_CORRUPT
        arguments = {"candidate_id": candidate_id, "idempotency_key": "idempotency-key:tamper-limbo-admit"}
        _failure(service.call_tool(ADMISSION, arguments, A), ErrorCode.JOURNAL_CORRUPT)
        with service.store.read(A.scope) as reader:
            assert reader.high_water() == 7  # nothing was written
        assert _verify(service, B).ok
    finally:
        service.close()


def test_text_that_is_not_utf8_is_journal_corrupt_not_a_retriable_outage(world: _World) -> None:
    """A text column whose bytes are not UTF-8 (what a damaged page reads as) is ``JOURNAL_CORRUPT``,
    for the service and its store, never ``STORE_UNAVAILABLE`` (retriable: a retry would never
    clear it); the port error's message quotes none of the stored bytes."""
    record_id = world.records["r1"]
    sid = _scope_id(world.db, A)
    changed = _execute(
        world.db,
        "UPDATE records SET record_digest = CAST(x'ff7a71626f64796279746573' AS TEXT)"
        " WHERE scope_id = ? AND record_id = ?",
        sid,
        record_id,
    )
    assert changed == 1
    service = _open(world.db)
    try:
        with service.store.read(A.scope) as reader, pytest.raises(StoreCorruptError) as caught:
            reader.record(record_id)
        assert caught.value.code is ErrorCode.JOURNAL_CORRUPT
        assert "zqbodybytes" not in str(caught.value) + "".join(getattr(caught.value, "__notes__", []))
        envelope = _get(service, A, record_id)
        _failure(envelope, ErrorCode.JOURNAL_CORRUPT)
        assert envelope["error"]["retriable"] is False
        assert _get(service, A, world.records["r3"])["ok"] is True  # the other rows still read
        assert _verify(service, B).ok
    finally:
        service.close()
