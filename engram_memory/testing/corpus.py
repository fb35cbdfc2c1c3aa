"""A deterministic synthetic corpus for benchmarks and scale tests.

:class:`SyntheticCorpus` makes ``engram_memory_capture`` arguments whose texts read like short
engineering notes: a decision, its context, sometimes evidence, and one to three citations. The
words come from a vocabulary of pseudo-words (``20,000`` by default) drawn with a Zipf–Mandelbrot
distribution, so a few words are in most documents and most words are rare, as in real text.

Everything is a pure function of the seed and the position: document ``i`` of tenant ``t`` is the
same whatever was generated before it (each document draws from its own ``random.Random`` seeded
by ``(seed, t, i)``), so a benchmark and a test that ask for the same documents get the same bytes
on every machine and Python version that implements ``random.Random`` version 2 seeding (every
CPython since 3.2).

Queries are term lists of a chosen *selectivity*: the expected fraction of documents containing
each term, computed from the Zipf probabilities and the mean document length (see
:meth:`SyntheticCorpus.document_fraction`).

:func:`preload_admitted` is the store-level fast path that benchmarks and scale tests use to build
a large scope quickly: it writes, through the ports' units of work, the rows a capture followed by
an accepting ``request_admission`` writes, without the per-operation overhead of the service.

This module imports only the standard library and :mod:`engram_memory` itself (no pytest), so the
benchmark scripts can use it without the ``testing`` extra.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from engram_memory.canonical import (
    Domain,
    canonical_bytes,
    digest,
    format_cursor,
    format_instant,
    receipt_digest,
)
from engram_memory.context import ALL_TOOLS, HostBinding
from engram_memory.journal import build_event
from engram_memory.mutation_guard import intent_of
from engram_memory.ports import (
    CandidateRow,
    IdempotencyRow,
    KeyVault,
    Policy,
    Store,
    UnitOfWork,
)
from engram_memory.records import (
    authorization_receipt,
    build_record,
    candidate_id_for,
    complete_payload,
    transaction_receipt,
    trust_binding,
)
from engram_memory.results import AdmissionOutcome, CaptureResult, RequestAdmissionResult
from engram_memory.write_path import store_admitted_record

__all__ = [
    "PURPOSE",
    "SELECTIVITY_BANDS",
    "VALID_FROM_BASE_MS",
    "CorpusSpec",
    "Selectivity",
    "SyntheticCorpus",
    "Tenant",
    "admission_key",
    "preload_admitted",
]

PURPOSE: Final = "purpose:engram-benchmark"
"""The purpose every generated payload carries (bind the same ``purpose_ref``)."""

VALID_FROM_BASE_MS: Final = 1_735_689_600_000
"""2025-01-01T00:00:00.000Z: generated valid times fall in the 365 days after this instant."""

_YEAR_MS: Final = 365 * 86_400_000

Selectivity = Literal["selective", "mid", "common"]

SELECTIVITY_BANDS: Final[dict[str, tuple[float, float]]] = {
    "selective": (0.0005, 0.004),
    "mid": (0.01, 0.04),
    "common": (0.08, 0.35),
}
"""Expected fraction of documents that contain a query term, per named selectivity."""

_ONSETS: Final = (
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
    "br", "ch", "cl", "dr", "fl", "gr", "kr", "pl", "pr", "sh", "sk", "sl", "sp", "st", "th", "tr",
)  # fmt: skip
_VOWELS: Final = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
_CODAS: Final = ("", "", "", "n", "r", "s", "l", "m", "t", "x", "nd", "rk", "st")
_TYPE_REFS: Final = ("decision", "convention", "incident", "preference", "constraint", "finding")
_LOCATOR_SCHEMES: Final = ("line", "section", "page", "anchor")
_SOURCE_KINDS: Final = ("doc", "adr", "ticket", "thread", "runbook", "commit")


@dataclass(frozen=True)
class Tenant:
    """One tenant of the corpus: the host-side names a :class:`~engram_memory.HostBinding` needs."""

    index: int
    tenant_id: str
    workspace_id: str
    principal: str
    projects: tuple[str, ...]

    def binding(self, caller: str) -> HostBinding:
        """This tenant's host binding for ``caller`` (agent ``agent-<caller>``, purpose :data:`PURPOSE`)."""
        return HostBinding(
            tenant_id=self.tenant_id,
            workspace_id=self.workspace_id,
            principal=self.principal,
            agent_id=f"agent-{caller}",
            session=f"session-{caller}",
            purpose_ref=PURPOSE,
            tools=ALL_TOOLS,
        )


