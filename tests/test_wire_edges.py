"""Edges of the service boundary: hostile argument shapes, missing host context, explicit grants."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any, Final

import attrs
import pytest

from engram_memory import ALL_TOOLS, Confirmation, DefaultPolicy, HostBinding, ManualClock, MemoryService
from engram_memory.context import scope_key
from engram_memory.errors import PUBLIC_MESSAGES, EngramError, ErrorCode, JsonRpcCode, ProtocolError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import (
    ADMISSION,
    CAPTURE,
    FORGET,
    GET,
    PURPOSE,
    SEARCH,
    WITHDRAW,
    Harness,
    capture_args,
    make_binding,
    make_key,
)
from engram_memory.wire import GetArgs, SearchArgs, parse_args

DEPTH: Final = 600
"""Tiny arguments nested deeper than the interpreter would follow by recursion during size checks."""


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.fixture(name="harness")
def harness_fixture() -> Harness:
    clock = ManualClock()
    service = MemoryService(
        store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    return Harness(service, clock)


BINDING: Final = make_binding()


def _assert_invalid_schema(envelope: dict[str, Any]) -> None:
    assert envelope["ok"] is False
    assert envelope["error"] == {
        "code": "INVALID_SCHEMA",
        "message": PUBLIC_MESSAGES[ErrorCode.INVALID_SCHEMA],
        "retriable": False,
    }


# --------------------------------------------------------------------------- argument shapes


def _deep_arguments(tool: str) -> dict[str, Any]:
    if tool == CAPTURE:
        return {**capture_args(make_key("deep")), "confirmed": nested(DEPTH)}
    if tool == ADMISSION:
        return {"candidate_id": "candidate_x", "idempotency_key": make_key("deep"), "extra": nested(DEPTH)}
    return {"query": nested(DEPTH), "purpose_ref": PURPOSE}


@pytest.mark.parametrize("tool", [CAPTURE, ADMISSION, SEARCH])
def test_deeply_nested_arguments_are_invalid_schema_not_an_unknown_outcome(harness: Harness, tool: str) -> None:
    """A RecursionError used to become MUTATION_OUTCOME_UNKNOWN (retriable) or CAPABILITY_UNAVAILABLE."""
    before = harness.state(BINDING)
    _assert_invalid_schema(harness.call(tool, _deep_arguments(tool), BINDING))
    assert harness.state(BINDING) == before


@pytest.mark.parametrize("tool", [CAPTURE, SEARCH])
def test_non_string_keys_are_invalid_schema(harness: Harness, tool: str) -> None:
    arguments: dict[Any, Any] = capture_args(make_key("keys")) if tool == CAPTURE else {"query": "q"}
    arguments.update({"purpose_ref": PURPOSE} if tool == SEARCH else {})
    arguments[7] = "x"
    _assert_invalid_schema(harness.call(tool, arguments, BINDING))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), b"10", {10}], ids=["nan", "infinity", "bytes", "set"])
def test_a_value_no_json_text_can_carry_is_invalid_schema_at_its_own_pointer(harness: Harness, value: Any) -> None:
    """Arguments built in Python may hold what JSON cannot (the 1 MiB bound cannot be measured on them):
    the field holding it is named, and the call is ``INVALID_SCHEMA`` like any other bad value."""
    raw = {"query": "orbit", "purpose_ref": PURPOSE, "limit": value}
    with pytest.raises(EngramError) as refused:
        parse_args(SearchArgs, raw)
    assert (refused.value.code, refused.value.pointer) == (ErrorCode.INVALID_SCHEMA, "/limit")
    _assert_invalid_schema(harness.call(SEARCH, raw, BINDING))


def test_operation_digest_refuses_deep_arguments_with_an_engram_error(harness: Harness) -> None:
    with pytest.raises(EngramError) as info:
        harness.service.operation_digest(ADMISSION, _deep_arguments(ADMISSION), BINDING)
    assert (info.value.code, info.value.pointer, info.value.retriable) == (ErrorCode.INVALID_SCHEMA, "", False)


# --------------------------------------------------------------------------- host context


NOT_BINDINGS: Final = [None, {"tenant_id": "t"}, "binding"]


def _protocol_code(call: Any) -> JsonRpcCode:
    with pytest.raises(ProtocolError) as info:
        call()
    code: JsonRpcCode = info.value.code
    return code


@pytest.mark.parametrize("binding", NOT_BINDINGS, ids=["none", "dict", "str"])
@pytest.mark.parametrize("tool", [SEARCH, CAPTURE, FORGET, "engram_memory_admin"])
def test_call_tool_without_a_host_binding_is_32603(harness: Harness, binding: Any, tool: str) -> None:
    assert _protocol_code(lambda: harness.service.call_tool(tool, {}, binding)) is JsonRpcCode.INTERNAL_ERROR


@pytest.mark.parametrize("binding", NOT_BINDINGS, ids=["none", "dict", "str"])
def test_list_tools_typed_calls_and_operation_digest_without_a_host_binding_are_32603(
    harness: Harness, binding: Any
) -> None:
    service = harness.service
    search = parse_args(SearchArgs, {"query": "q", "purpose_ref": PURPOSE})
    get = parse_args(GetArgs, {"record_id": "mem_abc", "purpose_ref": PURPOSE})
    admission = {"candidate_id": "candidate_x", "idempotency_key": make_key("ctx")}
    calls = [
        lambda: service.list_tools(binding),
        lambda: service.search(binding, search),
        lambda: service.get(binding, get),
        lambda: service.operation_digest(ADMISSION, admission, binding),
    ]
    assert [_protocol_code(call) for call in calls] == [JsonRpcCode.INTERNAL_ERROR] * len(calls)


@pytest.mark.parametrize("field", ["agent_id", "session"])
@pytest.mark.parametrize("tool", [SEARCH, GET, CAPTURE])
def test_an_empty_agent_or_session_is_32603(harness: Harness, field: str, tool: str) -> None:
    blanked: dict[str, Any] = {field: ""}
    binding = attrs.evolve(BINDING, **blanked)
    arguments = {
        SEARCH: {"query": "q", "purpose_ref": PURPOSE},
        GET: {"record_id": "mem_abc", "purpose_ref": PURPOSE},
        CAPTURE: capture_args(make_key("agentless")),
    }[tool]
    before = harness.state(BINDING)
    assert _protocol_code(lambda: harness.call(tool, arguments, binding)) is JsonRpcCode.INTERNAL_ERROR
    assert _protocol_code(lambda: harness.service.list_tools(binding)) is JsonRpcCode.INTERNAL_ERROR
    assert harness.state(BINDING) == before


# --------------------------------------------------------------------------- explicit grants


def test_a_binding_must_name_its_tools() -> None:
    with pytest.raises(TypeError, match="tools"):
        HostBinding(  # type: ignore[call-arg]
            tenant_id="t", workspace_id="w", principal="p", agent_id="a", session="s", purpose_ref=PURPOSE
        )


class _NoOffset(tzinfo):
    """A time zone that does not know its offset: a datetime in it is as good as naive."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None

    def tzname(self, dt: datetime | None) -> None:
        return None


