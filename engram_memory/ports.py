"""The ports: Store, KeyVault, Policy, Ranker and Clock, and the values they exchange.

Ports are :class:`typing.Protocol` s: a backend subclasses and registers nothing; it imports
only the value types it exchanges (:class:`SealedEnvelope`, :class:`JournalEvent`, ...) from here,
and certifies itself with the shipped suites in :mod:`engram_memory.testing`. Adapters translate
their driver's exceptions into the port errors of :mod:`engram_memory.errors`
(:class:`~engram_memory.errors.StoreUnavailableError`, ...) at their edge.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Final, Literal, NamedTuple, Protocol, get_args

import attrs

from engram_memory.context import HostBinding  # at run time: typing.get_type_hints resolves the Policy protocol

__all__ = [
    "DECISIONS",
    "FIELDS",
    "TRUST_CLASSES",
    "AdmissionDecision",
    "AdmissionRequest",
    "CandidateRow",
    "CaptureConstraints",
    "Capturer",
    "Clock",
    "EligibleDocument",
    "IdempotencyRow",
    "IndexEntry",
    "IndexStats",
    "IndexedDocument",
    "JournalEvent",
    "KeyVault",
    "Policy",
    "Posting",
    "RankedHit",
    "Ranker",
    "RankingQuery",
    "RecordRow",
    "RecordState",
    "SealedEnvelope",
    "Store",
    "StoreReader",
    "TermPostings",
    "UnitOfWork",
    "occurrence_fields",
    "occurrence_key",
    "occurrence_keys",
]

FIELDS: tuple[str, ...] = ("primary", "decision", "evidence", "context", "citations")
"""The lexical fields of a record, in the order every per-field tuple uses."""

CandidateState = Literal["pending", "rejected", "withdrawn", "admitted"]
RecordState = Literal[
    "accepted_current",
    "accepted_disputed",
    "historical",
    "expired",
    "trust_invalid",
    "tombstoned",
]


# --------------------------------------------------------------------------- values


@attrs.frozen(kw_only=True)
class SealedEnvelope:
    """Ciphertext produced by a :class:`KeyVault`; useless without the vault's key ``key_ref``."""

    key_ref: str
    nonce: bytes = attrs.field(repr=False)
    ciphertext: bytes = attrs.field(repr=False)


@attrs.frozen(kw_only=True)
class JournalEvent:
    """One journal event of a scope: ``body`` is its canonical JSON (ids, states, digests only)."""

    cursor: int
    event_digest: str
    body: bytes


@attrs.frozen(kw_only=True)
class IdempotencyRow:
    """What a (principal, idempotency key) is bound to: the intent and the original response.

    An empty ``response`` makes the binding *provisional*: the key is bound to its intent (another
    intent is ``DIGEST_CONFLICT``) but the operation has not happened yet, so a retry runs it again
    (an admission left ``pending_adjudication``).
    """

    intent_digest: str
    response: bytes

    @property
    def provisional(self) -> bool:
        """Whether the key is bound without an operation having happened (empty ``response``)."""
        return not self.response


@attrs.frozen(kw_only=True)
class CandidateRow:
    """The control row of a candidate; everything else about it is inside ``sealed``.

    ``sealed`` is ``None`` once the candidate left ``pending`` (the ciphertext is deleted and its
    key destroyed). ``outcome`` holds the canonical JSON of the accepted admission outcome.
    """

    candidate_id: str
    state: CandidateState
    created_cursor: int
    record_digest: str
    sealed: SealedEnvelope | None
    policy_id: str
    policy_version: str
    record_id: str | None = None
    outcome: bytes | None = None


@attrs.frozen(kw_only=True)
class RecordRow:
    """An admitted record: its lifecycle state, digests, eligibility inputs and sealed body.

    ``sealed`` is ``None`` once the record is tombstoned (body key destroyed, ciphertext deleted).
    ``valid_from``/``valid_to`` are the closed valid-time interval in epoch ms (``None`` = open);
    ``expires_at_ms`` is the retention expiry in epoch ms.
    """

    record_id: str
    state: RecordState
    record_digest: str
    payload_digest: str
    sealed: SealedEnvelope | None
    recorded_cursor: int
    accepted_cursor: int
    valid_from: int
    valid_to: int | None
    expires_at_ms: int | None
    trust_valid: bool = True