@dataclass(frozen=True)
class CorpusSpec:
    """The shape of a synthetic corpus.

    Args:
        seed: the only source of randomness.
        vocabulary_size: number of distinct pseudo-words.
        zipf_s: exponent of the Zipf–Mandelbrot law ``p(r) ∝ 1 / (r + zipf_q) ** zipf_s`` (rank ``r``
            from 1).
        zipf_q: its offset (flattens the head).
        tenants: number of tenants (each with one workspace and one principal).
        decision_words: inclusive range of the decision (primary) component's length in words.
        context_words: inclusive range of the context component's length.
        evidence_words: inclusive range of the optional evidence component's length.
        evidence_probability: chance that a document has an evidence component.
        extra_context_probability: chance of a second context component.
        citations: inclusive range of the number of citations.
        closed_interval_probability: chance that the valid-time interval has an end.
    """

    seed: int = 20_261_101
    vocabulary_size: int = 20_000
    zipf_s: float = 1.0
    zipf_q: float = 2.7
    tenants: int = 4
    decision_words: tuple[int, int] = (8, 24)
    context_words: tuple[int, int] = (15, 50)
    evidence_words: tuple[int, int] = (10, 40)
    evidence_probability: float = 0.5
    extra_context_probability: float = 0.2
    citations: tuple[int, int] = (1, 3)
    closed_interval_probability: float = 0.1
    projects_per_tenant: int = 6

    def __post_init__(self) -> None:
        if self.vocabulary_size < 100:
            raise ValueError("vocabulary_size must be at least 100")
        if self.tenants < 1:
            raise ValueError("tenants must be at least 1")
        for name in ("decision_words", "context_words", "evidence_words", "citations"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"{name} must be an increasing range starting at 1 or more")


def _rng(label: str) -> random.Random:
    """A generator seeded by ``label`` (string seeds hash with SHA-512: stable across runs and machines)."""
    return random.Random("engram-corpus/" + label)  # noqa: S311 - deterministic test data, never secrets


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _make_vocabulary(rng: random.Random, size: int) -> tuple[str, ...]:
    """``size`` distinct lower-case ASCII pseudo-words of 3 to 14 letters (never dropped by the tokenizer)."""
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < size:
        word = "".join(_syllable(rng) for _ in range(rng.choice((1, 2, 2, 2, 3, 3, 4))))
        if len(word) < 3 or len(word) > 14 or word in seen:
            continue
        seen.add(word)
        words.append(word)
    return tuple(words)