@pytest.mark.parametrize("field", ["deadline", "requested_at", "approved_at"])
@pytest.mark.parametrize("zone", [None, _NoOffset()], ids=["naive", "no-offset"])
def test_a_time_without_an_offset_is_refused_when_a_binding_or_confirmation_is_built(
    field: str, zone: tzinfo | None
) -> None:
    """A deadline or a confirmation instant must be an instant: ``DEADLINE_EXCEEDED`` and the 30 s window
    compare it with the clock's aware time, so a naive one is refused at once, naming the field."""
    aware = datetime(2026, 1, 1, tzinfo=UTC)
    times = {"deadline": aware, "requested_at": aware, "approved_at": aware, field: datetime(2026, 1, 1, tzinfo=zone)}

    def build() -> object:
        if field == "deadline":
            return attrs.evolve(make_binding(), deadline=times["deadline"])
        return Confirmation(
            id="confirmation-1",
            tool=FORGET,
            target="mem_a",
            operation_digest="sha256:" + "0" * 64,
            requested_at=times["requested_at"],
            approved_at=times["approved_at"],
        )

    with pytest.raises(ValueError, match=rf"^{field} must be a timezone-aware datetime$"):
        build()


@pytest.mark.parametrize(
    "tools",
    [frozenset(), frozenset({SEARCH, GET}), ALL_TOOLS - {WITHDRAW, FORGET}, ALL_TOOLS],
    ids=["none", "read-only", "no-erasure", "all"],
)
def test_the_default_policy_only_narrows_the_named_tools(harness: Harness, tools: frozenset[str]) -> None:
    binding = HostBinding(
        tenant_id="t", workspace_id="w", principal="p", agent_id="a", session="s", purpose_ref=PURPOSE, tools=tools
    )
    listed = [descriptor["name"] for descriptor in harness.service.list_tools(binding)]
    assert listed == [name for name in (SEARCH, GET, CAPTURE, ADMISSION, WITHDRAW, FORGET) if name in tools]
    if FORGET not in tools:
        forget = {"record_id": "mem_abc", "idempotency_key": make_key("ungranted"), "reason_ref": "r"}
        assert _protocol_code(lambda: harness.call(FORGET, forget, binding)) is JsonRpcCode.INVALID_PARAMS


