"""End to end over stdio: a real server subprocess driven by the official SDK stdio client."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from engram_memory.cli import STDIO_TOOLS
from engram_memory.wire.descriptors import tool_descriptors

pytestmark = pytest.mark.anyio

TENANT = "acme"
WORKSPACE = "platform"
PRINCIPAL = "alice"
PURPOSE = "engineering-decisions"
TIMEOUT = 30


def server_command(db: Path) -> list[str]:
    """The server under test: the ``engram-memory serve-mcp`` console command, serving ``db``."""
    return [
        sys.executable,
        "-m",
        "engram_memory",
        "serve-mcp",
        "--db",
        str(db),
        "--tenant",
        TENANT,
        "--workspace",
        WORKSPACE,
        "--principal",
        PRINCIPAL,
        "--purpose",
        PURPOSE,
        "--admission",
        "accept",
    ]


@pytest.fixture(name="anyio_backend")
def _anyio_backend() -> str:
    return "asyncio"


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def capture_args(text: str) -> dict[str, Any]:
    return {
        "idempotency_key": "stdio-capture-key-0001",
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


def _child_pids() -> set[int]:
    """Live children of this process (Linux ``/proc``; empty where unavailable)."""
    pids: set[int] = set()
    for children in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in children.read_text().split())
    return pids


@asynccontextmanager
async def stdio_session(tmp_path: Path) -> AsyncIterator[ClientSession]:
    """Start the server subprocess, initialize a session, and make sure the process is gone after."""
    before = _child_pids()
    command = server_command(tmp_path / "memory.db")
    params = StdioServerParameters(command=command[0], args=command[1:])
    with (tmp_path / "server.stderr").open("w", encoding="utf-8") as errlog:
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                initialized = await session.initialize()
                assert initialized.server_info.name == "engram-memory"
                yield session
        # stdio_client closes stdin, then terminates (and finally kills) the server's process group
        assert _child_pids() <= before


def _envelope(result: CallToolResult) -> dict[str, Any]:
    [text] = result.content
    assert isinstance(text, TextContent)
    assert json.loads(text.text) == result.structured_content
    assert result.is_error is (not result.structured_content["ok"])
    envelope: dict[str, Any] = result.structured_content
    return envelope


async def _capture_and_admit(session: ClientSession) -> str:
    captured = _envelope(await session.call_tool("engram_memory_capture", capture_args("Use blue-green deployments.")))
    assert captured["ok"] is True, captured
    assert captured["output"]["value"]["status"] == "committed_pending"
    candidate_id = captured["output"]["value"]["candidate_id"]
    admission = {"candidate_id": candidate_id, "idempotency_key": "stdio-admission-key-1"}
    admitted = _envelope(await session.call_tool("engram_memory_request_admission", admission))
    assert admitted["ok"] is True, admitted
    outcome = admitted["output"]["value"]["outcome"]
    assert outcome["status"] == "accepted"
    record_id: str = outcome["record_id"]
    return record_id


async def test_stdio_lists_captures_admits_and_rejects(tmp_path: Path) -> None:
    async with stdio_session(tmp_path) as session:
        listed = await session.list_tools()
        served = [d for d in tool_descriptors() if d["name"] in STDIO_TOOLS]
        assert [tool.name for tool in listed.tools] == [d["name"] for d in served]
        assert [tool.input_schema for tool in listed.tools] == [d["inputSchema"] for d in served]
        assert {"engram_memory_withdraw", "engram_memory_forget"}.isdisjoint(tool.name for tool in listed.tools)

        await _capture_and_admit(session)

        extra = {"query": "deployments", "purpose_ref": PURPOSE, "unexpected": True}
        rejected = await session.call_tool("engram_memory_search", extra)
        assert rejected.is_error is True
        assert _envelope(rejected)["error"]["code"] == "INVALID_SCHEMA"

        with pytest.raises(MCPError) as unknown:
            await session.call_tool("engram_memory_delete_everything", {})
        assert (unknown.value.code, unknown.value.message) == (-32602, "Unknown tool")


async def test_stdio_search_and_get_find_the_admitted_record(tmp_path: Path) -> None:
    async with stdio_session(tmp_path) as session:
        record_id = await _capture_and_admit(session)

        search = {"query": "blue-green deployments", "purpose_ref": PURPOSE}
        found = _envelope(await session.call_tool("engram_memory_search", search))
        assert found["ok"] is True, found
        assert [packet["record"]["record_id"] for packet in found["output"]["value"]["records"]] == [record_id]

        got = _envelope(await session.call_tool("engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}))
        assert got["ok"] is True, got
        assert got["output"]["value"]["record"]["record_id"] == record_id


SERVE_STDIO_SCRIPT = """
import anyio
from engram_memory import HostBinding, connect
from engram_memory.adapters.mcp import serve_stdio

binding = HostBinding(tenant_id="acme", workspace_id="platform", principal="alice", agent_id="agent",
                      session="stdio", purpose_ref="engineering-decisions",
                      tools=frozenset({"engram_memory_get", "engram_memory_search"}))
anyio.run(lambda: serve_stdio(connect("memory:"), binding, name="acme-stdio-memory"))
"""


async def test_serve_stdio_announces_its_name_and_serves_its_binding(tmp_path: Path) -> None:
    before = _child_pids()
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVE_STDIO_SCRIPT])
    with (tmp_path / "server.stderr").open("w", encoding="utf-8") as errlog:
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                initialized = await session.initialize()
                listed = await session.list_tools()
                got = await session.call_tool("engram_memory_get", {"record_id": "mem_x", "purpose_ref": PURPOSE})
        assert _child_pids() <= before
    assert initialized.server_info.name == "acme-stdio-memory"
    assert [tool.name for tool in listed.tools] == ["engram_memory_search", "engram_memory_get"]
    envelope = _envelope(got)
    assert envelope["ok"] is False
    assert envelope["error"] == {"code": "NOT_FOUND", "message": "memory target not found", "retriable": False}
