"""A replay of a gated mutation still needs the confirmation bound to that operation (not a fresh one)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService, ProtocolError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import capture_args, confirm, make_binding

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
