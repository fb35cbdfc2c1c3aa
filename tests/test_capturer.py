"""Who captured a candidate reaches the policy and the host's reviewer, sealed, never in clear.

Every principal of a workspace can name any of its candidates (candidate ids derive from the
scope, the principal and the idempotency key), so the policy is told the capturer beside the
requester, and ``DefaultPolicy(admission="accept")`` holds a request for another principal's
draft for the host instead of admitting it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

import attrs
import pytest

from engram_memory import DefaultPolicy, ErrorCode, MemoryAdmin
from engram_memory.context import ADMISSION, GET, HostBinding
from engram_memory.ports import AdmissionDecision, AdmissionRequest, Capturer
from engram_memory.records import candidate_context
from engram_memory.testing import PolicyOverride
from engram_memory.write_path import capturer_of
from tests.read_fixtures import DocSpec, ReadHarness, fail, idempotency_key, make_binding, ok

ALICE: Final = make_binding(principal="alice")
BOB: Final = attrs.evolve(make_binding(principal="bob"), agent_id="agent-bob", session="session-bob")
ACCEPT: Final = DefaultPolicy(admission="accept")


def _admit(harness: ReadHarness, binding: HostBinding, candidate_id: str, label: str) -> dict[str, Any]:
    args = {"candidate_id": candidate_id, "idempotency_key": idempotency_key(label)}
    outcome: dict[str, Any] = ok(harness.call(ADMISSION, args, binding))["outcome"]
    return outcome


def _recording(requests: list[AdmissionRequest]) -> PolicyOverride:
    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        requests.append(request)
        return ACCEPT.decide(request, now)

    return PolicyOverride(ACCEPT, decide=decide)


def test_the_policy_is_told_the_capturer_beside_the_requester() -> None:
    requests: list[AdmissionRequest] = []
    harness = ReadHarness(policy=_recording(requests))
    candidate_id, _ = harness.pending(ALICE, DocSpec(key="capturer-told-1", primary="orbit"))

    _admit(harness, BOB, candidate_id, "capturer-told-1:bob")

    (request,) = requests
    assert request.capturer == Capturer(principal="alice", agent_id="agent-1", session="session-1")
    assert (request.principal, request.agent_id, request.session) == ("bob", "agent-bob", "session-bob")


def test_the_default_policy_holds_a_request_for_another_principals_capture() -> None:
    harness = ReadHarness(policy=ACCEPT)
    candidate_id, record_id = harness.pending(ALICE, DocSpec(key="capturer-held-1", primary="orbit"))

    held = _admit(harness, BOB, candidate_id, "capturer-held-1:bob")
    assert held["status"] == "pending_adjudication"
    fail(harness.call(GET, {"record_id": record_id, "purpose_ref": ALICE.purpose_ref}, BOB), ErrorCode.NOT_FOUND)

    accepted = _admit(harness, ALICE, candidate_id, "capturer-held-1:alice")  # the capturer's own request
    assert (accepted["status"], accepted["record_id"]) == ("accepted", record_id)


def test_accept_any_requester_admits_another_principals_capture() -> None:
    harness = ReadHarness(policy=DefaultPolicy(admission="accept", accept_any_requester=True))
    candidate_id, record_id = harness.pending(ALICE, DocSpec(key="capturer-any-1", primary="orbit"))

    accepted = _admit(harness, BOB, candidate_id, "capturer-any-1:bob")
    assert (accepted["status"], accepted["record_id"]) == ("accepted", record_id)


def _request(capturer: Capturer | None, principal: str) -> AdmissionRequest:
    return AdmissionRequest(
        candidate_id="candidate_" + "0" * 64,
        scope="sha256:" + "1" * 64,
        record_digest="sha256:" + "2" * 64,
        payload_digest="sha256:" + "3" * 64,
        payload={},
        evidence={},
        principal=principal,
        agent_id="agent-1",
        session="session-1",
        capturer=capturer,
    )


@pytest.mark.parametrize(
    ("policy", "capturer", "decision"),
    [
        (ACCEPT, Capturer(principal="alice", agent_id="other-agent", session="other"), "accept"),
        (ACCEPT, Capturer(principal="bob", agent_id="agent-1", session="session-1"), "adjudication_required"),
        (ACCEPT, None, "adjudication_required"),
        (DefaultPolicy(admission="accept", accept_any_requester=True), None, "accept"),
        (DefaultPolicy(admission="reject"), Capturer(principal="bob", agent_id="a", session="s"), "reject"),
        (DefaultPolicy(), Capturer(principal="alice", agent_id="a", session="s"), "adjudication_required"),
    ],
    ids=["own, other agent", "another principal's", "unknown capturer", "any requester", "reject", "adjudicate"],
)
def test_default_policy_decisions_by_capturer(policy: DefaultPolicy, capturer: Capturer | None, decision: str) -> None:
    decided = policy.decide(_request(capturer, "alice"), datetime.fromisoformat("2026-01-01T00:00:00+00:00"))
    assert decided.decision == decision


def test_accept_any_requester_must_be_a_bool() -> None:
    with pytest.raises(TypeError):
        DefaultPolicy(accept_any_requester=1)  # type: ignore[arg-type]


def test_the_capturer_is_sealed_and_shown_to_the_reviewer() -> None:
    harness = ReadHarness(policy=DefaultPolicy())
    candidate_id, _ = harness.pending(BOB, DocSpec(key="capturer-sealed-1", primary="orbit"))
    with harness.store.read(BOB.scope) as reader:
        row = reader.candidate(candidate_id)
    assert row is not None
    assert row.sealed is not None
    assert b"session-bob" not in row.sealed.ciphertext
    envelope = json.loads(harness.vault.open(row.sealed, candidate_context(BOB.scope, candidate_id)))
    assert envelope["schema_version"] == 2
    assert envelope["captured_by"] == {"principal": "bob", "agent_id": "agent-bob", "session": "session-bob"}

    (listed,) = MemoryAdmin(harness.service).pending_candidates(tenant_id=BOB.tenant_id, workspace_id=BOB.workspace_id)
    assert listed.captured_by == Capturer(principal="bob", agent_id="agent-bob", session="session-bob")


def test_a_candidate_sealed_without_its_capturer_is_unknown_and_held() -> None:
    """A pre-release's envelope (schema 1) has no ``captured_by``: the capturer is ``None``, held by default."""
    harness = ReadHarness(policy=ACCEPT)
    candidate_id, _ = harness.pending(ALICE, DocSpec(key="capturer-legacy-1", primary="orbit"))
    context = candidate_context(ALICE.scope, candidate_id)
    with harness.store.write(ALICE.scope) as unit:
        row = unit.candidate(candidate_id)
        assert row is not None
        assert row.sealed is not None
        envelope = json.loads(harness.vault.open(row.sealed, context))
        legacy = {**{k: v for k, v in envelope.items() if k != "captured_by"}, "schema_version": 1}
        unit.put_candidate(attrs.evolve(row, sealed=harness.vault.seal(context, json.dumps(legacy).encode())))
    assert capturer_of(legacy) is None

    (listed,) = MemoryAdmin(harness.service).pending_candidates(
        tenant_id=ALICE.tenant_id, workspace_id=ALICE.workspace_id
    )
    assert listed.captured_by is None
    assert _admit(harness, ALICE, candidate_id, "capturer-legacy-1:alice")["status"] == "pending_adjudication"
