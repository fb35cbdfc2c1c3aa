"""The JSON screen in front of an MCP HTTP transport: duplicate keys refused before the SDK parses a body."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from mcp.server.streamable_http_manager import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.testclient import TestClient

from engram_memory import DefaultPolicy, HostBinding, MemoryAdmin, MemoryService, connect
from engram_memory.adapters import _json_screen as screen_module
from engram_memory.adapters._http_screen import SCREENS_AT_ONCE
from engram_memory.adapters.mcp import ASGIApp, build_server, screen_json_bodies
from tests.test_mcp_stdio import capture_args

PURPOSE = "engineering-decisions"
BINDING = HostBinding(
    tenant_id="acme",
    workspace_id="platform",
    principal="alice",
    agent_id="agent",
    session="http",
    purpose_ref=PURPOSE,
    tools=frozenset({"engram_memory_capture"}),
)
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}
INVALID_REQUEST = {"code": -32600, "message": "Invalid Request"}
PARSE = {"code": -32700, "message": "Parse error"}


def _capture(ident: int, key: str, text: str, *, also: str | None = None) -> bytes:
    """A ``tools/call`` of capture; with ``also``, its component's ``text`` is given a second time, as ``also``."""
    arguments = capture_args(text)
    arguments["idempotency_key"] = key
    call = {"name": "engram_memory_capture", "arguments": arguments}
    line = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": call}).encode()
    if also is None:
        return line
    member = json.dumps({"text": text})[1:-1].encode()
    assert line.count(member) == 1
    return line.replace(member, member + b", " + json.dumps({"text": also})[1:-1].encode())


def _pending_texts(service: MemoryService) -> list[str]:
    """The text of each pending candidate of the binding's scope, oldest first."""
    pending = MemoryAdmin(service).pending_candidates(tenant_id=BINDING.tenant_id, workspace_id=BINDING.workspace_id)
    return [candidate.payload["components"][0]["text"] for candidate in pending]


@pytest.fixture(name="service")
def _service() -> Iterator[MemoryService]:
    service = connect("memory:", policy=DefaultPolicy())
    yield service
    service.close()


def _client(service: MemoryService, *, screened: bool) -> TestClient:
    server = build_server(service, lambda _ctx: BINDING)
    app: ASGIApp = server.streamable_http_app(stateless_http=True, json_response=True)
    return TestClient(screen_json_bodies(app) if screened else app, base_url="http://127.0.0.1:8000")


def test_over_streamable_http_a_duplicated_argument_is_refused_and_nothing_is_captured(service: MemoryService) -> None:
    duplicated = _capture(7, "http-capture-key-0001", "Alpha zqone.", also="Beta zqtwo.")
    with _client(service, screened=True) as client:
        refused = client.post("/mcp", content=duplicated, headers=HEADERS)
        served = client.post("/mcp", content=_capture(8, "http-capture-key-0002", "Gamma zqthree."), headers=HEADERS)
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/json"
    assert refused.json() == {"jsonrpc": "2.0", "id": 7, "error": INVALID_REQUEST}
    assert served.status_code == 200
    assert served.json()["result"]["structuredContent"]["ok"] is True, served.text
    assert _pending_texts(service) == ["Gamma zqthree."]


def test_without_the_screen_the_sdk_serves_the_last_of_two_keys(service: MemoryService) -> None:
    """Why the screen exists: the SDK's own transport captures the text a proxy reading the first key never saw."""
    duplicated = _capture(7, "http-capture-key-0001", "Alpha zqone.", also="Beta zqtwo.")
    with _client(service, screened=False) as client:
        answer = client.post("/mcp", content=duplicated, headers=HEADERS)
    assert answer.status_code == 200
    assert answer.json()["result"]["structuredContent"]["ok"] is True, answer.text
    assert _pending_texts(service) == ["Beta zqtwo."]


MODERN = "2026-07-28"
MODERN_HEADERS = {
    **HEADERS,
    "mcp-protocol-version": MODERN,
    "mcp-method": "tools/call",
    "mcp-name": "engram_memory_capture",
}