class SyntheticCorpus:
    """Deterministic capture arguments and queries (see the module docstring).

    Args:
        spec: the corpus shape (the default is what the benchmarks use).
    """

    def __init__(self, spec: CorpusSpec | None = None) -> None:
        self.spec = spec if spec is not None else CorpusSpec()
        rng = _rng(f"vocabulary/{self.spec.seed}")
        self.vocabulary: tuple[str, ...] = _make_vocabulary(rng, self.spec.vocabulary_size)
        weights = [1.0 / (rank + self.spec.zipf_q) ** self.spec.zipf_s for rank in range(1, len(self.vocabulary) + 1)]
        total = math.fsum(weights)
        self.probabilities: tuple[float, ...] = tuple(w / total for w in weights)
        self._cumulative: list[float] = list(itertools.accumulate(self.probabilities))
        self._cumulative[-1] = 1.0
        self.tenants: tuple[Tenant, ...] = tuple(self._tenant(index) for index in range(self.spec.tenants))

    # ------------------------------------------------------------------ tenants

    def _tenant(self, index: int) -> Tenant:
        rng = _rng(f"tenant/{self.spec.seed}/{index}")
        projects = tuple(
            "".join(_syllable(rng) for _ in range(2)) + f"{index:02d}" for _ in range(self.spec.projects_per_tenant)
        )
        return Tenant(
            index=index,
            tenant_id=f"tenant-{index:02d}",
            workspace_id="workspace-main",
            principal=f"principal-{index:02d}",
            projects=projects,
        )

    # ------------------------------------------------------------------ words and lengths

    def words(self, rng: random.Random, count: int) -> list[str]:
        """``count`` words drawn from the Zipf distribution with ``rng``."""
        return rng.choices(self.vocabulary, cum_weights=self._cumulative, k=count)

    @property
    def mean_tokens(self) -> float:
        """Expected number of vocabulary tokens in one document (all components)."""
        spec = self.spec

        def mean(bounds: tuple[int, int]) -> float:
            return (bounds[0] + bounds[1]) / 2

        return (
            mean(spec.decision_words)
            + mean(spec.context_words) * (1 + spec.extra_context_probability)
            + mean(spec.evidence_words) * spec.evidence_probability
        )

    def document_fraction(self, rank: int) -> float:
        """Expected fraction of documents containing the word of 1-based Zipf ``rank``."""
        probability = self.probabilities[rank - 1]
        return 1.0 - math.pow(1.0 - probability, self.mean_tokens)

    def band(self, selectivity: Selectivity | tuple[float, float]) -> list[str]:
        """The vocabulary words whose expected document fraction lies in the band, most frequent first."""
        low, high = SELECTIVITY_BANDS[selectivity] if isinstance(selectivity, str) else selectivity
        return [
            word for rank, word in enumerate(self.vocabulary, start=1) if low <= self.document_fraction(rank) <= high
        ]

    # ------------------------------------------------------------------ documents

    def _sentence_text(self, rng: random.Random, count: int) -> str:
        """``count`` words as sentences of 5–14 words, capitalised, with light punctuation."""
        words = self.words(rng, count)
        sentences: list[str] = []
        position = 0
        while position < len(words):
            length = rng.randint(5, 14)
            chunk = words[position : position + length]
            position += length
            if len(chunk) > 3 and rng.random() < 0.3:
                cut = rng.randint(1, len(chunk) - 2)
                chunk = [*chunk[:cut], chunk[cut] + ",", *chunk[cut + 1 :]]
            sentences.append(chunk[0].capitalize() + (" " + " ".join(chunk[1:]) if len(chunk) > 1 else "") + ".")
        return " ".join(sentences)

    def idempotency_key(self, tenant: int, index: int) -> str:
        """The idempotency key of document ``index`` of ``tenant`` (unique, at least 16 bytes)."""
        return f"corpus-{self.spec.seed}-t{tenant:02d}-{index:09d}"

    def capture_arguments(self, tenant: int, index: int) -> dict[str, Any]:
        """Valid ``engram_memory_capture`` arguments for document ``index`` of ``tenant`` (JSON form)."""
        spec = self.spec
        owner = self.tenants[tenant]
        rng = _rng(f"document/{spec.seed}/{tenant}/{index}")
        citation_count = rng.randint(*spec.citations)
        citations: list[dict[str, Any]] = []
        for number in range(1, citation_count + 1):
            kind = rng.choice(_SOURCE_KINDS)
            project = rng.choice(owner.projects)
            source_ref = f"{kind}:{project}/{self.words(rng, 1)[0]}-{rng.randint(1, 999)}"
            cited = f"{source_ref}#{index}/{number}"
            citations.append(
                {
                    "citation_id": f"cite-{number}",
                    "source_ref": source_ref,
                    "locator": {"scheme": rng.choice(_LOCATOR_SCHEMES), "value": str(rng.randint(1, 400))},
                    "content_digest": "sha256:" + hashlib.sha256(cited.encode("utf-8")).hexdigest(),
                }
            )
        citation_ids = [c["citation_id"] for c in citations]

        def cites() -> list[str]:
            return sorted(rng.sample(citation_ids, rng.randint(1, len(citation_ids))))

        decision_cites = cites()
        components: list[dict[str, Any]] = [
            {
                "component_id": "c-decision",
                "kind": "decision",
                "text": self._sentence_text(rng, rng.randint(*spec.decision_words)),
                "citation_ids": decision_cites,
            },
            {
                "component_id": "c-context",
                "kind": "context",
                "text": self._sentence_text(rng, rng.randint(*spec.context_words)),
                "citation_ids": cites(),
            },
        ]
        if rng.random() < spec.extra_context_probability:
            components.append(
                {
                    "component_id": "c-context-2",
                    "kind": "context",
                    "text": self._sentence_text(rng, rng.randint(*spec.context_words)),
                    "citation_ids": cites(),
                }
            )
        if rng.random() < spec.evidence_probability:
            components.append(
                {
                    "component_id": "c-evidence",
                    "kind": "evidence",
                    "text": self._sentence_text(rng, rng.randint(*spec.evidence_words)),
                    "citation_ids": cites(),
                }
            )
        start = VALID_FROM_BASE_MS + rng.randrange(_YEAR_MS)
        valid_time: dict[str, Any] = {"t": start}
        if rng.random() < spec.closed_interval_probability:
            valid_time["t_end"] = start + rng.randrange(1, 90) * 86_400_000
        payload: dict[str, Any] = {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": valid_time,
            "components": components,
            "primary_component_id": "c-decision",
            "primary_event": {"at": start, "type_ref": rng.choice(_TYPE_REFS), "citation_id": decision_cites[0]},
            "citations": citations,
        }
        evidence = {
            "evidence_ref": f"evidence:{owner.tenant_id}/{index}",
            "evidence_digest": "sha256:" + hashlib.sha256(f"evidence/{tenant}/{index}".encode()).hexdigest(),
            "citation_ids": cites(),
        }
        return {"idempotency_key": self.idempotency_key(tenant, index), "payload": payload, "evidence": evidence}

    def documents(self, tenant: int, count: int, start: int = 0) -> Iterator[dict[str, Any]]:
        """Capture arguments of documents ``start .. start + count - 1`` of ``tenant``."""
        for index in range(start, start + count):
            yield self.capture_arguments(tenant, index)

    # ------------------------------------------------------------------ queries

    def query_terms(
        self, count: int, selectivity: Selectivity | tuple[float, float], *, seed: int | str = 0
    ) -> list[str]:
        """``count`` distinct words of the given selectivity (deterministic per ``seed``).

        Raises:
            ValueError: the band holds fewer than ``count`` words.
        """
        pool = self.band(selectivity)
        if len(pool) < count:
            raise ValueError(f"only {len(pool)} words in the {selectivity!r} band")
        rng = _rng(f"query/{self.spec.seed}/{selectivity}/{count}/{seed}")
        return rng.sample(pool, count)

    def queries(self, number: int, count: int, selectivity: Selectivity | tuple[float, float]) -> list[Sequence[str]]:
        """``number`` term lists of ``count`` terms each (see :meth:`query_terms`)."""
        return [self.query_terms(count, selectivity, seed=position) for position in range(number)]