@attrs.frozen(kw_only=True)
class IndexedDocument:
    """The lexical index entry of one record: per-term frequencies per field, field lengths.

    Tuples follow :data:`FIELDS`. The eligibility inputs are copied so a search can filter
    without reading record rows. The terms are the record's words in clear: the tokens of
    :mod:`engram_memory.ranking.tokenizer` (lower-case runs of letters, digits and ``_`` of NFC
    text, in any script), compared exactly as strings. They are the only content the service
    hands a store outside sealed envelopes: a store that writes its index outside process memory
    keys it by a keyed digest of each term (``SQLiteStore`` does), and ``unindex`` leaves nothing
    of a term no remaining document holds.
    """

    record_id: str
    lengths: tuple[int, ...]
    terms: dict[str, tuple[int, ...]]
    valid_from: int
    valid_to: int | None
    expires_at_ms: int | None


@attrs.frozen(kw_only=True)
class Posting:
    """One record's occurrence of a term, with what scoring and eligibility need."""

    record_id: str
    frequencies: tuple[int, ...]
    lengths: tuple[int, ...]
    valid_from: int
    valid_to: int | None
    expires_at_ms: int | None


@attrs.frozen(kw_only=True)
class IndexStats:
    """Corpus statistics of a scope's index: document count and total length per field."""

    documents: int
    total_lengths: tuple[int, ...]


TermPostings = tuple[Sequence[str], Sequence[str]]
"""``(document keys, occurrence keys)``: parallel sequences, one entry per indexed document holding a term.

A document key is the store's opaque handle of an index entry (see :meth:`StoreReader.index_entries`),
unique among the scope's indexed documents, stable within a read view, and unknown to every other
scope's views (a store that numbers documents per scope makes its keys name the scope too); the occurrence key is
:func:`occurrence_key` of the term's frequencies and the document's field lengths.
"""


def occurrence_key(frequencies: Sequence[int], lengths: Sequence[int]) -> str:
    """``field:tf:length`` for every field where the term occurs (``tf > 0``), in :data:`FIELDS` order.

    Positions are 0-based indexes into :data:`FIELDS`; parts are comma-separated, e.g. ``"0:2:13,3:1:40"``
    (``""`` when every frequency is 0). Equal keys mean equal scoring inputs, so a ranker may memoise
    by key.
    """
    return ",".join(
        f"{position}:{tf}:{length}"
        for position, (tf, length) in enumerate(zip(frequencies, lengths, strict=True))
        if tf > 0
    )


def occurrence_keys(document: IndexedDocument) -> dict[str, str]:
    """:func:`occurrence_key` of each of ``document``'s terms, by term.

    Computed once per distinct frequency tuple (most of a document's terms share a handful), so
    indexing a document costs one dict lookup per term. Raises as :func:`occurrence_key` does on
    a tuple of the wrong length.
    """
    lengths = document.lengths
    by_frequencies: dict[tuple[int, ...], str] = {}
    keys: dict[str, str] = {}
    for term, frequencies in document.terms.items():
        key = by_frequencies.get(frequencies)
        if key is None:
            key = by_frequencies[frequencies] = occurrence_key(frequencies, lengths)
        keys[term] = key
    return keys


