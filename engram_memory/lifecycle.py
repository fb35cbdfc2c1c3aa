"""Lifecycle rules of candidates and records (DESIGN D5): which transitions are legal.

Each check returns the row an operation may act on, or raises the refusal; the write path runs
them inside the unit of work (admission also before it, to fail fast), so
an illegal transition is refused before anything is written.
"""

from __future__ import annotations

import json
from typing import Any

from engram_memory.errors import EngramError, ErrorCode
from engram_memory.ports import CandidateRow, RecordRow
from engram_memory.results import AdmissionOutcome, RequestAdmissionResult, from_json

__all__ = ["check_admissible", "check_forgettable", "check_withdrawable", "duplicate_value", "not_found"]


def not_found() -> EngramError:
    """The one answer for unknown, foreign and ineligible targets alike."""
    return EngramError(ErrorCode.NOT_FOUND)


def check_withdrawable(row: CandidateRow | None) -> CandidateRow:
    """The candidate a withdraw may end, or the refusal (checked inside the unit)."""
    if row is None:
        raise not_found()
    if row.state in {"withdrawn", "rejected"}:
        raise EngramError(ErrorCode.ALREADY_TERMINAL)
    if row.state != "pending":
        raise EngramError(ErrorCode.ILLEGAL_TRANSITION)
    return row


def check_forgettable(row: RecordRow | None) -> RecordRow:
    """The record a forget may tombstone, or the refusal (checked inside the unit)."""
    if row is None:
        raise not_found()
    if row.state == "tombstoned":
        raise EngramError(ErrorCode.ALREADY_TERMINAL)
    return row


def check_admissible(row: CandidateRow | None) -> CandidateRow:
    """A pending or already admitted candidate, or the refusal (checked before and inside the unit)."""
    if row is None:
        raise not_found()
    if row.state == "admitted" and row.outcome is not None:
        return row
    if row.state != "pending":
        raise EngramError(ErrorCode.ALREADY_TERMINAL)
    return row


def duplicate_value(row: CandidateRow) -> dict[str, Any]:
    """The duplicate_exact answer for a candidate admitted earlier (under another key)."""
    assert row.outcome is not None  # noqa: S101 - only called for admitted candidates
    original = json.loads(row.outcome)
    return RequestAdmissionResult(
        outcome=from_json(AdmissionOutcome, {**original, "status": "duplicate_exact"}), replayed=False
    ).to_json()
