"""Damaged SQLite files: refused with the library's errors, and found by ``check_integrity``.

A damaged page under the schema ledger (text that is not UTF-8) and a damaged header (an
impossible schema version) are :class:`MigrationLedgerError` s, never a ``UnicodeDecodeError``,
for a read-write and a read-only open and through ``connect()``; nothing is written to the file.
``check_integrity`` reports what SQLite's ``integrity_check`` finds (index pages that no longer
hold their table's rows included) and ``[]`` for a sound file, writing nothing.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram_memory.connect import connect
from engram_memory.errors import ErrorCode, StoreUnavailableError
from engram_memory.keyvaults.sqlite import VAULT_SCHEMA, SQLiteKeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SQLiteStore
from engram_memory.stores.sqlite._files import integrity_problems, truncate_left_over_wal
from engram_memory.stores.sqlite._schema import STORE_SCHEMA
from engram_memory.testing import capture_args, make_binding, make_key

KEY = b"k" * 32
OPENERS: dict[str, Callable[..., Any]] = {  # (path, **options) -> an open store or vault
    "store": SQLiteStore,
    "vault": lambda path, **options: SQLiteKeyVault(path, master_key=KEY, **options),
}
LEDGER_NAMES = {"store": b"records-name-their-document", "vault": b"data-keys"}
"""Text only the ledger holds: the name of a migration (the tables' names use underscores)."""
INDEXES = {"store": "sqlite_autoindex_scopes_1", "vault": "sqlite_autoindex_data_keys_1"}
INDEXED = {"sqlite_autoindex_scopes_1": ("scopes", "scope"), "sqlite_autoindex_data_keys_1": ("data_keys", "key_ref")}
"""The table and column of each index the tests damage."""
KINDS = {"store": "store", "vault": "key vault"}
LATEST = {"store": STORE_SCHEMA.latest, "vault": VAULT_SCHEMA.latest}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flip(path: Path, offset: int, count: int = 4) -> None:
    """XOR ``count`` bytes of ``path`` at ``offset`` with 0xFF, as a damaged sector would."""
    data = bytearray(path.read_bytes())
    for at in range(offset, offset + count):
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def damage_ledger(path: Path, kind: str) -> None:
    """Flip the first bytes of every copy of a migration's name in the ledger (no longer UTF-8)."""
    data = path.read_bytes()
    name = LEDGER_NAMES[kind]
    start = data.find(name)
    assert start > 0
    while start > 0:
        flip(path, start)
        start = data.find(name, start + 1)


def damage_schema_text(path: Path, kind: str) -> None:
    """Flip 4 bytes of the ledger's ``CREATE TABLE`` text: SQLite's error quotes them, and they are not UTF-8."""
    del kind  # both kinds create the ledger with the same statement
    data = path.read_bytes()
    at = data.find(b"checksum TEXT NOT NULL")
    assert at > 0
    flip(path, at + 9)


DAMAGES: dict[str, Callable[[Path, str], None]] = {"ledger-row": damage_ledger, "schema-text": damage_schema_text}
"""Damaged pages under the schema ledger, whose text is no longer UTF-8."""


def damage_index(path: Path, index: str) -> None:
    """Flip 4 bytes of the first indexed value inside ``index``'s root page: that row goes missing from it."""
    table, column = INDEXED[index]
    conn = sqlite3.connect(path)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        value = conn.execute(f"SELECT {column} FROM {table} LIMIT 1").fetchone()[0]  # noqa: S608 - constants
    finally:
        conn.close()
    page = path.read_bytes()[(root - 1) * page_size : root * page_size]
    at = page.find(value.encode("utf-8"))
    assert at >= 0
    flip(path, (root - 1) * page_size + at + 8)


def _written(path: Path, kind: str) -> None:
    """A closed store with one scope, or a closed vault with sealed items (every file checkpointed)."""
    if kind == "store":
        service = connect(f"sqlite:///{path}")
        assert service.call_tool("engram_memory_capture", capture_args(make_key("one")), make_binding())["ok"]
        service.close()
    else:
        with SQLiteKeyVault(path, master_key=KEY, reserve=4) as vault:
            vault.seal("context", b"x")


# --------------------------------------------------------------------------- a damaged ledger


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_ledger_that_is_not_utf8_is_a_migration_ledger_error(
    kind: str, read_only: bool, damage: str, tmp_path: Path
) -> None:
    path = tmp_path / "memory.db"
    _written(path, kind)
    DAMAGES[damage](path, kind)
    before = _digest(path)
    with pytest.raises(MigrationLedgerError) as refused:
        OPENERS[kind](str(path), read_only=read_only)
    assert refused.value.code is ErrorCode.MIGRATION_LEDGER_INVALID
    assert f"schema ledger is unreadable: the {KINDS[kind]} file is damaged" in refused.value.__notes__
    assert _digest(path) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm"))]


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_connect_refuses_a_store_whose_ledger_is_not_utf8(damage: str, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _written(db, "store")
    DAMAGES[damage](db, "store")
    before = _digest(db)
    with pytest.raises(MigrationLedgerError) as refused:
        connect(f"sqlite:///{db}")
    assert "schema ledger is unreadable: the store file is damaged" in refused.value.__notes__
    assert _digest(db) == before


# --------------------------------------------------------------------------- an impossible schema version


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_negative_schema_version_is_a_damaged_file(kind: str, read_only: bool, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _written(path, kind)
    flip(path, 60)  # user_version n (big-endian, offset 60) becomes -n - 1
    impossible = -1 - LATEST[kind]
    before = _digest(path)
    with pytest.raises(MigrationLedgerError) as refused:
        OPENERS[kind](str(path), read_only=read_only)
    assert refused.value.found == impossible
    what = KINDS[kind]
    assert (
        f"{what} schema version {impossible} is impossible: the file is damaged or not an engram-memory {what} "
        "database" in refused.value.__notes__
    )
    assert _digest(path) == before


# --------------------------------------------------------------------------- check_integrity


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_sound_file_has_no_problem(kind: str, read_only: bool, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _written(path, kind)
    before = _digest(path)
    with OPENERS[kind](str(path), read_only=read_only) as opened:
        assert opened.check_integrity() == []
    if read_only:
        assert _digest(path) == before


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_damaged_index_is_reported_and_nothing_is_written(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _written(path, kind)
    damage_index(path, INDEXES[kind])
    before = _digest(path)
    with OPENERS[kind](str(path), read_only=True) as opened:
        problems = opened.check_integrity()
    assert problems
    assert any(INDEXES[kind] in problem for problem in problems)
    assert all(problem.isprintable() for problem in problems)
    assert _digest(path) == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm"))]


def test_a_damaged_vault_index_hides_a_key_that_is_still_there(tmp_path: Path) -> None:
    """What ``verify`` would call a missing key: the row is there, only the index lost it."""
    path = tmp_path / "vault.db"
    with SQLiteKeyVault(path, master_key=KEY, reserve=1) as vault:
        sealed = vault.seal("context", b"x")
    damage_index(path, INDEXES["vault"])
    with SQLiteKeyVault(path, master_key=KEY, read_only=True) as vault:
        assert not vault.holds(sealed.key_ref)
        assert vault.check_integrity()


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_check_integrity_on_a_closed_file_is_unavailable(kind: str, tmp_path: Path) -> None:

    opened = OPENERS[kind](str(tmp_path / "memory.db"))
    opened.close()
    with pytest.raises(StoreUnavailableError):
        opened.check_integrity()


# --------------------------------------------------------------------------- what a check cannot complete


class _Refusing:
    """A connection whose every statement fails with ``error`` (a file SQLite cannot read through)."""

    def __init__(self, error: sqlite3.Error) -> None:
        self.error = error

    def execute(self, *_: object) -> Any:
        raise self.error


def _sqlite_error(kind: type[sqlite3.Error], code: int, name: str) -> sqlite3.Error:
    error = kind(name.lower())
    error.sqlite_errorcode = code
    error.sqlite_errorname = name
    return error


@pytest.mark.parametrize(("code", "name"), [(sqlite3.SQLITE_CORRUPT, "SQLITE_CORRUPT"), (26, "SQLITE_NOTADB")])
def test_a_check_that_damage_stops_is_one_problem(code: int, name: str) -> None:
    refusing = _Refusing(_sqlite_error(sqlite3.DatabaseError, code, name))
    assert integrity_problems(refusing) == [f"the check could not complete: {name}"]  # type: ignore[arg-type]


def test_a_check_that_a_lock_stops_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    """A busy file says nothing about damage: the error propagates, and the vault reports it as unavailable."""
    busy = _sqlite_error(sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY")
    with pytest.raises(sqlite3.OperationalError):
        integrity_problems(_Refusing(busy))  # type: ignore[arg-type]
    vault = SQLiteKeyVault(tmp_path / "memory.db.vault", master_key=KEY)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("engram_memory.keyvaults.sqlite.integrity_problems", _Refusing(busy).execute)
            with pytest.raises(StoreUnavailableError, match="sqlite check integrity failed: SQLITE_BUSY"):
                vault.check_integrity()
    finally:
        vault.close()


# --------------------------------------------------------------------------- a log left by a killed process


def test_truncating_a_left_over_log_never_waits_for_a_reader(tmp_path: Path) -> None:
    """A reader holding a snapshot keeps the log (the truncation is skipped, not waited for); once it
    is gone the truncation empties the log; a connection that cannot run it answers ``False``."""
    db = tmp_path / "memory.db"
    service = connect(f"sqlite:///{db}")
    try:
        assert service.call_tool("engram_memory_capture", capture_args(make_key("log")), make_binding())["ok"]
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()
        writer = sqlite3.connect(db, isolation_level=None)
        try:
            assert Path(f"{db}-wal").stat().st_size > 0
            assert truncate_left_over_wal(writer, busy_timeout_ms=1234) is False
            assert writer.execute("PRAGMA busy_timeout").fetchone()[0] == 1234  # restored
            assert Path(f"{db}-wal").stat().st_size > 0
            reader.execute("ROLLBACK")
            assert truncate_left_over_wal(writer, busy_timeout_ms=1234) is True
            assert Path(f"{db}-wal").stat().st_size == 0
        finally:
            writer.close()
            reader.close()
        closed = sqlite3.connect(db)
        closed.close()
        assert truncate_left_over_wal(closed, busy_timeout_ms=1234) is False
    finally:
        service.close()
