"""Builders for tests: host bindings, capture arguments, confirmations, and a small harness.

Everything here speaks the JSON contract (``call_tool`` arguments in, envelopes out), so the
same helpers drive every backend.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import attrs
import pytest

from engram_memory.admin import MemoryAdmin
from engram_memory.clock import ManualClock
from engram_memory.context import (
    ADMISSION,
    ALL_TOOLS,
    CAPTURE,
    FORGET,
    GET,
    SEARCH,
    WITHDRAW,
    Confirmation,
    HostBinding,
)
from engram_memory.errors import ErrorCode
from engram_memory.ports import (
    AdmissionDecision,
    AdmissionRequest,
    CandidateRow,
    CaptureConstraints,
    Clock,
    Policy,
    RecordRow,
    Store,
    StoreReader,
    UnitOfWork,
)
from engram_memory.service import MemoryService
from engram_memory.stores.memory import InMemoryStore

__all__ = [
    "ADMISSION",
    "CAPTURE",
    "FORGET",
    "GET",
    "PURPOSE",
    "SEARCH",
    "VALID_FROM_MS",
    "WITHDRAW",
    "Harness",
    "InMemoryCapabilities",
    "PolicyOverride",
    "ServiceFactory",
    "StoreWrapper",
    "capture_args",
    "confirm",
    "content_digest",
    "distinctive_words",
    "fail",
    "inmemory_replace_event_body",
    "inmemory_scope_contents",
    "inmemory_term_traces",
    "make_binding",
    "make_key",
    "ok",
    "with_policy",
]

PURPOSE: Final = "purpose:engram-conformance"
"""The purpose every binding built by :func:`make_binding` carries unless told otherwise."""

VALID_FROM_MS: Final = 1_764_547_200_000
"""2025-12-01T00:00:00.000Z in epoch milliseconds: before :class:`ManualClock`'s default start."""

ServiceFactory = Callable[[Clock], MemoryService]
"""Makes a :class:`MemoryService` over one backend; every call must reuse the same store and vault."""


def make_binding(
    tenant: str = "tenant-a",
    workspace: str = "workspace-1",
    principal: str = "principal-1",
    *,
    purpose_ref: str = PURPOSE,
    tools: Iterable[str] = ALL_TOOLS,
    agent_id: str = "agent-1",
    session: str = "session-1",
    audit_id: str | None = None,
    deadline: datetime | None = None,
    confirmation: Confirmation | None = None,
) -> HostBinding:
    """A host binding for one (tenant, workspace, principal), granting every tool by default."""
    return HostBinding(
        tenant_id=tenant,
        workspace_id=workspace,
        principal=principal,
        agent_id=agent_id,
        session=session,
        purpose_ref=purpose_ref,
        tools=tools,
        audit_id=audit_id,
        deadline=deadline,
        confirmation=confirmation,
    )


def make_key(label: str) -> str:
    """An idempotency key (NFC, at least 16 ASCII bytes) derived from a short label."""
    return f"idempotency-key:{label}"


