"""A Hypothesis state machine that drives a service and a tiny model side by side.

``service_machine(make_backend)`` returns a :class:`~hypothesis.stateful.RuleBasedStateMachine`
class. ``make_backend()`` is called once per example and returns a
:data:`~engram_memory.testing.fakes.ServiceFactory` over a *fresh* backend (every call of that
factory must reuse the same store and vault: the machine calls it again to model a restart)::

    TestInMemoryStateful = service_machine(lambda: my_factory_over_a_new_store()).TestCase

Rules: capture, request_admission, withdraw and forget (with confirmations), host adjudication,
exact replays, conflicting replays, clock advances and restarts, across three scopes and two
principals, with a small pool of keys and contents so that replays, conflicts, duplicates and the
forgotten-content guard happen often. The model is a few dicts per scope: candidate states, record
states, tombstoned contents, idempotency bindings and the journal high water. After every step:
every envelope matched the model, the high water of every scope equals the number of journal
writes the model predicts (captures, accepts, rejects, withdraws, forgets — not replays,
``pending_adjudication`` (which only holds its key) or ``duplicate_exact`` admissions), the store's
candidate and record states and its indexed records equal the model's, no key destruction is left
pending, and the journal of every touched scope verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from engram_memory.admin import MemoryAdmin
from engram_memory.canonical import canonical_bytes
from engram_memory.clock import ManualClock
from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.results import RequestAdmissionResult
from engram_memory.service import MemoryService
from engram_memory.testing.fakes import (
    ADMISSION,
    CAPTURE,
    FORGET,
    WITHDRAW,
    PolicyOverride,
    ServiceFactory,
    capture_args,
    confirm,
    distinctive_words,
    fail,
    make_binding,
    make_key,
    ok,
    with_policy,
)
from engram_memory.write_path import DESTROY_BATCH

__all__ = ["VERDICT_POLICY", "service_machine"]

SCOPES: Final = (("tenant-a", "workspace-1"), ("tenant-a", "workspace-2"), ("tenant-b", "workspace-1"))
PRINCIPALS: Final = ("principal-1", "principal-2")
KEY_LABELS: Final = tuple(f"machine-{index}" for index in range(10))
VERDICTS: Final = ("accept", "accept", "reject", "adjudicate")
"""The policy's verdict for each content of the pool (carried in ``primary_event.type_ref``)."""
REASONS: Final = ("reason:obsolete", "reason:mistaken")

_DECISIONS: Final[dict[str, Literal["accept", "reject", "adjudication_required"]]] = {
    "verdict:accept": "accept",
    "verdict:reject": "reject",
    "verdict:adjudicate": "adjudication_required",
}


def _verdict_decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
    decision = _DECISIONS[request.payload["primary_event"]["type_ref"]]
    return AdmissionDecision(
        decision=decision,
        record_digest=request.record_digest,
        issued_at=now,
        policy_id=VERDICT_POLICY.policy_id,
        policy_version=VERDICT_POLICY.policy_version,
    )


VERDICT_POLICY: Final = PolicyOverride(DefaultPolicy(), decide=_verdict_decide)
"""Decides every candidate by the verdict written in its content (deterministic admission)."""


def _content_args(key: str, content: int) -> dict[str, Any]:
    return capture_args(
        key, words=distinctive_words(f"machine-content-{content}"), type_ref=f"verdict:{VERDICTS[content]}"
    )


def _intent(tool: str, arguments: dict[str, Any]) -> bytes:
    return canonical_bytes({"tool": tool, "arguments": arguments})


@attrs.define
class _Candidate:
    content: int
    state: str = "pending"
    record_id: str | None = None


@attrs.define
class _Bound:
    tool: str
    arguments: dict[str, Any]
    value: dict[str, Any]


