"""The per-scope hash-chained journal: event construction, state digest and verification.

An event body holds ids, states and digests only, never content: the journal stays verifiable
after erasure. Cursors are dense from 1 per scope; ``previous_event_digest`` of the first event is
:data:`~engram_memory.canonical.ZERO_DIGEST`; ``event_digest`` hashes the body without itself.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import attrs

from engram_memory.canonical import (
    ZERO_DIGEST,
    CanonicalError,
    Domain,
    canonical_bytes,
    digest,
    format_cursor,
    format_instant,
    is_instant,
    parse_instant,
    parse_plain,
)
from engram_memory.errors import ErrorCode, KeyUnavailableError, SealIntegrityError
from engram_memory.ports import FIELDS, JournalEvent, KeyVault, RecordRow, SealedEnvelope, StoreReader, occurrence_key
from engram_memory.ranking.tokenizer import term_frequencies
from engram_memory.records import candidate_context, record_context, rederived

__all__ = ["VerifyReport", "build_event", "journal_instant", "state_digest", "verify_scope"]

_Problem = tuple[int, ErrorCode, str]
"""A verify finding: the cursor it is reported at, its code and detail."""

_log = logging.getLogger("engram_memory")
_CLOCK_BEHIND_WARNING: Final = timedelta(seconds=1)
"""How far the clock may be behind the journal's last event before a mutation logs it."""
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


def journal_instant(reader: StoreReader, now: datetime) -> str:
    """The ``recorded_at`` of the scope's next event: ``now``, or the last event's if that is later.

    Journal time never decreases as the cursor grows, even when a call that read the clock earlier
    commits after one that read it later (each reads it before it waits for the unit), or when
    the host clock steps back. Call it inside the unit that appends the event. A last event
    without a readable ``recorded_at`` (which ``verify`` does not judge) does not hold ``now`` back. When the
    clock is more than a second behind the last event (it jumped forward for a while, or another
    process's clock is ahead), a warning is logged: journal time stays there until the clock
    catches up.
    """
    instant = format_instant(now)
    high_water = reader.high_water()
    if high_water <= 0:
        return instant
    for event in reader.events(after=high_water - 1):
        try:
            previous = json.loads(event.body).get("recorded_at")
        except (ValueError, AttributeError):
            return instant
        # validated only when it would win: text order is time order among canonical instants
        if not (isinstance(previous, str) and previous > instant and is_instant(previous)):
            return instant
        if parse_instant(previous) - now > _CLOCK_BEHIND_WARNING:
            _log.warning("the clock is behind the journal's last event; journal time is held at that event's")
        return previous
    return instant  # pragma: no cover - the high water always has an event


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


ErasedMeanwhile = Callable[[Literal["candidate", "record"], str, SealedEnvelope], bool]
"""``(item, id, sealed) -> bool``: whether a fresh view shows the row no longer holding ``sealed``."""


