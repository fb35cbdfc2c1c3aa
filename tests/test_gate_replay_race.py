"""The same gated call sent twice with one approval: the slower one is a replay, never ``gate_failed``.

A concurrent call with the same key and confirmation that commits between the slower call's
idempotency lookup and its confirmation gate has consumed the approval. The contract makes the
slower call a replay (same key, same intent), and a replay needs the approval bound to the
operation, not an unused one. The store wrapper below runs the faster call at exactly that
moment, on one thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService, connect
from engram_memory.ports import Store, StoreReader
from engram_memory.testing import capture_args, confirm, make_binding, ok
from engram_memory.testing.fakes import StoreWrapper

CAPTURE = "engram_memory_capture"
ADMISSION = "engram_memory_request_admission"


class _CompetitorBeforeGate(StoreWrapper):
    """Runs ``competitor`` just before the second read view (the gate's) is opened, once."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.reads = 0
        self.competitor: Any = None

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        self.reads += 1
        if self.reads == 2 and self.competitor is not None:  # the first read was the idempotency lookup
            self.competitor()
        return self.inner.read(scope)


@pytest.fixture(params=["memory", "sqlite"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'memory.db'}"
    service = connect(url, policy=DefaultPolicy(admission="accept"), clock=ManualClock())
    yield service
    service.close()


def _target(base: MemoryService, tool: str) -> dict[str, Any]:
    binding = make_binding("t", "w", "alice")
    captured = ok(base.call_tool(CAPTURE, capture_args("idempotency-key:gate-capture"), binding))
    if tool == "engram_memory_withdraw":
        return {"candidate_id": captured["candidate_id"]}
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": "idempotency-key:gate-admission"}
    return {"record_id": ok(base.call_tool(ADMISSION, admission, binding))["outcome"]["record_id"]}


@pytest.mark.parametrize("tool", ["engram_memory_withdraw", "engram_memory_forget"])
def test_the_slower_of_two_identical_gated_calls_answers_the_faster_ones_response(
    base: MemoryService, tool: str
) -> None:
    binding = make_binding("t", "w", "alice")
    args = {**_target(base, tool), "idempotency_key": "idempotency-key:gate-shared", "reason_ref": "r"}
    assert isinstance(base.clock, ManualClock)
    approved = confirm(base, tool, args, binding, base.clock, confirmation_id="approval-1")  # one approval
    wrapper = _CompetitorBeforeGate(base.store)
    slower = MemoryService(store=wrapper, vault=base.vault, policy=base.policy, clock=base.clock)
    faster: dict[str, Any] = {}
    wrapper.competitor = lambda: faster.update(base.call_tool(tool, args, approved))
    answer = ok(slower.call_tool(tool, args, approved))
    first = ok(faster)
    assert first["replayed"] is False
    assert answer == {**first, "replayed": True}
    assert wrapper.reads >= 3  # the gate refused, and the key was looked up again


def test_a_mismatched_confirmation_stays_refused_even_when_the_key_replays(base: MemoryService) -> None:
    tool = "engram_memory_withdraw"
    binding = make_binding("t", "w", "alice")
    args = {**_target(base, tool), "idempotency_key": "idempotency-key:gate-shared", "reason_ref": "r"}
    assert isinstance(base.clock, ManualClock)
    approved = confirm(base, tool, args, binding, base.clock, confirmation_id="approval-1")
    ok(base.call_tool(tool, args, approved))
    assert approved.confirmation is not None
    other = attrs.evolve(approved, confirmation=attrs.evolve(approved.confirmation, target="another-target"))
    refused = base.call_tool(tool, args, other)
    assert refused["error"]["code"] == "gate_failed"
    replay = ok(base.call_tool(tool, args, approved))
    assert replay["replayed"] is True


def test_a_used_approval_for_a_new_key_is_still_gate_failed(base: MemoryService) -> None:
    tool = "engram_memory_withdraw"
    binding = make_binding("t", "w", "alice")
    target = _target(base, tool)
    args = {**target, "idempotency_key": "idempotency-key:gate-shared", "reason_ref": "r"}
    assert isinstance(base.clock, ManualClock)
    approved = confirm(base, tool, args, binding, base.clock, confirmation_id="approval-1")
    ok(base.call_tool(tool, args, approved))
    again = {**args, "idempotency_key": "idempotency-key:gate-another"}
    reused = confirm(base, tool, again, binding, base.clock, confirmation_id="approval-1")
    refused = base.call_tool(tool, again, reused)
    assert (refused["error"]["code"], refused["error"]["retriable"]) == ("gate_failed", False)