def _modern_capture(ident: int, key: str, text: str, also: str) -> str:
    """A capture on the SDK's newer request path (its protocol version in the header and ``_meta``), ``text`` twice."""
    line = json.loads(_capture(ident, key, text))
    line["params"]["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    member = json.dumps({"text": text})[1:-1]
    return json.dumps(line).replace(member, member + ", " + json.dumps({"text": also})[1:-1])


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "utf-8 with a byte order mark": lambda text: b"\xef\xbb\xbf" + text.encode(),
    "utf-16-le": lambda text: text.encode("utf-16-le"),
    "utf-16-be": lambda text: text.encode("utf-16-be"),
}


def test_on_the_newer_request_path_a_body_the_screen_cannot_read_is_refused(service: MemoryService) -> None:
    """That path parses bytes with ``json.loads``, which takes a byte order mark or UTF-16: the screen fails closed."""
    with _client(service, screened=False) as client:  # the gap: the SDK reads them and keeps the last key
        for n, (name, encode) in enumerate(ENCODINGS.items()):
            body = encode(_modern_capture(10 + n, f"modern-capture-key-000{n}", "Alpha zqone.", f"Beta {name}."))
            assert client.post("/mcp", content=body, headers=MODERN_HEADERS).status_code == 200
    assert _pending_texts(service) == [f"Beta {name}." for name in ENCODINGS]
    with _client(service, screened=True) as client:
        for n, encode in enumerate(ENCODINGS.values()):
            body = encode(_modern_capture(20 + n, f"modern-capture-key-002{n}", "Gamma zqthree.", "Delta zqfour."))
            refused = client.post("/mcp", content=body, headers=MODERN_HEADERS)
            assert (refused.status_code, refused.json()) == (
                400,
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
            )
        plain = _modern_capture(30, "modern-capture-key-0030", "Gamma zqthree.", "Delta zqfour.").encode()
        refused = client.post("/mcp", content=plain, headers=MODERN_HEADERS)
        assert (refused.status_code, refused.json()["id"]) == (400, 30)
    assert len(_pending_texts(service)) == len(ENCODINGS)  # nothing more was captured


class _Recorder:
    """A fake ASGI transport, and the app it reaches: what the app received, and what was sent to the client.

    Its client stays until the app is called (then ``receive`` gives the disconnect, as a server
    does once the request is served) or, with ``leaves``, disconnects right after its body.
    """

    def __init__(self, *incoming: dict[str, Any], leaves: bool = False, leaves_after: float = 0.0) -> None:
        self.incoming = list(incoming)
        self.leaves = leaves
        self.leaves_after = leaves_after
        self.received = 0
        self.sent: list[dict[str, Any]] = []
        self.calls: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        self._called: anyio.Event | None = None

    def called(self) -> anyio.Event:
        """Set once the app is called (made in the event loop of the first to ask)."""
        if self._called is None:
            self._called = anyio.Event()
        return self._called

    async def receive(self) -> dict[str, Any]:
        self.received += 1
        if self.incoming:
            return self.incoming.pop(0)
        if self.leaves:
            await anyio.sleep(self.leaves_after)
        else:
            await self.called().wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @staticmethod
    async def app(scope: Any, receive: Any, send: Any) -> None:
        """The wrapped app: it records, on the scope's recorder, what it reads."""
        recorder: _Recorder = scope["recorder"]
        recorder.called().set()
        got = [await receive()]
        while got[-1].get("more_body"):
            got.append(await receive())
        got.append(await receive())  # what follows the body
        recorder.calls.append((scope, got))

    def scope(self, scope: dict[str, Any]) -> dict[str, Any]:
        return {**scope, "recorder": self}

    def run(self, scope: dict[str, Any], **options: int) -> None:
        screened: Any = screen_json_bodies(self.app, **options)
        anyio.run(screened, self.scope(scope), self.receive, self.send)

    def answer(self) -> tuple[int, bytes]:
        start, body = self.sent
        assert (start["type"], body["type"]) == ("http.response.start", "http.response.body")
        assert (b"content-length", str(len(body["body"])).encode()) in start["headers"]
        return start["status"], body["body"]