def content_digest(text: str) -> str:
    """``sha256:`` + hex of the UTF-8 bytes of ``text`` (a cited content digest)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def distinctive_words(seed: str, count: int = 3) -> tuple[str, ...]:
    """Words that occur nowhere else: lower-case ASCII, 14 letters, derived from ``seed``.

    They survive the tokenizer unchanged, so a scan for them finds the content wherever it leaks
    (and finds it in the index once a record is admitted).
    """
    words: list[str] = []
    for index in range(count):
        hexed = hashlib.sha256(f"{seed}\0{index}".encode()).hexdigest()
        words.append("zq" + "".join(chr(ord("g") + int(c, 16) % 20) for c in hexed[:12]))
    return tuple(words)


def capture_args(
    key: str,
    *,
    words: Sequence[str] | None = None,
    purpose_ref: str = PURPOSE,
    type_ref: str = "decision",
    retention: dict[str, Any] | None = None,
    reconciliation: dict[str, Any] | None = None,
    valid_time: dict[str, Any] | None = None,
    attestation: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Valid ``engram_memory_capture`` arguments whose texts carry distinctive words.

    Args:
        key: the idempotency key.
        words: the distinctive words of the content (default: derived from ``key``); the same
            words give the same payload, whatever the key.
        purpose_ref: the payload purpose (must equal the bound purpose).
        type_ref: ``primary_event.type_ref`` (part of the content; a test policy may read it).
        retention: optional ``payload.retention``.
        reconciliation: optional ``payload.reconciliation``.
        valid_time: ``payload.valid_time`` (default: ``{"t": VALID_FROM_MS}``).
        attestation: optional ``evidence.attestation`` (sealed with the candidate, never indexed).
        extra: extra top-level argument properties (to test the closed schema).
    """
    chosen = tuple(words) if words is not None else distinctive_words(key)
    decision_text = "Decision: " + " ".join(chosen) + " is the convention we keep."
    context_text = "Context: observed while testing " + chosen[-1] + " behaviour."
    cited = "source text for " + " ".join(chosen)
    payload: dict[str, Any] = {
        "schema_version": 2,
        "purpose_ref": purpose_ref,
        "valid_time": valid_time if valid_time is not None else {"t": VALID_FROM_MS},
        "components": [
            {"component_id": "c-decision", "kind": "decision", "text": decision_text, "citation_ids": ["cite-1"]},
            {"component_id": "c-context", "kind": "context", "text": context_text, "citation_ids": ["cite-1"]},
        ],
        "primary_component_id": "c-decision",
        "primary_event": {"at": VALID_FROM_MS, "type_ref": type_ref, "citation_id": "cite-1"},
        "citations": [
            {
                "citation_id": "cite-1",
                "source_ref": "doc:conformance/adr-7",
                "locator": {"scheme": "line", "value": "12"},
                "content_digest": content_digest(cited),
            }
        ],
    }
    if retention is not None:
        payload["retention"] = retention
    if reconciliation is not None:
        payload["reconciliation"] = reconciliation
    evidence: dict[str, Any] = {
        "evidence_ref": "evidence:conformance/1",
        "evidence_digest": content_digest("evidence for " + " ".join(chosen)),
        "citation_ids": ["cite-1"],
    }
    if attestation is not None:
        evidence["attestation"] = attestation
    arguments: dict[str, Any] = {"idempotency_key": key, "payload": payload, "evidence": evidence}
    if extra:
        arguments.update(extra)
    return arguments


def confirm(
    service: MemoryService,
    tool: str,
    args: dict[str, Any],
    binding: HostBinding,
    clock: Clock,
    *,
    confirmation_id: str | None = None,
    requested_at: datetime | None = None,
    approved_at: datetime | None = None,
    confirmed_tool: str | None = None,
    target: str | None = None,
    operation_digest: str | None = None,
) -> HostBinding:
    """``binding`` carrying a valid :class:`Confirmation` of this exact call, approved now.

    The confirmation is :meth:`MemoryService.confirmation` of the call. Keyword arguments override
    single fields to build invalid confirmations (another tool, target or digest; a stale request
    or approval; a reused id); with both ``target`` and ``operation_digest`` given, the call's
    arguments are not parsed at all.
    """
    the_id = confirmation_id if confirmation_id is not None else "confirmation-" + uuid.uuid4().hex
    approved = approved_at if approved_at is not None else clock.now()
    requested = requested_at if requested_at is not None else approved - timedelta(seconds=20)
    if target is None or operation_digest is None:
        exact = service.confirmation(
            tool, args, binding, confirmation_id=the_id, requested_at=requested, approved_at=approved
        )
        target = target if target is not None else exact.target
        operation_digest = operation_digest if operation_digest is not None else exact.operation_digest
    confirmation = Confirmation(
        id=the_id,
        tool=confirmed_tool if confirmed_tool is not None else tool,
        target=target,
        operation_digest=operation_digest,
        requested_at=requested,
        approved_at=approved,
    )
    return attrs.evolve(binding, confirmation=confirmation)


def with_policy(service: MemoryService, policy: Policy) -> MemoryService:
    """A service over the same store, vault, clock and ranker, governed by another policy."""
    return MemoryService(
        store=service.store, vault=service.vault, policy=policy, clock=service.clock, ranker=service.ranker
    )


