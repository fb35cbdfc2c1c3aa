"""A replay of a gated mutation still needs the confirmation bound to that operation (not a fresh one)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService, ProtocolError
from engram_memory.errors import StoreUnavailableError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PolicyOverride, capture_args, confirm, make_binding
from engram_memory.wire import ARGS_BY_TOOL, parse_args

WITHDRAW = "engram_memory_withdraw"


@pytest.fixture(name="setup")
def _setup() -> tuple[MemoryService, ManualClock, dict[str, Any], Any]:
    clock = ManualClock()
    service = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy(), clock=clock)
    binding = make_binding()
    captured = service.call_tool("engram_memory_capture", capture_args("replay-gate-capture-01"), binding)
    withdraw = {
        "candidate_id": captured["output"]["value"]["candidate_id"],
        "idempotency_key": "replay-gate-withdraw-01",
        "reason_ref": "superseded",
    }
    approved = confirm(service, WITHDRAW, withdraw, binding, clock)
    first = service.call_tool(WITHDRAW, withdraw, approved)
    assert first["ok"] is True
    assert first["output"]["value"]["replayed"] is False
    return service, clock, withdraw, approved


def test_a_replay_with_the_consumed_confirmation_answers_the_original(setup: Any) -> None:
    service, clock, withdraw, approved = setup
    clock.advance(timedelta(minutes=10))  # long after the 30 s execution window
    again = service.call_tool(WITHDRAW, withdraw, approved)
    assert again["ok"] is True
    assert again["output"]["value"]["replayed"] is True


def test_a_replay_without_confirmation_is_a_protocol_error(setup: Any) -> None:
    service, _clock, withdraw, approved = setup
    with pytest.raises(ProtocolError) as caught:
        service.call_tool(WITHDRAW, withdraw, attrs.evolve(approved, confirmation=None))
    assert int(caught.value.code) == -32603


def test_a_replay_with_a_confirmation_of_another_operation_fails_the_gate(setup: Any) -> None:
    service, clock, withdraw, approved = setup
    other = confirm(service, WITHDRAW, {**withdraw, "reason_ref": "another-reason"}, approved, clock)
    refused = service.call_tool(WITHDRAW, withdraw, other)
    assert refused["ok"] is False
    assert refused["error"] == {
        "code": "gate_failed",
        "message": "a confirmation or policy gate was not met",
        "retriable": False,
    }


FORGET = "engram_memory_forget"
CAPTURE_KEY = "replay-gate-capture-01"
FORGET_ARGS = {"record_id": "mem_" + "a" * 26, "idempotency_key": "replay-gate-forget-01", "reason_ref": "erasure"}


def _unconfirmed_calls(withdraw: dict[str, Any], clock: ManualClock) -> list[tuple[str, str, dict[str, Any], Any]]:
    """(label, tool, arguments, deadline): calls that each had a memory answer when the confirmation came last."""
    past = clock.now() - timedelta(seconds=1)
    return [
        (
            "withdraw, key bound to the capture: DIGEST_CONFLICT",
            WITHDRAW,
            {**withdraw, "idempotency_key": CAPTURE_KEY},
            None,
        ),
        (
            "forget, key bound to the capture: DIGEST_CONFLICT",
            FORGET,
            {**FORGET_ARGS, "idempotency_key": CAPTURE_KEY},
            None,
        ),
        ("withdraw, malformed: INVALID_SCHEMA", WITHDRAW, {**withdraw, "reason_ref": 7}, None),
        ("forget, unknown argument: INVALID_SCHEMA", FORGET, {**FORGET_ARGS, "confirmed": True}, None),
        ("withdraw, deadline passed: DEADLINE_EXCEEDED (retriable)", WITHDRAW, withdraw, past),
        ("forget, deadline passed: DEADLINE_EXCEEDED (retriable)", FORGET, FORGET_ARGS, past),
    ]


def test_withdraw_and_forget_without_confirmation_are_refused_before_anything_else(setup: Any) -> None:
    """They always need one: -32603 before the arguments, the deadline or the stored keys are looked at."""
    service, clock, withdraw, approved = setup
    for label, tool, arguments, deadline in _unconfirmed_calls(withdraw, clock):
        unconfirmed = attrs.evolve(approved, confirmation=None, deadline=deadline)
        with pytest.raises(ProtocolError) as caught:
            service.call_tool(tool, arguments, unconfirmed)
        assert int(caught.value.code) == -32603, label
        if "INVALID_SCHEMA" in label:
            continue
        typed = parse_args(ARGS_BY_TOOL[tool], arguments)
        call = service.withdraw if tool == WITHDRAW else service.forget
        with pytest.raises(ProtocolError) as caught:
            call(unconfirmed, typed)
        assert int(caught.value.code) == -32603, label


def test_a_policy_gated_capture_without_confirmation_learns_nothing_of_its_key() -> None:
    """-32603 before its arguments, deadline or key are looked at; the policy is asked once a call."""
    asked: list[str] = []

    def gate_everything(tool: str, _binding: Any) -> bool:
        asked.append(tool)
        return True

    policy = PolicyOverride(DefaultPolicy(), requires_confirmation=gate_everything)
    clock = ManualClock()
    service = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=policy, clock=clock)
    binding = make_binding()
    first = capture_args("replay-gate-capture-02")
    assert service.call_tool(
        "engram_memory_capture", first, confirm(service, "engram_memory_capture", first, binding, clock)
    )["ok"]
    other = capture_args("replay-gate-capture-02", words=["other", "content", "same", "key"])
    late = attrs.evolve(binding, deadline=clock.now() - timedelta(seconds=1))
    unconfirmed = [
        ("key bound to another capture: DIGEST_CONFLICT", other, binding),
        ("malformed: INVALID_SCHEMA", {**other, "confirmed": True}, binding),
        ("deadline passed: DEADLINE_EXCEEDED", other, late),
    ]
    for label, arguments, unconfirmed_binding in unconfirmed:
        asked.clear()
        with pytest.raises(ProtocolError) as caught:
            service.call_tool("engram_memory_capture", arguments, unconfirmed_binding)
        assert int(caught.value.code) == -32603, label
        assert asked == ["engram_memory_capture"], label
    confirmed = confirm(service, "engram_memory_capture", other, binding, clock)
    asked.clear()
    conflict = service.call_tool("engram_memory_capture", other, confirmed)
    assert conflict["error"]["code"] == "DIGEST_CONFLICT"  # a confirmed call is answered as before
    assert asked == ["engram_memory_capture"]


def test_a_confirmation_for_another_operation_learns_nothing_of_the_key(setup: Any) -> None:
    """gate_failed before the key is looked up: a bound key and a fresh one get the same answer."""
    service, clock, withdraw, approved = setup
    stale = confirm(service, WITHDRAW, {**withdraw, "reason_ref": "another-reason"}, approved, clock)
    for key in (CAPTURE_KEY, "replay-gate-withdraw-fresh"):  # bound to the capture (was DIGEST_CONFLICT); unused
        refused = service.call_tool(WITHDRAW, {**withdraw, "idempotency_key": key}, stale)
        assert refused["error"]["code"] == "gate_failed", key


def test_the_write_path_gates_withdraw_and_forget_whatever_it_is_told(setup: Any) -> None:
    """A safeguard below the service: ``gated=False`` does not open an always-gated tool."""
    service, _clock, withdraw, approved = setup
    unconfirmed = attrs.evolve(approved, confirmation=None)
    typed = parse_args(ARGS_BY_TOOL[WITHDRAW], {**withdraw, "idempotency_key": "replay-gate-withdraw-02"})
    with pytest.raises(ProtocolError) as caught:
        service._write.withdraw(unconfirmed, typed, gated=False)
    assert int(caught.value.code) == -32603


def test_a_store_failing_while_the_gate_reads_is_answered_as_such(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's own read failing is the store's error (retriable), not a refusal of the confirmation."""
    service, clock, withdraw, approved = setup
    fresh = {**withdraw, "idempotency_key": "replay-gate-withdraw-03"}
    confirmed = confirm(service, WITHDRAW, fresh, approved, clock)

    def unavailable(_reader: object, _confirmation_id: str) -> bool:
        raise StoreUnavailableError("injected: the store went away")

    monkeypatch.setattr(type(_reader_of(service)), "confirmation_used", unavailable)
    refused = service.call_tool(WITHDRAW, fresh, confirmed)
    assert refused["error"] == {
        "code": "STORE_UNAVAILABLE",
        "message": "the memory store is unavailable",
        "retriable": True,
    }


def _reader_of(service: MemoryService) -> object:
    with service.store.read(make_binding().scope) as reader:
        return reader
