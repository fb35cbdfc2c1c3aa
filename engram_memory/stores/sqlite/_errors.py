"""The adapter edge: every ``sqlite3`` exception becomes a port error here, and nowhere else.

Nothing above :mod:`engram_memory.stores.sqlite` (and :mod:`engram_memory.keyvaults.sqlite`) ever
sees a ``sqlite3`` exception. The mapping:

* busy / locked (another writer holds the lock past the busy timeout) → :class:`StoreUnavailableError`
  (retriable);
* corruption (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``) → :class:`StoreCorruptError` with
  ``JOURNAL_CORRUPT`` (retrying cannot help);
* a constraint violation → :class:`StoreConflictError` (the statement was refused; the unit of work
  rolls back when the exception leaves it);
* anything else (I/O error, disk full, cannot open, misuse of a closed connection) →
  :class:`StoreUnavailableError`.

An error raised *by* ``COMMIT`` is handled by the store itself: the outcome may be unknown
(:class:`StoreOutcomeUnknownError`), see :func:`commit_failure`.

:class:`MigrationLedgerError` and :class:`SchemaVersionError` are the typed refusals of a database
whose schema this library cannot vouch for. They are :class:`~engram_memory.errors.EngramError` s
with code ``MIGRATION_LEDGER_INVALID`` — not retriable, because waiting does not make a newer
schema older — rather than :class:`StoreUnavailableError`, whose contract is "retry later".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import wraps
from typing import Final, ParamSpec, TypeVar

from engram_memory.errors import (
    EngramError,
    ErrorCode,
    PortError,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)

__all__ = [
    "MigrationLedgerError",
    "SchemaVersionError",
    "commit_failure",
    "is_busy",
    "translate",
    "translated",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class MigrationLedgerError(EngramError):
    """The database's schema ledger cannot be trusted (foreign file, edited or unknown migrations).

    Code ``MIGRATION_LEDGER_INVALID``, not retriable. ``found`` is the schema version read from the
    file (``PRAGMA user_version``), ``supported`` the newest version this library knows.
    """

    def __init__(self, detail: str, *, found: int | None = None, supported: int | None = None) -> None:
        super().__init__(ErrorCode.MIGRATION_LEDGER_INVALID, detail=detail)
        self.found = found
        self.supported = supported


class SchemaVersionError(MigrationLedgerError):
    """The database was written by a newer version of the library; it is refused, never downgraded."""


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _undecodable_text(exc: sqlite3.Error) -> bool:
    """Whether ``sqlite3`` could not decode a ``TEXT`` value it read (a damaged page; no SQLite code)."""
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("Could not decode to UTF-8")


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is ``SQLITE_BUSY`` / ``SQLITE_LOCKED`` (including extended codes)."""
    code = _primary_code(exc)
    if code is not None:
        return code in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def translate(exc: sqlite3.Error, action: str) -> PortError:
    """The port error for a ``sqlite3`` exception raised while doing ``action``.

    The message names the action and SQLite's error name only; it never carries bound values.
    """
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    detail = f"sqlite {action} failed: {name}"
    if _undecodable_text(exc):  # first: its message quotes the bytes, which may read "busy"; only the fact is kept
        return StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, f"{detail} (a text value is not UTF-8: damaged file)")
    if is_busy(exc):
        return StoreUnavailableError(f"{detail} (database is locked; retry)")
    if _primary_code(exc) in _CORRUPT_CODES:
        return StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, detail)
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreConflictError(detail)
    return StoreUnavailableError(detail)


def commit_failure(exc: sqlite3.Error, *, still_in_transaction: bool) -> PortError:
    """The port error for a failed ``COMMIT``.

    SQLite keeps the transaction open when ``COMMIT`` fails with ``SQLITE_BUSY``: nothing was
    written, so after a rollback the outcome is known (retriable :class:`StoreUnavailableError`).
    Any other failure (I/O error, disk full, lost file) may have happened before or after the
    commit record reached the disk: :class:`StoreOutcomeUnknownError`.
    """
    if still_in_transaction and is_busy(exc):
        return StoreUnavailableError("sqlite commit failed: database is locked; nothing was written")
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return StoreOutcomeUnknownError(f"sqlite commit failed: {name}; the outcome is unknown")


def translated(action: str) -> Callable[[Callable[_P, _T]], Callable[_P, _T]]:
    """Decorate a method so that a ``sqlite3.Error`` leaves it as a port error."""

    def decorate(function: Callable[_P, _T]) -> Callable[_P, _T]:
        @wraps(function)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            try:
                return function(*args, **kwargs)
            except sqlite3.Error as exc:
                raise translate(exc, action) from exc

        return wrapper

    return decorate
