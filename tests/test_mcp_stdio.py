"""End to end over stdio: a real server subprocess driven by the official SDK stdio client."""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
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

from engram_memory.adapters._stdin import MAX_LINE_BYTES
from engram_memory.cli import STDIO_TOOLS
from engram_memory.wire.descriptors import tool_descriptors

pytestmark = pytest.mark.anyio

TENANT = "acme"
WORKSPACE = "platform"
PRINCIPAL = "alice"
PURPOSE = "engineering-decisions"
TIMEOUT = 30
INITIALIZE_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
RAW_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE_PARAMS}
"""What a client without the SDK sends first."""


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


TWO_SERVERS_SCRIPT = """
import sys
import anyio
from engram_memory import HostBinding, connect
from engram_memory.adapters.mcp import serve_stdio

binding = HostBinding(tenant_id="acme", workspace_id="platform", principal="alice", agent_id="agent",
                      session="stdio", purpose_ref="engineering-decisions",
                      tools=frozenset({"engram_memory_get"}))

async def main():
    service = connect("memory:")
    async with anyio.create_task_group() as group:
        group.start_soon(serve_stdio, service, binding)
        await anyio.sleep(0.2)
        try:
            await serve_stdio(service, binding)
        except RuntimeError as exc:
            print("second:", exc, file=sys.stderr, flush=True)
    await serve_stdio(service, binding)  # once the first has returned, stdin (at its end) may be served again
    print("third returned", file=sys.stderr, flush=True)

anyio.run(main)
"""


