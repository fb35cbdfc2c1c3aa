"""The read path: search and get (DESIGN D10, D11, D12).

Both operations run in one :meth:`~engram_memory.ports.Store.read` view of the binding's scope
(a record key found missing is told apart in a fresh view, once that one is closed) and never
write. Eligibility is :mod:`engram_memory.ranking.eligibility`: ``accepted_current``,
trust valid, valid at the pinned ``valid_as_of`` and not past retention expiry.

**Pins.** A first search page pins ``valid_as_of`` (the clock, epoch ms) and ``system_as_of``
(the scope's high-water cursor); later pages reuse both from the page cursor. Retention expiry is
always checked against the live clock, so a record that expires between two pages changes the
ordering and the next page is ``STALE_PAGE``.

**Page cursor** (:mod:`engram_memory.page_cursor`): an HMAC under the store secret over the
position and pins. ``binding_digest`` binds the scope, principal, purpose, query, ``limit``, ``max_packet_bytes``,
``capability_policy``, the ranking profile and its config digest; ``ordering_digest`` binds the
whole ordered list (ids, scores and recencies) computed at the pins. A later page re-ranks at the
pins and compares: a forged, edited, foreign or re-parameterised cursor, a moved ordering (new
admission, forget, expiry), a cursor whose ``system_as_of`` is above the high water, or one older
than the service's ``page_cursor_lifetime`` is ``STALE_PAGE``.

**Budgets.** ``max_packet_bytes`` bounds the canonical bytes of the ``records`` array; a page
stops before the record that would overflow and the next cursor resumes exactly there. A record
that does not fit alone is ``PROJECTION_OVERSIZED`` (never an empty page with a repeating cursor);
one that fits ``max_packet_bytes`` but not the 1,048,576-byte transport cap with the rest of the
value is ``RESULT_TOO_LARGE``.

**The ranker is host code.** Whatever of it fails during a search (its ``profile``, ``channels``,
``uses_network``, ``config()``, ``tokenize()`` or ``rank()``, or an answer of the wrong shape) makes
the search ``RANKING_UNAVAILABLE`` (retriable), through the typed API and ``call_tool`` alike.

**Failures are never empty successes.** A destroyed key or a sealed body that fails
authentication or re-derivation is ``BLOB_MISSING`` / ``JOURNAL_CORRUPT``; an index entry whose
record row is not eligible is ``PROJECTION_STALE``. A key destroyed by a forget that committed
while the search was reading is detected with a fresh view and the search is re-run.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from math import isfinite
from typing import Any, Final, NamedTuple, cast

import attrs

from engram_memory.canonical import (
    ZERO_DIGEST,
    CanonicalError,
    Domain,
    canonical_array,
    canonical_bytes,
    canonical_object,
    digest,
    digest_bytes,
    epoch_ms,
    format_cursor,
    format_instant,
    parse_plain,
    receipt_digest,
    sealed_receipt,
)
from engram_memory.context import GET, SEARCH, HostBinding, now_within_deadline
from engram_memory.errors import (
    EngramError,
    ErrorCode,
    KeyUnavailableError,
    SealIntegrityError,
    StoreCorruptError,
    StoreUnavailableError,
)
from engram_memory.page_cursor import PageCursor, PageCursorCodec
from engram_memory.ports import (
    Clock,
    KeyVault,
    Policy,
    RankedHit,
    Ranker,
    RankingQuery,
    RecordRow,
    Store,
    StoreReader,
)
from engram_memory.ranking.bm25f import CANDIDATE_CAP
from engram_memory.ranking.eligibility import row_is_eligible
from engram_memory.records import authorization_for, record_context, rederived
from engram_memory.redaction import redact_record
from engram_memory.results import GetResult, RecordPacket, SearchResult
from engram_memory.store_access import read_view
from engram_memory.wire.args import GetArgs, SearchArgs

__all__ = ["TRANSPORT_CAP", "PageCursor", "PageCursorCodec", "ReadPath", "redact_record"]

TRANSPORT_CAP: Final = 1_048_576
"""The largest canonical value a search or get may return (UTF-8 bytes)."""
_PLACEHOLDER_DIGEST: Final = ZERO_DIGEST
_SEARCH_ATTEMPTS: Final = 3
_DIGEST_MEMBER_BYTES: Final = len(',"response_digest":""') + len(ZERO_DIGEST)
_SCORE_AND_RECENCY: Final = struct.Struct(">dd")
_STR: Final = frozenset({str})
_FLOAT: Final = frozenset({float})
_NUMBER: Final = frozenset({float, int})


class _KeyGoneError(Exception):
    """A record's key is unavailable in the vault; whether a forget erased it meanwhile is told after the view.

    Raised out of the read view, so that the fresh view that tells it apart is never opened while
    another view of the same thread is open (a store may serialise views with a plain lock).
    """

    def __init__(self, row: RecordRow) -> None:
        super().__init__("record key unavailable")
        self.row = row


def _stale(detail: str) -> EngramError:
    return EngramError(ErrorCode.STALE_PAGE, detail=detail)


@contextmanager
def _ranker_failures(passing: tuple[type[Exception], ...] = (EngramError,)) -> Iterator[None]:
    """Run host ranker code: any exception it raises becomes ``RANKING_UNAVAILABLE`` (retriable).

    A memory error, and each class in ``passing``, keeps its own code.
    """
    try:
        yield
    except passing:
        raise
    except Exception as exc:  # the ranker is host code (a remote semantic channel may be down)
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail=f"ranker failed: {type(exc).__name__}") from exc


class _Profile(NamedTuple):
    """The ranker's profile name, its config, and the config's digest (read once per search)."""

    name: str
    config: dict[str, Any]
    config_digest: str


# --------------------------------------------------------------------------- read path


class ReadPath:
    """Search and get over the ports; held by :class:`engram_memory.MemoryService`."""

    def __init__(
        self,
        *,
        store: Store,
        vault: KeyVault,
        policy: Policy,
        clock: Clock,
        ranker: Ranker,
        cursor_lifetime_ms: int | None = None,
    ) -> None:
        self._store = store
        self._vault = vault
        self._policy = policy
        self._clock = clock
        self._ranker = ranker
        self._cursor_lifetime_ms = cursor_lifetime_ms

    # ------------------------------------------------------------------ shared machinery

    def _now(self, binding: HostBinding) -> datetime:
        return now_within_deadline(self._clock, binding)

    def _reading(self, scope: str) -> AbstractContextManager[StoreReader]:
        return read_view(self._store, scope)

    def _allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        allowlist = self._policy.redaction_allowlist(binding)  # failures: POLICY_UNAVAILABLE (GuardedPolicy)
        return None if allowlist is None else tuple(allowlist)

    def _open(self, scope: str, row: RecordRow) -> tuple[dict[str, Any], bytes]:
        """Open and re-derive an eligible record's sealed body; the record and its canonical bytes.

        Raises:
            EngramError: ``BLOB_MISSING`` (no body, key gone) or ``JOURNAL_CORRUPT`` (the body does
                not authenticate or does not re-derive its id and digest).
            _KeyGoneError: the key is unavailable (see :meth:`_check_erased_meanwhile`, called once the view is closed).
        """
        if row.sealed is None:
            raise EngramError(ErrorCode.BLOB_MISSING, detail="eligible record has no body")
        try:
            plaintext = self._vault.open(row.sealed, record_context(scope, row.record_id))
        except KeyUnavailableError as exc:
            raise _KeyGoneError(row) from exc
        except SealIntegrityError as exc:
            raise EngramError(ErrorCode.JOURNAL_CORRUPT, detail="record body altered") from exc
        try:
            record, plain = parse_plain(plaintext)
            whole = rederived(record, row, plain=plain)
        except (ValueError, CanonicalError) as exc:
            raise EngramError(ErrorCode.JOURNAL_CORRUPT, detail="record body unreadable") from exc
        if whole is None:
            raise EngramError(ErrorCode.JOURNAL_CORRUPT, detail="record body does not re-derive")
        opened: dict[str, Any] = record
        return opened, whole

    def _check_erased_meanwhile(self, scope: str, gone: _KeyGoneError) -> None:
        """Return if a fresh view shows the record changed since it was read (a concurrent forget).

        Called with no view open. Raises ``BLOB_MISSING`` when it did not change: the key is lost.
        """
        row = gone.row
        with self._reading(scope) as fresh:
            current = fresh.record(row.record_id)
        if current is None or current.sealed != row.sealed or current.state != row.state:
            return
        raise EngramError(ErrorCode.BLOB_MISSING, detail="record key unavailable") from gone.__cause__

    def _redaction(
        self, record: dict[str, Any], whole: bytes, allowlist: tuple[str, ...] | None
    ) -> tuple[dict[str, Any], list[str], str, bytes]:
        """The redacted record, the removed fields, the redaction receipt and the record's bytes."""
        redacted, removed = redact_record(record, allowlist)
        receipt = digest(  # the receipt_digest of a body without its redaction_receipt_digest field
            Domain.RECALL_REDACTION,
            {
                "record_id": record["record_id"],
                "source_record_digest": record["record_digest"],  # the reference's member name
                "policy_version": self._policy.policy_version,
                "redacted_fields": removed,
            },
        )
        return redacted, removed, receipt, (whole if allowlist is None else canonical_bytes(redacted))

    def _authorization(self, tool: str, binding: HostBinding, target: str, now: datetime) -> str:
        return authorization_for(
            tool=tool, binding=binding, policy=self._policy, target=target, checked_at=format_instant(now)
        )

    @staticmethod
    def _revalidation(
        operation: str,
        record_ids: list[str],
        *,
        valid_as_of: int,
        system_as_of: int,
        high_water: int,
        authorization: str,
    ) -> str:
        """Receipt of the eligibility re-check of the records actually materialised."""
        return receipt_digest(
            Domain.REVALIDATION_PACKET,
            {
                "operation": operation,
                "record_ids": record_ids,
                "eligible_record_ids": record_ids,
                "removed": [],
                "valid_as_of": valid_as_of,
                "system_as_of": format_cursor(system_as_of),
                "validated_through_cursor": format_cursor(high_water),
                "authorization_receipt_digest": authorization,
            },
        )

    # ------------------------------------------------------------------ search

    def search(self, binding: HostBinding, args: SearchArgs) -> SearchResult:
        """One page of current records of the bound scope, ranked, with a rank receipt.

        Raises:
            EngramError: ``RANKING_UNAVAILABLE``, ``STALE_PAGE``, ``PROJECTION_OVERSIZED``,
                ``RESULT_TOO_LARGE``, ``BLOB_MISSING``, ``JOURNAL_CORRUPT``, ``PROJECTION_STALE``,
                ``STORE_UNAVAILABLE``, ``POLICY_UNAVAILABLE``, ``DEADLINE_EXCEEDED``.
        """
        with _ranker_failures():
            semantic = args.capability_policy.minimum_channels != "lexical_and_semantic" or (
                "semantic" in self._ranker.channels
            )
            uses_network = bool(self._ranker.uses_network)
        if not semantic:
            raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="no semantic channel; no lexical fallback")
        if uses_network and not (args.capability_policy.network == "allow" and self._policy.allows_network(binding)):
            raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="the ranker needs the network; not allowed here")
        for _attempt in range(_SEARCH_ATTEMPTS):
            try:
                return self._search_once(binding, args)
            except _KeyGoneError as gone:
                self._check_erased_meanwhile(binding.scope, gone)  # forgotten meanwhile: search again
        raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail="records kept being erased during the search")

    def _rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        """The ranker's hits; a failure of the ranker itself is ``RANKING_UNAVAILABLE`` (retriable).

        So is an answer that breaks the ranker contract (see :func:`_well_formed`), which would
        otherwise repeat records across pages or fail later, unmapped. Store failures met while
        ranking keep their own codes (the read view maps them), and so do memory errors the
        ranker raises.
        """
        with _ranker_failures((EngramError, StoreUnavailableError, StoreCorruptError)):
            return _well_formed(self._ranker.rank(reader, query))

    def _profile(self) -> _Profile:
        """The ranker's profile, its config and the config's digest.

        A failure of the ranker, a profile that is not a ``str`` and a config that is not a
        ``dict`` with a canonical JSON form are ``RANKING_UNAVAILABLE`` (retriable).
        """
        with _ranker_failures():
            profile: object = self._ranker.profile  # typed, but host code may answer anything
            config: object = self._ranker.config()
            if not isinstance(profile, str) or not isinstance(config, dict):
                raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker profile or config malformed")
            config_digest = receipt_digest(Domain.RECALL_PROFILE_CONFIG, config, "profile_config_digest")
        return _Profile(profile, config, config_digest)

    def _binding_digest(self, binding: HostBinding, args: SearchArgs, profile: _Profile) -> str:
        return digest(
            Domain.PAGE_CURSOR,
            {
                "tool": SEARCH,
                "scope_ref": binding.scope,
                "principal": binding.principal,
                "purpose_ref": args.purpose_ref,
                "query": args.query,
                "limit": args.limit,
                "max_packet_bytes": args.max_packet_bytes,
                "capability_policy": {
                    "minimum_channels": args.capability_policy.minimum_channels,
                    "network": args.capability_policy.network,
                },
                "profile": profile.name,
                "profile_config_digest": profile.config_digest,
            },
        )

    def _pinned(self, codec: PageCursorCodec, token: str, binding_digest: str, now_ms: int) -> PageCursor:
        """The pins of a page cursor issued for this binding and not older than the cursor lifetime.

        Raises:
            EngramError: ``STALE_PAGE`` (see :meth:`PageCursorCodec.decode`), or the first page was
                ranked more than ``page_cursor_lifetime`` before ``now_ms``.
        """
        pinned = codec.decode(token, binding_digest)
        lifetime = self._cursor_lifetime_ms
        if lifetime is not None and now_ms - pinned.valid_as_of > lifetime:
            raise _stale("page cursor older than the service's page_cursor_lifetime")
        return pinned

    def _search_once(self, binding: HostBinding, args: SearchArgs) -> SearchResult:
        now = self._now(binding)
        now_ms = epoch_ms(now)
        profile = self._profile()
        binding_digest = self._binding_digest(binding, args, profile)
        codec = PageCursorCodec(self._store.secret())
        pinned = None if args.page_cursor is None else self._pinned(codec, args.page_cursor, binding_digest, now_ms)
        with _ranker_failures():
            terms = tuple(self._ranker.tokenize(args.query))
        allowlist = self._allowlist(binding)
        with self._reading(binding.scope) as reader:
            high_water = reader.high_water()
            if pinned is None:
                valid_as_of, system_as_of, offset = now_ms, high_water, 0
            else:
                valid_as_of, system_as_of, offset = pinned.valid_as_of, pinned.system_as_of, pinned.offset
                if system_as_of > high_water:
                    raise _stale("pinned system cursor is above the high water")
            hits = self._rank(reader, RankingQuery(terms=terms, valid_as_of=valid_as_of, now_ms=now_ms))
            ordering = None if pinned is None else _ordering_digest(hits)  # a first page may need none
            if pinned is not None and (ordering != pinned.ordering_digest or offset >= len(hits)):
                raise _stale("the ordering at the pinned instants changed")
            pins = PageCursor(
                offset=offset, valid_as_of=valid_as_of, system_as_of=system_as_of, ordering_digest=_PLACEHOLDER_DIGEST
            )
            receipt = self._rank_receipt(reader, binding, args, hits, profile=profile, pins=pins, now=now)
            room, room_last = _page_room(codec, receipt, attrs.evolve(pins, offset=len(hits)))
            packets, packet_bytes = self._materialise(
                reader,
                binding.scope,
                hits[offset : offset + args.limit],
                allowlist=allowlist,
                first_rank=offset + 1,
                max_packet_bytes=args.max_packet_bytes,
                room=room,
                room_last=room_last if offset + args.limit >= len(hits) else room,
                valid_as_of=valid_as_of,
                now_ms=now_ms,
            )
        page_ids = [packet.record["record_id"] for packet in packets]
        receipt["revalidation_receipt_digest"] = self._revalidation(
            "recall_current",
            page_ids,
            valid_as_of=valid_as_of,
            system_as_of=system_as_of,
            high_water=high_water,
            authorization=receipt["authorization_receipt_digest"],
        )
        receipt["receipt_digest"], receipt_bytes = sealed_receipt(Domain.RANK_RECEIPT, receipt)
        next_offset = offset + len(packets)
        next_cursor = None
        if next_offset < len(hits):
            ordering = ordering if ordering is not None else _ordering_digest(hits)
            next_cursor = codec.encode(attrs.evolve(pins, offset=next_offset, ordering_digest=ordering), binding_digest)
        members = {"records": canonical_array(packet_bytes), "rank_receipt": receipt_bytes}
        if next_cursor is not None:
            members["next_page_cursor"] = canonical_bytes(next_cursor)
        body = canonical_object(members)  # the result's JSON value without response_digest
        if len(body) + _DIGEST_MEMBER_BYTES > TRANSPORT_CAP:  # pragma: no cover - the room check prevents it
            raise EngramError(ErrorCode.RESULT_TOO_LARGE, detail="search value over the transport cap")
        return SearchResult(
            records=tuple(packets),
            rank_receipt=receipt,
            next_page_cursor=next_cursor,
            response_digest=digest_bytes(Domain.SEARCH_RESPONSE, body),
        )

    def _rank_receipt(
        self,
        reader: StoreReader,
        binding: HostBinding,
        args: SearchArgs,
        hits: Sequence[RankedHit],
        *,
        profile: _Profile,
        pins: PageCursor,
        now: datetime,
    ) -> dict[str, Any]:
        """The rank receipt of ``hits`` ranked at ``pins``, its revalidation and own digest still placeholders.

        It binds the request, its authorization, the accepted snapshot at the pinned system
        cursor, and the candidate and ordered ids (one canonical encoding of the id list for both).
        """
        valid_as_of, system_as_of = pins.valid_as_of, format_cursor(pins.system_as_of)
        config = profile.config
        ids_json = canonical_bytes([hit.record_id for hit in hits])
        request = receipt_digest(
            Domain.RECALL_REQUEST,
            {
                "query": args.query,
                "purpose_ref": args.purpose_ref,
                "profile": profile.name,
                "valid_as_of": valid_as_of,
                "system_as_of": system_as_of,
                "capability_policy": {
                    "minimum_channels": args.capability_policy.minimum_channels,
                    "network": args.capability_policy.network,
                },
                "budgets": {
                    "max_candidates": config.get("candidate_cap", CANDIDATE_CAP),
                    "max_results": args.limit,
                    "max_packet_bytes": args.max_packet_bytes,
                },
            },
            "request_digest",
        )
        candidate_ids = _single_member_digest(Domain.RECALL_CANDIDATES, "candidate_ids", ids_json)
        snapshot_id = "memory:snapshot-" + system_as_of
        snapshot = receipt_digest(
            Domain.ACCEPTED_SNAPSHOT,
            {
                "snapshot_id": snapshot_id,
                "system_as_of": system_as_of,
                "valid_as_of": valid_as_of,
                "journal_event_digest": _event_digest_at(reader, pins.system_as_of),
                "eligibility_digest": digest(
                    Domain.ACCEPTED_ELIGIBILITY,
                    {"candidate_ids_digest": candidate_ids, "valid_as_of": valid_as_of, "system_as_of": system_as_of},
                ),
            },
        )
        return {
            "request_digest": request,
            "authorization_receipt_digest": self._authorization(SEARCH, binding, request, now),
            "profile": profile.name,
            "profile_version": str(config.get("profile_version", "")),
            "profile_config_digest": profile.config_digest,
            "valid_as_of": valid_as_of,
            "system_as_of": system_as_of,
            "snapshot_id": snapshot_id,
            "snapshot_digest": snapshot,
            "candidate_count": len(hits),
            "candidate_ids_digest": candidate_ids,
            "scoring_formula_ref": str(config.get("scoring_formula_ref", "")),
            "ordered_ids_digest": _single_member_digest(Domain.RECALL_ORDERED, "ordered_ids", ids_json),
            "revalidation_receipt_digest": _PLACEHOLDER_DIGEST,
            "projection_receipt_digests": [],
            "issued_at": format_instant(now),
            "receipt_digest": _PLACEHOLDER_DIGEST,
        }

    def _materialise(
        self,
        reader: StoreReader,
        scope: str,
        page: Sequence[RankedHit],
        *,
        allowlist: tuple[str, ...] | None,
        first_rank: int,
        max_packet_bytes: int,
        room: int,
        room_last: int,
        valid_as_of: int,
        now_ms: int,
    ) -> tuple[list[RecordPacket], list[bytes]]:
        """Open, re-check, redact and budget the records of one page, in rank order.

        ``room`` is what the transport cap leaves for the ``records`` array when a cursor follows;
        ``room_last`` bounds the page's last record instead (the caller passes ``room`` unless
        that record ends the ordering, when no cursor is issued). Returns the packets and the
        canonical bytes of each packet's JSON value.
        """
        packets: list[RecordPacket] = []
        encoded: list[bytes] = []
        used = len(b"[]")
        for index, hit in enumerate(page):
            row = reader.record(hit.record_id)
            if row is None or not row_is_eligible(row, valid_as_of=valid_as_of, now_ms=now_ms):
                raise EngramError(ErrorCode.PROJECTION_STALE, detail="ranked record is not eligible")
            record, whole = self._open(scope, row)
            redacted, removed, redaction, redacted_bytes = self._redaction(record, whole, allowlist)
            packet = RecordPacket(
                record=redacted,
                redacted_fields=tuple(removed),
                redaction_receipt_digest=redaction,
                score=hit.score,
                rank=first_rank + index,
            )
            packet_bytes = _packet_bytes(packet, redacted_bytes)
            size = len(packet_bytes) + (1 if packets else 0)
            if used + size > min(max_packet_bytes, room_last if index == len(page) - 1 else room):
                if packets:
                    break
                if used + size > max_packet_bytes:
                    raise EngramError(ErrorCode.PROJECTION_OVERSIZED, detail="one record exceeds max_packet_bytes")
                raise EngramError(ErrorCode.RESULT_TOO_LARGE, detail="one record exceeds the transport cap")
            used += size
            packets.append(packet)
            encoded.append(packet_bytes)
        return packets, encoded

    # ------------------------------------------------------------------ get

    def get(self, binding: HostBinding, args: GetArgs) -> GetResult:
        """One current record of the bound scope at a fresh pin, with a read receipt.

        Raises:
            EngramError: ``NOT_FOUND`` (unknown, other scope, or not eligible: one answer),
                ``PROJECTION_OVERSIZED``, ``RESULT_TOO_LARGE``, ``BLOB_MISSING``, ``JOURNAL_CORRUPT``.
        """
        now = self._now(binding)
        now_ms = epoch_ms(now)
        scope = binding.scope
        allowlist = self._allowlist(binding)
        try:
            with self._reading(scope) as reader:
                high_water = reader.high_water()
                row = reader.record(args.record_id)
                if row is None or not row_is_eligible(row, valid_as_of=now_ms, now_ms=now_ms):
                    raise EngramError(ErrorCode.NOT_FOUND)
                record, whole = self._open(scope, row)
        except _KeyGoneError as gone:
            self._check_erased_meanwhile(scope, gone)
            raise EngramError(ErrorCode.NOT_FOUND) from gone  # forgotten meanwhile
        redacted, removed, redaction, redacted_bytes = self._redaction(record, whole, allowlist)
        if len(redacted_bytes) > args.max_packet_bytes:
            raise EngramError(ErrorCode.PROJECTION_OVERSIZED, detail="record exceeds max_packet_bytes")
        authorization = self._authorization(GET, binding, args.record_id, now)
        read_receipt: dict[str, Any] = {
            "record_id": row.record_id,
            "record_digest": row.record_digest,
            "valid_as_of": now_ms,
            "system_as_of": format_cursor(high_water),
            "validated_through_cursor": format_cursor(high_water),
            "authorization_receipt_digest": authorization,
            "revalidation_receipt_digest": self._revalidation(
                "get",
                [row.record_id],
                valid_as_of=now_ms,
                system_as_of=high_water,
                high_water=high_water,
                authorization=authorization,
            ),
            "checked_at": format_instant(now),
        }
        read_receipt["receipt_digest"], read_receipt_bytes = sealed_receipt(Domain.READ_RECEIPT, read_receipt)
        body = canonical_object(  # the result's JSON value without packet_digest
            {
                "record": redacted_bytes,
                "redacted_fields": canonical_bytes(removed),
                "redaction_receipt_digest": canonical_bytes(redaction),
                "read_receipt": read_receipt_bytes,
            }
        )
        if len(body) + len(',"packet_digest":""') + len(ZERO_DIGEST) > TRANSPORT_CAP:
            raise EngramError(ErrorCode.RESULT_TOO_LARGE, detail="get value over the transport cap")
        return GetResult(
            record=redacted,
            redacted_fields=tuple(removed),
            redaction_receipt_digest=redaction,
            read_receipt=read_receipt,
            packet_digest=digest_bytes(Domain.GET_PACKET, body),
        )


