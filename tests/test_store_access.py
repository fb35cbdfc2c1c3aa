"""``read_view``: store port errors become memory errors; everything else passes through."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest

from engram_memory.errors import EngramError, ErrorCode, StoreCorruptError, StoreUnavailableError
from engram_memory.ports import Store
from engram_memory.store_access import read_view


class _Store:
    """A store whose ``read`` yields a sentinel reader, or fails on entry with ``fail``."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.reader = object()
        self.events: list[str] = []

    @contextmanager
    def read(self, scope: str) -> Iterator[Any]:
        self.events.append(f"enter {scope}")
        if self.fail is not None:
            raise self.fail
        try:
            yield self.reader
        finally:
            self.events.append(f"exit {scope}")


def _as_store(store: _Store) -> Store:
    return cast("Store", store)


def test_yields_the_reader_of_the_scope_and_closes_it() -> None:
    store = _Store()
    with read_view(_as_store(store), "scope-7") as reader:
        assert reader is store.reader
        assert store.events == ["enter scope-7"]
    assert store.events == ["enter scope-7", "exit scope-7"]


def test_an_unavailable_store_is_a_retriable_store_unavailable() -> None:
    cause = StoreUnavailableError("lock wait timed out")
    with pytest.raises(EngramError) as caught, read_view(_as_store(_Store(cause)), "scope-7"):
        pytest.fail("the body must not run")
    error = caught.value
    assert error.code is ErrorCode.STORE_UNAVAILABLE
    assert error.retriable is True
    assert str(error) == "the memory store is unavailable"
    assert error.__cause__ is cause
    assert error.__notes__ == ["lock wait timed out"]


def test_unavailability_inside_the_view_is_converted_too() -> None:
    store = _Store()
    cause = StoreUnavailableError("disk I/O error")
    with pytest.raises(EngramError) as caught, read_view(_as_store(store), "scope-7"):
        raise cause
    assert caught.value.code is ErrorCode.STORE_UNAVAILABLE
    assert caught.value.__cause__ is cause
    assert store.events == ["enter scope-7", "exit scope-7"]


@pytest.mark.parametrize("code", [ErrorCode.JOURNAL_CORRUPT, ErrorCode.BLOB_MISSING])
def test_corruption_keeps_its_code(code: ErrorCode) -> None:
    cause = StoreCorruptError(code, "row 12 digest mismatch")
    with pytest.raises(EngramError) as caught, read_view(_as_store(_Store(cause)), "scope-7"):
        pytest.fail("the body must not run")
    error = caught.value
    assert error.code is code
    assert error.retriable is False
    assert error.__cause__ is cause
    assert error.__notes__ == [str(cause)]
    assert str(cause) != ""


def test_journal_corruption_message() -> None:
    cause = StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "row 12 digest mismatch")
    with pytest.raises(EngramError) as caught, read_view(_as_store(_Store(cause)), "s"):
        pytest.fail("the body must not run")
    assert str(caught.value) == "the journal failed verification"
    assert caught.value.__notes__ == ["the journal failed verification"]


@pytest.mark.parametrize(
    "failure",
    [KeyError("k"), EngramError(ErrorCode.NOT_FOUND), RuntimeError("boom")],
)
def test_other_failures_pass_through_unchanged(failure: Exception) -> None:
    store = _Store()
    with pytest.raises(type(failure)) as caught, read_view(_as_store(store), "scope-7"):
        raise failure
    assert caught.value is failure
    assert store.events == ["enter scope-7", "exit scope-7"]