def test_a_second_serve_stdio_in_the_process_is_refused_and_the_first_serves_on() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", TWO_SERVERS_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        assert process.stdin is not None
        assert select.select([process.stderr], [], [], TIMEOUT)[0], "the second serve_stdio said nothing"
        refused = process.stderr.readline()  # before the first server's input ends
        assert refused == b"second: serve_stdio is already serving this process's stdin and stdout\n"
        stdout, stderr = process.communicate(json.dumps(RAW_INITIALIZE).encode() + b"\n", timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert [answer["id"] for answer in answers] == [1]  # one answer, from the first server
    assert answers[0]["result"]["serverInfo"]["name"] == "engram-memory"
    assert stderr == b"third returned\n"


PENDING = (sys.executable, "-m", "engram_memory", "pending")


class _RawServer:
    """``serve-mcp`` driven line by line over pipes (no SDK client), to reach what a client cannot send."""

    def __init__(self, db: Path, *, stderr: int = subprocess.PIPE) -> None:
        self.process = subprocess.Popen(  # our own console command
            server_command(db),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        self.next_id = 1
        self.unread = b""

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read lines until its answer."""
        ident, self.next_id = self.next_id, self.next_id + 1
        self.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode())
        while True:
            message = self.receive()
            if message.get("id") == ident:
                return message

    def receive(self) -> dict[str, Any]:
        """The server's next message; fails after ``TIMEOUT`` seconds without one."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()  # read raw: nothing waits in a Python buffer
        while b"\n" not in self.unread:
            ready, _, _ = select.select([fd], [], [], TIMEOUT)
            assert ready, "the server sent no message"
            chunk = os.read(fd, 1 << 16)
            assert chunk, "the server closed its output"
            self.unread += chunk
        line, _, self.unread = self.unread.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def initialize(self) -> None:
        assert "result" in self.request("initialize", INITIALIZE_PARAMS)
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def stop(self) -> None:
        """Kill the server if it still runs, and close its pipes."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.parametrize(
    ("stop", "status", "said"),
    [(signal.SIGINT, 130, b"interrupted\n"), (signal.SIGTERM, 143, b"terminated\n")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_stops_a_server_whose_input_stays_open(
    tmp_path: Path, stop: signal.Signals, status: int, said: bytes
) -> None:
    """Ctrl-C, or SIGTERM (systemd, docker, an SDK client's stop), ends an idle server at once and closes it."""
    db = tmp_path / "memory.db"
    server = _RawServer(db)
    try:
        server.initialize()
        assert "result" in server.request("ping", {})
        time.sleep(0.5)  # the server now waits for its next line (where a blocked read ignored Ctrl-C)
        os.kill(server.process.pid, stop)
        assert server.process.wait(timeout=TIMEOUT) == status  # stdin is still open
        assert server.process.stderr is not None
        assert server.process.stderr.read() == said
    finally:
        server.stop()
    verified = subprocess.run(  # our own console command
        [sys.executable, "-m", "engram_memory", "verify", "--db", str(db)], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stderr


def _jam(server: _RawServer) -> int:
    """Send ``tools/list`` requests, reading no answer, until the server stops reading: how many were sent."""
    assert server.process.stdin is not None
    fd = server.process.stdin.fileno()
    os.set_blocking(fd, False)
    written, jammed_since = 0, None
    deadline = time.monotonic() + TIMEOUT
    while jammed_since is None or time.monotonic() - jammed_since < 1:  # its input full for a second
        assert time.monotonic() < deadline, "the server never stopped reading"
        try:  # one short line is written whole or not at all
            os.write(fd, b'{"jsonrpc": "2.0", "id": %d, "method": "tools/list"}\n' % (1000 + written))
        except BlockingIOError:
            jammed_since = jammed_since or time.monotonic()
            time.sleep(0.05)
        else:
            written, jammed_since = written + 1, None
    return written


def test_sigint_stops_a_server_whose_client_does_not_read_its_answers(tmp_path: Path) -> None:
    """A full stdout used to pin the SDK's writer thread, which no cancellation reaches: Ctrl-C hung."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        written = _jam(server)
        os.kill(server.process.pid, signal.SIGINT)
        assert server.process.wait(timeout=TIMEOUT) == 130
        assert server.process.stderr is not None
        assert server.process.stderr.read() == b"interrupted\n"
    finally:
        server.stop()
    assert written > 100  # many answers were waiting to be read


def test_sigint_stops_a_server_whose_stderr_shares_the_full_pipe(tmp_path: Path) -> None:
    """``2>&1``: the ``interrupted`` line is dropped rather than waited for."""
    server = _RawServer(tmp_path / "memory.db", stderr=subprocess.STDOUT)
    try:
        server.initialize()
        _jam(server)
        os.kill(server.process.pid, signal.SIGINT)
        assert server.process.wait(timeout=TIMEOUT) == 130
    finally:
        server.stop()


PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
INVALID_REQUEST = {"code": -32600, "message": "Invalid Request"}


def _nothing_pending(db: Path) -> bool:
    pending = subprocess.run(  # our own console command
        [*PENDING, "--db", str(db), "--tenant", TENANT, "--workspace", WORKSPACE], capture_output=True, check=False
    )
    assert pending.returncode == 0, pending.stderr
    return pending.stdout == b""


def _capture_line(arguments: dict[str, Any], ident: int) -> bytes:
    call = {"jsonrpc": "2.0", "id": ident, "method": "tools/call"}
    return json.dumps({**call, "params": {"name": "engram_memory_capture", "arguments": arguments}}).encode()


def test_a_client_that_closes_the_servers_output_ends_it_cleanly_and_its_capture_commits_whole(
    tmp_path: Path,
) -> None:
    """The answer meets EPIPE: status 0 and nothing on stderr (it was status 1 and a traceback)."""
    db = tmp_path / "memory.db"
    server = _RawServer(db)
    try:
        server.initialize()
        assert server.process.stdout is not None
        server.process.stdout.close()  # the client's end of the server's stdout
        server.send(_capture_line(capture_args("Closed output, committed capture."), 7))
        assert server.process.wait(timeout=TIMEOUT) == 0  # stdin is still open: the closed output ended it
        assert server.process.stderr is not None
        assert server.process.stderr.read() == b""
    finally:
        server.stop()
    assert not _nothing_pending(db)  # the capture whose answer nobody could read is committed
    verified = subprocess.run(  # our own console command
        [sys.executable, "-m", "engram_memory", "verify", "--db", str(db)], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_client_that_closes_the_one_socket_of_both_streams_with_answers_unread_ends_it_cleanly(
    tmp_path: Path,
) -> None:
    """One socket for stdin and stdout (socat, inetd): the server's read then meets ECONNRESET."""
    db = tmp_path / "memory.db"
    client, served = socket.socketpair()
    with client:
        with served:
            process = subprocess.Popen(  # our own console command
                server_command(db),
                stdin=served.fileno(),
                stdout=served.fileno(),
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        try:
            client.sendall(json.dumps(RAW_INITIALIZE).encode() + b"\n")
            assert select.select([client], [], [], TIMEOUT)[0], "the server sent no message"
            assert b'"id":1' in client.recv(1 << 16)
            client.sendall(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
            client.sendall(_capture_line(capture_args("One socket, closed with its answer unread."), 2) + b"\n")
            assert select.select([client], [], [], TIMEOUT)[0], "the server sent no answer"  # left unread
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    try:
        assert process.wait(timeout=TIMEOUT) == 0
        assert process.stderr is not None
        assert process.stderr.read() == b""
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
    assert not _nothing_pending(db)


def test_a_line_that_is_not_utf8_is_answered_parse_error_and_nothing_is_captured(tmp_path: Path) -> None:
    """The SDK would decode it with U+FFFD and commit the altered text; it is answered -32700 instead."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        line = _capture_line(capture_args("Invalid zqmarkzq byte."), 900)
        server.send(line.replace(b"zqmarkzq", b"\xff"))  # a raw 0xff byte inside the text
        assert server.receive() == PARSE_ERROR
        search = {"query": "invalid byte", "purpose_ref": PURPOSE}
        found = server.request("tools/call", {"name": "engram_memory_search", "arguments": search})
        assert found["result"]["structuredContent"]["ok"] is True  # the server goes on
        assert _nothing_pending(tmp_path / "memory.db")
    finally:
        server.stop()


def test_a_duplicated_argument_is_answered_invalid_request_and_nothing_is_captured(tmp_path: Path) -> None:
    """The SDK's parser keeps the last of two keys; over stdio the message is refused before it."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        arguments = capture_args("Shown to a proxy that reads the first key.")
        line = _capture_line(arguments, 901)
        key = b'"idempotency_key": "stdio-capture-key-0001"'
        assert line.count(key) == 1
        server.send(line.replace(key, key + b', "idempotency_key": "stdio-capture-key-0002"'))
        assert server.receive() == {
            "jsonrpc": "2.0",
            "id": 901,
            "error": {"code": -32600, "message": "Invalid Request"},
        }
        server.send(b"   ")  # a blank line holds no message and gets no answer
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"k": 1, "k": 2}}')  # nor does this
        server.send(b"not json at all")  # what the SDK cannot parse is answered too
        assert server.receive() == PARSE_ERROR
        assert server.request("ping", {})["result"] == {}
        assert _nothing_pending(tmp_path / "memory.db")
        same = json.loads(_capture_line(arguments, 902))  # the message without the duplicate is served
        server.send(json.dumps(same).encode())
        served = server.receive()
        assert served["id"] == 902
        assert served["result"]["structuredContent"]["output"]["value"]["status"] == "committed_pending"
        assert not _nothing_pending(tmp_path / "memory.db")
    finally:
        server.stop()


def test_requests_read_before_end_of_input_are_answered(tmp_path: Path) -> None:
    """Input that ends right after its requests (a file, a client that writes and closes) loses no answer."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        search = {"query": "anything", "purpose_ref": PURPOSE}
        call = {"jsonrpc": "2.0", "id": 71, "method": "tools/call"}
        server.send(json.dumps({**call, "params": {"name": "engram_memory_search", "arguments": search}}).encode())
        server.send(b'{"jsonrpc": "2.0", "id": 72, "method": "ping"}')
        server.send(b"not json at all")
        assert server.process.stdin is not None
        server.process.stdin.close()  # end of input, with three lines unanswered yet
        answers = [server.receive() for _ in range(3)]
        assert server.process.wait(timeout=TIMEOUT) == 0
    finally:
        server.stop()
    by_id = {answer["id"]: answer for answer in answers}
    assert set(by_id) == {71, 72, None}
    assert by_id[71]["result"]["structuredContent"]["ok"] is True
    assert by_id[72]["result"] == {}
    assert by_id[None] == PARSE_ERROR


def test_a_line_over_the_limit_is_answered_parse_error_and_the_server_goes_on(tmp_path: Path) -> None:
    """Over 9 MiB, a line is dropped as it is read (never parsed, never held whole)."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        line = _capture_line(capture_args("zqmarkzq"), 903)
        server.send(line.replace(b"zqmarkzq", b"x" * MAX_LINE_BYTES))  # valid JSON, one line, too long
        assert server.receive() == PARSE_ERROR
        assert server.request("ping", {})["result"] == {}
        assert _nothing_pending(tmp_path / "memory.db")
    finally:
        server.stop()


def test_lines_that_stopped_the_server_are_answered_and_it_goes_on(tmp_path: Path) -> None:
    """An id with a lone surrogate (the SDK could not write its answer), a duplicate before deep nesting or bad JSON."""
    server = _RawServer(tmp_path / "memory.db")
    try:
        server.initialize()
        server.send(b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}')
        assert server.receive() == {"jsonrpc": "2.0", "id": None, "error": INVALID_REQUEST}
        meta = b'{"a": [{"k": 1, "k": 2}, ' + b"[" * 100_000 + b"]" * 100_000 + b"]}"  # too deep on any Python
        server.send(b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": ' + meta + b"}}")
        assert server.receive() == {"jsonrpc": "2.0", "id": None, "error": INVALID_REQUEST}
        server.send(b'{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"k": 1, "k": 2}} x')  # not JSON
        assert server.receive() == PARSE_ERROR
        assert server.request("ping", {})["result"] == {}
    finally:
        server.stop()