def _well_formed(hits: object) -> list[RankedHit]:
    """A ranker's answer, checked: ``RANKING_UNAVAILABLE`` (retriable) unless it keeps the contract.

    That is a ``list`` of at most 2,000 hits whose record ids are distinct ``str`` of ASCII
    without NUL (as every record id is) and whose scores and recencies are finite numbers. Those
    values reach the JSON and the digests as floats with one zero: an ``int`` is taken as its
    float and ``-0.0`` as ``0.0`` (the hit is rebuilt; the order is the ranker's).
    """
    if not isinstance(hits, list) or len(hits) > CANDIDATE_CAP:
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker answered no list or too many hits")
    ids = [hit.record_id for hit in hits]
    if not {type(record_id) for record_id in ids} <= _STR or len(set(ids)) != len(ids):
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker answered a record id twice or not a str")
    joined = "".join(ids)
    if not joined.isascii() or "\0" in joined:
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker answered a record id that names no record")
    numbers = [hit.score for hit in hits] + [hit.recency for hit in hits]
    if {type(number) for number in numbers} <= _FLOAT and all(map(isfinite, numbers)) and 0.0 not in numbers:
        return hits  # the usual answer, taken as it is
    return [
        RankedHit(
            record_id=hit.record_id, score=_json_float(hit.score), recency=_json_float(hit.recency), lexical=hit.lexical
        )
        for hit in hits
    ]


