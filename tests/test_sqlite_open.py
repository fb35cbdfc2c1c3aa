"""Opening SQLite files: a file that is not ours is refused before anything is written to it,
and processes that open one new file at the same moment all succeed (the switch to WAL waits
for a busy file as long as the busy timeout). A file system where WAL cannot run, a lost schema
ledger and an interrupted first migration are refused with the file left as it was."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory.errors import ErrorCode, StoreCorruptError, StoreUnavailableError
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SQLiteStore
from engram_memory.stores.sqlite._schema import STORE_SCHEMA, Migration, SchemaSpec, migrate, schema_version

OPENERS: dict[str, Callable[..., Any]] = {  # (path, **options) -> an open store or vault
    "store": SQLiteStore,
    "vault": lambda path, **options: SQLiteKeyVault(path, master_key=b"k" * 32, **options),
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


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_file_that_is_not_a_database_is_journal_corrupt_and_not_retriable(
    tmp_path: Path, kind: str, read_only: bool
) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not an SQLite file, just bytes" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreCorruptError) as refused:
        OPENERS[kind](str(path), read_only=read_only)
    assert refused.value.code is ErrorCode.JOURNAL_CORRUPT
    assert refused.value.__notes__ == [f"sqlite open{' vault' if kind == 'vault' else ''} failed: SQLITE_NOTADB"]
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db"]  # no -wal, no -shm


def test_a_schema_whose_migrations_are_not_numbered_one_to_n_is_refused() -> None:
    first, second = STORE_SCHEMA.migrations[:2]
    for migrations in [(second,), (first, first), (second, first), (first, second, second)]:
        with pytest.raises(ValueError, match=r"^migrations must be numbered 1\.\.n$"):
            SchemaSpec(kind="store", application_id=STORE_SCHEMA.application_id, migrations=migrations)


@pytest.mark.parametrize(
    ("tampering", "note"),
    [
        # the ledger alone does not vouch for a file: ``application_id`` must name a store too
        ("PRAGMA application_id = 1234", "not an engram-memory store database"),
        ("DROP TABLE schema_migrations", "schema ledger is missing"),
    ],
    ids=["application-id", "no-ledger"],
)
def test_a_store_whose_identity_or_ledger_was_changed_is_refused_untouched(
    tmp_path: Path, tampering: str, note: str
) -> None:
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    _raw(path, tampering, "PRAGMA wal_checkpoint(TRUNCATE)")
    before = path.read_bytes()
    with pytest.raises(MigrationLedgerError) as refused:
        SQLiteStore(path)
    error = refused.value
    assert (error.code, error.retriable) == (ErrorCode.MIGRATION_LEDGER_INVALID, False)
    assert (error.found, error.supported) == (STORE_SCHEMA.latest, STORE_SCHEMA.latest)
    assert note in error.__notes__
    assert path.read_bytes() == before


def test_an_interrupted_first_migration_raises_the_interruption_and_leaves_the_file_empty(tmp_path: Path) -> None:
    """An interrupt (``Connection.interrupt()`` from another thread, here a progress handler) makes SQLite
    roll the whole transaction back itself: ``migrate`` reports the interruption, not a failed ROLLBACK."""

    def interrupted_seed(conn: sqlite3.Connection) -> None:
        conn.set_progress_handler(lambda: 1, 1)
        conn.execute("INSERT INTO meta (name, value) VALUES ('store_secret', zeroblob(32))")

    path = tmp_path / "new.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match=r"^interrupted$"):
            migrate(conn, STORE_SCHEMA, seed=interrupted_seed)
        conn.set_progress_handler(None, 1)
        assert not conn.in_transaction
        assert schema_version(conn) == 0
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    finally:
        conn.close()
    SQLiteStore(path).close()  # the next open creates the store from scratch
    assert _raw_version(path) == STORE_SCHEMA.latest


def _raw_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return version


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_file_system_where_wal_cannot_run_is_refused_before_anything_is_written(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without shared memory (SQLite's ``unix-none`` VFS: no locking, as on some network file systems)
    SQLite keeps the rollback journal when asked for WAL; the file is refused while still empty."""
    real_connect = sqlite3.connect

    def without_shared_memory(database: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = real_connect(
            Path(database).resolve().as_uri() + "?vfs=unix-none", *args, uri=True, **kwargs
        )
        return conn

    path = tmp_path / f"{kind}.db"
    monkeypatch.setattr(sqlite3, "connect", without_shared_memory)
    with pytest.raises(StoreUnavailableError, match=rf"^the {'store' if kind == 'store' else 'key vault'} file cannot"):
        OPENERS[kind](str(path))
    monkeypatch.undo()
    assert path.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def _locking(path: Path) -> sqlite3.Connection:
    """A connection holding the write lock of a new (rollback-journal) file, as another process that opens it.

    SQLite answers ``SQLITE_BUSY`` to a switch to WAL at once, without calling the busy handler, while
    another connection holds that lock: the opener itself must retry until its busy timeout.
    """
    peer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    peer.execute("BEGIN IMMEDIATE")
    return peer


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_the_switch_to_wal_waits_for_another_opener_of_the_new_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "new.db"
    peer = _locking(path)
    finish = threading.Timer(0.3, peer.execute, ("ROLLBACK",))
    finish.start()
    try:
        OPENERS[kind](str(path)).close()  # the default busy timeout (5 s) outlasts the peer's lock
    finally:
        finish.join()
        peer.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_lock_that_outlasts_the_busy_timeout_is_retriable_and_nothing_is_written(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "new.db"
    peer = _locking(path)
    try:
        with pytest.raises(StoreUnavailableError, match=r"\(database is locked; retry\)$"):
            OPENERS[kind](str(path), busy_timeout_ms=100)
    finally:
        peer.close()
    assert path.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.db"]
    OPENERS[kind](str(path)).close()  # the retry works


@pytest.mark.parametrize("failure", [sqlite3.OperationalError("disk I/O error"), KeyboardInterrupt()], ids=repr)
def test_a_read_only_connection_whose_setup_fails_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """A failure (or Ctrl-C) between opening a read-only connection and making it query-only closes it."""
    path = tmp_path / "store.db"
    SQLiteStore(path).close()
    opened: list[sqlite3.Connection] = []

    class _FailingSetup(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql == "PRAGMA query_only = ON":
                raise failure
            return super().execute(sql, *args)

    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, factory=_FailingSetup, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    with pytest.raises((StoreUnavailableError, KeyboardInterrupt)) as refused:
        SQLiteStore(path, read_only=True)
    monkeypatch.undo()
    assert type(refused.value) is (
        KeyboardInterrupt if isinstance(failure, KeyboardInterrupt) else StoreUnavailableError
    )
    assert len(opened) == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        opened[0].execute("SELECT 1")