class Harness:
    """Drives one service through ``call_tool`` with confirmations built on the fly.

    ``service`` may be swapped (another policy, a restarted service over the same backend).
    """

    def __init__(self, service: MemoryService, clock: ManualClock) -> None:
        self.service = service
        self.clock = clock

    @property
    def admin(self) -> MemoryAdmin:
        """Host maintenance over the current service."""
        return MemoryAdmin(self.service)

    def use(self, policy: Policy) -> MemoryService:
        """Switch to ``policy`` over the same backend; return the new service."""
        self.service = with_policy(self.service, policy)
        return self.service

    def call(self, tool: str, args: dict[str, Any], binding: HostBinding) -> dict[str, Any]:
        """``call_tool`` as the host would run it."""
        return self.service.call_tool(tool, args, binding)

    def confirmed(self, tool: str, args: dict[str, Any], binding: HostBinding, **overrides: Any) -> dict[str, Any]:
        """``call_tool`` with a fresh confirmation of this exact call (fields may be overridden)."""
        return self.call(tool, args, confirm(self.service, tool, args, binding, self.clock, **overrides))

    def capture(self, binding: HostBinding, key: str, **kwargs: Any) -> dict[str, Any]:
        """Capture :func:`capture_args` (``kwargs`` go to the builder)."""
        return self.call(CAPTURE, capture_args(key, **kwargs), binding)

    def admit(self, binding: HostBinding, candidate_id: str, key: str) -> dict[str, Any]:
        """Request admission of ``candidate_id`` under ``key``."""
        return self.call(ADMISSION, {"candidate_id": candidate_id, "idempotency_key": key}, binding)

    def withdraw(
        self, binding: HostBinding, candidate_id: str, key: str, reason_ref: str = "reason:no-longer-true"
    ) -> dict[str, Any]:
        """Withdraw with a valid confirmation."""
        args = {"candidate_id": candidate_id, "idempotency_key": key, "reason_ref": reason_ref}
        return self.confirmed(WITHDRAW, args, binding)

    def forget(
        self, binding: HostBinding, record_id: str, key: str, reason_ref: str = "reason:erasure-request"
    ) -> dict[str, Any]:
        """Forget with a valid confirmation."""
        args = {"record_id": record_id, "idempotency_key": key, "reason_ref": reason_ref}
        return self.confirmed(FORGET, args, binding)

    def pending(self, binding: HostBinding, key: str, **kwargs: Any) -> str:
        """Capture and return the new candidate id (asserting ``committed_pending``)."""
        value = ok(self.capture(binding, key, **kwargs))
        assert value["status"] == "committed_pending", value
        candidate_id: str = value["candidate_id"]
        return candidate_id

    def accepted(self, binding: HostBinding, key: str, **kwargs: Any) -> tuple[str, str]:
        """Capture and admit under an accepting policy; return ``(candidate_id, record_id)``.

        The current policy must accept (e.g. ``DefaultPolicy(admission="accept")``).
        """
        candidate_id = self.pending(binding, key, **kwargs)
        value = ok(self.admit(binding, candidate_id, key + ":admit"))
        assert value["outcome"]["status"] == "accepted", value
        record_id: str = value["outcome"]["record_id"]
        return candidate_id, record_id

    def high_water(self, binding: HostBinding) -> int:
        """The journal high water of the binding's scope."""
        with self.service.store.read(binding.scope) as reader:
            return reader.high_water()

    def state(self, binding: HostBinding) -> tuple[int, str]:
        """``(high water, state digest)`` of the binding's scope: equal before and after a refusal."""
        digest = self.admin.state_digest(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id)
        return self.high_water(binding), digest


def ok(envelope: dict[str, Any]) -> dict[str, Any]:
    """The value of a success envelope (fails the test on a failure envelope)."""
    assert envelope["ok"] is True, envelope
    assert envelope["output"]["schema_version"] == 1, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def fail(envelope: dict[str, Any], code: ErrorCode, *, retriable: bool | None = None) -> dict[str, Any]:
    """The error of a failure envelope, checked against ``code`` (and ``retriable`` if given)."""
    assert envelope["ok"] is False, envelope
    error: dict[str, Any] = envelope["error"]
    assert error["code"] == code.value, envelope
    if retriable is not None:
        assert error["retriable"] is retriable, envelope
    return error


