"""Store access shared by the read and write paths: port errors become memory errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engram_memory.errors import EngramError, ErrorCode, StoreCorruptError, StoreUnavailableError
from engram_memory.ports import Store, StoreReader

__all__ = ["available_view", "read_view"]


@contextmanager
def read_view(store: Store, scope: str) -> Iterator[StoreReader]:
    """A read view of ``scope``; ``STORE_UNAVAILABLE`` (retriable) or the corruption code on failure."""
    try:
        with available_view(store, scope) as reader:
            yield reader
    except StoreCorruptError as exc:
        raise EngramError(exc.code, detail=str(exc)) from exc


@contextmanager
def available_view(store: Store, scope: str) -> Iterator[StoreReader]:
    """A read view of ``scope`` for host maintenance: ``STORE_UNAVAILABLE`` (retriable) when the store gives none.

    A closed store, or one busy past its timeout, is ``EngramError`` like everywhere else; a
    damaged row's :class:`~engram_memory.errors.StoreCorruptError` propagates as the store raised
    it, with its own detail (what the operator's tools show).
    """
    try:
        with store.read(scope) as reader:
            yield reader
    except StoreUnavailableError as exc:
        raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail=str(exc)) from exc
