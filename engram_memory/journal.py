"""The per-scope hash-chained journal: event construction, state digest and verification.

An event body holds ids, states and digests only, never content: the journal stays verifiable
after erasure. Cursors are dense from 1 per scope; ``previous_event_digest`` of the first event is
:data:`~engram_memory.canonical.ZERO_DIGEST`; ``event_digest`` hashes the body without itself.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from engram_memory.canonical import (
    ZERO_DIGEST,
    CanonicalError,
    Domain,
    canonical_bytes,
    digest,
    format_cursor,
)
from engram_memory.errors import ErrorCode, KeyUnavailableError, SealIntegrityError
from engram_memory.ports import JournalEvent, KeyVault, StoreReader
from engram_memory.records import candidate_context, record_context

__all__ = ["VerifyReport", "build_event", "state_digest", "verify_scope"]

_CANDIDATE_STATES = {"capture": "pending", "reject": "rejected", "withdraw": "withdrawn", "accept": "admitted"}


def build_event(
    reader: StoreReader, *, event_id_prefix: str = "evt", **fields: Any
) -> tuple[JournalEvent, dict[str, Any]]:
    """Build the next event of the reader's scope from ``fields`` (``None`` values omitted)."""
    cursor = reader.high_water() + 1
    body: dict[str, Any] = {
        "schema_version": 1,
        "event_id": f"{event_id_prefix}_{cursor}",
        "cursor": format_cursor(cursor),
        **{key: value for key, value in fields.items() if value is not None},
        "previous_event_digest": reader.last_event_digest() or ZERO_DIGEST,
    }
    body["event_digest"] = digest(Domain.JOURNAL_EVENT, body)
    event = JournalEvent(cursor=cursor, event_digest=body["event_digest"], body=canonical_bytes(body))
    return event, body


def state_digest(reader: StoreReader) -> str:
    """Digest of the scope's folded state: head of the chain, candidate and record states."""
    return digest(
        Domain.FOLD_STATE,
        {
            "high_water_cursor": format_cursor(reader.high_water()),
            "journal_root": reader.last_event_digest() or ZERO_DIGEST,
            "candidates": [[c.candidate_id, c.state] for c in reader.candidates()],
            "records": [[r.record_id, r.state, r.record_digest] for r in reader.records()],
        },
    )


@attrs.frozen(kw_only=True)
class VerifyReport:
    """The outcome of :func:`verify_scope`: ``ok``, or the first bad cursor and its code."""

    ok: bool
    high_water: int
    code: ErrorCode | None = None
    cursor: int | None = None
    detail: str = ""


def _fail(code: ErrorCode, cursor: int, high_water: int, detail: str) -> VerifyReport:
    return VerifyReport(ok=False, high_water=high_water, code=code, cursor=cursor, detail=detail)


def verify_scope(reader: StoreReader, vault: KeyVault, scope: str) -> VerifyReport:
    """Re-derive the chain and the folded state of a scope and compare them with the stored state.

    Reports ``CURSOR_GAP`` (a missing or repeated cursor), ``JOURNAL_CORRUPT`` (a body that does
    not hash to its digest, a broken chain, a state that disagrees with the fold, a sealed body
    that does not authenticate) or ``BLOB_MISSING`` (a live candidate or record without its sealed
    body or key), each with the first bad cursor.
    """
    high_water = reader.high_water()
    previous = ZERO_DIGEST
    expected = 1
    candidates: dict[str, tuple[str, int]] = {}
    records: dict[str, tuple[str, int, str]] = {}
    for event in reader.events():
        if event.cursor != expected:
            return _fail(ErrorCode.CURSOR_GAP, expected, high_water, "cursor is not dense")
        try:
            body = json.loads(event.body)
            recomputed = digest(Domain.JOURNAL_EVENT, {k: v for k, v in body.items() if k != "event_digest"})
        except (ValueError, CanonicalError, AttributeError):
            return _fail(ErrorCode.JOURNAL_CORRUPT, event.cursor, high_water, "unreadable event")
        if (
            not isinstance(body, dict)
            or body.get("event_digest") != event.event_digest
            or recomputed != event.event_digest
            or body.get("previous_event_digest") != previous
            or body.get("cursor") != format_cursor(event.cursor)
            or canonical_bytes(body) != event.body
        ):
            return _fail(ErrorCode.JOURNAL_CORRUPT, event.cursor, high_water, "event does not hash")
        operation = body.get("operation")
        if operation in _CANDIDATE_STATES:
            candidates[body["candidate_id"]] = (_CANDIDATE_STATES[operation], event.cursor)
        if operation == "accept":
            records[body["record_id"]] = ("accepted_current", event.cursor, body["record_digest"])
        elif operation == "tombstone":
            _, _, record_digest = records.get(body.get("record_id", ""), ("", 0, ""))
            records[body["record_id"]] = ("tombstoned", event.cursor, record_digest)
        previous = event.event_digest
        expected += 1
    return _check_state(reader, vault, scope, candidates, records, high_water)


def _check_state(  # noqa: C901, PLR0917 - one pass over the fold, private helper
    reader: StoreReader,
    vault: KeyVault,
    scope: str,
    candidates: dict[str, tuple[str, int]],
    records: dict[str, tuple[str, int, str]],
    high_water: int,
) -> VerifyReport:
    stored_candidates = {row.candidate_id: row for row in reader.candidates()}
    stored_records = {row.record_id: row for row in reader.records()}
    problems: list[tuple[int, ErrorCode, str]] = []
    for cid, (state, cursor) in candidates.items():
        row = stored_candidates.pop(cid, None)
        if row is None or row.state != state:
            problems.append((cursor, ErrorCode.JOURNAL_CORRUPT, "candidate state differs from the fold"))
        elif state == "pending":
            problem = _check_sealed(vault, row.sealed, candidate_context(scope, cid))
            if problem is not None:
                problems.append((cursor, *problem))
    for rid, (state, cursor, record_digest) in records.items():
        record_row = stored_records.pop(rid, None)
        if record_row is None or record_row.state != state or record_row.record_digest != record_digest:
            problems.append((cursor, ErrorCode.JOURNAL_CORRUPT, "record state differs from the fold"))
        elif state != "tombstoned":
            problem = _check_sealed(vault, record_row.sealed, record_context(scope, rid))
            if problem is not None:
                problems.append((cursor, *problem))
    if stored_candidates or stored_records:
        problems.append((high_water, ErrorCode.JOURNAL_CORRUPT, "state rows without journal events"))
    if not problems:
        return VerifyReport(ok=True, high_water=high_water)
    cursor, code, detail = min(problems, key=lambda p: p[0])
    return _fail(code, cursor, high_water, detail)


def _check_sealed(vault: KeyVault, sealed: Any, context: str) -> tuple[ErrorCode, str] | None:
    if sealed is None:
        return ErrorCode.BLOB_MISSING, "sealed body is missing"
    try:
        vault.open(sealed, context)
    except KeyUnavailableError:
        return ErrorCode.BLOB_MISSING, "data key is missing"
    except SealIntegrityError:
        return ErrorCode.JOURNAL_CORRUPT, "sealed body does not authenticate"
    return None
