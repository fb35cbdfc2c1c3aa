"""Database files: created owner-only, or opened for reading without writing anything.

Creation: SQLite gives its -wal and -shm files the mode of their database, so a file created
``0600`` keeps its write-ahead log owner-only too.

Read-only opening (``read_only=True`` of the store and the vault) follows SQLite's rules for a
WAL database opened read-only. While the file has a ``-wal`` (a process has it open, or one was
killed), a ``mode=ro`` connection reads through the log under SQLite's usual reader locks, so a
writer may keep writing; it needs the ``-shm`` index to exist (SQLite would create a missing one,
so that case is refused once it outlasts a short re-check: a process opening the file creates the
``-wal`` just before the ``-shm``, and one closing it removes them in the other order). Without a
``-wal`` no process has the file open, and it is read
``immutable``: no lock is taken and no ``-wal`` or ``-shm`` is created (a ``mode=ro`` connection
would create both, and leave them behind). ``immutable`` is only correct while nothing writes the
file, so a caller that may race a writer compares :func:`file_mark` before and after it reads.
Either way the connection runs ``PRAGMA query_only``, can never checkpoint, and leaves the file
byte for byte as it was.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Final

from engram_memory.errors import StoreUnavailableError
from engram_memory.stores.sqlite._errors import MigrationLedgerError
from engram_memory.stores.sqlite._schema import SchemaSpec, migrate

__all__ = [
    "FileMark",
    "LogWithoutIndexError",
    "check_current_schema",
    "connect_read_only",
    "create_private",
    "file_mark",
    "holds_scopes",
    "integrity_problems",
    "read_only_uri",
    "truncate_left_over_wal",
]

FileMark = tuple[int, int, int, int]
"""A file's device, inode, size and modification time (ns): what changes when anything writes it."""

_WAL_WITHOUT_SHM: Final = (
    "the file has a write-ahead log without its -shm index, and reading it would create one: another "
    "process may be opening or closing it, or hold it in exclusive locking mode, or one was killed; run "
    "the command again, and if this persists while no process has the file open, open it read-write "
    "once (as the user that owns it) to recover it"
)
_SETTLE_SECONDS: Final = 1.0
"""How long :func:`read_only_uri` re-checks a ``-wal`` without its ``-shm`` before refusing the file."""
_SETTLE_STEP: Final = 0.02


class LogWithoutIndexError(StoreUnavailableError):
    """The file kept a ``-wal`` without its ``-shm`` for the whole re-check: it cannot be read without writing.

    Usually transient (another process opening or closing the file); it persists while a process
    holds the file in exclusive locking mode, or after one was killed at the wrong moment.
    """


