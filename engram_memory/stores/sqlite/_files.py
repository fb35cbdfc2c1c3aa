"""Database files: created owner-only, or opened for reading without writing anything.

Creation: SQLite gives its -wal and -shm files the mode of their database, so a file created
``0600`` keeps its write-ahead log owner-only too.

Read-only opening (``read_only=True`` of the store and the vault) follows SQLite's rules for a
WAL database opened read-only. While the file has a ``-wal`` (a process has it open, or one was
killed), a ``mode=ro`` connection reads through the log under SQLite's usual reader locks, so a
writer may keep writing; it needs the ``-shm`` index to exist (SQLite would create a missing one,
so that case is refused). Without a ``-wal`` no process has the file open, and it is read
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
from pathlib import Path
from typing import Final

from engram_memory.errors import StoreUnavailableError
from engram_memory.stores.sqlite._errors import MigrationLedgerError
from engram_memory.stores.sqlite._schema import SchemaSpec, migrate

__all__ = ["FileMark", "check_current_schema", "connect_read_only", "create_private", "file_mark", "read_only_uri"]

FileMark = tuple[int, int, int, int]
"""A file's device, inode, size and modification time (ns): what changes when anything writes it."""

_WAL_WITHOUT_SHM: Final = (
    "the file has a write-ahead log without its -shm index, and reading it would create one; "
    "open it read-write once (as the user that owns it) to recover it"
)


def create_private(path: str) -> None:
    """Create an empty file with mode 0600 if ``path`` does not exist yet (never touches an existing file).

    A symbolic link is followed, as SQLite follows it: a link to a file that does not exist yet gets
    that file created owner-only (``O_EXCL`` alone would refuse the link and leave SQLite to create
    the file with the umask's mode).
    """
    with contextlib.suppress(OSError):  # exists already, or sqlite3 reports the real problem at open
        os.close(os.open(os.path.realpath(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def read_only_uri(path: str) -> str:
    """The SQLite URI that reads ``path`` without writing or creating any file (see the module docstring).

    Raises:
        StoreUnavailableError: the file has a ``-wal`` but no ``-shm``, which a read would create.
    """
    real = Path(os.path.realpath(path))
    if not real.with_name(f"{real.name}-wal").exists():
        return real.as_uri() + "?mode=ro&immutable=1"
    if not real.with_name(f"{real.name}-shm").exists():
        raise StoreUnavailableError(_WAL_WITHOUT_SHM)
    return real.as_uri() + "?mode=ro"


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
