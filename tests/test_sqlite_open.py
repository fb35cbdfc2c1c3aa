"""Opening SQLite files: a file that is not ours is refused before anything is written to it,
and processes that open one new file at the same moment all succeed (the switch to WAL waits
for a busy file as long as the busy timeout)."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory.errors import ErrorCode, StoreCorruptError
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SQLiteStore
from engram_memory.stores.sqlite._schema import STORE_SCHEMA, Migration, migrate, schema_version

OPENERS: dict[str, Callable[[str], Any]] = {
    "store": SQLiteStore,
    "vault": lambda path: SQLiteKeyVault(path, master_key=b"k" * 32),
}


def _foreign_database(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('x')")
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_foreign_database_is_refused_byte_for_byte_untouched(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "foreign.db"
    before = _foreign_database(path)
    with pytest.raises(MigrationLedgerError) as refused:
        OPENERS[kind](str(path))
    assert refused.value.code is ErrorCode.MIGRATION_LEDGER_INVALID
    assert path.read_bytes() == before  # header bytes 18/19 still say "rollback journal"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]  # no -wal, no -shm


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_the_other_kinds_file_is_refused_untouched(tmp_path: Path, kind: str) -> None:
    """A vault file opened as a store (and the reverse) is foreign too."""
    other = "vault" if kind == "store" else "store"
    path = tmp_path / f"{other}.db"
    OPENERS[other](str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(MigrationLedgerError):
        OPENERS[kind](str(path))
    assert path.read_bytes() == before


def _open_at_once(path: str, kind: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        OPENERS[kind](path).close()
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks workers")
@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_processes_opening_one_new_file_at_once_all_succeed(tmp_path: Path, kind: str) -> None:
    context = multiprocessing.get_context("fork")
    outcomes: list[str] = []
    for attempt in range(12):
        path = str(tmp_path / f"new-{attempt}.db")
        barrier, results = context.Barrier(4), context.Queue()
        workers = [context.Process(target=_open_at_once, args=(path, kind, barrier, results)) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        outcomes += [results.get(timeout=10) for _ in workers]
    assert outcomes == ["ok"] * len(outcomes)


# --------------------------------------------------------------------------- marks, secret and migrations


def _raw(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()


def test_a_store_whose_application_id_was_changed_is_refused_untouched(tmp_path: Path) -> None:
    """The ledger alone does not vouch for a file: ``application_id`` must name a store too."""
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    _raw(path, "PRAGMA application_id = 1234", "PRAGMA wal_checkpoint(TRUNCATE)")
    before = path.read_bytes()
    with pytest.raises(MigrationLedgerError) as refused:
        SQLiteStore(path)
    error = refused.value
    assert (error.code, error.retriable) == (ErrorCode.MIGRATION_LEDGER_INVALID, False)
    assert (error.found, error.supported) == (STORE_SCHEMA.latest, STORE_SCHEMA.latest)
    assert "not an engram-memory store database" in " ".join(error.__notes__)
    assert path.read_bytes() == before


@pytest.mark.parametrize("secret", [b"", b"s" * 31, b"s" * 33], ids=["empty", "31-bytes", "33-bytes"])
def test_a_store_secret_that_is_not_32_bytes_is_journal_corrupt(tmp_path: Path, secret: bytes) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute("UPDATE meta SET value = ? WHERE name = 'store_secret'", (secret,)).rowcount == 1
    finally:
        conn.close()
    with pytest.raises(StoreCorruptError) as refused:
        SQLiteStore(path)
    assert refused.value.code is ErrorCode.JOURNAL_CORRUPT


@pytest.mark.parametrize("target", [-1, STORE_SCHEMA.latest + 1])
def test_migrate_refuses_a_target_outside_the_known_migrations(tmp_path: Path, target: int) -> None:
    conn = sqlite3.connect(tmp_path / "new.db", isolation_level=None)
    try:
        with pytest.raises(ValueError, match=r"^target outside the known migrations$"):
            migrate(conn, STORE_SCHEMA, target=target)
        assert schema_version(conn) == 0
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
        assert not conn.in_transaction
    finally:
        conn.close()


def test_a_failing_migration_rolls_back_on_the_callers_connection(tmp_path: Path) -> None:
    """``migrate`` leaves no transaction open: the caller's connection sees the file as it was, and can write."""
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    broken = attrs.evolve(
        STORE_SCHEMA,
        migrations=(*STORE_SCHEMA.migrations, Migration(5, "broken", "CREATE TABLE half_done (x INTEGER); NOT SQL")),
    )
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError):
            migrate(conn, broken)
        assert not conn.in_transaction
        assert schema_version(conn) == STORE_SCHEMA.latest
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0
    finally:
        conn.close()
    SQLiteStore(path, busy_timeout_ms=0).close()  # no lock was left behind


def test_a_file_that_is_not_a_database_is_journal_corrupt_and_not_retriable(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not an SQLite file, just bytes" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreCorruptError) as refused:
        SQLiteStore(path)
    assert refused.value.code is ErrorCode.JOURNAL_CORRUPT
    assert path.read_bytes() == before