def verify_scope(
    reader: StoreReader, vault: KeyVault, scope: str, *, erased_meanwhile: ErasedMeanwhile | None = None
) -> VerifyReport:
    """Re-derive the chain and the folded state of a scope and compare them with the stored state.

    Reports ``CURSOR_GAP`` (a missing or repeated cursor), ``JOURNAL_CORRUPT`` (a body that does
    not hash to its digest, a broken chain, a state that disagrees with the fold, a sealed body
    that does not authenticate) or ``BLOB_MISSING`` (a live candidate or record without its sealed
    body or key), each with the first bad cursor.

    State the fold and the opened bodies derive is ``JOURNAL_CORRUPT`` too, at the record's last
    event: a tombstoned record's payload digest missing from the tombstones; an untrusted row; a
    current row whose body does not re-derive its id and digest, or whose accept cursor, payload
    digest, valid time or retention expiry differ from the fold and its body; a current record
    missing from the index or from the postings of the term it is looked up under (with its body's
    occurrence key); an indexed record that is not current. Index statistics that differ from the
    indexed documents are reported at the high water. The cost is one pass over each of the
    scope's events, rows and indexed ids, plus at most one read of its postings.

    Keys are opened in the live ``vault``: one destroyed by an erasure that committed after
    ``reader``'s snapshot would read as ``BLOB_MISSING``. ``erased_meanwhile`` tells such a key
    apart (:meth:`engram_memory.MemoryAdmin.verify_scope` passes a fresh view of the store): the
    body of a row it returns true for is not checked.
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
    opener = _Opener(vault, scope, erased_meanwhile)
    return _check_state(reader, opener, candidates, records, high_water)


def _check_state(
    reader: StoreReader,
    opener: _Opener,
    candidates: dict[str, tuple[str, int]],
    records: dict[str, tuple[str, int, str]],
    high_water: int,
) -> VerifyReport:
    problems = _check_candidates(reader, opener, candidates, high_water)
    index = _IndexCheck(reader)
    stored_records = {row.record_id: row for row in reader.records()}
    for rid, (state, cursor, record_digest) in records.items():
        record_row = stored_records.pop(rid, None)
        if record_row is None or record_row.state != state or record_row.record_digest != record_digest:
            problems.append((cursor, ErrorCode.JOURNAL_CORRUPT, "record state differs from the fold"))
            continue
        problem = _check_record(reader, opener, record_row, cursor, index)
        if problem is not None:
            problems.append((cursor, *problem))
    if stored_records:
        problems.append((high_water, ErrorCode.JOURNAL_CORRUPT, "state rows without journal events"))
    problems += index.check_documents(records, high_water)
    if not problems:
        return VerifyReport(ok=True, high_water=high_water)
    cursor, code, detail = min(problems, key=lambda p: p[0])
    return _fail(code, cursor, high_water, detail)


def _check_candidates(
    reader: StoreReader, opener: _Opener, candidates: dict[str, tuple[str, int]], high_water: int
) -> list[_Problem]:
    """Candidate rows against the fold; a pending one's sealed body must open."""
    stored_candidates = {row.candidate_id: row for row in reader.candidates()}
    problems: list[_Problem] = []
    for cid, (state, cursor) in candidates.items():
        row = stored_candidates.pop(cid, None)
        if row is None or row.state != state:
            problems.append((cursor, ErrorCode.JOURNAL_CORRUPT, "candidate state differs from the fold"))
        elif state == "pending":
            opened = opener.open("candidate", cid, row.sealed)
            if isinstance(opened, tuple):
                problems.append((cursor, *opened))
    if stored_candidates:
        problems.append((high_water, ErrorCode.JOURNAL_CORRUPT, "state rows without journal events"))
    return problems


def _check_record(
    reader: StoreReader, opener: _Opener, row: RecordRow, cursor: int, index: _IndexCheck
) -> tuple[ErrorCode, str] | None:
    """A record row whose state the fold confirmed, against what the fold and its body derive.

    No event revokes trust, so every row is trust valid. A tombstoned row's payload digest is in
    the scope's tombstones (its body is gone: nothing else of it can be re-derived). A current
    row's accept cursor is its fold cursor, its sealed body opens, re-derives the row's id and
    digest and holds the row's payload digest and eligibility times, and its index entry is found.
    """
    if not row.trust_valid:
        return ErrorCode.JOURNAL_CORRUPT, "record trust differs from the fold"
    if row.state == "tombstoned":
        tombstoned = reader.is_tombstoned_payload(row.payload_digest)
        return None if tombstoned else (ErrorCode.JOURNAL_CORRUPT, "tombstoned payload is not in the tombstones")
    if row.accepted_cursor != cursor:
        return ErrorCode.JOURNAL_CORRUPT, "record accept cursor differs from the fold"
    opened = opener.open("record", row.record_id, row.sealed)
    if opened is None or isinstance(opened, tuple):
        return opened
    record = _rederived(opened, row)
    if isinstance(record, str):
        return ErrorCode.JOURNAL_CORRUPT, record
    return index.check_record(row.record_id, record)


def _rederived(plaintext: bytes, row: RecordRow) -> dict[str, Any] | str:
    """The opened record body if it re-derives ``row`` (:func:`~engram_memory.records.rederived`), else why not."""
    try:
        record, plain = parse_plain(plaintext)
        if rederived(record, row, plain=plain) is not None:
            opened: dict[str, Any] = record
            return opened
    except (ValueError, CanonicalError):
        pass
    return "record body does not re-derive its row"