# --------------------------------------------------------------------------- store-level fast path

_CAPTURE: Final = "engram_memory_capture"
_ADMISSION: Final = "engram_memory_request_admission"


def admission_key(capture_key: str) -> str:
    """The idempotency key :func:`preload_admitted` binds the admission of ``capture_key`` to."""
    return capture_key + ":admit"


@dataclass(frozen=True)
class _Context:
    binding: HostBinding
    scope: str
    policy_id: str
    policy_version: str
    trust_class: str
    instant: str


def _authorization(ctx: _Context, tool: str, target: str) -> str:
    binding = ctx.binding
    return authorization_receipt(
        tool=tool,
        scope=ctx.scope,
        principal=binding.principal,
        agent_id=binding.agent_id,
        session=binding.session,
        purpose_ref=binding.purpose_ref,
        target=target,
        policy_id=ctx.policy_id,
        policy_version=ctx.policy_version,
        checked_at=ctx.instant,
    )


def _preload_one(unit: UnitOfWork, vault: KeyVault, ctx: _Context, arguments: Mapping[str, Any]) -> str:
    """Write what capture + an accepting request_admission of ``arguments`` write; return the record id."""
    scope, binding, at = ctx.scope, ctx.binding, ctx.instant
    key: str = arguments["idempotency_key"]
    completed = complete_payload(dict(arguments["payload"]), scope)
    payload_digest = digest(Domain.PAYLOAD, completed)
    candidate_id = candidate_id_for(scope, binding.principal, key)
    capture_auth = _authorization(ctx, _CAPTURE, candidate_id)
    trust = trust_binding(
        trust_class=ctx.trust_class,
        evidence_digest=arguments["evidence"]["evidence_digest"],
        policy_id=ctx.policy_id,
        policy_version=ctx.policy_version,
        issued_at=at,
        payload_digest=payload_digest,
    )
    capture_cursor = format_cursor(unit.high_water() + 1)
    record = build_record(
        completed=completed,
        payload_digest=payload_digest,
        recorded_at=at,
        recorded_cursor=capture_cursor,
        authorization_receipt_digest=capture_auth,
        trust=trust,
    )
    record_id: str = record["record_id"]
    record_digest: str = record["record_digest"]
    # capture: journal event, idempotency row (the candidate row is overwritten below)
    event, body = build_event(
        unit,
        recorded_at=at,
        operation="capture",
        candidate_id=candidate_id,
        to_state="pending",
        record_digest=record_digest,
        authorization_receipt_digest=capture_auth,
    )
    unit.append_event(event)
    captured = CaptureResult(
        status="committed_pending",
        candidate_id=candidate_id,
        record_digest=record_digest,
        cursor=capture_cursor,
        transaction_receipt_digest=transaction_receipt(
            operation="capture",
            scope=scope,
            cursor=capture_cursor,
            event_digest=body["event_digest"],
            committed_at=at,
            record_digest=record_digest,
        ),
    ).to_json()
    intent = intent_of(_CAPTURE, dict(arguments))
    unit.put_idempotency(
        binding.principal, key, IdempotencyRow(intent_digest=intent, response=canonical_bytes(captured))
    )
    # admission (accept): decision, event, record row, index, candidate row, idempotency row
    decision = receipt_digest(
        Domain.ADMISSION_DECISION,
        {
            "policy_id": ctx.policy_id,
            "policy_version": ctx.policy_version,
            "record_digest": record_digest,
            "decision": "accept",
            "issued_at": at,
        },
    )
    admit_auth = _authorization(ctx, _ADMISSION, candidate_id)
    event, body = build_event(
        unit,
        recorded_at=at,
        operation="accept",
        candidate_id=candidate_id,
        record_id=record_id,
        from_state="pending",
        to_state="accepted_current",
        record_digest=record_digest,
        decision_receipt_digest=decision,
        authorization_receipt_digest=admit_auth,
    )
    unit.append_event(event)
    cursor = format_cursor(event.cursor)
    outcome = AdmissionOutcome(
        status="accepted",
        candidate_id=candidate_id,
        record_id=record_id,
        cursor=cursor,
        decision_receipt_digest=decision,
        transaction_receipt_digest=transaction_receipt(
            operation="accept",
            scope=scope,
            cursor=cursor,
            event_digest=body["event_digest"],
            committed_at=at,
            record_digest=record_digest,
        ),
    )
    store_admitted_record(unit, vault.seal, scope, record, event.cursor)
    unit.put_candidate(
        CandidateRow(
            candidate_id=candidate_id,
            state="admitted",
            created_cursor=int(capture_cursor),
            record_digest=record_digest,
            sealed=None,
            policy_id=ctx.policy_id,
            policy_version=ctx.policy_version,
            record_id=record_id,
            outcome=canonical_bytes(outcome.to_json()),
        )
    )
    admit_args = {"candidate_id": candidate_id, "idempotency_key": admission_key(key)}
    admit_intent = intent_of(_ADMISSION, admit_args)
    admitted = RequestAdmissionResult(outcome=outcome, replayed=False).to_json()
    unit.put_idempotency(
        binding.principal,
        admission_key(key),
        IdempotencyRow(intent_digest=admit_intent, response=canonical_bytes(admitted)),
    )
    return record_id


