"""The stdio server's streams: refusals answered as JSON-RPC 2.0 says, requests answered before EOF ends the server."""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("mcp")

import anyio
import mcp.types as mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from engram_memory.adapters import _stdio_relay
from engram_memory.adapters._json_screen import Refusal
from engram_memory.adapters._stdio_relay import AnsweringReads

pytestmark = pytest.mark.anyio

PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


@pytest.fixture(name="anyio_backend")
def _anyio_backend() -> str:
    return "asyncio"


def _ping(ident: int) -> SessionMessage:
    return SessionMessage(mcp_types.JSONRPCRequest(jsonrpc="2.0", id=ident, method="ping"))


def _answer(ident: int) -> SessionMessage:
    return SessionMessage(mcp_types.JSONRPCResponse(jsonrpc="2.0", id=ident, result={}))


def _cancelled(ident: object) -> SessionMessage:
    notification = mcp_types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/cancelled", params={"requestId": ident}
    )
    return SessionMessage(notification)


def _wire(message: SessionMessage) -> object:
    return mcp_types.jsonrpc_message_adapter.dump_python(message.message, by_alias=True, exclude_unset=True)


Streams = tuple[
    MemoryObjectSendStream[SessionMessage | Exception],
    MemoryObjectReceiveStream[SessionMessage | Exception],
    MemoryObjectSendStream[SessionMessage],
    MemoryObjectReceiveStream[SessionMessage],
]


def _streams() -> Streams:
    into, inner = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write, answers = anyio.create_memory_object_stream[SessionMessage](16)
    return into, inner, write, answers


async def _passed_on(
    into: MemoryObjectSendStream[SessionMessage | Exception], reads: AnsweringReads, messages: list[SessionMessage]
) -> None:
    """Send ``messages`` through ``reads`` and end the input; the relay has passed each on."""
    for message in messages:
        await into.send(message)
    into.close()
    for _ in messages:
        await reads.receive()


async def test_each_refused_line_gets_the_answer_queued_for_it_and_never_reaches_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_stdio_relay, "DRAIN_LIMIT", 0.01)  # the ping is never answered here
    into, inner, write, answers = _streams()
    refusals: collections.deque[Refusal] = collections.deque(
        [None, (-32700, None), (-32600, 9), None, None, (-32600, "req-a")]
    )
    items: list[SessionMessage | Exception] = [
        _ping(1),  # a message: its queued refusal is consumed, unused
        ValueError("not JSON"),
        ValueError("a key twice"),
        ValueError("a notification the SDK refused"),  # None: no answer
        _answer(5),  # a response passes through too (the server resolves it)
        ValueError("a request with a string id"),
    ]
    async with write, answers:
        for item in items:
            await into.send(item)
        into.close()
        reads = AnsweringReads(inner, write, refusals)
        async with reads:
            served = [item async for item in reads]
        assert [_wire(item) for item in served if isinstance(item, SessionMessage)] == [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 5, "result": {}},
        ]
        assert len(served) == 2
        sent = [_wire(answers.receive_nowait()) for _ in range(3)]
        with pytest.raises(anyio.WouldBlock):
            answers.receive_nowait()
    assert sent == [
        PARSE_ERROR,
        {"jsonrpc": "2.0", "id": 9, "error": {"code": -32600, "message": "Invalid Request"}},
        {"jsonrpc": "2.0", "id": "req-a", "error": {"code": -32600, "message": "Invalid Request"}},
    ]
    assert not refusals
    with pytest.raises(anyio.ClosedResourceError):  # leaving the block closed the transport's stream
        inner.receive_nowait()