def _post(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": list(headers)}


def _chunks(body: bytes, size: int) -> list[dict[str, Any]]:
    parts = [body[at : at + size] for at in range(0, len(body), size)] or [b""]
    return [{"type": "http.request", "body": part, "more_body": n < len(parts) - 1} for n, part in enumerate(parts)]


def test_a_body_that_passes_reaches_the_app_whole_in_one_message() -> None:
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"a": {"a": 1}}}'
    recorder = _Recorder(*_chunks(body, 10))
    recorder.run(_post())
    assert recorder.sent == []  # the app answers, not the screen (this fake app answers nothing)
    [(scope, got)] = recorder.calls
    assert scope == recorder.scope(_post())
    assert got == [{"type": "http.request", "body": body, "more_body": False}, {"type": "http.disconnect"}]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            b'{"jsonrpc": "2.0", "id": "r1", "method": "x", "params": {"k": 1, "k": 2}}',
            {"id": "r1", "error": INVALID_REQUEST},
        ),
        (b'{"jsonrpc": "2.0", "id": 4, "id": 5, "method": "ping"}', {"id": None, "error": INVALID_REQUEST}),
        (
            b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"k": 1, "k": 1}}',
            {"id": None, "error": INVALID_REQUEST},
        ),
        (b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', {"id": None, "error": INVALID_REQUEST}),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "x", "params": {"k": 1, "k": 2}} x', {"id": None, "error": PARSE}),
        (b"\xef\xbb\xbf" + b'{"jsonrpc": "2.0", "id": 6, "method": "ping"}', {"id": None, "error": PARSE}),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": "\xff"}}',
            {"id": None, "error": {"code": -32700, "message": "Parse error"}},
        ),
    ],
)
def test_a_refused_body_is_answered_400_with_its_json_rpc_error_and_never_reaches_the_app(
    body: bytes, error: dict[str, Any]
) -> None:
    recorder = _Recorder(*_chunks(body, 16))
    recorder.run(_post())
    assert recorder.calls == []
    status, content = recorder.answer()
    assert status == 400
    assert json.loads(content) == {"jsonrpc": "2.0", **error}


def test_a_body_over_the_limit_is_answered_413_as_declared_or_as_it_arrives() -> None:
    declared = _Recorder(*_chunks(b"x" * 100, 100))
    declared.run(_post((b"Content-Length", b"101")), max_body_bytes=100)
    assert (declared.answer(), declared.received, declared.calls) == ((413, b"Request body too large"), 0, [])

    streamed = _Recorder(*_chunks(b"{" + b" " * 150 + b"}", 40))
    streamed.run(_post((b"content-length", b"unreadable")), max_body_bytes=100)
    assert (streamed.answer(), streamed.received, streamed.calls) == ((413, b"Request body too large"), 3, [])

    for digits in (b"9" * 20, b"9" * 5000):  # over 19 digits is over any limit (Python converts at most 4,300)
        huge = _Recorder(*_chunks(b"x" * 100, 100))
        huge.run(_post((b"content-length", digits)), max_body_bytes=100)
        assert (huge.answer(), huge.received, huge.calls) == ((413, b"Request body too large"), 0, [])

    at_limit = _Recorder(*_chunks(b"{" + b" " * 98 + b"}", 40))
    at_limit.run(_post((b"content-length", b"100")), max_body_bytes=100)
    assert (at_limit.sent, len(at_limit.calls)) == ([], 1)


def test_a_client_that_leaves_while_its_body_is_read_gets_nothing_and_reaches_nothing() -> None:
    recorder = _Recorder({"type": "http.request", "body": b'{"id": 1', "more_body": True}, leaves=True)
    recorder.run(_post())
    assert (recorder.sent, recorder.calls) == ([], [])


@pytest.mark.parametrize(
    "scope",
    [
        {"type": "http", "method": "GET", "path": "/mcp", "headers": []},
        {"type": "lifespan"},
    ],
)
def test_what_is_not_a_post_reaches_the_app_untouched(scope: dict[str, Any]) -> None:
    seen: list[tuple[Any, Any, Any]] = []

    async def app(got_scope: Any, receive: Any, send: Any) -> None:
        seen.append((got_scope, receive, send))

    async def receive() -> dict[str, Any]:
        raise AssertionError("the screen read the request")

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("the screen answered")

    screened: Any = screen_json_bodies(app)
    anyio.run(screened, scope, receive, send)
    assert seen == [(scope, receive, send)]


