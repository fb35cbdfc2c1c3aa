"""Typed results of the six operations (``<Verb>Result``); their JSON form is the tool output.

``to_json()`` gives exactly the ``value`` of the success envelope (absent optionals omitted).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import attrs

from engram_memory.wire.converter import make_converter

__all__ = [
    "AdmissionOutcome",
    "CaptureResult",
    "ForgetResult",
    "GetResult",
    "LifecycleReceipt",
    "RecordPacket",
    "RequestAdmissionResult",
    "SearchResult",
    "WithdrawResult",
    "from_json",
]

_CONVERTER = make_converter()
# records and receipts are already JSON values: unstructure them as they are, without a deep walk
_CONVERTER.register_unstructure_hook_func(lambda tp: tp == dict[str, Any], lambda value: value)
_T = TypeVar("_T")


class _Json:
    def to_json(self) -> dict[str, Any]:
        """The JSON value of this result (the envelope's ``output.value``)."""
        out: dict[str, Any] = _CONVERTER.unstructure(self)
        return out


def from_json(cls: type[_T], value: dict[str, Any]) -> _T:
    """Rebuild a typed result from its JSON value (used for idempotent replays)."""
    return _CONVERTER.structure(value, cls)


@attrs.frozen(kw_only=True)
class CaptureResult(_Json):
    """``committed_pending`` for a new candidate, ``duplicate_exact`` for a replay."""

    status: Literal["committed_pending", "duplicate_exact"]
    candidate_id: str
    record_digest: str | None = None
    cursor: str
    transaction_receipt_digest: str


@attrs.frozen(kw_only=True)
class AdmissionOutcome(_Json):
    """The admission outcome; ``record_id`` is present when accepted (and for duplicate_exact)."""

    status: Literal["accepted", "rejected", "pending_adjudication", "duplicate_exact"]
    candidate_id: str
    record_id: str | None = None
    cursor: str
    decision_receipt_digest: str
    transaction_receipt_digest: str


@attrs.frozen(kw_only=True)
class RequestAdmissionResult(_Json):
    """An admission outcome and whether it is an idempotent replay."""

    outcome: AdmissionOutcome
    replayed: bool


@attrs.frozen(kw_only=True)
class LifecycleReceipt(_Json):
    """The receipt of a withdraw or forget transition."""

    event_id: str
    operation: Literal["withdraw", "tombstone"]
    from_state: str
    to_state: Literal["withdrawn", "tombstoned"]
    cursor: str
    event_digest: str
    authorization_receipt_digest: str
    transaction_receipt_digest: str


@attrs.frozen(kw_only=True)
class WithdrawResult(_Json):
    """A withdrawn candidate; ``key_destruction`` tells whether its key is already gone."""

    receipt: LifecycleReceipt
    replayed: bool
    key_destruction: Literal["pending", "complete"]


@attrs.frozen(kw_only=True)
class ForgetResult(_Json):
    """A tombstoned record; ``projection_invalidation`` tells whether every index is purged."""

    receipt: LifecycleReceipt
    replayed: bool
    projection_invalidation: Literal["pending", "complete"]
    coverage_receipt_digest: str | None = None


@attrs.frozen(kw_only=True)
class RecordPacket(_Json):
    """One search hit: the redacted record, what was removed, and its score and rank."""

    record: dict[str, Any]
    redacted_fields: tuple[str, ...]
    redaction_receipt_digest: str
    score: float
    rank: int


@attrs.frozen(kw_only=True)
class SearchResult(_Json):
    """A page of search hits with the rank receipt and the response digest."""

    records: tuple[RecordPacket, ...]
    rank_receipt: dict[str, Any]
    next_page_cursor: str | None = None
    response_digest: str


@attrs.frozen(kw_only=True)
class GetResult(_Json):
    """One current record with its read receipt and packet digest."""

    record: dict[str, Any]
    redacted_fields: tuple[str, ...]
    redaction_receipt_digest: str
    read_receipt: dict[str, Any]
    packet_digest: str
