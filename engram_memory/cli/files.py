"""How the commands open a database's files: existing ones checked first, inspected read-only.

A command on an existing database checks that the store, its vault and the master key file exist
and that both databases are at the current schema (reading their marks only), then either
inspects them through read-only connections that write nothing and notice a writer that changed
the files meanwhile (:func:`_inspection`), or connects read-write under the master key
(:func:`_connected`). Every failure exits with one line naming the file.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import stat
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Final

from engram_memory.cli.messages import _AS_OWNER, _SQLITE_HINTS, _cause_hint, _reason
from engram_memory.clock import SystemClock
from engram_memory.connect import connect
from engram_memory.errors import EngramError, PortError, StoreUnavailableError
from engram_memory.keyvaults.sqlite import VAULT_SCHEMA, MasterKeyError, SQLiteKeyVault, _read_key_file
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import Policy
from engram_memory.service import MemoryService
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.stores.sqlite._files import FileMark, LogWithoutIndexError, file_mark, read_only_uri
from engram_memory.stores.sqlite._schema import STORE_APPLICATION_ID, STORE_SCHEMA

_URL_UNSAFE = frozenset("?#%")
"""Characters a ``sqlite:///`` URL refuses in its path (see :func:`~engram_memory.connect.connect`)."""


def _exists(path: str | Path) -> bool:
    """Whether something is at ``path``; exits with a message if it cannot be looked at."""
    try:
        Path(path).stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SystemExit(f"cannot look at {path}: {exc.strerror}") from None
    return True


def _sqlite_url(db: str | Path) -> str:
    """The ``sqlite:///`` URL of the file ``db``; exits if the path cannot be written as one."""
    if _URL_UNSAFE.intersection(str(db)):
        raise SystemExit(f"cannot use {db}: a database path must not contain '?', '#' or '%'")
    return f"sqlite:///{db}"


def _require_current_schema(path: str, what: str, application_id: int, current: int, *, writer: bool) -> None:
    """Exit unless ``path`` is an engram-memory ``what`` file at schema ``current``; read its marks only.

    The connection is the one the store and the vault open read-only (see ``read_only_uri``): it
    creates no ``-wal`` or ``-shm`` file and writes nothing. A ``writer`` (a command that opens
    the files read-write next) is not refused for a ``-wal`` without its ``-shm``: it reads the
    marks through a read-write connection, as its own open will.
    """
    if _exists(Path(path)) and not stat.S_ISREG(Path(path).stat().st_mode):  # a FIFO would block the open
        raise SystemExit(f"cannot open {path}: not a regular file")
    try:
        found_id, version = _marks_of(path, writer=writer)
    except sqlite3.OperationalError as exc:  # cannot open: permissions, a -shm it cannot read, a lock
        hint = _cause_hint(exc)
        if writer or hint == _SQLITE_HINTS["SQLITE_BUSY"]:
            raise SystemExit(f"cannot open {path}: {exc}; {hint}") from None
        raise SystemExit(f"cannot open {path} read-only: {exc}; {_AS_OWNER}") from None
    except sqlite3.Error as exc:
        raise SystemExit(f"cannot open {path}: {exc}") from None
    except PortError as exc:
        raise SystemExit(f"cannot open {path} read-only: {exc}") from None
    if version < 0:  # no library writes one: a damaged header
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is impossible: the file is damaged "
            f"or not an engram-memory {what}"
        )
    if found_id != application_id or version == 0:
        raise SystemExit(f"cannot open {path}: not an engram-memory {what}")
    if version < current:
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is outdated (current: {current}); "
            "this command never modifies the file, and opening it with the library (connect()) migrates it"
        )
    if version > current:
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is newer than this engram-memory "
            f"supports ({current}); upgrade engram-memory"
        )


def _marks_of(path: str, *, writer: bool) -> tuple[int, int]:
    """``path``'s application id and schema version (``sqlite3.Error`` or ``PortError`` if unreadable)."""
    try:
        conn = sqlite3.connect(read_only_uri(path, settle_seconds=0) if writer else read_only_uri(path), uri=True)
    except LogWithoutIndexError:
        if not writer:
            raise
        conn = sqlite3.connect(path, timeout=5.0)  # creates the -shm, as the command's own open will
    try:
        found_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return found_id, version


def _mark(path: str) -> tuple[bool, FileMark]:
    """Whether ``path`` has a write-ahead log, and what identifies its content (see ``file_mark``)."""
    try:
        return _exists(f"{path}-wal"), file_mark(path)
    except OSError as exc:
        raise SystemExit(f"cannot look at {path}: {exc.strerror}") from None


def _changed(path: str, before: tuple[bool, FileMark]) -> bool:
    """Whether a read of ``path`` may have raced a writer.

    A file that had a ``-wal`` before and after was read through it under SQLite's reader locks,
    which keep a writer's checkpoint from changing what a reader sees. Otherwise it was (or may
    have been) read ``immutable``, without locks: correct only if nothing changed the file.
    """
    had_wal, mark = before
    try:
        has_wal, now = _mark(path)
    except SystemExit:
        return True
    return not (had_wal and has_wal) and now != mark


