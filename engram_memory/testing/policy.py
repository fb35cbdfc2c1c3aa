"""``PolicyConformance``: the answers every host :class:`~engram_memory.ports.Policy` must give.

Bind it with one fixture::

    class TestMyPolicy(PolicyConformance):
        @pytest.fixture
        def policy(self) -> MyPolicy:
            return MyPolicy(...)

A policy's mistakes show only at run time otherwise: an answer of the wrong shape (a decision
issued at a naive ``datetime.now()``, a trust class outside the three, ``None`` for a boolean)
makes every call that asks it ``POLICY_UNAVAILABLE``, retriable, for ever. The kit asks every
method, for each binding of the ``bindings`` fixture (override it with the bindings your host
makes: the default is two principals of one workspace, one granted every tool and one granted
only search and get), and fails with the method and what is wrong. ``decide`` is asked about a
complete, digested capture (override ``capture_arguments`` with one your policy expects), as
the service builds it, captured by the requester, by another principal, and by an unknown one. It checks shapes and the
service's own rules (a decision for the request's record, by this policy, issued within 300 s
before ``now`` and not after it), not the host's choices. An ``EngramError`` a method raises is
a refusal the contract allows (``RATE_LIMITED``, say), so a binding the policy refuses passes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
import pytest

from engram_memory.canonical import Domain, digest
from engram_memory.context import ALL_TOOLS, HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import AdmissionRequest, Capturer, Policy
from engram_memory.records import build_record, candidate_id_for, complete_payload, trust_binding
from engram_memory.testing.fakes import capture_args, make_binding, make_key
from engram_memory.wire.schemas import output_schema

__all__ = ["PolicyConformance", "admission_request"]

_DECISION_MAX_AGE: Final = timedelta(seconds=300)
_RECORD_FIELDS: Final = frozenset(output_schema("engram_memory_get")["properties"]["record"]["properties"])
_READ_ONLY: Final = frozenset({"engram_memory_search", "engram_memory_get"})


def _answer(policy: Policy, ask: Any) -> Any:
    """The policy's answer through the service's own guard; ``None`` when it refuses with an ``EngramError``.

    A malformed answer or a foreign exception fails the test with the guard's note (the method
    and what is wrong), which the service would only log.
    """
    try:
        return ask(GuardedPolicy(policy))
    except EngramError as error:
        if error.code is ErrorCode.POLICY_UNAVAILABLE:
            notes = "; ".join(getattr(error, "__notes__", [])) or "no detail"
            cause = f" ({type(error.__cause__).__name__}: {error.__cause__})" if error.__cause__ is not None else ""
            pytest.fail(f"the service would answer POLICY_UNAVAILABLE: {notes}{cause}")
        return None  # a refusal with the policy's own code: allowed


def _pointer_tokens(pointer: str) -> list[str] | None:
    """RFC 6901 tokens of ``pointer``; ``None`` when it is malformed."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        return None
    tokens = pointer[1:].split("/")
    if any("~" in token.replace("~0", "").replace("~1", "") for token in tokens):
        return None
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def admission_request(
    binding: HostBinding, arguments: dict[str, Any], *, capturer: Capturer | None
) -> AdmissionRequest:
    """The request the service would hand ``decide`` for a capture of ``arguments`` asked for by ``binding``.

    The payload is completed and digested, and the record digest derived, as the service does;
    the candidate id is the one the capture gets (under the capturer's principal, or the
    requester's when the capturer is unknown). Trust and authorization are stand-ins: a policy
    sees only their effect on ``record_digest``.
    """
    completed = complete_payload(arguments["payload"], binding.scope)
    payload_digest = digest(Domain.PAYLOAD, completed)
    at = "2026-06-01T12:00:00.000Z"
    trust = trust_binding(
        trust_class="asserted",
        evidence_digest=arguments["evidence"]["evidence_digest"],
        policy_id="policy-kit",
        policy_version="1",
        issued_at=at,
        payload_digest=payload_digest,
    )
    record = build_record(
        completed=completed,
        payload_digest=payload_digest,
        recorded_at=at,
        recorded_cursor="1",
        authorization_receipt_digest="sha256:" + "a" * 64,
        trust=trust,
    )
    principal = binding.principal if capturer is None else capturer.principal
    return AdmissionRequest(
        candidate_id=candidate_id_for(binding.scope, principal, arguments["idempotency_key"]),
        scope=binding.scope,
        record_digest=record["record_digest"],
        payload_digest=payload_digest,
        payload=completed,
        evidence=arguments["evidence"],
        principal=binding.principal,
        agent_id=binding.agent_id,
        session=binding.session,
        capturer=capturer,
    )


