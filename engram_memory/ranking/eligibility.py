"""The read eligibility rule (DESIGN D10/D11), in one place for search, get and the ranker.

A record is readable at the pinned instant ``valid_as_of`` (epoch ms) and the wall-clock instant
``now_ms`` iff it is ``accepted_current``, its trust is valid, ``valid_from <= valid_as_of``, the
closed interval has not ended (``valid_to`` absent or ``valid_as_of <= valid_to``) and its
retention has not expired (``expires_at_ms`` absent or ``now_ms < expires_at_ms``).

A store may state the same rule in its own query language to judge a search's hits where the rows
are (:meth:`~engram_memory.ports.StoreReader.eligible_documents`; the SQLite store does); the store
conformance kit checks that it keeps exactly what this rule keeps, instants on every boundary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from engram_memory.ports import IndexEntry, RecordRow

_Key = TypeVar("_Key")

__all__ = ["eligible_entries", "row_is_eligible"]


class _EligibilityInputs(Protocol):
    """What the rule reads: a record row, or an index entry carrying its row's inputs."""

    @property
    def state(self) -> str: ...
    @property
    def trust_valid(self) -> bool: ...
    @property
    def valid_from(self) -> int: ...
    @property
    def valid_to(self) -> int | None: ...
    @property
    def expires_at_ms(self) -> int | None: ...


_Row = TypeVar("_Row", bound=_EligibilityInputs)


def eligible_entries(entries: Iterable[tuple[_Key, _Row]], *, valid_as_of: int, now_ms: int) -> list[tuple[_Key, _Row]]:
    """The (key, row) pairs whose row is readable at ``valid_as_of`` and ``now_ms``, in order.

    The full rule (state, trust, valid time, retention) in one comprehension, so a batch of hits
    (hundreds per search) is judged without a call per hit; :func:`row_is_eligible` is the same
    rule for one row.
    """
    return [
        (key, row)
        for key, row in entries
        if row.state == "accepted_current"
        and row.trust_valid
        and row.valid_from <= valid_as_of
        and (row.valid_to is None or valid_as_of <= row.valid_to)
        and (row.expires_at_ms is None or now_ms < row.expires_at_ms)
    ]


def row_is_eligible(row: RecordRow | IndexEntry, *, valid_as_of: int, now_ms: int) -> bool:
    """Full eligibility of a record row (or of an index entry, which carries its row's inputs): state, trust, time."""
    return bool(eligible_entries(((None, row),), valid_as_of=valid_as_of, now_ms=now_ms))
