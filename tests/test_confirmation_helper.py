"""``MemoryService.confirmation``: the host's Confirmation of exactly one call, built without the store.

Each confirmation it builds is checked against what the gate requires by running the call it
confirms, on an in-memory service whose policy gates all four mutations.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from engram_memory import (
    Confirmation,
    DefaultPolicy,
    EngramError,
    ErrorCode,
    JsonRpcCode,
    ManualClock,
    MemoryService,
    ProtocolError,
)
from engram_memory.canonical import Domain, digest
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import StoreReader, UnitOfWork
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import (
    ADMISSION,
    CAPTURE,
    FORGET,
    GET,
    SEARCH,
    WITHDRAW,
    Harness,
    PolicyOverride,
    StoreWrapper,
    capture_args,
    fail,
    inmemory_scope_contents,
    make_binding,
    make_key,
    ok,
    with_policy,
)
from engram_memory.wire import (
    CaptureArgs,
    Component,
    ForgetArgs,
    RequestAdmissionArgs,
    SearchArgs,
    WithdrawArgs,
    parse_args,
)
from engram_memory.wire.converter import ARGS_BY_TOOL, unstructure_args

A = make_binding("tenant-a", "workspace-1", "principal-1")
ACCEPT = DefaultPolicy(admission="accept")
GATE_ALL = PolicyOverride(ACCEPT, requires_confirmation=lambda _tool, _binding: True)
"""Accepts every admission and requires a confirmation for all four mutations."""
_WITHDRAW = {"candidate_id": "candidate_x", "idempotency_key": make_key("bad"), "reason_ref": "reason:bad"}
"""Valid withdraw arguments naming a candidate that does not exist."""


class RecordingStore(StoreWrapper):
    """An in-memory store that records every read and write it is asked for."""

    def __init__(self) -> None:
        super().__init__(InMemoryStore())
        self.accesses: list[str] = []

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        self.accesses.append("read")
        return super().read(scope)

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        self.accesses.append("write")
        return super().write(scope)

    def scopes(self) -> list[str]:
        self.accesses.append("scopes")
        return super().scopes()

    def secret(self) -> bytes:
        self.accesses.append("secret")
        return super().secret()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> RecordingStore:
    return RecordingStore()


@pytest.fixture
def harness(store: RecordingStore, clock: ManualClock) -> Harness:
    """Set up under an accepting policy that gates only withdraw and forget."""
    return Harness(MemoryService(store=store, vault=InMemoryKeyVault(), policy=ACCEPT, clock=clock), clock)


@pytest.fixture
def gated(harness: Harness) -> MemoryService:
    """The same backend, with all four mutations gated."""
    return with_policy(harness.service, GATE_ALL)


def _scope_bytes(service: MemoryService) -> bytes:
    assert isinstance(service.store, RecordingStore)
    return inmemory_scope_contents(service.store.inner, A.scope)


def _approved(service: MemoryService, tool: str, arguments: dict[str, Any], confirmation_id: str) -> Confirmation:
    """The helper's confirmation of this call, requested 20 s ago and approved 2 s ago."""
    now = service.clock.now()
    return service.confirmation(
        tool,
        arguments,
        A,
        confirmation_id=confirmation_id,
        requested_at=now - timedelta(seconds=20),
        approved_at=now - timedelta(seconds=2),
    )


def _call_for(harness: Harness, tool: str) -> tuple[dict[str, Any], str]:
    """Valid arguments of ``tool`` over fresh state, and the target the contract says they name."""
    if tool == CAPTURE:
        key = make_key("helper-capture")
        return capture_args(key), key
    if tool == FORGET:
        _, record_id = harness.accepted(A, make_key("helper-forget-setup"))
        args = {"record_id": record_id, "idempotency_key": make_key("helper-forget"), "reason_ref": "reason:erasure"}
        return args, record_id
    candidate_id = harness.pending(A, make_key(f"helper-{tool}-setup"))
    if tool == ADMISSION:
        return {"candidate_id": candidate_id, "idempotency_key": make_key("helper-admission")}, candidate_id
    args = {"candidate_id": candidate_id, "idempotency_key": make_key("helper-withdraw"), "reason_ref": "reason:wrong"}
    return args, candidate_id