@attrs.define
class _ScopeModel:
    high_water: int = 0
    candidates: dict[str, _Candidate] = attrs.Factory(dict)
    records: dict[str, list[Any]] = attrs.Factory(dict)
    """record id → [content, state]"""
    tombstoned: set[int] = attrs.Factory(set)
    bindings: dict[tuple[str, str], _Bound] = attrs.Factory(dict)
    held: dict[tuple[str, str], dict[str, Any]] = attrs.Factory(dict)
    """keys bound provisionally by a ``pending_adjudication`` admission → its arguments"""
    doomed: int = 0
    """accepted candidates whose key still waits for its batch (DESTROY_BATCH)"""

    def keys_destroyed(self) -> None:
        """A reject, withdraw or forget (or a replayed withdraw or forget) destroyed every doomed key of the scope."""
        self.doomed = 0


Target = tuple[int, str]
"""(scope index, candidate or record id)."""


def _replayed(bound: _Bound) -> bytes:
    if bound.tool == CAPTURE:
        return canonical_bytes({**bound.value, "status": "duplicate_exact"})
    return canonical_bytes({**bound.value, "replayed": True})


def service_machine(make_backend: Callable[[], ServiceFactory]) -> type[RuleBasedStateMachine]:  # noqa: C901
    """Build the differential state machine for the backend ``make_backend`` creates."""

    class ServiceMachine(RuleBasedStateMachine):
        """The service against a dict model, through ``call_tool`` only."""

        candidates = Bundle[Target]("candidates")
        records = Bundle[Target]("records")

        def __init__(self) -> None:
            super().__init__()
            self.factory = make_backend()
            self.clock = ManualClock()
            self.service: MemoryService = with_policy(self.factory(self.clock), VERDICT_POLICY)
            self.model = [_ScopeModel() for _ in SCOPES]
            self.calls: list[tuple[int, str, str]] = []
            """Bound (scope index, principal, key), in binding order."""
            self.dirty: set[int] = set()

        # -------------------------------------------------------------- helpers

        def binding(self, scope: int, principal: str) -> HostBinding:
            tenant, workspace = SCOPES[scope]
            return make_binding(tenant, workspace, principal)

        def call(self, scope: int, principal: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            binding = self.binding(scope, principal)
            if tool in {WITHDRAW, FORGET}:
                binding = confirm(self.service, tool, arguments, binding, self.clock)
            self.dirty.add(scope)
            return self.service.call_tool(tool, arguments, binding)

        def replay_or_conflict(
            self, scope: int, principal: str, tool: str, arguments: dict[str, Any], envelope: dict[str, Any]
        ) -> bool:
            """Check the envelope of an already bound key; ``False`` when the key is fresh."""
            pair = (principal, arguments["idempotency_key"])
            bound = self.model[scope].bindings.get(pair)
            if bound is None:
                held = self.model[scope].held.get(pair)
                if held is None or _intent(ADMISSION, held) == _intent(tool, arguments):
                    return False  # fresh, or held for this very admission: the policy is asked again
                fail(envelope, ErrorCode.DIGEST_CONFLICT, retriable=False)
                return True
            if _intent(bound.tool, bound.arguments) == _intent(tool, arguments):
                assert canonical_bytes(ok(envelope)) == _replayed(bound), envelope
                if tool in {WITHDRAW, FORGET}:  # a replayed erasure answers once no key waits in the scope
                    self.model[scope].keys_destroyed()
            else:
                fail(envelope, ErrorCode.DIGEST_CONFLICT, retriable=False)
            return True

        def bind(self, scope: int, principal: str, tool: str, arguments: dict[str, Any], value: dict[str, Any]) -> None:
            key = arguments["idempotency_key"]
            self.model[scope].held.pop((principal, key), None)
            self.model[scope].bindings[(principal, key)] = _Bound(tool=tool, arguments=arguments, value=value)
            self.calls.append((scope, principal, key))

        @staticmethod
        def scope_of(target: Target, cross: bool) -> int:
            return (target[0] + 1) % len(SCOPES) if cross else target[0]

        # -------------------------------------------------------------- agent rules

        @initialize(target=candidates, content=st.integers(0, len(VERDICTS) - 1))
        def seed(self, content: int) -> MultipleResults[Target]:
            """One candidate per scope, so every rule has targets even when capture is disabled."""
            seeded = [self.captured(scope, PRINCIPALS[0], "machine-seed", content) for scope in range(len(SCOPES))]
            return multiple(*(target for target in seeded if target is not None))

        @rule(
            target=candidates,
            scope=st.integers(0, len(SCOPES) - 1),
            principal=st.sampled_from(PRINCIPALS),
            label=st.sampled_from(KEY_LABELS),
            content=st.integers(0, len(VERDICTS) - 1),
        )
        def capture(self, scope: int, principal: str, label: str, content: int) -> MultipleResults[Target]:
            target = self.captured(scope, principal, label, content)
            return multiple() if target is None else multiple(target)

        def captured(self, scope: int, principal: str, label: str, content: int) -> Target | None:
            """Capture and check against the model; the new candidate, or ``None`` for a replay."""
            arguments = _content_args(make_key(label), content)
            envelope = self.call(scope, principal, CAPTURE, arguments)
            if self.replay_or_conflict(scope, principal, CAPTURE, arguments, envelope):
                return None
            model = self.model[scope]
            value = ok(envelope)
            assert value["status"] == "committed_pending", value
            assert value["cursor"] == str(model.high_water + 1), value
            assert value["candidate_id"] not in model.candidates
            model.high_water += 1
            model.candidates[value["candidate_id"]] = _Candidate(content=content)
            self.bind(scope, principal, CAPTURE, arguments, value)
            return (scope, value["candidate_id"])

        @rule(
            target=records,
            candidate=candidates,
            principal=st.sampled_from(PRINCIPALS),
            label=st.sampled_from(KEY_LABELS),
            cross=st.integers(0, 4).map(lambda n: n == 0),
        )
        def request_admission(  # noqa: PLR0911 - one return per branch of the model
            self, candidate: Target, principal: str, label: str, cross: bool
        ) -> MultipleResults[Target]:
            scope = self.scope_of(candidate, cross)
            arguments = {"candidate_id": candidate[1], "idempotency_key": make_key(label)}
            envelope = self.call(scope, principal, ADMISSION, arguments)
            if self.replay_or_conflict(scope, principal, ADMISSION, arguments, envelope):
                return multiple()
            model = self.model[scope]
            state = model.candidates.get(candidate[1])
            if state is None:
                fail(envelope, ErrorCode.NOT_FOUND, retriable=False)
                return multiple()
            if state.state in {"rejected", "withdrawn"}:
                fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)
                return multiple()
            value = ok(envelope)
            outcome = value["outcome"]
            assert value["replayed"] is False, value
            if state.state == "admitted":
                assert outcome["status"] == "duplicate_exact", value
                assert outcome["record_id"] == state.record_id, value
                self.bind(scope, principal, ADMISSION, arguments, value)
                return multiple()
            verdict = VERDICTS[state.content]
            if verdict == "accept" and state.content in model.tombstoned:
                verdict = "adjudicate"
            if verdict == "adjudicate":
                assert outcome["status"] == "pending_adjudication", value
                model.held.setdefault((principal, arguments["idempotency_key"]), arguments)
                return multiple()
            assert outcome["cursor"] == str(model.high_water + 1), value
            model.high_water += 1
            self.bind(scope, principal, ADMISSION, arguments, value)
            if verdict == "reject":
                assert outcome["status"] == "rejected", value
                state.state = "rejected"
                model.keys_destroyed()
                return multiple()
            assert outcome["status"] == "accepted", value
            return multiple(self.admitted(scope, state, outcome["record_id"]))

        def admitted(self, scope: int, state: _Candidate, record_id: str) -> Target:
            model = self.model[scope]
            assert record_id not in model.records
            state.state = "admitted"
            state.record_id = record_id
            model.records[record_id] = [state.content, "accepted_current"]
            model.doomed = 0 if model.doomed + 1 >= DESTROY_BATCH else model.doomed + 1
            return (scope, record_id)

        @rule(
            candidate=candidates,
            principal=st.sampled_from(PRINCIPALS),
            label=st.sampled_from(KEY_LABELS),
            cross=st.integers(0, 4).map(lambda n: n == 0),
            reason=st.sampled_from(REASONS),
        )
        def withdraw(self, candidate: Target, principal: str, label: str, cross: bool, reason: str) -> None:
            scope = self.scope_of(candidate, cross)
            arguments = {"candidate_id": candidate[1], "idempotency_key": make_key(label), "reason_ref": reason}
            envelope = self.call(scope, principal, WITHDRAW, arguments)
            if self.replay_or_conflict(scope, principal, WITHDRAW, arguments, envelope):
                return
            model = self.model[scope]
            state = model.candidates.get(candidate[1])
            if state is None:
                fail(envelope, ErrorCode.NOT_FOUND, retriable=False)
            elif state.state in {"rejected", "withdrawn"}:
                fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)
            elif state.state == "admitted":
                fail(envelope, ErrorCode.ILLEGAL_TRANSITION, retriable=False)
            else:
                value = ok(envelope)
                receipt = value["receipt"]
                assert (receipt["from_state"], receipt["to_state"]) == ("pending", "withdrawn"), value
                assert receipt["cursor"] == str(model.high_water + 1), value
                assert value["key_destruction"] == "complete", value
                model.high_water += 1
                state.state = "withdrawn"
                model.keys_destroyed()
                self.bind(scope, principal, WITHDRAW, arguments, value)

        @rule(
            record=records,
            principal=st.sampled_from(PRINCIPALS),
            label=st.sampled_from(KEY_LABELS),
            cross=st.integers(0, 4).map(lambda n: n == 0),
            reason=st.sampled_from(REASONS),
        )
        def forget(self, record: Target, principal: str, label: str, cross: bool, reason: str) -> None:
            scope = self.scope_of(record, cross)
            arguments = {"record_id": record[1], "idempotency_key": make_key(label), "reason_ref": reason}
            envelope = self.call(scope, principal, FORGET, arguments)
            if self.replay_or_conflict(scope, principal, FORGET, arguments, envelope):
                return
            model = self.model[scope]
            state = model.records.get(record[1])
            if state is None:
                fail(envelope, ErrorCode.NOT_FOUND, retriable=False)
            elif state[1] == "tombstoned":
                fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)
            else:
                value = ok(envelope)
                receipt = value["receipt"]
                assert (receipt["from_state"], receipt["to_state"]) == ("accepted_current", "tombstoned"), value
                assert receipt["cursor"] == str(model.high_water + 1), value
                assert value["projection_invalidation"] == "complete", value
                model.high_water += 1
                state[1] = "tombstoned"
                model.tombstoned.add(state[0])
                model.keys_destroyed()
                self.bind(scope, principal, FORGET, arguments, value)

        # -------------------------------------------------------------- replays

        @precondition(lambda self: bool(self.calls))
        @rule(pick=st.integers(0, 10_000))
        def replay(self, pick: int) -> None:
            scope, principal, key = self.calls[pick % len(self.calls)]
            bound = self.model[scope].bindings[(principal, key)]
            before = self.model[scope].high_water
            envelope = self.call(scope, principal, bound.tool, bound.arguments)
            assert canonical_bytes(ok(envelope)) == _replayed(bound), envelope
            assert self.model[scope].high_water == before
            if bound.tool in {WITHDRAW, FORGET}:  # a replayed erasure answers once no key waits in the scope
                self.model[scope].keys_destroyed()

        @precondition(lambda self: bool(self.calls))
        @rule(pick=st.integers(0, 10_000), shift=st.integers(1, len(VERDICTS) - 1))
        def conflicting_replay(self, pick: int, shift: int) -> None:
            scope, principal, key = self.calls[pick % len(self.calls)]
            bound = self.model[scope].bindings[(principal, key)]
            content = 0
            if bound.tool == CAPTURE:
                original = next(
                    c
                    for c in range(len(VERDICTS))
                    if _intent(CAPTURE, _content_args(key, c)) == _intent(CAPTURE, bound.arguments)
                )
                content = (original + shift) % len(VERDICTS)
            envelope = self.call(scope, principal, CAPTURE, _content_args(key, content))
            fail(envelope, ErrorCode.DIGEST_CONFLICT, retriable=False)

        # -------------------------------------------------------------- host

        @rule(
            target=records,
            candidate=candidates,
            decision=st.sampled_from(["accept", "reject"]),
            cross=st.integers(0, 4).map(lambda n: n == 0),
            readmit=st.booleans(),
        )
        def adjudicate(
            self, candidate: Target, decision: Literal["accept", "reject"], cross: bool, readmit: bool
        ) -> MultipleResults[Target]:
            scope = self.scope_of(candidate, cross)
            tenant, workspace = SCOPES[scope]
            self.dirty.add(scope)
            model = self.model[scope]
            state = model.candidates.get(candidate[1])
            try:
                result: RequestAdmissionResult | None = MemoryAdmin(self.service).adjudicate(
                    tenant_id=tenant,
                    workspace_id=workspace,
                    candidate_id=candidate[1],
                    decision=decision,
                    readmit_forgotten=readmit,
                )
                code = None
            except EngramError as error:
                result, code = None, error.code
            if state is None:
                assert code is ErrorCode.NOT_FOUND, (code, result)
                return multiple()
            if state.state in {"rejected", "withdrawn"}:
                assert code is ErrorCode.ALREADY_TERMINAL, (code, result)
                return multiple()
            if state.state == "pending" and decision == "accept" and state.content in model.tombstoned and not readmit:
                assert code is ErrorCode.GATE_FAILED, (code, result)  # nothing written: the invariants check it
                return multiple()
            assert result is not None, code
            outcome = result.outcome
            if state.state == "admitted":
                assert (outcome.status, outcome.record_id) == ("duplicate_exact", state.record_id), result
                return multiple()
            assert outcome.cursor == str(model.high_water + 1), result
            model.high_water += 1
            if decision == "reject":
                assert outcome.status == "rejected", result
                state.state = "rejected"
                model.keys_destroyed()
                return multiple()
            assert outcome.status == "accepted", result
            assert outcome.record_id is not None
            return multiple(self.admitted(scope, state, outcome.record_id))

        @rule(seconds=st.integers(1, 600))
        def advance_clock(self, seconds: int) -> None:
            self.clock.advance(timedelta(seconds=seconds))

        @rule()
        def restart(self) -> None:
            self.service = with_policy(self.factory(self.clock), VERDICT_POLICY)

        # -------------------------------------------------------------- invariants

        @invariant()
        def store_matches_model(self) -> None:
            for index, (tenant, workspace) in enumerate(SCOPES):
                model = self.model[index]
                scope = make_binding(tenant, workspace).scope
                with self.service.store.read(scope) as reader:
                    assert reader.high_water() == model.high_water
                    if index not in self.dirty:
                        continue
                    assert {c.candidate_id: c.state for c in reader.candidates()} == {
                        cid: c.state for cid, c in model.candidates.items()
                    }
                    assert {r.record_id: r.state for r in reader.records()} == {
                        rid: state for rid, (_, state) in model.records.items()
                    }
                    assert list(reader.indexed_ids()) == sorted(
                        rid for rid, (_, state) in model.records.items() if state == "accepted_current"
                    )
                    assert len(reader.doomed_keys()) == model.doomed
                report = MemoryAdmin(self.service).verify(tenant_id=tenant, workspace_id=workspace)
                assert report.ok, report
                assert report.high_water == model.high_water
            self.dirty.clear()

    return ServiceMachine