def occurrence_fields(key: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The per-field frequencies and lengths of an :func:`occurrence_key` (``0`` where the term is absent)."""
    frequencies = [0] * len(FIELDS)
    lengths = [0] * len(FIELDS)
    for part in key.split(",") if key else ():
        position, tf, length = (int(value) for value in part.split(":"))
        frequencies[position] = tf
        lengths[position] = length
    return tuple(frequencies), tuple(lengths)


class IndexEntry(NamedTuple):
    """An indexed document resolved to its record row: the row's id and eligibility inputs.

    The values are those of the record row as the read view sees it, not a copy taken when the
    document was indexed, so a stale index entry (a row that changed state or time without being
    unindexed) is judged by its row.
    """

    record_id: str
    state: RecordState
    trust_valid: bool
    valid_from: int
    valid_to: int | None
    expires_at_ms: int | None


class EligibleDocument(NamedTuple):
    """An indexed document whose record row is readable at a search's instants (:meth:`StoreReader.eligible_documents`).

    ``document`` is the store's key (from :meth:`StoreReader.term_postings`); ``record_id`` and
    ``valid_to`` are the row's, which the ranker needs to order hits and weigh their recency.
    """

    document: str
    record_id: str
    valid_to: int | None


# --------------------------------------------------------------------------- Store


class StoreReader(Protocol):
    """A consistent read view of one scope. Nothing read here belongs to another scope.

    A view reads one snapshot of committed state: every method answers from the same state,
    whatever other threads (or processes) commit meanwhile, and no write of a unit of work that
    is open on another thread, or that rolled back, shows in it. (``InMemoryStore`` makes writers
    on other threads wait while a view is open; ``SQLiteStore`` reads a WAL snapshot and lets
    them commit.) What a view shows of a unit that its own thread opens while the view is open
    is not specified, as the service never does it: ``InMemoryStore``'s view shows the unit's
    writes, ``SQLiteStore``'s does not. A :class:`UnitOfWork` is also a reader: it sees the
    committed state plus its own writes.
    """

    def high_water(self) -> int:
        """The scope's last journal cursor, ``0`` when the journal is empty."""
        ...

    def last_event_digest(self) -> str | None:
        """The ``event_digest`` of the last event, ``None`` when the journal is empty."""
        ...

    def events(self, after: int = 0) -> Iterator[JournalEvent]:
        """Journal events with ``cursor > after`` in cursor order."""
        ...

    def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
        """The row bound to (principal, key) in this scope, or ``None``."""
        ...

    def candidate(self, candidate_id: str) -> CandidateRow | None:
        """The candidate's control row in this scope, or ``None`` (unknown or other scope)."""
        ...

    def record(self, record_id: str) -> RecordRow | None:
        """The record row in this scope, or ``None`` (unknown or other scope)."""
        ...

    def candidates(self) -> Iterator[CandidateRow]:
        """Every candidate row of the scope, ordered by candidate id."""
        ...

    def records(self) -> Iterator[RecordRow]:
        """Every record row of the scope, ordered by record id."""
        ...

    def is_tombstoned_payload(self, payload_digest: str) -> bool:
        """Whether a tombstoned record of this scope had this payload digest."""
        ...

    def confirmation_used(self, confirmation_id: str) -> bool:
        """Whether a confirmation id was already consumed in this scope."""
        ...

    def index_stats(self) -> IndexStats:
        """Statistics over every indexed document of the scope.

        The store counts what is indexed, whatever its record row's state: the service indexes only
        ``accepted_current`` records, and ``verify`` checks the count against :meth:`indexed_ids`.
        """
        ...

    def postings(self, term: str) -> Sequence[Posting]:
        """Every indexed record of the scope containing ``term``, ordered by record id.

        Required, but the library itself never calls it: it is the reference form of the index,
        against which the conformance kits check what production reads (:meth:`term_postings`
        resolved by :meth:`index_entries`, and :meth:`index_stats`). The ranker and ``verify`` use
        only those fast forms.
        """
        ...

    def term_postings(self, term: str) -> TermPostings:
        """The document keys and occurrence keys of every indexed document of the scope containing ``term``.

        The fast form of :meth:`postings` (one entry per document, in no specified order): the same
        documents, which :meth:`index_entries` resolves to their record rows.
        """
        ...

    def index_entries(self, documents: Sequence[str]) -> dict[str, IndexEntry]:
        """These indexed documents resolved to their record rows (see :class:`IndexEntry`).

        A key that is not an indexed document of this scope, or whose record has no row in this
        scope, is absent; repeated keys are answered once. Keys are compared as the store's own
        strings (from :meth:`term_postings`): another spelling of a key (padded, zero-led, signed)
        is unknown. The ranker calls this once per batch of hits, so a store answers it with one
        lookup per document, not one per key and table.
        """
        ...

    def eligible_documents(self, documents: Sequence[str], *, valid_as_of: int, now_ms: int) -> list[EligibleDocument]:
        """Those of these indexed documents whose record row is readable at ``valid_as_of`` and ``now_ms``.

        Exactly the documents that :func:`~engram_memory.ranking.eligibility.eligible_entries`
        keeps of :meth:`index_entries` of the same keys (the row is ``accepted_current``, its trust
        is valid, ``valid_from <= valid_as_of``, ``valid_to`` is ``None`` or
        ``valid_as_of <= valid_to``, and ``expires_at_ms`` is ``None`` or ``now_ms < expires_at_ms``),
        each once, in no specified order; unknown keys are absent as there. The ranker calls this
        once per batch of hits, so a store may judge the rule where the rows are, in the same
        lookup (the SQLite store does), instead of returning every entry for the caller to judge.
        """
        ...

    def indexed_ids(self) -> Iterator[str]:
        """Ids of every indexed record of the scope, sorted."""
        ...

    def doomed_keys(self) -> list[str]:
        """Key refs whose destruction was committed but not yet confirmed by the vault, sorted."""
        ...


class UnitOfWork(StoreReader, Protocol):
    """One atomic mutation of one scope: all of its writes commit together or none do.

    Reads see the committed state plus the unit's own writes; no other unit of the scope runs
    until this one ends (:meth:`Store.write`), so what it reads stays true until it commits.
    Leaving the ``with`` block normally commits; any exception, ``KeyboardInterrupt`` and
    ``SystemExit`` included, rolls everything back and propagates. Nothing the unit wrote shows
    in a view on another thread before its commit.
    """

    def append_event(self, event: JournalEvent) -> None:
        """Append the next event.

        Raises:
            StoreConflictError: ``event.cursor`` is not ``high_water() + 1``.
        """
        ...

    def put_idempotency(self, principal: str, key: str, row: IdempotencyRow) -> None:
        """Bind (principal, key); never over an existing binding, unless provisional to the same intent.

        Raises:
            StoreConflictError: the pair is already bound (and not provisionally to this intent).
        """
        ...

    def put_candidate(self, row: CandidateRow) -> None:
        """Insert or replace a candidate's control row."""
        ...

    def put_record(self, row: RecordRow) -> None:
        """Insert or replace a record row."""
        ...

    def add_tombstone(self, payload_digest: str) -> None:
        """Remember that a record with this payload digest was tombstoned in the scope."""
        ...

    def consume_confirmation(self, confirmation_id: str) -> None:
        """Mark a confirmation id used.

        Raises:
            StoreConflictError: it was already used.
        """
        ...

    def index_document(self, document: IndexedDocument) -> None:
        """Add a record to the scope's lexical index (replacing an older entry).

        The store keeps no reference to ``document``'s mutable parts.

        Raises:
            ValueError: ``lengths`` or a frequency tuple without one entry per field (the unit
                then rolls back like for any other exception).
        """
        ...

    def unindex(self, record_id: str) -> None:
        """Remove every trace of a record from the scope's lexical index (no-op if absent)."""
        ...

    def doom_key(self, key_ref: str) -> None:
        """Record that ``key_ref`` must be destroyed (cleared once the vault confirms)."""
        ...

    def clear_doomed_key(self, key_ref: str) -> None:
        """Forget a doomed key once the vault destroyed it."""
        ...


class Store(Protocol):
    """Journal, state, idempotency rows and lexical index, partitioned by scope key.

    Each mutation runs in exactly one :meth:`write` unit of work; reads run in :meth:`read`
    views and never write.

    One store object serves every thread of the process: a ``MemoryService`` calls it from
    whichever threads call the service, so any method may run on any thread at the same time as
    the others. Units of work on one scope are serialised (see :meth:`write`); a view is a
    consistent snapshot of committed state (see :class:`StoreReader`). Views and units on
    different threads may run at the same time (``SQLiteStore``: views never wait for writers) or
    take turns (``InMemoryStore``: one lock for both); either is conformant. The service uses each
    view and unit on the thread that opened it, within one call.
    """

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        """A consistent read view of ``scope``, usable only inside its ``with`` block.

        The service never opens a view or a unit on a thread that has a view open (a store may
        serialise views and units with one plain lock), and never a view on a thread that has a
        unit of work open, so what such a view does is left to the store: ``InMemoryStore`` refuses it with
        ``StoreUnavailableError``; ``SQLiteStore`` gives a view of the committed state, without
        the open unit's writes.

        Raises:
            StoreUnavailableError: the view cannot be opened now (retriable), or (from any of its
                methods) it is used after its block ended.
        """
        ...

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        """A unit of work on ``scope``, serialised with every other writer of the scope.

        While a unit of the scope is open, another writer (on another thread, or in another
        process for a store that several processes open) waits until it has committed or rolled
        back; a store may give up after a timeout of its own and raise ``StoreUnavailableError``
        before anything is written. ``InMemoryStore`` waits without limit; ``SQLiteStore`` waits
        for its busy timeout (5 s by default). A store may serialise more than one scope at a
        time (both reference stores serialise every writer of the store).

        Usable only inside its ``with`` block. A unit of work opened while the same thread has a
        unit of the same store open (of any scope) raises ``StoreUnavailableError`` and never
        commits: nothing it writes is ever seen, and the open unit is unaffected (it commits if
        the caller catches the error). It raises from the ``with`` statement (at once, or after
        the store's timeout, as for another writer), from one of its methods, or when its block
        ends; the conformance kit accepts each. Both reference stores raise at once, from the
        ``with`` statement, before touching anything. The service never nests units.

        Raises:
            StoreUnavailableError: the store cannot start or commit now (retriable), this thread
                already has a unit of work of the store open, the store is closed, or (from any of
                the unit's methods) it is used after its block ended.
            StoreOutcomeUnknownError: the commit may or may not have happened.
        """
        ...

    def scopes(self) -> list[str]:
        """Every scope key with at least one journal event, sorted."""
        ...

    def secret(self) -> bytes:
        """A per-store secret (32 bytes) for MACs such as page cursors; stable across reopen."""
        ...

    def close(self) -> None:
        """Release resources; idempotent.

        Afterwards each method either works as before or raises ``StoreUnavailableError``, never
        another exception. So does each method of a view or unit of work that is open when
        ``close`` is called on another thread (a shutdown racing a search): a view answers as
        before or raises ``StoreUnavailableError``; a unit either commits whole when its block
        ends, or raises ``StoreUnavailableError`` (nothing committed) or
        ``StoreOutcomeUnknownError``. ``close`` may wait for such views and units to end first.
        Both reference stores refuse :meth:`read`, :meth:`write` and :meth:`scopes` with
        ``StoreUnavailableError``, let a view or unit open at the close finish normally, and still
        answer :meth:`secret` with the same bytes.
        """
        ...


# --------------------------------------------------------------------------- KeyVault


class KeyVault(Protocol):
    """Data keys that never leave the vault: seal, open, destroy (crypto-shredding).

    A cloud KMS can implement this: ``seal`` makes a fresh data key per call (a vault may create
    keys ahead of use, as long as a key is durable before ``seal`` returns an envelope under it),
    the associated data binds ``context`` (scope and id), and ``destroy`` makes every envelope
    sealed under the given keys permanently unreadable.

    A vault that is unreachable for a while (a timeout, a throttled KMS) raises
    :class:`~engram_memory.errors.StoreUnavailableError` from any method: the agent then gets a
    retriable answer (``STORE_UNAVAILABLE``, or ``MUTATION_OUTCOME_UNKNOWN`` once a mutation's
    commit may have happened). Any other exception counts as a defect of the vault: the typed
    operations of :class:`~engram_memory.MemoryService` let it propagate, and ``call_tool`` answers
    it as a non-retriable ``CAPABILITY_UNAVAILABLE`` (a read) or a retriable
    ``MUTATION_OUTCOME_UNKNOWN`` (a mutation).

    One vault object serves every thread of the process, so ``seal``, ``open`` and ``destroy``
    may run at the same time on any threads. Each ``seal`` returns an envelope under a key ref no
    other ``seal`` returned. The envelope opens on every thread from the moment ``seal`` returns
    until ``destroy`` is called on its key, and never once that destruction is done (``destroy``
    returned or, for a vault that schedules destruction, the scheduled destruction ran). A
    ``destroy`` affects only the keys it names, whatever is sealed or opened meanwhile. (Both
    reference vaults hold one lock around their keys: ``SQLiteKeyVault`` around its one
    connection.)

    A vault may also have a ``close()`` method, which the protocol does not name:
    ``MemoryService.close()`` looks it up (``getattr``) and calls it, after closing the store, if
    it is there (``SQLiteKeyVault`` has one; it releases the file). A vault shared by several
    services is therefore closed by the first of them to close.
    """

    @property
    def destroys_synchronously(self) -> bool:
        """``True`` if :meth:`destroy` erases the key before returning (else it is scheduled)."""
        ...

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        """Encrypt ``plaintext`` under a fresh key, binding ``context`` as associated data."""
        ...

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        """Decrypt an envelope sealed with the same ``context``.

        Raises:
            KeyUnavailableError: the key is unknown or destroyed.
            SealIntegrityError: the ciphertext or context does not authenticate.
        """
        ...

    def destroy(self, *key_refs: str) -> None:
        """Destroy every given key; an unknown or already destroyed key is a no-op.

        One call may carry many keys so a vault can erase them in one durable step. When it
        raises, any subset may already be destroyed: the caller retries the whole call.
        """
        ...


# --------------------------------------------------------------------------- Policy


@attrs.frozen(kw_only=True)
class CaptureConstraints:
    """What the host allows in a capture's retention and reconciliation.

    ``allow_retain``: ``retention.derivative_rule: "retain"`` is allowed (else ``UNAUTHORIZED``).
    ``max_retention``: the longest ``retention.expires_at`` after the capture's time (a later one
    is ``UNAUTHORIZED``; ``None``: no cap). It caps only an expiry the capture gives: a capture
    without ``expires_at`` is kept until withdrawn or forgotten, and the port cannot require
    one (the contract tells agents to omit retention unless told otherwise). ``family_refs``: the
    reconciliation families the host consents to (any other is ``UNAUTHORIZED``).
    """

    allow_retain: bool = False
    max_retention: timedelta | None = None
    family_refs: frozenset[str] = frozenset()


@attrs.frozen(kw_only=True)
class Capturer:
    """Who captured a candidate: the principal, agent id and session of the capturing binding.

    The service seals it inside the candidate's envelope, destroyed with the envelope's key when
    the candidate leaves ``pending``; no column of the store names the capturer. (The principal
    is stored in clear anyway, with its idempotency rows, one of which answers with the
    ``candidate_id``; the agent id and the session are nowhere else.)
    """

    principal: str
    agent_id: str
    session: str


@attrs.frozen(kw_only=True)
class AdmissionRequest:
    """What the service hands the policy: the opened, re-digested candidate, who asks, and who captured it.

    ``principal``, ``agent_id`` and ``session`` are those of the binding that calls
    ``request_admission`` (the requester). ``capturer`` is the binding that captured the
    candidate, so a policy can tell a request for one's own capture from a request for another
    principal's (every principal of a workspace can name any candidate of it, and candidate ids
    are derived from guessable inputs). It is ``None`` only for a candidate sealed by a
    pre-release that did not record it (envelope schema 1); a policy that keys a rule on the
    capturer treats ``None`` as unknown.
    """

    candidate_id: str
    scope: str
    record_digest: str
    payload_digest: str
    payload: dict[str, Any]
    evidence: dict[str, Any]
    principal: str
    agent_id: str
    session: str
    capturer: Capturer | None = None


Decision = Literal["accept", "reject", "adjudication_required"]
DECISIONS: Final = frozenset(get_args(Decision))
"""What a policy may decide."""
TrustClass = Literal["asserted", "earned", "signed"]
TRUST_CLASSES: Final = frozenset(get_args(TrustClass))
"""The trust classes a host may assign (the contract's three)."""


@attrs.frozen(kw_only=True)
class AdmissionDecision:
    """A policy's decision; the service wraps and validates it (id, version, digest, age)."""

    decision: Decision
    record_digest: str
    issued_at: datetime
    policy_id: str
    policy_version: str


class Policy(Protocol):
    """The host's rules. Pure decisions.

    An :class:`~engram_memory.errors.EngramError` a method raises answers the call with its own
    code (a host may refuse with ``RATE_LIMITED`` or ``AUTHORIZATION_EXPIRED``, say). Any other
    exception, and an answer of the wrong shape, is ``POLICY_UNAVAILABLE`` (retriable). Either
    way nothing is written, through the typed API and ``call_tool`` alike.
    """

    @property
    def policy_id(self) -> str:
        """Stable identifier of the policy (an opaque ref: non-empty text without lone surrogates)."""
        ...

    @property
    def policy_version(self) -> str:
        """Version (non-empty text, as the id); a candidate captured under another version gets ``POLICY_STALE``."""
        ...

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """The tools this policy grants the binding (intersected with ``binding.tools``)."""
        ...

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:
        """Retention and reconciliation limits for captures by this binding."""
        ...

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:
        """Whether capture / request_admission need a human confirmation.

        withdraw and forget always do, whatever this returns.
        """
        ...

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        """JSON pointers (RFC 6901) of the record fields the binding may read; ``None`` = all.

        ``""`` keeps the whole record; a pointer may reach inside an object but not through an
        array (see :func:`engram_memory.redaction.redact_record`).
        """
        ...

    def allows_network(self, binding: HostBinding) -> bool:
        """Whether this binding's searches may run a ranker that uses the network.

        A search runs such a ranker only when this is true *and* its ``capability_policy`` says
        ``network: "allow"`` (which grants nothing by itself).
        """
        ...

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:
        """The trust class of what this binding captures (never the caller's choice)."""
        ...

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """Decide a pending candidate.

        ``now`` is the instant the call read (UTC). The decision's ``issued_at`` (aware, any
        zone) may be ``now`` or the host clock's reading while deciding: it is ``POLICY_STALE``
        when more than 300 s old, or later than the service's own reading once ``decide`` returns.
        """
        ...


# --------------------------------------------------------------------------- Ranker and Clock


@attrs.frozen(kw_only=True)
class RankingQuery:
    """A query as the ranker sees it: tokens plus the pinned eligibility instant."""

    terms: tuple[str, ...]
    valid_as_of: int
    now_ms: int


class RankedHit(NamedTuple):
    """One ranked record: final score, its recency component, and the lexical score.

    A named tuple (a ranker builds one per candidate, up to 2,000 per search); build it by keyword.
    """

    record_id: str
    score: float
    recency: float
    lexical: float


class Ranker(Protocol):
    """Orders the eligible records of one scope for a query; deterministic and read-only.

    Any exception one of its members raises during a search (other than an
    :class:`~engram_memory.errors.EngramError`, which keeps its code), and an answer of the wrong
    shape (for :meth:`rank`: not a list of at most 2,000 hits with distinct ASCII ``str`` record
    ids and finite ``int`` or ``float`` scores and recencies), makes the search
    ``RANKING_UNAVAILABLE`` (retriable), through the typed API and ``call_tool`` alike. A store
    failure, whether :meth:`rank` meets it or the search does, keeps its code
    (``STORE_UNAVAILABLE``, ``JOURNAL_CORRUPT`` or ``BLOB_MISSING``).
    """

    @property
    def profile(self) -> str:
        """The ranking profile name (``offline_lexical_v1`` for the reference ranker)."""
        ...

    @property
    def channels(self) -> frozenset[str]:
        """The channels this ranker provides (``{"lexical"}`` or ``{"lexical", "semantic"}``)."""
        ...

    @property
    def uses_network(self) -> bool:
        """Whether ranking contacts the network (a remote embedding or rerank service).

        Such a ranker runs only for a search whose ``capability_policy`` allows the network and
        whose host Policy does too (:meth:`Policy.allows_network`); otherwise the search is
        ``RANKING_UNAVAILABLE`` and the ranker is never called.
        """
        ...

    def config(self) -> dict[str, Any]:
        """Every constant that determines the order (bound by ``profile_config_digest``).

        The read path also reads ``profile_version``, ``scoring_formula_ref`` and
        ``candidate_cap`` from it (defaults ``""``, ``""`` and 2,000 when absent).
        """
        ...

    def tokenize(self, text: str) -> list[str]:
        """The tokens of a query's ``text``, which become :attr:`RankingQuery.terms`.

        The service calls it on the query only. The store's lexical index is always built from
        the tokens of the built-in tokenizer (:mod:`engram_memory.ranking.tokenizer`,
        ``graphify-memory:tokenizer:v1``), whatever the ranker; so a ranker that looks terms up in
        the lexical index must tokenize as that tokenizer does, or its terms will not match.
        """
        ...

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        """Every eligible hit, best first (score desc, recency desc, record id asc)."""
        ...


class Clock(Protocol):
    """Injected time; the core never reads the system clock itself."""

    def now(self) -> datetime:
        """The current instant, timezone-aware."""
        ...