def _succeeded(tool: str, value: dict[str, Any]) -> None:
    """The call did what its tool does (not a replay)."""
    if tool == CAPTURE:
        assert value["status"] == "committed_pending", value
    elif tool == ADMISSION:
        assert value["outcome"]["status"] == "accepted", value
        assert value["replayed"] is False, value
    elif tool == WITHDRAW:
        assert value["receipt"]["to_state"] == "withdrawn", value
        assert value["replayed"] is False, value
    else:
        assert value["receipt"]["to_state"] == "tombstoned", value
        assert value["replayed"] is False, value


@pytest.mark.parametrize("tool", [CAPTURE, ADMISSION, WITHDRAW, FORGET])
def test_the_confirmation_names_exactly_the_call_and_passes_the_gate(
    harness: Harness, gated: MemoryService, tool: str
) -> None:
    arguments, target = _call_for(harness, tool)
    now = gated.clock.now()
    confirmation = gated.confirmation(
        tool,
        arguments,
        A,
        confirmation_id="approval-0001",
        requested_at=now - timedelta(seconds=20),
        approved_at=now - timedelta(seconds=2),
    )

    assert confirmation == Confirmation(
        id="approval-0001",
        tool=tool,
        target=target,
        operation_digest=gated.operation_digest(tool, arguments, A),
        requested_at=now - timedelta(seconds=20),
        approved_at=now - timedelta(seconds=2),
    )
    canonical = unstructure_args(parse_args(ARGS_BY_TOOL[tool], arguments))
    documented = {"tool": tool, "scope_ref": A.scope, "principal": A.principal, "target": target}
    assert confirmation.operation_digest == digest(Domain.OPERATION, {**documented, "arguments": canonical})
    assert confirmation.operation_digest.startswith("sha256:")
    assert len(confirmation.operation_digest) == len("sha256:") + 64

    # the gate requires a confirmation here, and this one satisfies it
    with pytest.raises(ProtocolError) as missing:
        gated.call_tool(tool, arguments, A)
    assert missing.value.code is JsonRpcCode.INTERNAL_ERROR
    _succeeded(tool, ok(gated.call_tool(tool, arguments, attrs.evolve(A, confirmation=confirmation))))
    with gated.store.read(A.scope) as reader:
        assert reader.confirmation_used("approval-0001")


def test_the_typed_withdraw_accepts_the_confirmation_built_from_its_json_arguments(harness: Harness) -> None:
    candidate_id = harness.pending(A, make_key("typed-setup"))
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("typed-withdraw"), "reason_ref": "r:typed"}
    confirmation = _approved(harness.service, WITHDRAW, arguments, "approval-typed")
    assert confirmation.target == candidate_id
    result = harness.service.withdraw(attrs.evolve(A, confirmation=confirmation), parse_args(WithdrawArgs, arguments))
    assert result.receipt.to_state == "withdrawn"
    assert result.key_destruction == "complete"


def test_the_confirmation_differs_with_every_part_of_the_call(harness: Harness) -> None:
    candidate_id = harness.pending(A, make_key("parts-setup"))
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("parts"), "reason_ref": "reason:one"}
    base = _approved(harness.service, WITHDRAW, arguments, "approval-parts")
    other_reason = _approved(harness.service, WITHDRAW, {**arguments, "reason_ref": "reason:two"}, "approval-parts")
    other_principal = harness.service.confirmation(
        WITHDRAW,
        arguments,
        attrs.evolve(A, principal="principal-2"),
        confirmation_id="approval-parts",
        requested_at=base.requested_at,
        approved_at=base.approved_at,
    )
    as_admission = _approved(
        harness.service,
        ADMISSION,
        {"candidate_id": candidate_id, "idempotency_key": make_key("parts")},
        "approval-parts",
    )
    other_scope = harness.service.confirmation(
        WITHDRAW,
        arguments,
        attrs.evolve(A, tenant_id="tenant-b"),
        confirmation_id="approval-parts",
        requested_at=base.requested_at,
        approved_at=base.approved_at,
    )
    variants = [other_reason, other_principal, other_scope, as_admission]
    assert len({base.operation_digest, *(variant.operation_digest for variant in variants)}) == 5
    assert {variant.target for variant in variants} == {base.target} == {candidate_id}
    assert as_admission.tool == ADMISSION