def test_the_limit_must_be_a_positive_int() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError

    with pytest.raises(TypeError, match="max_body_bytes must be an int"):
        screen_json_bodies(app, max_body_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_body_bytes must be an int"):
        screen_json_bodies(app, max_body_bytes=True)
    with pytest.raises(ValueError, match="max_body_bytes must be at least 1"):
        screen_json_bodies(app, max_body_bytes=0)


LARGE = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"t": "' + b"x" * 70_000 + b'"}}'


def _slow_screens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make each screen take 0.1 s; the list it returns holds, per screen started, how many ran then."""
    screen = screen_module.screened
    running: list[int] = []
    started: list[int] = []
    lock = threading.Lock()

    def counted(message: bytes) -> tuple[str, Any]:
        with lock:
            running.append(1)
            started.append(len(running))
        time.sleep(0.1)
        with lock:
            running.pop()
        return screen(message)

    monkeypatch.setattr(screen_module, "screened", counted)
    return started


def _flood(recorders: list[_Recorder]) -> None:
    screened: Any = screen_json_bodies(_Recorder.app)

    async def flood() -> None:
        async with anyio.create_task_group() as group:
            for recorder in recorders:
                group.start_soon(screened, recorder.scope(_post()), recorder.receive, recorder.send)
                await anyio.sleep(0.01)  # in this order

    anyio.run(flood)


def test_large_bodies_are_screened_two_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of large bodies holds at most SCREENS_AT_ONCE worker threads in the screen, per wrapped app."""
    started = _slow_screens(monkeypatch)
    recorders = [_Recorder(*_chunks(LARGE, 1 << 16)) for _ in range(6)]
    _flood(recorders)
    assert max(started) == SCREENS_AT_ONCE == 2
    assert [len(recorder.calls) for recorder in recorders] == [1] * 6  # every body passed, in turn


def test_a_client_that_leaves_while_its_large_body_waits_gives_up_its_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    started = _slow_screens(monkeypatch)
    staying = [_Recorder(*_chunks(LARGE, 1 << 16)) for _ in range(2)]
    leaving = [_Recorder(*_chunks(LARGE, 1 << 16), leaves=True) for _ in range(3)]
    _flood([*staying, *leaving])
    assert len(started) == 2  # the leavers' bodies were never parsed
    assert [len(recorder.calls) for recorder in staying] == [1, 1]
    assert [(recorder.calls, recorder.sent) for recorder in leaving] == [([], [])] * 3


def test_the_default_limit_is_the_sdks_own() -> None:
    declared = _Recorder()
    declared.run(_post((b"content-length", str(DEFAULT_MAX_REQUEST_BODY_SIZE + 1).encode())))
    assert declared.answer() == (413, b"Request body too large")
    assert DEFAULT_MAX_REQUEST_BODY_SIZE == 4 * 1_048_576


def test_a_cancelled_screen_keeps_its_place_until_its_thread_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled callers (a host's timeout) cannot start more screens than the limiter allows."""
    started = _slow_screens(monkeypatch)
    limiter = anyio.CapacityLimiter(2)

    async def cancelled_soon() -> None:
        with anyio.move_on_after(0.03):
            await screen_module.screened_off_loop(LARGE, limiter=limiter)

    async def many() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(cancelled_soon)
                await anyio.sleep(0.01)

    anyio.run(many)
    assert 1 <= max(started) <= 2


def test_a_client_that_leaves_while_its_body_is_screened_reaches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The screen already running finishes (it keeps its place), and its result is for nobody."""
    started = _slow_screens(monkeypatch)
    leaving = _Recorder(*_chunks(LARGE, 1 << 16), leaves=True, leaves_after=0.03)
    _flood([leaving])
    assert len(started) == 1
    assert (leaving.calls, leaving.sent) == ([], [])
