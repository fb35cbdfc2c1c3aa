"""The stdio server's streams between the SDK's transport and its server: refusals answered, answers drained at EOF.

Two things the SDK's stdio transport and server do not:

* **Answer what they cannot parse.** The transport hands a line it fails to parse to the server
  as an exception, and the server drops it, so the client waited for its own timeout. Each line
  the transport reads yields exactly one item (a message or an exception), in order, so the
  refusal :class:`~engram_memory.adapters._stdin.StdinLines` queued for the line is the one
  to answer: ``-32700`` with ``id`` null for text that is not JSON, ``-32600`` with the request's
  id for JSON that is no valid JSON-RPC request, nothing for a notification or a response.
* **Finish what was asked before input ended.** At end of input the server cancels the requests
  it is still running, so a request followed by EOF (input from a file, a client that writes
  and closes) lost its answer. Here end of input is passed on only once every request read has
  been answered or cancelled by the client (``notifications/cancelled``), or after
  :data:`DRAIN_LIMIT` seconds.
"""

from __future__ import annotations

import collections
import logging
from types import TracebackType
from typing import Any, Final, Protocol, Self

import anyio
import mcp.types as mcp_types
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.message import SessionMessage

from engram_memory.adapters._json_screen import PARSE_ERROR, REQUEST_INVALID, Refusal

__all__ = ["DRAIN_LIMIT", "AnsweringReads", "TrackingWrites"]

_log = logging.getLogger("engram_memory.adapters.mcp")

DRAIN_LIMIT: Final = 60.0
"""Seconds the server keeps answering after end of input, at most."""
_MESSAGES: Final = {PARSE_ERROR: "Parse error", REQUEST_INVALID: "Invalid Request"}


class _Stream(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...
    async def aclose(self) -> None: ...


class _InFlight:
    """Ids of the requests read and not yet answered; an event set whenever there is none.

    Ids are matched as the SDK matches them (``as_request_id``, ``coerce_request_id``): ``"5"``
    and ``5`` are one request, and ``true`` is none.
    """

    def __init__(self) -> None:
        self.ids: collections.Counter[int | str] = collections.Counter()
        self.idle = anyio.Event()
        self.idle.set()

    def add(self, ident: int | str) -> None:
        self.ids[coerce_request_id(ident)] += 1
        if self.idle.is_set():
            self.idle = anyio.Event()

    def remove(self, ident: object) -> None:
        request = as_request_id(ident)
        key = None if request is None else coerce_request_id(request)
        if key is not None and self.ids[key] > 0:
            self.ids[key] -= 1
            if not self.ids[key]:
                del self.ids[key]
        if not self.ids:
            self.idle.set()


class _Wrapping:
    """A stream over another: closing it (or leaving its ``async with``) closes the one it wraps."""

    _inner: Any  # the wrapped stream: the transport's read stream, or its write stream

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class TrackingWrites(_Wrapping):
    """The server's write stream: each response or error sent settles its request."""

    def __init__(self, inner: _Stream, in_flight: _InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        message = item.message
        if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
            self._in_flight.remove(message.id)


class AnsweringReads(_Wrapping):
    """The server's read stream over the transport's (see the module docstring)."""

    def __init__(self, inner: Any, write: _Stream, refusals: collections.deque[Refusal]) -> None:
        self._inner = inner
        self._write = write
        self._refusals = refusals
        self.in_flight = _InFlight()

    @property
    def last_context(self) -> object:
        """The sender's context, which the SDK reads from its transport's stream."""
        return getattr(self._inner, "last_context", None)

    def writes(self, inner: _Stream) -> TrackingWrites:
        """The write stream to hand the server with this read stream."""
        return TrackingWrites(inner, self.in_flight)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            try:
                item: SessionMessage | Exception = await self._inner.receive()
            except anyio.EndOfStream:
                with anyio.move_on_after(DRAIN_LIMIT):
                    await self.in_flight.idle.wait()
                raise
            refusal = self._refusals.popleft() if self._refusals else (PARSE_ERROR, None)
            if not isinstance(item, Exception):
                self._note(item.message)
                return item
            if refusal is not None:
                _log.debug("stdio message refused: %s, answered %d", type(item).__name__, refusal[0])
                code, ident = refusal
                error = mcp_types.ErrorData(code=code, message=_MESSAGES[code])
                await self._write.send(SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=ident, error=error)))

    def _note(self, message: object) -> None:
        if isinstance(message, mcp_types.JSONRPCRequest):
            self.in_flight.add(message.id)
        elif isinstance(message, mcp_types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self.in_flight.remove((message.params or {}).get("requestId"))

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