def test_building_reads_and_writes_nothing(harness: Harness, gated: MemoryService, store: RecordingStore) -> None:
    pending = harness.pending(A, make_key("nothing-setup"))
    _, record_id = harness.accepted(A, make_key("nothing-record"))
    before = _scope_bytes(gated)
    store.accesses.clear()
    calls = {
        CAPTURE: capture_args(make_key("nothing-capture")),
        ADMISSION: {"candidate_id": pending, "idempotency_key": make_key("nothing-admission")},
        WITHDRAW: {"candidate_id": pending, "idempotency_key": make_key("nothing-withdraw"), "reason_ref": "r:x"},
        FORGET: {"record_id": record_id, "idempotency_key": make_key("nothing-forget"), "reason_ref": "r:y"},
    }
    built = [_approved(gated, tool, arguments, "approval-nothing") for tool, arguments in calls.items()]
    # unknown targets too: existence is the call's business, not the builder's
    unknown = {"record_id": "mem_unknown", "idempotency_key": make_key("nothing-unknown"), "reason_ref": "r:z"}
    built.append(_approved(gated, FORGET, unknown, "approval-nothing"))
    assert [confirmation.target for confirmation in built] == [
        make_key("nothing-capture"),
        pending,
        pending,
        record_id,
        "mem_unknown",
    ]
    assert store.accesses == []
    assert _scope_bytes(gated) == before
    with gated.store.read(A.scope) as reader:
        assert not reader.confirmation_used("approval-nothing")


def test_a_confirmation_it_builds_is_single_use(harness: Harness) -> None:
    first = harness.pending(A, make_key("once-1"))
    second = harness.pending(A, make_key("once-2"))
    withdraw_first = {"candidate_id": first, "idempotency_key": make_key("once-w1"), "reason_ref": "reason:once"}
    withdraw_second = {"candidate_id": second, "idempotency_key": make_key("once-w2"), "reason_ref": "reason:once"}
    service = harness.service
    approved = attrs.evolve(A, confirmation=_approved(service, WITHDRAW, withdraw_first, "approval-once"))
    assert ok(service.call_tool(WITHDRAW, withdraw_first, approved))["receipt"]["to_state"] == "withdrawn"

    state = harness.state(A)
    reused = attrs.evolve(A, confirmation=_approved(service, WITHDRAW, withdraw_second, "approval-once"))
    fail(service.call_tool(WITHDRAW, withdraw_second, reused), ErrorCode.GATE_FAILED, retriable=False)
    assert harness.state(A) == state

    fresh = attrs.evolve(A, confirmation=_approved(service, WITHDRAW, withdraw_second, "approval-twice"))
    assert ok(service.call_tool(WITHDRAW, withdraw_second, fresh))["receipt"]["to_state"] == "withdrawn"


@pytest.mark.parametrize(
    ("requested", "approved", "advance"),
    [
        pytest.param(-40, -31, 0, id="call-too-late"),
        pytest.param(-2, -5, 0, id="approved-before-requested"),
        pytest.param(-320, -10, 0, id="approval-too-slow"),
        pytest.param(-20, -2, 29, id="clock-moves-past-the-window"),
    ],
)
def test_the_time_windows_are_checked_when_the_call_runs(
    harness: Harness, requested: int, approved: int, advance: int
) -> None:
    candidate_id = harness.pending(A, make_key("late-setup"))
    arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("late"), "reason_ref": "reason:late"}
    now = harness.clock.now()
    confirmation = harness.service.confirmation(  # builds whatever the times: the gate judges them
        WITHDRAW,
        arguments,
        A,
        confirmation_id="approval-late",
        requested_at=now + timedelta(seconds=requested),
        approved_at=now + timedelta(seconds=approved),
    )
    assert confirmation.approved_at - confirmation.requested_at == timedelta(seconds=approved - requested)
    harness.clock.advance(timedelta(seconds=advance))
    state = harness.state(A)
    envelope = harness.service.call_tool(WITHDRAW, arguments, attrs.evolve(A, confirmation=confirmation))
    fail(envelope, ErrorCode.GATE_FAILED, retriable=False)
    assert harness.state(A) == state