def _key_file_of(options: argparse.Namespace) -> str:
    """The master key file a command reads: ``--key-file``, by default ``<db>.key`` beside the database."""
    key_file: str | None = options.key_file
    return key_file if key_file is not None else f"{options.db}.key"


def _require_existing(db: str, key_file: str, *, writer: bool = False) -> tuple[str, str]:
    """Exit unless ``db``, its vault and ``key_file`` exist and both databases are at the current schema.

    Reads only; returns the paths of the store and the vault. A command that works on an existing
    database must never create or migrate one. ``writer``: the command opens the files read-write
    next (see ``_require_current_schema``).
    """
    for path, what in ((db, "database"), (f"{db}.vault", "key vault"), (key_file, "master key file")):
        if not _exists(path):
            raise SystemExit(f"no {what} at {path}")
    _sqlite_url(db)
    _require_current_schema(db, "store", STORE_APPLICATION_ID, STORE_SCHEMA.latest, writer=writer)
    vault = f"{db}.vault"
    _require_current_schema(vault, VAULT_SCHEMA.kind, VAULT_SCHEMA.application_id, VAULT_SCHEMA.latest, writer=writer)
    return db, vault


@contextlib.contextmanager
def _inspection(db: str, key_file: str) -> Iterator[MemoryService]:
    """An existing database opened read-only with its vault and ``key_file``; never created, migrated or written.

    Exits with a message if a file is missing, cannot be read without writing, is at another
    schema version, or changed while it was read (then whatever was read is not trusted).
    """
    marks = {path: _mark(path) for path in _require_existing(db, key_file)}
    failure: str | None = None
    try:
        store = SQLiteStore(db, read_only=True)
    except (EngramError, PortError) as exc:
        raise SystemExit(_cannot_open(db, exc)) from None
    try:
        vault = SQLiteKeyVault(f"{db}.vault", master_key_file=key_file, read_only=True)
    except (EngramError, PortError) as exc:
        store.close()
        raise SystemExit(_cannot_open(db, exc)) from None
    # each file was opened as its -wal was then; a -wal both before and after means it was read through it
    marks = {path: (had_wal and _exists(f"{path}-wal"), mark) for path, (had_wal, mark) in marks.items()}
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=SystemClock())
    try:
        yield service
    except (EngramError, PortError) as exc:
        failure = _reason(exc)
    except UnicodeDecodeError:  # a text column of a damaged page: the store's reads pass it through
        failure = _UNDECODABLE
    finally:
        service.close(destroy_doomed_keys=False)  # closes the read-only connections: writes nothing
    if any(_changed(path, mark) for path, mark in marks.items()):
        raise SystemExit(f"{db} changed while it was read (a process wrote it); run the command again")
    if failure is not None:
        raise SystemExit(f"cannot read {db}: {failure}")


_UNDECODABLE: Final = "a text value is not valid UTF-8: the file is damaged"


def _cannot_open(db: str, exc: EngramError | PortError) -> str:
    if isinstance(exc, LogWithoutIndexError):  # the message says what to do
        return f"cannot open {db} read-only: {_reason(exc)}"
    if isinstance(exc, StoreUnavailableError):  # cannot open, or cannot read without writing, or locked
        locked = _cause_hint(exc) == _SQLITE_HINTS["SQLITE_BUSY"]
        return f"cannot open {db} read-only: {_reason(exc)}; {_SQLITE_HINTS['SQLITE_BUSY'] if locked else _AS_OWNER}"
    return f"cannot open {db}: {_reason(exc)}"


def _master_key(db: str, key_file: str | None) -> bytes | None:
    """The 32 bytes of ``--key-file`` for ``connect(master_key=...)``; ``None`` without it (``<db>.key`` is used).

    Read as the key vault reads its own key file (length checked, a warning for loose modes);
    exits with one line if the file is missing, unreadable or not 32 bytes. Creates nothing.
    """
    if key_file is None:
        return None
    try:
        key = _read_key_file(Path(key_file))
    except MasterKeyError as exc:
        raise SystemExit(f"cannot open {db}: {exc}; reading the key file {key_file!r}") from None
    if key is None:
        raise SystemExit(f"no master key file at {key_file}")
    return key


def _connected(
    options: argparse.Namespace, policy: Policy | None = None, page_cursor_lifetime: timedelta | None = None
) -> MemoryService:
    """``connect()`` on ``--db`` under the master key of ``--key-file`` (default ``<db>.key``); exits on failure.

    A failure is one line naming the database, and the key file as ``connect()`` names its default one.
    """
    key_file: str | None = options.key_file
    master_key = _master_key(options.db, key_file)
    try:
        return connect(
            _sqlite_url(options.db), policy=policy, master_key=master_key, page_cursor_lifetime=page_cursor_lifetime
        )
    except (EngramError, PortError) as exc:
        reason = _reason(exc)
        if key_file is not None:  # connect() names the vault only, since it was given bytes
            note = f"opening the SQLite key vault {f'{options.db}.vault'!r}"
            reason = reason.replace(note, f"{note} with the key file {key_file!r}")
        raise SystemExit(f"cannot open {options.db}: {reason}") from None
