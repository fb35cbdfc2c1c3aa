"""request_admission re-checks, inside its unit of work, what a concurrent write may have changed
since its snapshot: content forgotten while the policy decided is not accepted (D7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PolicyOverride, capture_args, confirm, make_binding

WORDS = ("zqalphaalphaalpha", "zqbetabetabeta", "zqgammagammag")


def test_content_forgotten_while_the_policy_decides_stays_pending_adjudication() -> None:
    clock = ManualClock()
    base = DefaultPolicy(admission="accept")
    during_decision: list[Any] = []

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        while during_decision:  # a forget commits while the (slow, remote) policy decides
            during_decision.pop()()
        return base.decide(request, now)

    store = InMemoryStore()
    service = MemoryService(
        store=store, vault=InMemoryKeyVault(), policy=PolicyOverride(base, decide=decide), clock=clock
    )
    binding = make_binding()

    def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        envelope = service.call_tool(tool, args, binding)
        assert envelope["ok"] is True, envelope
        value: dict[str, Any] = envelope["output"]["value"]
        return value

    first = call("engram_memory_capture", capture_args("race-capture-first-01", words=WORDS))["candidate_id"]
    admission = {"candidate_id": first, "idempotency_key": "race-admission-first"}
    record_id = call("engram_memory_request_admission", admission)["outcome"]["record_id"]
    same_content = call("engram_memory_capture", capture_args("race-capture-again-01", words=WORDS))["candidate_id"]
    forget = {"record_id": record_id, "idempotency_key": "race-forget-first-01", "reason_ref": "erasure"}

    def forget_first() -> None:
        done = service.call_tool(
            "engram_memory_forget", forget, confirm(service, "engram_memory_forget", forget, binding, clock)
        )
        assert done["output"]["value"]["receipt"]["to_state"] == "tombstoned"

    during_decision.append(forget_first)
    outcome = call(
        "engram_memory_request_admission", {"candidate_id": same_content, "idempotency_key": "race-admission-again"}
    )["outcome"]

    assert outcome["status"] == "pending_adjudication"
    assert "record_id" not in outcome
    assert not during_decision  # the forget did run during the decision
    with store.read(binding.scope) as reader:
        candidate = reader.candidate(same_content)
        assert candidate is not None
        assert candidate.state == "pending"
        assert [row.state for row in reader.records()] == ["tombstoned"]
        assert list(reader.indexed_ids()) == []