def create_private(path: str) -> None:
    """Create an empty file with mode 0600 if ``path`` does not exist yet (never touches an existing file).

    A symbolic link is followed, as SQLite follows it: a link to a file that does not exist yet gets
    that file created owner-only (``O_EXCL`` alone would refuse the link and leave SQLite to create
    the file with the umask's mode).
    """
    with contextlib.suppress(OSError):  # exists already, or sqlite3 reports the real problem at open
        os.close(os.open(os.path.realpath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def read_only_uri(path: str, *, settle_seconds: float = _SETTLE_SECONDS) -> str:
    """The SQLite URI that reads ``path`` without writing or creating any file (see the module docstring).

    A ``-wal`` without its ``-shm`` is looked at again every few milliseconds for up to
    ``settle_seconds``: another process opening or closing the file passes through that state.

    Raises:
        LogWithoutIndexError: the file kept a ``-wal`` but no ``-shm`` (which a read would create)
            for the whole re-check.
    """
    real = Path(os.path.realpath(path))
    wal, shm = real.with_name(f"{real.name}-wal"), real.with_name(f"{real.name}-shm")
    deadline = time.monotonic() + settle_seconds
    while True:
        if not wal.exists():
            return real.as_uri() + "?mode=ro&immutable=1"
        if shm.exists():
            return real.as_uri() + "?mode=ro"
        if time.monotonic() >= deadline:
            raise LogWithoutIndexError(_WAL_WITHOUT_SHM)
        time.sleep(_SETTLE_STEP)


def file_mark(path: str) -> FileMark:
    """What identifies ``path``'s current content without reading it (``OSError`` if it cannot be looked at)."""
    found = Path(path).stat()
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def connect_read_only(uri: str, *, busy_timeout_ms: int, cached_statements: int = 128) -> sqlite3.Connection:
    """A connection to ``uri`` (from :func:`read_only_uri`) that refuses every write (``query_only``).

    Raises:
        sqlite3.Error: the caller translates it.
    """
    conn = sqlite3.connect(
        uri,
        uri=True,
        timeout=busy_timeout_ms / 1000,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=cached_statements,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA trusted_schema = OFF")
    except BaseException:
        conn.close()
        raise
    return conn


def holds_scopes(path: str) -> bool | None:
    """Whether the store file at ``path`` holds a scope, read without writing anything.

    ``None`` when that cannot be told this way (not an engram-memory store of any version, a
    ``-wal`` without its ``-shm``, a driver error): the caller then opens it the usual way, which
    refuses it or answers the same question.
    """
    try:
        conn = connect_read_only(read_only_uri(path, settle_seconds=0), busy_timeout_ms=1000)
    except (sqlite3.Error, StoreUnavailableError):
        return None
    try:
        found: int = conn.execute("SELECT EXISTS (SELECT 1 FROM scopes)").fetchone()[0]
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return found == 1


def truncate_left_over_wal(conn: sqlite3.Connection, *, busy_timeout_ms: int) -> bool:
    """Checkpoint and truncate the write-ahead log ``conn``'s file was opened with; whether it was truncated.

    A process killed between an erasure's commit and its own truncation leaves the page images
    from before the erasure in the ``-wal`` (SQLite keeps them until the log is reset). A
    read-write open calls this, so they leave the log there and then instead of at the next
    erasure or the last close. Never waits: another process still reading the log keeps it (a
    busy checkpoint is skipped; its own erasures and its close truncate it), and an error is
    ignored. ``conn``'s busy timeout is set back to ``busy_timeout_ms``.
    """
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    except sqlite3.Error:
        busy = 1
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    return not busy


def integrity_problems(conn: sqlite3.Connection) -> list[str]:
    """The problems SQLite's ``PRAGMA integrity_check`` finds in ``conn``'s file (``[]`` when it is sound).

    Reads every page of the file (its cost grows with the file). It checks SQLite's structures:
    the B-trees, the free list, and that every index holds exactly its table's rows
    (``quick_check`` skips that last part, and with it the damage a flipped index page does); not
    that values make sense to this library. A check that SQLite cannot complete because the file
    is damaged is reported as one problem; any other ``sqlite3.Error`` (a lock, an I/O error)
    propagates. The texts are SQLite's (table and index names, row numbers), made printable.
    """
    try:
        rows = conn.execute("SELECT CAST(integrity_check AS BLOB) FROM pragma_integrity_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}:
            raise
        return [f"the check could not complete: {getattr(exc, 'sqlite_errorname', None) or 'SQLITE_CORRUPT'}"]
    found = [bytes(row[0]).decode("utf-8", errors="backslashreplace") for row in rows]
    return [] if found == ["ok"] else [text if text.isprintable() else ascii(text) for text in found]


def check_current_schema(conn: sqlite3.Connection, spec: SchemaSpec) -> None:
    """Refuse, reading only, a file that is not a ``spec.kind`` database at the current schema.

    Raises:
        MigrationLedgerError: a foreign or empty file, an untrusted ledger, or an outdated schema
            (which only a read-write open migrates); :class:`SchemaVersionError` for a newer one.
        sqlite3.Error: the caller translates it.
    """
    version = migrate(conn, spec, target=0)  # validates the marks and the ledger; writes nothing
    if version == 0:
        raise MigrationLedgerError(f"not an engram-memory {spec.kind} database", found=0, supported=spec.latest)
    if version < spec.latest:
        raise MigrationLedgerError(
            f"{spec.kind} schema version {version} is outdated; a read-only open never migrates it",
            found=version,
            supported=spec.latest,
        )