# --------------------------------------------------------------------------- host ids in NFC


@pytest.mark.parametrize("field", ["tenant_id", "workspace_id", "principal", "agent_id", "session", "purpose_ref"])
def test_a_host_id_not_in_nfc_is_32603(harness: Harness, field: str) -> None:
    decomposed: dict[str, Any] = {field: getattr(BINDING, field) + "-Ame\u0301lie"}
    binding = attrs.evolve(BINDING, **decomposed)
    before = harness.state(BINDING)
    search = {"query": "q", "purpose_ref": binding.purpose_ref}
    assert _protocol_code(lambda: harness.call(SEARCH, search, binding)) is JsonRpcCode.INTERNAL_ERROR
    assert _protocol_code(lambda: harness.service.list_tools(binding)) is JsonRpcCode.INTERNAL_ERROR
    assert harness.state(BINDING) == before


@pytest.mark.parametrize("field", ["tenant_id", "workspace_id", "principal", "agent_id", "session", "purpose_ref"])
def test_a_host_id_with_a_lone_surrogate_is_32603_on_every_tool(harness: Harness, field: str) -> None:
    """A non-UTF-8 id (``surrogateescape`` of a CLI argument) has no digest: -32603, never a retriable answer.

    It used to pass the NFC check and fail inside the first digest, so reads answered
    ``CAPABILITY_UNAVAILABLE`` and mutations a retriable ``MUTATION_OUTCOME_UNKNOWN`` forever.
    """
    lone: dict[str, Any] = {field: getattr(BINDING, field) + "-\udcff"}
    binding = attrs.evolve(BINDING, **lone)
    before = harness.state(BINDING)
    search = {"query": "q", "purpose_ref": binding.purpose_ref}
    capture = capture_args(make_key("lone-surrogate"), purpose_ref=binding.purpose_ref)
    assert _protocol_code(lambda: harness.call(SEARCH, search, binding)) is JsonRpcCode.INTERNAL_ERROR
    assert _protocol_code(lambda: harness.call(CAPTURE, capture, binding)) is JsonRpcCode.INTERNAL_ERROR
    assert _protocol_code(lambda: harness.service.list_tools(binding)) is JsonRpcCode.INTERNAL_ERROR
    assert harness.state(BINDING) == before


@pytest.mark.parametrize("audit_id", ["audit-\udcff", 7, b"audit"])
def test_an_audit_id_that_is_not_text_is_32603(harness: Harness, audit_id: Any) -> None:
    """The envelope echoes ``audit_id`` as a string: one that cannot be one is refused before anything runs."""
    binding = attrs.evolve(BINDING, audit_id=audit_id)
    before = harness.state(BINDING)
    capture = capture_args(make_key("audit-id"), purpose_ref=binding.purpose_ref)
    assert _protocol_code(lambda: harness.call(CAPTURE, capture, binding)) is JsonRpcCode.INTERNAL_ERROR
    assert harness.state(BINDING) == before


def test_canonically_equivalent_tenants_never_share_a_scope() -> None:
    composed = scope_key("tenant-Am\u00e9lie", "workspace-\u00c5")
    assert composed != scope_key("tenant-Amelie", "workspace-\u00c5")
    for tenant, workspace in (("tenant-Ame\u0301lie", "workspace-\u00c5"), ("tenant-Am\u00e9lie", "workspace-\u212b")):
        with pytest.raises(ValueError, match="NFC"):
            scope_key(tenant, workspace)