def _json_float(number: object) -> float:
    """``number`` as a finite float with one zero; ``RANKING_UNAVAILABLE`` if it is none."""
    if type(number) not in _NUMBER:  # a bool is no score
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker answered a score that is not a number")
    value = float(cast("float", number))  # an int too large for a float: OverflowError, mapped by the caller
    if not isfinite(value):
        raise EngramError(ErrorCode.RANKING_UNAVAILABLE, detail="ranker answered a score that is not finite")
    return value + 0.0  # -0.0 + 0.0 == +0.0


def _page_room(codec: PageCursorCodec, receipt: dict[str, Any], last_pins: PageCursor) -> tuple[int, int]:
    """What the transport cap leaves for a page's ``records`` array: with a cursor, and without one.

    The value without records, its cursor as long as the longest one this page can issue
    (``last_pins``: the offset past the last hit), and without a cursor for the page that ends
    the ordering.
    """
    skeleton = {
        "records": [],
        "rank_receipt": receipt,
        "next_page_cursor": "A" * codec.encoded_length(last_pins),
        "response_digest": _PLACEHOLDER_DIGEST,
    }
    room = TRANSPORT_CAP - (len(canonical_bytes(skeleton)) - len(b"[]"))
    del skeleton["next_page_cursor"]
    return room, TRANSPORT_CAP - (len(canonical_bytes(skeleton)) - len(b"[]"))


