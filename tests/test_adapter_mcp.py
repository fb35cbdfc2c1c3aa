"""The MCP adapter, driven in memory by the official SDK client (both protocol eras)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("mcp")

import anyio
import anyio.lowlevel
from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

import engram_memory._version
from engram_memory import ALL_TOOLS, DefaultPolicy, HostBinding, ManualClock, MemoryService, ProtocolError, connect
from engram_memory.adapters.mcp import BindingFor, RequestContext, build_server
from engram_memory.wire.descriptors import tool_descriptors
from engram_memory.wire.envelope import to_mcp_call_result

pytestmark = pytest.mark.anyio

CAPTURE = "engram_memory_capture"
ADMISSION = "engram_memory_request_admission"
SEARCH = "engram_memory_search"
WITHDRAW = "engram_memory_withdraw"
PURPOSE = "engineering-decisions"
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TIMEOUT = 30


@pytest.fixture(name="anyio_backend")
def _anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(name="mode", params=["auto", "legacy"])
def _mode(request: pytest.FixtureRequest) -> str:
    """``auto``: the 2026-07-28 per-request path; ``legacy``: the initialize handshake over JSON-RPC."""
    mode: str = request.param
    return mode


def _service() -> MemoryService:
    return connect(
        "memory:", policy=DefaultPolicy(admission="accept"), clock=ManualClock(), audit_ids=lambda: "audit-1"
    )


@pytest.fixture(name="service")
def _service_fixture() -> MemoryService:
    return _service()


def make_binding(tools: frozenset[str] = ALL_TOOLS) -> HostBinding:
    return HostBinding(
        tenant_id="acme",
        workspace_id="platform",
        principal="alice",
        agent_id="agent-1",
        session="session-1",
        purpose_ref=PURPOSE,
        # cast: mypy's attrs plugin types the ``converter=frozenset`` parameter as ``Iterable[_T_co]``
        tools=cast("Any", tools),
    )


@pytest.fixture(name="binding")
def _binding() -> HostBinding:
    return make_binding()


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def capture_args(key: str = "capture-key-000001", text: str = "Use blue-green deployments.") -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "payload": {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": {"t": 1_767_225_600_000},
            "components": [{"component_id": "decision", "kind": "decision", "text": text, "citation_ids": ["src"]}],
            "primary_component_id": "decision",
            "primary_event": {"at": 1_767_225_600_000, "type_ref": "decision-recorded", "citation_id": "src"},
            "citations": [
                {
                    "citation_id": "src",
                    "source_ref": "adr/0042-deployments.md",
                    "locator": {"scheme": "line", "value": "1"},
                    "content_digest": _digest(text),
                }
            ],
        },
        "evidence": {"evidence_ref": "review-notes", "evidence_digest": _digest("notes"), "citation_ids": ["src"]},
    }


@asynccontextmanager
async def connected(service: MemoryService, binding_for: BindingFor | HostBinding, mode: str) -> AsyncIterator[Client]:
    callback: BindingFor = (lambda _ctx: binding_for) if isinstance(binding_for, HostBinding) else binding_for
    with anyio.fail_after(TIMEOUT):
        async with Client(build_server(service, callback), mode=mode) as client:
            yield client


async def _mcp_error(client: Client, name: str, arguments: dict[str, Any]) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.call_tool(name, arguments)
    return caught.value


# ---------------------------------------------------------------------------------------- tools/list


async def test_lists_exactly_the_six_tool_descriptors(service: MemoryService, binding: HostBinding, mode: str) -> None:
    async with connected(service, binding, mode) as client:
        listed = await client.list_tools()
    expected = tool_descriptors()
    assert [tool.name for tool in listed.tools] == [d["name"] for d in expected]
    assert len(listed.tools) == 6
    for tool, descriptor in zip(listed.tools, expected, strict=True):
        assert tool.input_schema == descriptor["inputSchema"]
        assert tool.output_schema == descriptor["outputSchema"]
        assert tool.model_dump(by_alias=True, mode="json", exclude_none=True) == descriptor


async def test_a_narrower_binding_lists_fewer_tools(service: MemoryService, binding: HostBinding, mode: str) -> None:
    narrow = make_binding(frozenset({SEARCH, "engram_memory_get"}))
    async with connected(service, narrow, mode) as client:
        listed = await client.list_tools()
    assert [tool.name for tool in listed.tools] == ["engram_memory_search", "engram_memory_get"]


# ---------------------------------------------------------------------------------------- tools/call


async def test_capture_carries_the_envelope(service: MemoryService, binding: HostBinding, mode: str) -> None:
    expected = _service().call_tool(CAPTURE, capture_args(), binding)
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(CAPTURE, capture_args())
    assert result.is_error is False
    assert result.structured_content == expected
    assert result.structured_content["ok"] is True
    assert len(result.content) == 1
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert json.loads(text.text) == result.structured_content
    assert text.text == to_mcp_call_result(expected)["content"][0]["text"]


async def test_an_extra_argument_is_an_invalid_schema_envelope(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(CAPTURE, {**capture_args(), "note": "extra"})
    assert result.is_error is True
    assert result.structured_content["ok"] is False
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"
    assert isinstance(result.content[0], TextContent)
    assert json.loads(result.content[0].text) == result.structured_content


async def test_a_string_limit_is_not_coerced(service: MemoryService, binding: HostBinding, mode: str) -> None:
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(SEARCH, {"query": "deployments", "purpose_ref": PURPOSE, "limit": "10"})
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"


@pytest.mark.parametrize(
    "arguments",
    [
        {"query": "deployments", "purpose_ref": PURPOSE, "limit": "10"},
        {"query": "deployments", "purpose_ref": PURPOSE, "limit": 10.0, "surprise": [1, {"a": None}]},
        {"query": 7, "purpose_ref": PURPOSE, "capability_policy": {"network": "allow", "x": True}},
        {},
    ],
)
async def test_arguments_reach_the_service_untouched(
    service: MemoryService, binding: HostBinding, mode: str, arguments: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, Any, HostBinding, threading.Thread]] = []
    real = service.call_tool

    def spy(name: str, raw: Any, bound: HostBinding) -> dict[str, Any]:
        seen.append((name, raw, bound, threading.current_thread()))
        return real(name, raw, bound)

    monkeypatch.setattr(service, "call_tool", spy)
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(SEARCH, arguments)
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"
    [(name, raw, bound, thread)] = seen
    assert (name, bound) == (SEARCH, binding)
    assert raw == arguments
    assert json.dumps(raw, sort_keys=True) == json.dumps(arguments, sort_keys=True)  # same types: 10.0 stays a float
    assert thread is not threading.main_thread()  # the synchronous service runs in a worker thread


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        error = await _mcp_error(client, "engram_memory_delete_everything", {})
    assert (error.code, error.message) == (INVALID_PARAMS, "Unknown tool")


async def test_an_ungranted_tool_is_a_json_rpc_invalid_params_error(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, make_binding(ALL_TOOLS - {CAPTURE}), mode) as client:
        error = await _mcp_error(client, CAPTURE, capture_args())
    assert error.code == INVALID_PARAMS


async def test_a_purpose_mismatch_is_a_json_rpc_internal_error(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        error = await _mcp_error(client, SEARCH, {"query": "deployments", "purpose_ref": "marketing"})
    assert (error.code, error.message) == (INTERNAL_ERROR, "trusted call context unavailable")


async def test_withdraw_without_confirmation_is_a_json_rpc_internal_error(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        captured = await client.call_tool(CAPTURE, capture_args())
        candidate_id = captured.structured_content["output"]["value"]["candidate_id"]
        withdraw = {"candidate_id": candidate_id, "idempotency_key": "withdraw-key-00001", "reason_ref": "superseded"}
        error = await _mcp_error(client, WITHDRAW, withdraw)
    assert (error.code, error.message) == (INTERNAL_ERROR, "trusted call context unavailable")


async def test_capture_then_admission_over_mcp(service: MemoryService, binding: HostBinding, mode: str) -> None:
    async with connected(service, binding, mode) as client:
        captured = await client.call_tool(CAPTURE, capture_args())
        candidate_id = captured.structured_content["output"]["value"]["candidate_id"]
        admitted = await client.call_tool(
            ADMISSION, {"candidate_id": candidate_id, "idempotency_key": "admission-key-0001"}
        )
    assert admitted.is_error is False
    assert admitted.structured_content["output"]["value"]["outcome"]["status"] == "accepted"


# ---------------------------------------------------------------------------------------- the host callback


async def test_the_callback_gets_the_request_context(service: MemoryService, binding: HostBinding, mode: str) -> None:
    methods: list[str] = []

    def binding_for(ctx: RequestContext) -> HostBinding:
        assert isinstance(ctx, ServerRequestContext)
        methods.append(ctx.method)
        return binding

    async with connected(service, binding_for, mode) as client:
        await client.list_tools()
        await client.call_tool(CAPTURE, capture_args())
    assert methods == ["tools/list", "tools/call"]


async def test_an_async_callback_is_awaited(service: MemoryService, binding: HostBinding, mode: str) -> None:
    async def binding_for(_ctx: RequestContext) -> HostBinding:
        await anyio.lowlevel.checkpoint()
        return binding

    async with connected(service, binding_for, mode) as client:
        result = await client.call_tool(CAPTURE, capture_args())
    assert result.is_error is False


@pytest.mark.parametrize("answer", [None, {"tenant_id": "t"}, "binding"], ids=["none", "dict", "str"])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_callback_answering_no_host_binding_is_untrusted_context(
    service: MemoryService, mode: str, answer: object, kind: str
) -> None:
    """Sync or async, a callback's answer that is not a ``HostBinding`` is the same ``-32603``."""

    def sync_binding_for(_ctx: RequestContext) -> Any:
        return answer

    async def async_binding_for(_ctx: RequestContext) -> Any:
        return answer

    binding_for = sync_binding_for if kind == "sync" else async_binding_for
    async with connected(service, binding_for, mode) as client:
        error = await _mcp_error(client, CAPTURE, capture_args())
        with pytest.raises(MCPError) as listed:
            await client.list_tools()
    assert (error.code, error.message) == (INTERNAL_ERROR, "trusted call context unavailable")
    assert (listed.value.code, listed.value.error.message) == (INTERNAL_ERROR, "trusted call context unavailable")