def test_the_digest_of_a_fixed_call_is_stable(harness: Harness) -> None:
    """A host may record the digest with the approval: it must not drift between versions."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    confirmation = harness.service.confirmation(
        WITHDRAW, _WITHDRAW, A, confirmation_id="approval-vector", requested_at=at, approved_at=at
    )
    assert confirmation.target == "candidate_x"
    assert confirmation.operation_digest == "sha256:3ee1e00029fd5f8a2bf5a9bd969e52650e2618895ffe743acf5ed504e46148a2"


def _raised(call: Callable[[], object]) -> ProtocolError | EngramError:
    try:
        call()
    except (ProtocolError, EngramError) as error:
        return error
    raise AssertionError("no error raised")


def _same_failure(service: MemoryService, tool: Any, arguments: Any, binding: Any) -> ProtocolError | EngramError:
    """The helper's failure, checked to be ``operation_digest``'s for the same call, with no store access."""
    assert isinstance(service.store, RecordingStore)
    service.store.accesses.clear()
    now = service.clock.now()
    from_helper = _raised(
        lambda: service.confirmation(
            tool, arguments, binding, confirmation_id="approval-bad", requested_at=now, approved_at=now
        )
    )
    from_digest = _raised(lambda: service.operation_digest(tool, arguments, binding))
    assert type(from_helper) is type(from_digest)
    assert from_helper.code == from_digest.code
    if isinstance(from_helper, EngramError):
        assert isinstance(from_digest, EngramError)
        assert from_helper.pointer == from_digest.pointer
    assert service.store.accesses == []
    return from_helper


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        pytest.param("engram_memory_nope", _WITHDRAW, id="unknown-tool"),
        pytest.param(SEARCH, {"query": "q", "purpose_ref": A.purpose_ref}, id="search"),
        pytest.param(GET, {"record_id": "mem_x", "purpose_ref": A.purpose_ref}, id="get"),
        pytest.param(None, _WITHDRAW, id="not-a-name"),
    ],
)
def test_a_tool_that_is_not_a_mutation_is_32602(harness: Harness, tool: Any, arguments: dict[str, Any]) -> None:
    error = _same_failure(harness.service, tool, arguments, A)
    assert isinstance(error, ProtocolError)
    assert error.code is JsonRpcCode.INVALID_PARAMS


@pytest.mark.parametrize(
    "binding",
    [
        pytest.param(None, id="none"),
        pytest.param(attrs.evolve(A, principal=""), id="empty-principal"),
        pytest.param(attrs.evolve(A, tenant_id="te\u0301nant"), id="not-nfc"),
    ],
)
def test_a_missing_host_context_is_32603(harness: Harness, binding: Any) -> None:
    error = _same_failure(harness.service, WITHDRAW, _WITHDRAW, binding)
    assert isinstance(error, ProtocolError)
    assert error.code is JsonRpcCode.INTERNAL_ERROR


def _bad_citation_digest() -> dict[str, Any]:
    arguments = capture_args(make_key("bad-digest"))
    arguments["payload"]["citations"][0]["content_digest"] = "sha256:XYZ"
    return arguments


_NO_REASON = {key: value for key, value in _WITHDRAW.items() if key != "reason_ref"}


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "pointer"),
    [
        pytest.param(WITHDRAW, _NO_REASON, "INVALID_SCHEMA", "/reason_ref", id="missing-field"),
        pytest.param(FORGET, {**_WITHDRAW, "record_id": "mem_x"}, "INVALID_SCHEMA", "/candidate_id", id="extra-field"),
        pytest.param(WITHDRAW, [_WITHDRAW], "INVALID_SCHEMA", "", id="a-list"),
        pytest.param(WITHDRAW, OrderedDict(_WITHDRAW), "INVALID_SCHEMA", "", id="a-dict-subclass"),
        pytest.param(WITHDRAW, None, "INVALID_SCHEMA", "", id="none"),
        pytest.param(
            CAPTURE, _bad_citation_digest(), "INVALID_DIGEST", "/payload/citations/0/content_digest", id="bad-digest"
        ),
    ],
)
def test_invalid_arguments_fail_as_for_operation_digest(
    harness: Harness, tool: str, arguments: Any, code: str, pointer: str
) -> None:
    error = _same_failure(harness.service, tool, arguments, A)
    assert isinstance(error, EngramError)
    assert error.code is ErrorCode[code]
    assert error.pointer == pointer


@pytest.mark.parametrize("field", ["requested_at", "approved_at"])
def test_a_naive_datetime_is_refused_by_the_confirmation_validator(harness: Harness, field: str) -> None:
    now = harness.clock.now()
    times: dict[str, datetime] = {"requested_at": now, "approved_at": now}
    times[field] = now.replace(tzinfo=None)
    with pytest.raises(ValueError, match=f"^{field} must be a timezone-aware datetime$"):
        harness.service.confirmation(WITHDRAW, _WITHDRAW, A, confirmation_id="approval-naive", **times)


# --------------------------------------------------------------------------- typed arguments


def _typed_twins(tool: str, arguments: dict[str, Any]) -> list[Any]:
    """The typed arguments equal to ``arguments``: parsed, and (but for capture) built directly."""
    parsed = parse_args(ARGS_BY_TOOL[tool], arguments)
    if tool == ADMISSION:
        return [parsed, RequestAdmissionArgs(**arguments)]
    if tool == WITHDRAW:
        return [parsed, WithdrawArgs(**arguments)]
    if tool == FORGET:
        return [parsed, ForgetArgs(**arguments)]
    return [parsed]


@pytest.mark.parametrize("tool", [CAPTURE, ADMISSION, WITHDRAW, FORGET])
def test_typed_arguments_give_the_digest_and_confirmation_of_their_json_object(
    harness: Harness, gated: MemoryService, store: RecordingStore, tool: str
) -> None:
    """A typed-API host need not keep the JSON object to build its approvals."""
    arguments, target = _call_for(harness, tool)
    from_json = _approved(gated, tool, arguments, "approval-typed-json")
    store.accesses.clear()
    for typed in _typed_twins(tool, arguments):
        assert gated.operation_digest(tool, typed, A) == gated.operation_digest(tool, arguments, A)
        assert _approved(gated, tool, typed, "approval-typed-json") == from_json
    assert from_json.target == target
    assert store.accesses == []

    # the typed call accepts the confirmation built from its typed arguments
    typed = _typed_twins(tool, arguments)[-1]
    operation = getattr(gated, tool.removeprefix("engram_memory_"))
    confirmed = attrs.evolve(A, confirmation=_approved(gated, tool, typed, "approval-typed-call"))
    _succeeded(tool, operation(confirmed, typed).to_json())


def _other_args() -> list[Any]:
    return [
        parse_args(ForgetArgs, {"record_id": "mem_x", "idempotency_key": make_key("other"), "reason_ref": "r:x"}),
        parse_args(RequestAdmissionArgs, {"candidate_id": "candidate_x", "idempotency_key": make_key("other")}),
        parse_args(SearchArgs, {"query": "q", "purpose_ref": A.purpose_ref}),
    ]


@pytest.mark.parametrize("typed", _other_args(), ids=lambda typed: type(typed).__name__)
def test_the_typed_arguments_of_another_tool_are_a_type_error(harness: Harness, typed: Any) -> None:
    """As for a typed operation: a programming error, named, not a wire code."""
    now = harness.clock.now()
    expected = (
        "the arguments of engram_memory_withdraw are a WithdrawArgs or its JSON object, "
        "not the typed arguments of another tool"
    )
    with pytest.raises(TypeError) as from_digest:
        harness.service.operation_digest(WITHDRAW, typed, A)
    with pytest.raises(TypeError) as from_helper:
        harness.service.confirmation(
            WITHDRAW, typed, A, confirmation_id="approval-other", requested_at=now, approved_at=now
        )
    for error in (from_digest.value, from_helper.value):
        assert str(error) == expected
        assert error.__notes__ == [f"got {type(typed).__name__}"]


def test_typed_arguments_still_need_the_host_context_and_a_mutating_tool(harness: Harness) -> None:
    typed = parse_args(WithdrawArgs, _WITHDRAW)
    error = _same_failure(harness.service, WITHDRAW, typed, attrs.evolve(A, principal=""))
    assert isinstance(error, ProtocolError)
    assert error.code is JsonRpcCode.INTERNAL_ERROR
    error = _same_failure(harness.service, SEARCH, parse_args(SearchArgs, {"query": "q", "purpose_ref": "p"}), A)
    assert isinstance(error, ProtocolError)
    assert error.code is JsonRpcCode.INVALID_PARAMS


def test_typed_capture_arguments_over_the_bound_are_invalid_schema(harness: Harness) -> None:
    """As :meth:`MemoryService.capture` refuses them: the JSON object would be over 1,048,576 bytes."""
    typed = parse_args(CaptureArgs, capture_args(make_key("oversized")))
    filler = tuple(
        Component(component_id=f"c-fill-{index}", kind="context", text="x" * 65_000, citation_ids=("cite-1",))
        for index in range(17)
    )
    oversized = attrs.evolve(typed, payload=attrs.evolve(typed.payload, components=typed.payload.components + filler))
    error = _same_failure(harness.service, CAPTURE, oversized, A)
    assert isinstance(error, EngramError)
    assert error.code is ErrorCode.INVALID_SCHEMA
    assert error.pointer == ""