def _packet_bytes(packet: RecordPacket, record_bytes: bytes) -> bytes:
    """``canonical_bytes(packet.to_json())``, given the canonical bytes of ``packet.record``."""
    return b"".join(  # the members in canonical (sorted) order
        (
            b'{"rank":',
            canonical_bytes(packet.rank),
            b',"record":',
            record_bytes,
            b',"redacted_fields":',
            canonical_bytes(packet.redacted_fields),
            b',"redaction_receipt_digest":',
            canonical_bytes(packet.redaction_receipt_digest),
            b',"score":',
            canonical_bytes(packet.score),
            b"}",
        )
    )


def _ordering_digest(hits: Sequence[RankedHit]) -> str:
    """Digest of the whole ordering a cursor was issued for: ids, scores and recencies.

    Internal to the cursor (never published), so it hashes an exact binary form: each id (ASCII,
    no NUL) followed by a NUL and the big-endian IEEE-754 doubles of score and recency.
    """
    pack = _SCORE_AND_RECENCY.pack
    encoded = b"".join([hit.record_id.encode("utf-8") + b"\0" + pack(hit.score, hit.recency) for hit in hits])
    return digest_bytes(Domain.PAGE_CURSOR, encoded)


def _single_member_digest(domain: Domain, key: str, canonical_value: bytes) -> str:
    """``digest(domain, {key: value})`` from the already canonical bytes of ``value``.

    The JCS form of a one-member object is ``{"key":value}``; building it from bytes canonicalised
    once lets the ordered and candidate id lists (up to 2,000 ids each) share one canonicalisation.
    """
    return digest_bytes(domain, b"{" + canonical_bytes(key) + b":" + canonical_value + b"}")


def _event_digest_at(reader: StoreReader, cursor: int) -> str:
    """The ``event_digest`` of the scope's journal event at ``cursor`` (the zero digest at 0)."""
    if cursor <= 0:
        return ZERO_DIGEST
    for event in reader.events(after=cursor - 1):
        return event.event_digest
    return ZERO_DIGEST  # pragma: no cover - cursor <= high water always has an event
