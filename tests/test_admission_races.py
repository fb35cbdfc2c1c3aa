"""A mutation re-checks, inside its unit of work, what may have changed since its first checks:
content forgotten while the policy (or the host) decided is not accepted (D7), and a confirmation
is still within its window at the commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from engram_memory import DefaultPolicy, EngramError, ErrorCode, HostBinding, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PolicyOverride, capture_args, confirm, make_binding

WORDS = ("zqalphaalphaalpha", "zqbetabetabeta", "zqgammagammag")


def _value(service: MemoryService, binding: HostBinding, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The value of a call that must succeed."""
    envelope = service.call_tool(tool, args, binding)
    assert envelope["ok"] is True, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


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
    call = partial(_value, service, binding)

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


class _StoreWithHooks(InMemoryStore):
    """An in-memory store that runs the queued hooks before its next unit of work opens."""

    def __init__(self) -> None:
        super().__init__()
        self.before_next_write: list[Callable[[], object]] = []

    @contextmanager
    def write(self, scope: str) -> Iterator[Any]:  # the base class's own unit type
        while self.before_next_write:
            self.before_next_write.pop()()
        with super().write(scope) as unit:
            yield unit


def test_content_forgotten_while_the_host_decides_is_not_readmitted_unasked() -> None:
    """The host reviewed a candidate whose content was not forgotten; a forget of the same content
    commits before the decision's unit: the accept is ``gate_failed`` and writes nothing, unless the
    host said ``readmit_forgotten``."""
    clock = ManualClock()
    store = _StoreWithHooks()
    service = MemoryService(
        store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    binding = make_binding()
    admin = MemoryAdmin(service)
    call = partial(_value, service, binding)

    first = call("engram_memory_capture", capture_args("host-race-capture-01", words=WORDS))["candidate_id"]
    admission = {"candidate_id": first, "idempotency_key": "host-race-admission-1"}
    record_id = call("engram_memory_request_admission", admission)["outcome"]["record_id"]
    same_content = call("engram_memory_capture", capture_args("host-race-capture-02", words=WORDS))["candidate_id"]
    reviewed = admin.pending_candidate(tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=same_content)
    assert reviewed is not None
    assert reviewed.forgotten is False  # what the reviewer saw
    forget = {"record_id": record_id, "idempotency_key": "host-race-forget-0001", "reason_ref": "erasure"}
    store.before_next_write.append(
        lambda: _value(
            service, confirm(service, "engram_memory_forget", forget, binding, clock), "engram_memory_forget", forget
        )
    )

    with pytest.raises(EngramError) as refused:
        admin.adjudicate(tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=same_content, decision="accept")

    assert refused.value.code is ErrorCode.GATE_FAILED
    assert not store.before_next_write  # the forget did commit between the review and the decision
    with store.read(binding.scope) as reader:
        candidate = reader.candidate(same_content)
        assert candidate is not None
        assert candidate.state == "pending"
        assert [row.state for row in reader.records()] == ["tombstoned"]
        assert reader.high_water() == 4  # a capture, its admission, a capture, the forget; no decision
    accepted = admin.adjudicate(
        tenant_id="tenant-a",
        workspace_id="workspace-1",
        candidate_id=same_content,
        decision="accept",
        readmit_forgotten=True,
    )
    assert accepted.outcome.status == "accepted"
    assert accepted.outcome.cursor == "5"


def test_readmit_forgotten_must_be_a_bool() -> None:
    service = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy())
    with pytest.raises(TypeError, match="readmit_forgotten must be a bool"):
        MemoryAdmin(service).adjudicate(
            tenant_id="t",
            workspace_id="w",
            candidate_id="cand_x",
            decision="accept",
            readmit_forgotten="yes",  # type: ignore[arg-type]
        )


def test_a_clock_stepping_back_between_the_gate_and_the_commit_fails_the_confirmation() -> None:
    """The gate found the approval in its window; the unit's re-check finds the clock now before the
    approval (it stepped back meanwhile): ``gate_failed``, the confirmation unused, nothing written."""
    clock = ManualClock()
    store = _StoreWithHooks()
    service = MemoryService(
        store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    binding = make_binding()
    candidate = _value(service, binding, "engram_memory_capture", capture_args("clock-back-capture-1"))["candidate_id"]
    withdraw = {"candidate_id": candidate, "idempotency_key": "clock-back-withdraw-1", "reason_ref": "changed"}
    approved = confirm(service, "engram_memory_withdraw", withdraw, binding, clock)
    confirmation = approved.confirmation
    assert confirmation is not None
    clock.advance(timedelta(seconds=5))  # the gate runs 5 s after the approval
    store.before_next_write.append(lambda: clock.set(confirmation.approved_at - timedelta(seconds=1)))

    refused = service.call_tool("engram_memory_withdraw", withdraw, approved)

    assert refused["ok"] is False
    assert refused["error"]["code"] == "gate_failed"
    assert not store.before_next_write  # the clock did step back between the gate and the unit
    with store.read(binding.scope) as reader:
        assert reader.high_water() == 1  # the capture only
        assert not reader.confirmation_used(confirmation.id)
        row = reader.candidate(candidate)
        assert row is not None
        assert row.state == "pending"


class _RacingVault(InMemoryKeyVault):
    """Runs ``before_open`` (once) just before the first ``open``: an identical call that commits first."""

    def __init__(self) -> None:
        super().__init__()
        self.before_open: Callable[[], None] | None = None

    def open(self, envelope: Any, context: str) -> bytes:
        hook, self.before_open = self.before_open, None
        if hook is not None:
            hook()
        return super().open(envelope, context)


@pytest.mark.parametrize("admission", ["reject", "accept"])
def test_an_identical_admission_that_decides_first_is_replayed_when_its_decision_took_the_key(
    admission: str, tmp_path: Any
) -> None:
    """Same key, same candidate, racing: the loser's view saw the candidate pending, but its key is gone.

    The winner's decision destroyed the key (at once for a reject, in a batch for an accept): the
    loser answers the winner's response as a replay, not ``ALREADY_TERMINAL`` or ``STORE_UNAVAILABLE``.
    (SQLite: a write may run inside a read view of the same thread, as another thread's would.)
    """
    from engram_memory.stores.sqlite import SQLiteStore  # noqa: PLC0415 - only this test needs the file store

    vault = _RacingVault()
    store = SQLiteStore(tmp_path / "race.db")
    policy = DefaultPolicy(admission="reject" if admission == "reject" else "accept")
    service = MemoryService(store=store, vault=vault, policy=policy, clock=ManualClock())
    binding = make_binding()
    try:
        captured = _value(service, binding, "engram_memory_capture", capture_args("race-identical-capture"))
        args = {"candidate_id": captured["candidate_id"], "idempotency_key": "race-identical-admission"}
        winner: list[dict[str, Any]] = []

        def identical_call_wins() -> None:
            winner.append(_value(service, binding, "engram_memory_request_admission", args))
            if admission == "accept":  # the batch that destroys the accepted candidate's key
                MemoryAdmin(service).reap_keys()

        vault.before_open = identical_call_wins
        loser = _value(service, binding, "engram_memory_request_admission", args)
        assert winner[0]["replayed"] is False
        assert loser == {**winner[0], "replayed": True}
        assert loser["outcome"]["status"] == ("rejected" if admission == "reject" else "accepted")
    finally:
        service.close()