async def test_a_callback_protocol_error_is_a_json_rpc_error(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    def binding_for(_ctx: RequestContext) -> HostBinding:
        raise ProtocolError.untrusted_context("no authenticated caller")

    async with connected(service, binding_for, mode) as client:
        error = await _mcp_error(client, CAPTURE, capture_args())
        with pytest.raises(MCPError) as listed:
            await client.list_tools()
    assert (error.code, error.message) == (INTERNAL_ERROR, "trusted call context unavailable")
    assert listed.value.code == INTERNAL_ERROR
    assert "authenticated" not in repr(listed.value.error)


async def test_an_unexpected_failure_does_not_leak(
    service: MemoryService, binding: HostBinding, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_args: Any) -> dict[str, Any]:
        raise RuntimeError("secret-internal-detail")

    monkeypatch.setattr(service, "call_tool", boom)
    async with connected(service, binding, mode) as client:
        error = await _mcp_error(client, CAPTURE, capture_args())
    assert error.code == INTERNAL_ERROR
    assert "secret-internal-detail" not in repr(error.error)


async def test_a_failing_callback_does_not_leak_on_tools_list(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    def binding_for(_ctx: RequestContext) -> HostBinding:
        raise LookupError("secret-session-table")

    async with connected(service, binding_for, mode) as client:
        with pytest.raises(MCPError) as listed:
            await client.list_tools()
    assert (listed.value.code, listed.value.message) == (INTERNAL_ERROR, "Internal server error")
    assert "secret-session-table" not in repr(listed.value.error)


async def test_absent_arguments_are_an_invalid_schema_envelope(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(SEARCH, None)
    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"


async def test_a_callback_mcp_error_passes_through_unchanged(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    def binding_for(_ctx: RequestContext) -> HostBinding:
        raise MCPError(-32001, "host refused the session")

    async with connected(service, binding_for, mode) as client:
        error = await _mcp_error(client, CAPTURE, capture_args())
        with pytest.raises(MCPError) as listed:
            await client.list_tools()
    assert (error.code, error.message) == (-32001, "host refused the session")
    assert (listed.value.code, listed.value.message) == (-32001, "host refused the session")


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
async def test_an_unexpected_failure_is_logged_with_its_traceback(
    service: MemoryService, binding: HostBinding, mode: str, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    def binding_for(_ctx: RequestContext) -> HostBinding:
        raise LookupError("secret-session-table")

    caplog.set_level(logging.ERROR, logger="engram_memory.adapters.mcp")
    async with connected(service, binding_for, mode) as client:
        request = client.call_tool(CAPTURE, capture_args()) if method == "tools/call" else client.list_tools()
        with pytest.raises(MCPError):
            await request
    [record] = [r for r in caplog.records if r.name == "engram_memory.adapters.mcp"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == f"MCP {method} handler failed"
    assert record.exc_info is not None
    assert record.exc_info[0] is LookupError
    assert str(record.exc_info[1]) == "secret-session-table"


async def test_a_protocol_error_is_not_logged_as_a_failure(
    service: MemoryService, binding: HostBinding, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="engram_memory.adapters.mcp")
    async with connected(service, binding, mode) as client:
        error = await _mcp_error(client, "engram_memory_delete_everything", {})
    assert error.code == INVALID_PARAMS
    assert [r for r in caplog.records if r.name == "engram_memory.adapters.mcp"] == []


def _version_in_source() -> str:
    """The version as the build backend reads it: ``_version.py`` of the package as imported."""
    source = Path(engram_memory._version.__file__).read_text(encoding="utf-8")  # the checkout's, or the wheel's
    match = re.search(r'^__version__ = "([^"]+)"$', source, re.MULTILINE)
    assert match is not None
    return match.group(1)


async def test_the_tool_list_is_private_and_never_cached(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        listed = await client.list_tools()
    assert listed.ttl_ms == 0
    assert listed.cache_scope == "private"
    assert listed.next_cursor is None


async def test_the_server_announces_its_name_and_the_package_version(
    service: MemoryService, binding: HostBinding, mode: str
) -> None:
    async with connected(service, binding, mode) as client:
        default_info = client.server_info
    with anyio.fail_after(TIMEOUT):
        async with Client(build_server(service, lambda _ctx: binding, name="acme-memory"), mode=mode) as client:
            named_info = client.server_info
    assert default_info is not None
    assert named_info is not None
    assert default_info.name == "engram-memory"
    assert named_info.name == "acme-memory"
    # The version as the build backend reads it (hatch: ``engram_memory/_version.py``).
    version = _version_in_source()
    assert default_info.version == named_info.version == version


async def test_tools_list_runs_the_service_in_a_worker_thread(
    service: MemoryService, binding: HostBinding, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[HostBinding, threading.Thread]] = []
    real = service.list_tools

    def spy(bound: HostBinding) -> list[dict[str, Any]]:
        seen.append((bound, threading.current_thread()))
        return real(bound)

    monkeypatch.setattr(service, "list_tools", spy)
    async with connected(service, binding, mode) as client:
        listed = await client.list_tools()
    assert len(listed.tools) == 6
    [(bound, thread)] = seen
    assert bound == binding
    assert thread is not threading.main_thread()


async def test_absent_arguments_reach_the_service_as_none(
    service: MemoryService, binding: HostBinding, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    real = service.call_tool

    def spy(name: str, raw: Any, bound: HostBinding) -> dict[str, Any]:
        seen.append(raw)
        return real(name, raw, bound)

    monkeypatch.setattr(service, "call_tool", spy)
    async with connected(service, binding, mode) as client:
        result = await client.call_tool(SEARCH, None)
    assert seen == [None]
    assert result.structured_content == {
        "ok": False,
        "auditId": "audit-1",
        "redactionClass": "high",
        "error": {"code": "INVALID_SCHEMA", "message": "arguments do not match the closed schema", "retriable": False},
    }


# ---------------------------------------------------------------------------------------- packaging


def test_the_core_does_not_import_the_sdk() -> None:
    script = "import sys, engram_memory, engram_memory.adapters; assert 'mcp' not in sys.modules, 'mcp imported'"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=TIMEOUT)
