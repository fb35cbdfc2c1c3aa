"""The stdio server's read stream answers what the transport could not parse with JSON-RPC -32700."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import anyio
import mcp.types as mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from engram_memory.adapters.mcp import _AnsweringParseErrors

pytestmark = pytest.mark.anyio

PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


@pytest.fixture(name="anyio_backend")
def _anyio_backend() -> str:
    return "asyncio"


def _ping(ident: int) -> SessionMessage:
    return SessionMessage(mcp_types.JSONRPCRequest(jsonrpc="2.0", id=ident, method="ping"))


def _wire(message: SessionMessage) -> object:
    return mcp_types.jsonrpc_message_adapter.dump_python(message.message, by_alias=True, exclude_unset=True)


async def test_each_exception_is_answered_and_never_reaches_the_server() -> None:
    into, inner = anyio.create_memory_object_stream[SessionMessage | Exception](8)
    write, answers = anyio.create_memory_object_stream[SessionMessage](8)
    async with write, answers:
        await _relay_four_items(into, inner, write, answers)


async def _relay_four_items(
    into: MemoryObjectSendStream[SessionMessage | Exception],
    inner: MemoryObjectReceiveStream[SessionMessage | Exception],
    write: MemoryObjectSendStream[SessionMessage],
    answers: MemoryObjectReceiveStream[SessionMessage],
) -> None:
    for item in (_ping(1), ValueError("not JSON"), ValueError("a key twice"), _ping(2)):
        await into.send(item)
    into.close()
    async with _AnsweringParseErrors(inner, write) as relay:
        served = [item async for item in relay]
    assert [_wire(item) for item in served if isinstance(item, SessionMessage)] == [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    assert len(served) == 2
    assert [_wire(answers.receive_nowait()) for _ in range(2)] == [PARSE_ERROR, PARSE_ERROR]
    with pytest.raises(anyio.WouldBlock):
        answers.receive_nowait()
    with pytest.raises(anyio.ClosedResourceError):  # leaving the block closed the transport's stream
        inner.receive_nowait()


async def test_receive_waits_past_an_exception_and_ends_with_the_stream() -> None:
    into, inner = anyio.create_memory_object_stream[SessionMessage | Exception](8)
    write, answers = anyio.create_memory_object_stream[SessionMessage](8)
    async with into, inner, write, answers:
        await _receive_past_an_exception(into, _AnsweringParseErrors(inner, write), answers)


async def _receive_past_an_exception(
    into: MemoryObjectSendStream[SessionMessage | Exception],
    relay: _AnsweringParseErrors,
    answers: MemoryObjectReceiveStream[SessionMessage],
) -> None:
    await into.send(RuntimeError("undecodable"))
    await into.send(_ping(7))
    message = await relay.receive()
    assert isinstance(message, SessionMessage)
    assert _wire(message) == {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    assert _wire(answers.receive_nowait()) == PARSE_ERROR
    into.close()
    with pytest.raises(anyio.EndOfStream):
        await relay.receive()
    with pytest.raises(StopAsyncIteration):
        await relay.__anext__()


async def test_the_senders_context_is_read_through() -> None:
    class Inner:
        last_context = "the sender's context"

    write, answers = anyio.create_memory_object_stream[SessionMessage](1)
    async with write, answers:
        assert _AnsweringParseErrors(Inner(), write).last_context == "the sender's context"
        assert _AnsweringParseErrors(object(), write).last_context is None