async def test_an_exception_with_no_refusal_queued_is_answered_as_a_parse_error() -> None:
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        await into.send(RuntimeError("from another reader"))
        await into.send(_ping(7))
        reads = AnsweringReads(inner, write, collections.deque())
        message = await reads.receive()
        assert isinstance(message, SessionMessage)
        assert _wire(message) == {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        assert _wire(answers.receive_nowait()) == PARSE_ERROR


async def test_end_of_input_waits_until_every_request_read_is_answered() -> None:
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        reads = AnsweringReads(inner, write, collections.deque())
        writes = reads.writes(write)
        for ident in (1, 2, 2):  # a client may reuse an id: each request is awaited
            await into.send(_ping(ident))
        await into.send(_cancelled(3))  # cancelling a request never read changes nothing
        into.close()
        for _ in range(4):
            await reads.receive()
        ended = anyio.Event()

        async def read_to_the_end() -> None:
            with pytest.raises(anyio.EndOfStream):
                await reads.receive()
            ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(read_to_the_end)
            for ident in (2, 1):
                await anyio.sleep(0.05)
                assert not ended.is_set()
                await writes.send(_answer(ident))
            await anyio.sleep(0.05)
            assert not ended.is_set()  # the second request with id 2 is still running
            await writes.send(_answer(2))
            with anyio.fail_after(5):
                await ended.wait()
        assert [_wire(answers.receive_nowait())["id"] for _ in range(3)] == [2, 1, 2]  # type: ignore[index]


async def test_a_request_the_client_cancelled_is_not_awaited_at_end_of_input() -> None:
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        reads = AnsweringReads(inner, write, collections.deque())
        await _passed_on(into, reads, [_ping(4), _cancelled(4)])
        with anyio.fail_after(5), pytest.raises(StopAsyncIteration):
            await reads.__anext__()


async def test_end_of_input_stops_waiting_after_the_drain_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_stdio_relay, "DRAIN_LIMIT", 0.2)
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        reads = AnsweringReads(inner, write, collections.deque())
        await _passed_on(into, reads, [_ping(8)])  # never answered
        started = anyio.current_time()
        with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
            await reads.receive()
        assert anyio.current_time() - started >= 0.2


async def test_the_senders_context_is_read_through() -> None:
    class Inner:
        last_context = "the sender's context"

    write, answers = anyio.create_memory_object_stream[SessionMessage](1)
    async with write, answers:
        empty: collections.deque[Refusal] = collections.deque()
        assert AnsweringReads(Inner(), write, empty).last_context == "the sender's context"
        assert AnsweringReads(object(), write, empty).last_context is None


async def test_the_write_side_closes_its_stream() -> None:
    write, answers = anyio.create_memory_object_stream[SessionMessage](1)
    async with answers:
        reads = AnsweringReads(object(), write, collections.deque())
        async with reads.writes(write) as writes:
            await writes.send(_answer(1))
        with pytest.raises(anyio.ClosedResourceError):
            await write.send(_answer(2))
        assert _wire(answers.receive_nowait()) == {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.mark.parametrize(
    ("sent", "cancelled"),
    [(5, 5), (5, "5"), ("5", 5), ("05", 5), ("req", "req")],
)
async def test_a_cancelled_request_is_matched_by_id_as_the_sdk_matches_it(sent: int | str, cancelled: object) -> None:
    """The SDK takes ``"5"`` and ``5`` for one request when it cancels it, and then never answers it."""
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        reads = AnsweringReads(inner, write, collections.deque())
        request = SessionMessage(mcp_types.JSONRPCRequest(jsonrpc="2.0", id=sent, method="ping"))
        await _passed_on(into, reads, [request, _cancelled(cancelled)])
        with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
            await reads.receive()


async def test_a_cancel_naming_true_settles_no_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``true`` is no request id (the SDK ignores such a cancel): request 1 is still awaited."""
    monkeypatch.setattr(_stdio_relay, "DRAIN_LIMIT", 0.3)
    into, inner, write, answers = _streams()
    async with into, inner, write, answers:
        reads = AnsweringReads(inner, write, collections.deque())
        await _passed_on(into, reads, [_ping(1), _cancelled(True)])  # noqa: FBT003 - a wire value, not a flag
        started = anyio.current_time()
        with anyio.fail_after(5), pytest.raises(anyio.EndOfStream):
            await reads.receive()
        assert anyio.current_time() - started >= 0.3  # waited for request 1 until the limit