class StoreWrapper:
    """A :class:`~engram_memory.ports.Store` that hands every call to ``inner``.

    Subclass it and override the calls a test intercepts (a fault before or after a commit, a
    competitor run at a chosen moment).
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        """``inner.read``."""
        return self.inner.read(scope)

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        """``inner.write``."""
        return self.inner.write(scope)

    def scopes(self) -> list[str]:
        """``inner.scopes``."""
        return self.inner.scopes()

    def secret(self) -> bytes:
        """``inner.secret``."""
        return self.inner.secret()

    def close(self) -> None:
        """``inner.close``."""
        self.inner.close()


class PolicyOverride:
    """A policy that behaves like ``base`` except for the methods given as callables.

    Used to model misbehaving hosts: a policy that raises, decides for another digest, issues
    stale decisions, or answers with another version.
    """

    def __init__(
        self,
        base: Policy,
        *,
        policy_version: str | None = None,
        decide: Callable[[AdmissionRequest, datetime], AdmissionDecision] | None = None,
        granted_tools: Callable[[HostBinding], frozenset[str]] | None = None,
        capture_constraints: Callable[[HostBinding], CaptureConstraints] | None = None,
        requires_confirmation: Callable[[str, HostBinding], bool] | None = None,
        trust_class: Callable[[HostBinding], Literal["asserted", "earned", "signed"]] | None = None,
    ) -> None:
        self._base = base
        self._version = policy_version
        self._decide = decide
        self._granted = granted_tools
        self._constraints = capture_constraints
        self._confirm = requires_confirmation
        self._trust = trust_class

    @property
    def policy_id(self) -> str:
        """The base policy's id."""
        return self._base.policy_id

    @property
    def policy_version(self) -> str:
        """The overridden version, else the base policy's."""
        return self._version if self._version is not None else self._base.policy_version

    def granted_tools(self, binding: HostBinding) -> frozenset[str]:
        """Overridden or delegated."""
        return self._granted(binding) if self._granted is not None else self._base.granted_tools(binding)

    def capture_constraints(self, binding: HostBinding) -> CaptureConstraints:
        """Overridden or delegated."""
        if self._constraints is not None:
            return self._constraints(binding)
        return self._base.capture_constraints(binding)

    def requires_confirmation(self, tool: str, binding: HostBinding) -> bool:
        """Overridden or delegated."""
        if self._confirm is not None:
            return self._confirm(tool, binding)
        return self._base.requires_confirmation(tool, binding)

    def redaction_allowlist(self, binding: HostBinding) -> tuple[str, ...] | None:
        """Delegated."""
        return self._base.redaction_allowlist(binding)

    def allows_network(self, binding: HostBinding) -> bool:
        """Delegated."""
        return self._base.allows_network(binding)

    def trust_class(self, binding: HostBinding) -> Literal["asserted", "earned", "signed"]:
        """Overridden or delegated."""
        return self._trust(binding) if self._trust is not None else self._base.trust_class(binding)

    def decide(self, request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        """Overridden or delegated."""
        return self._decide(request, now) if self._decide is not None else self._base.decide(request, now)


def inmemory_scope_contents(store: Store, scope: str) -> bytes:
    """Everything an :class:`InMemoryStore` holds for ``scope``, except sealed nonces and ciphertexts.

    Events, idempotency rows, candidate and record rows (sealed bodies reduced to their key ref),
    tombstones, confirmations, doomed keys and the whole lexical index, as bytes to scan.
    """
    assert isinstance(store, InMemoryStore)
    partition = store.raw_partition(scope)
    parts: list[bytes] = []
    for event in partition.events:
        parts += [str(event.cursor).encode(), event.event_digest.encode(), event.body]
    for (principal, key), row in partition.idempotency.items():
        parts += [principal.encode(), key.encode(), row.intent_digest.encode(), row.response]
    rows: list[CandidateRow | RecordRow] = [*partition.candidates.values(), *partition.records.values()]
    for item in rows:
        key_ref = item.sealed.key_ref if item.sealed is not None else ""
        parts += [repr(attrs.evolve(item, sealed=None)).encode(), key_ref.encode()]
    for members in (partition.tombstones, partition.confirmations, partition.doomed):
        parts += [member.encode() for member in sorted(members)]
    parts += [repr(document).encode() for document in partition.documents.values()]
    parts += [term.encode() for term in partition.occurrences]
    return b"\n".join(parts)


def inmemory_term_traces(store: Store, scope: str, term: str) -> bool:
    """Whether an :class:`InMemoryStore` holds anything of ``term`` for ``scope`` (a posting map, a document's term)."""
    assert isinstance(store, InMemoryStore)
    partition = store.raw_partition(scope)
    return (
        term in partition.occurrences
        or any(term in document.terms for document in partition.documents.values())
        or any(term in terms for terms, _ in partition.buckets.values())
    )


def inmemory_replace_event_body(store: Store, scope: str, cursor: int, body: bytes) -> None:
    """Overwrite the stored body of one event of an :class:`InMemoryStore` (tamper simulation)."""
    assert isinstance(store, InMemoryStore)
    events = store.raw_partition(scope).events
    events[cursor - 1] = attrs.evolve(events[cursor - 1], body=body)


class InMemoryCapabilities:
    """Mix into a ``ServiceConformance`` subclass whose services share one :class:`InMemoryStore`.

    It binds the kit's capability fixtures ``scope_contents``, ``replace_event_body`` and
    ``term_traces``, so the plaintext scans, the tamper test and the index-trace check run instead
    of being skipped.
    """

    @pytest.fixture
    def scope_contents(self) -> Callable[[Store, str], bytes] | None:
        """:func:`inmemory_scope_contents`."""
        return inmemory_scope_contents

    @pytest.fixture
    def replace_event_body(self) -> Callable[[Store, str, int, bytes], None] | None:
        """:func:`inmemory_replace_event_body`."""
        return inmemory_replace_event_body

    @pytest.fixture
    def term_traces(self) -> Callable[[Store, str, str], bool] | None:
        """:func:`inmemory_term_traces`."""
        return inmemory_term_traces
