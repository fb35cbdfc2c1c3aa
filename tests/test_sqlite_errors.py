"""The SQLite adapter edge, beyond the exception *type*: which failures are retriable, which commit outcomes are
known, and which corruption code reaches the caller — for primary and extended result codes alike."""

from __future__ import annotations

import sqlite3
from typing import Final

import pytest

from engram_memory.errors import (
    ErrorCode,
    PortError,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.stores.sqlite import _errors as errors

LOCKED_HINT: Final = "(database is locked; retry)"


def _coded(kind: type[sqlite3.Error], code: int, name: str) -> sqlite3.Error:
    error = kind("message")
    error.sqlite_errorcode = code
    error.sqlite_errorname = name
    return error


def _name(error: sqlite3.Error) -> str:
    return str(getattr(error, "sqlite_errorname", error))


BUSY: Final = [
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY"),
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_LOCKED, "SQLITE_LOCKED"),
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_BUSY_SNAPSHOT, "SQLITE_BUSY_SNAPSHOT"),
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_BUSY_TIMEOUT, "SQLITE_BUSY_TIMEOUT"),
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_LOCKED_SHAREDCACHE, "SQLITE_LOCKED_SHAREDCACHE"),
    sqlite3.OperationalError("database is locked"),  # no result code attached: the text decides
    sqlite3.OperationalError("database table is locked"),
]
NOT_BUSY: Final = [
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_IOERR, "SQLITE_IOERR"),
    _coded(sqlite3.OperationalError, sqlite3.SQLITE_FULL, "SQLITE_FULL"),
    sqlite3.OperationalError("disk I/O error"),
]
CORRUPT: Final = [
    _coded(sqlite3.DatabaseError, sqlite3.SQLITE_CORRUPT, "SQLITE_CORRUPT"),
    _coded(sqlite3.DatabaseError, sqlite3.SQLITE_CORRUPT_INDEX, "SQLITE_CORRUPT_INDEX"),
    _coded(sqlite3.DatabaseError, sqlite3.SQLITE_NOTADB, "SQLITE_NOTADB"),
]


@pytest.mark.parametrize("error", BUSY, ids=_name)
def test_a_lock_is_a_retriable_unavailability_and_a_busy_commit_wrote_nothing(error: sqlite3.Error) -> None:
    assert errors.is_busy(error)
    translated = errors.translate(error, "write")
    assert type(translated) is StoreUnavailableError
    assert LOCKED_HINT in str(translated)
    assert type(errors.commit_failure(error, still_in_transaction=True)) is StoreUnavailableError
    assert type(errors.commit_failure(error, still_in_transaction=False)) is StoreOutcomeUnknownError


@pytest.mark.parametrize("error", NOT_BUSY, ids=_name)
def test_other_operational_failures_are_unavailable_and_a_failed_commit_is_unknown(error: sqlite3.Error) -> None:
    assert not errors.is_busy(error)
    translated = errors.translate(error, "write")
    assert type(translated) is StoreUnavailableError
    assert LOCKED_HINT not in str(translated)
    assert type(errors.commit_failure(error, still_in_transaction=True)) is StoreOutcomeUnknownError


@pytest.mark.parametrize("error", CORRUPT, ids=_name)
def test_corruption_is_journal_corrupt(error: sqlite3.Error) -> None:
    translated = errors.translate(error, "read")
    assert type(translated) is StoreCorruptError
    assert isinstance(translated, StoreCorruptError)
    assert translated.code is ErrorCode.JOURNAL_CORRUPT


def test_a_constraint_violation_with_an_extended_code_is_a_conflict() -> None:
    error = _coded(sqlite3.IntegrityError, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, "SQLITE_CONSTRAINT_PRIMARYKEY")
    assert type(errors.translate(error, "append_event")) is StoreConflictError


class _BusyCommit:
    """A connection whose ``COMMIT`` is refused with ``SQLITE_BUSY`` and leaves the transaction open, as SQLite does."""

    def __init__(self) -> None:
        self.in_transaction = True
        self.executed: list[str] = []

    def execute(self, sql: str) -> None:
        self.executed.append(sql)
        if sql == "COMMIT":
            raise _coded(sqlite3.OperationalError, sqlite3.SQLITE_BUSY, "SQLITE_BUSY")
        if sql == "ROLLBACK":
            self.in_transaction = False


def test_a_busy_commit_is_rolled_back_and_reported_as_retriable_with_nothing_written() -> None:
    conn = _BusyCommit()
    with pytest.raises(PortError) as caught:
        SQLiteStore._commit(conn)  # type: ignore[arg-type]
    assert type(caught.value) is StoreUnavailableError
    assert "nothing was written" in str(caught.value)
    assert conn.executed == ["COMMIT", "ROLLBACK"]
    assert not conn.in_transaction