def preload_admitted(
    store: Store,
    vault: KeyVault,
    binding: HostBinding,
    arguments: Iterable[Mapping[str, Any]],
    *,
    policy: Policy,
    now: datetime,
    batch: int = 1000,
    vault_batch: Callable[[], AbstractContextManager[object]] | None = None,
) -> list[str]:
    """Admit captures straight through the store's units of work; return the record ids in order.

    For each capture's arguments (already valid and in their JSON form, as
    :meth:`SyntheticCorpus.capture_arguments` makes them) this writes what ``capture`` followed by
    an accepting ``request_admission`` under :func:`admission_key` write: both journal events
    (hash-chained), both idempotency rows, the admitted candidate row with its outcome, the record
    row with its body sealed under a fresh key of ``vault``, and the lexical index entry. The
    candidate's own sealed envelope is skipped: admission destroys it anyway. Every document is
    stamped ``now``; ``policy`` supplies the policy id, version and trust class.

    ``batch`` documents share one unit of work (one commit). ``vault_batch``, if given, is entered
    around each batch's seals (e.g. one vault transaction instead of one durable commit per key).

    It skips the service's validation, confirmation gate, replay lookups and decision envelope
    checks, so use it only for corpora known to be valid; the resulting scope verifies with
    :meth:`~engram_memory.MemoryAdmin.verify` and behaves like one built through the service.
    """
    ctx = _Context(
        binding=binding,
        scope=binding.scope,
        policy_id=policy.policy_id,
        policy_version=policy.policy_version,
        trust_class=policy.trust_class(binding),
        instant=format_instant(now),
    )
    record_ids: list[str] = []
    pending = iter(arguments)
    while True:
        chunk = list(itertools.islice(pending, batch))
        if not chunk:
            return record_ids
        with vault_batch() if vault_batch is not None else nullcontext(), store.write(ctx.scope) as unit:
            record_ids.extend(_preload_one(unit, vault, ctx, item) for item in chunk)