class _IndexCheck:
    """The scope's lexical index against the fold and the opened bodies of its current records.

    Each current record is looked up in the postings of one of its terms (a term already read
    when it has one, else its first), with the occurrence key its body derives; each term's
    postings are read once, so the whole check reads at most the scope's postings once.
    """

    def __init__(self, reader: StoreReader) -> None:
        self._reader = reader
        self._postings: dict[str, dict[str, str]] = {}  # term -> record id -> occurrence key
        self._lengths = [0] * len(FIELDS)
        self._measured = 0
        self._dangling = False

    def check_record(self, record_id: str, record: dict[str, Any]) -> tuple[ErrorCode, str] | None:
        """Whether a current record's index entry is found under one of its body's terms."""
        lengths, terms = term_frequencies(record)
        self._lengths = [total + length for total, length in zip(self._lengths, lengths, strict=True)]
        self._measured += 1
        if not terms:
            return None
        term = next((term for term in terms if term in self._postings), None)
        if term is None:
            term = next(iter(terms))
            self._postings[term] = self._read(term)
        if self._postings[term].get(record_id) != occurrence_key(terms[term], lengths):
            return ErrorCode.JOURNAL_CORRUPT, "record is missing from the postings of its terms"
        return None

    def _read(self, term: str) -> dict[str, str]:
        documents, occurrences = self._reader.term_postings(term)
        entries = self._reader.index_entries(documents)
        self._dangling = self._dangling or len(entries) != len(set(documents))
        return {
            entries[document].record_id: occurrence
            for document, occurrence in zip(documents, occurrences, strict=True)
            if document in entries
        }

    def check_documents(self, records: dict[str, tuple[str, int, str]], high_water: int) -> list[_Problem]:
        """The indexed ids are exactly the fold's current records; the statistics match them.

        A current record missing from the index is reported at its accept cursor, an indexed record
        that is not current at its last event (``high_water`` if it has none), statistics that differ
        and postings of documents that are not indexed at ``high_water``.
        """
        current = {rid: cursor for rid, (state, cursor, _) in records.items() if state == "accepted_current"}
        indexed = set(self._reader.indexed_ids())
        problems: list[_Problem] = [
            (current[rid], ErrorCode.JOURNAL_CORRUPT, "current record is not indexed")
            for rid in current.keys() - indexed
        ]
        problems += [
            (
                records[rid][1] if rid in records else high_water,
                ErrorCode.JOURNAL_CORRUPT,
                "indexed record is not current",
            )
            for rid in indexed - current.keys()
        ]
        stats = self._reader.index_stats()
        measured = self._measured == len(current)
        if stats.documents != len(indexed) or (measured and stats.total_lengths != tuple(self._lengths)):
            problems.append((high_water, ErrorCode.JOURNAL_CORRUPT, "index statistics differ from the index"))
        if self._dangling:
            problems.append((high_water, ErrorCode.JOURNAL_CORRUPT, "postings of a document that is not indexed"))
        return problems


@attrs.frozen
class _Opener:
    """Opens the scope's sealed bodies in the vault, telling a key erased meanwhile from a lost one."""

    vault: KeyVault
    scope: str
    erased_meanwhile: ErasedMeanwhile | None

    def open(
        self, item: Literal["candidate", "record"], item_id: str, sealed: SealedEnvelope | None
    ) -> bytes | tuple[ErrorCode, str] | None:
        """The plaintext of a sealed body, the problem that keeps it closed, or ``None``.

        ``None``: the key was destroyed by an erasure that committed after the snapshot, so there
        is nothing to check.
        """
        if sealed is None:
            return ErrorCode.BLOB_MISSING, "sealed body is missing"
        context = candidate_context if item == "candidate" else record_context
        try:
            return self.vault.open(sealed, context(self.scope, item_id))
        except KeyUnavailableError:
            if self.erased_meanwhile is not None and self.erased_meanwhile(item, item_id, sealed):
                return None
            return ErrorCode.BLOB_MISSING, "data key is missing"
        except SealIntegrityError:
            return ErrorCode.JOURNAL_CORRUPT, "sealed body does not authenticate"
