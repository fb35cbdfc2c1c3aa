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

import pytest

from engram_memory.errors import ErrorCode
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SQLiteStore

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