class PolicyConformance:
    """Bind ``policy``; override ``bindings`` with the bindings your host makes."""

    @pytest.fixture
    def policy(self) -> Policy:
        """The policy under test (override)."""
        raise NotImplementedError("policy test classes must override the policy fixture")

    @pytest.fixture
    def bindings(self) -> list[HostBinding]:
        """The bindings to ask about (default: two principals of one workspace, all tools and read-only)."""
        writer = make_binding("tenant-a", "workspace-1", "principal-1")
        reader = attrs.evolve(make_binding("tenant-a", "workspace-1", "principal-2"), tools=_READ_ONLY)
        return [writer, reader]

    @pytest.fixture
    def capture_arguments(self) -> dict[str, Any]:
        """The capture whose admission ``decide`` is asked about (override with one your policy expects).

        Valid ``engram_memory_capture`` arguments (default: :func:`~engram_memory.testing.capture_args`).
        """
        return capture_args(make_key("policy-kit"))

    def test_the_id_and_version_are_non_empty_strings_that_do_not_change(self, policy: Policy) -> None:
        """Candidates keep them; a version that changed between calls would make decisions ``POLICY_STALE``."""
        first = (_answer(policy, lambda p: p.policy_id), _answer(policy, lambda p: p.policy_version))
        again = (_answer(policy, lambda p: p.policy_id), _answer(policy, lambda p: p.policy_version))
        assert first == again, f"policy_id and policy_version changed between two reads: {first} then {again}"

    def test_granted_tools_are_tool_names(self, policy: Policy, bindings: list[HostBinding]) -> None:
        """Names of the six tools; the service also keeps only those the binding grants."""
        for binding in bindings:
            granted = _answer(policy, lambda p, b=binding: p.granted_tools(b))
            if granted is not None:
                unknown = sorted(granted - ALL_TOOLS)
                assert not unknown, f"granted_tools names tools that do not exist: {unknown}"

    def test_capture_constraints_are_well_formed(self, policy: Policy, bindings: list[HostBinding]) -> None:
        for binding in bindings:
            constraints = _answer(policy, lambda p, b=binding: p.capture_constraints(b))
            if constraints is not None and constraints.max_retention is not None:
                assert constraints.max_retention > timedelta(0), (
                    f"max_retention {constraints.max_retention} refuses every capture that gives an expiry"
                )

    def test_requires_confirmation_answers_a_bool_for_every_tool(
        self, policy: Policy, bindings: list[HostBinding]
    ) -> None:
        for binding in bindings:
            for tool in sorted(ALL_TOOLS):
                _answer(policy, lambda p, t=tool, b=binding: p.requires_confirmation(t, b))

    def test_the_trust_class_is_one_of_the_three(self, policy: Policy, bindings: list[HostBinding]) -> None:
        for binding in bindings:
            _answer(policy, lambda p, b=binding: p.trust_class(b))

    def test_allows_network_answers_a_bool(self, policy: Policy, bindings: list[HostBinding]) -> None:
        for binding in bindings:
            _answer(policy, lambda p, b=binding: p.allows_network(b))

    def test_the_redaction_allowlist_names_record_fields(self, policy: Policy, bindings: list[HostBinding]) -> None:
        """Pointers the redaction ignores (malformed, or under no record field) hide what they meant to show."""
        for binding in bindings:
            allowlist = _answer(policy, lambda p, b=binding: p.redaction_allowlist(b))
            for pointer in allowlist or ():
                tokens = _pointer_tokens(pointer)
                assert tokens is not None, f"redaction_allowlist holds a malformed JSON pointer: {pointer!r}"
                assert not tokens or tokens[0] in _RECORD_FIELDS, (
                    f"redaction_allowlist pointer {pointer!r} names no record field "
                    f"({', '.join(sorted(_RECORD_FIELDS))})"
                )

    @pytest.mark.parametrize("capturer", ["own", "another principal's", "unknown"])
    def test_a_decision_is_for_the_request_by_this_policy_issued_now(
        self, policy: Policy, bindings: list[HostBinding], capture_arguments: dict[str, Any], capturer: str
    ) -> None:
        """For the request's ``record_digest``, by this ``policy_id`` and ``policy_version``, issued now."""
        policy_id, version = _answer(policy, lambda p: p.policy_id), _answer(policy, lambda p: p.policy_version)
        for binding in bindings:
            captured_by = {
                "own": Capturer(principal=binding.principal, agent_id=binding.agent_id, session=binding.session),
                "another principal's": Capturer(principal=binding.principal + "-other", agent_id="a", session="s"),
                "unknown": None,
            }[capturer]
            request = admission_request(binding, capture_arguments, capturer=captured_by)
            now = datetime.now(UTC)  # as the service reads its clock: the host's time, not a fixed one
            decision = _answer(policy, lambda p, r=request, n=now: p.decide(r, n))
            decided_by = max(now, datetime.now(UTC))
            if decision is None:
                continue
            assert decision.record_digest == request.record_digest, "the decision names another record_digest"
            assert (decision.policy_id, decision.policy_version) == (policy_id, version), (
                f"the decision names policy {decision.policy_id!r} version {decision.policy_version!r}, "
                f"not the policy's own {policy_id!r} version {version!r} (POLICY_STALE)"
            )
            assert now - _DECISION_MAX_AGE <= decision.issued_at <= decided_by, (
                f"issued_at {decision.issued_at.isoformat()} is not between 300 s before the call's now "
                f"{now.isoformat()} and the clock's reading once decide returned (POLICY_STALE)"
            )
