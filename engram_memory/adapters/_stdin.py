"""Lines of standard input for the stdio MCP server: read without a blocking worker thread, screened.

The SDK's own stdin reader blocks a worker thread in ``readline``, which no cancellation reaches:
after Ctrl-C the server kept its files open, answering nothing, until a line arrived or stdin
closed. This reader waits for the descriptor to be readable in the event loop (cancellable), then
reads what is there. A descriptor the event loop cannot watch (a regular file, as with
``< requests.jsonl``) is read in a worker thread instead, where a read never waits long.

Each line is screened before the SDK parses it:

* a line that is not valid UTF-8 (the SDK would decode it with ``errors="replace"``, and a
  capture was committed with U+FFFD in place of the bytes), a line the standard ``json`` module
  does not parse (the screen fails closed), a JSON message holding the same key twice in one
  object, at any depth (the SDK's parser keeps the last value, where the core refuses
  duplicates), and one whose ``id`` the answer could not carry, are handed on as
  :data:`~engram_memory.adapters._json_screen.REFUSED_LINE`, text that is not JSON, so the SDK
  cannot parse them;
* a line longer than :data:`MAX_LINE_BYTES` is refused as it is read, never held whole (the
  SDK would buffer it whole, however long): it is handed on as ``REFUSED_LINE``, answered
  ``-32700`` with ``id`` null (its id is never read);
* a blank line is skipped: it holds no message.

The screen is :mod:`engram_memory.adapters._json_screen`'s; a line over 64 KiB is screened in a
worker thread (the SDK's own parse of the line then still runs in the event loop).

Any other line is handed on as read; whether it is a JSON-RPC message is the SDK's to decide.
For every line handed on, :attr:`StdinLines.refusals` receives, in order, the JSON-RPC error that
answers it should the SDK fail to parse it (see
:func:`~engram_memory.adapters._json_screen.refusal_answer`).
"""

from __future__ import annotations

import collections
import os
from typing import Final

import anyio
import anyio.to_thread

from engram_memory.adapters._json_screen import (
    MAX_MESSAGE_BYTES,
    PARSE_ERROR,
    REFUSED_LINE,
    Refusal,
    screened_off_loop,
)

__all__ = ["MAX_LINE_BYTES", "StdinLines"]

_CHUNK: Final = 1 << 16
MAX_LINE_BYTES: Final = MAX_MESSAGE_BYTES
"""The longest line read (9 MiB, line feed excluded)."""


class StdinLines:
    """``async for line in StdinLines(fd)``: the screened, non-blank lines of ``fd``, without line feeds, until EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._scanned = 0  # bytes at the start of the buffer known to hold no line feed
        self._eof = False
        self._pollable = True
        self.refusals: collections.deque[Refusal] = collections.deque()
        """One entry per line handed on, in order: how to answer it if the SDK cannot parse it."""

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._next_line()
            if line is None:  # over MAX_LINE_BYTES, and already dropped
                self.refusals.append((PARSE_ERROR, None))
                return REFUSED_LINE
            if line.strip():
                text, refusal = await screened_off_loop(line)
                self.refusals.append(refusal)
                return text

    async def _next_line(self) -> bytes | None:
        """The next line without its line feed, or ``None`` for one over :data:`MAX_LINE_BYTES`.

        An over-long line is dropped as it is read: at most one line's worth plus one read is held.

        Raises:
            StopAsyncIteration: at EOF, with no line left.
        """
        overlong = False
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end < 0 and self._eof:
                if not self._buffer and not overlong:
                    raise StopAsyncIteration
                end = len(self._buffer)  # the last line has no line feed
            if end >= 0:
                overlong = overlong or end > MAX_LINE_BYTES
                line = None if overlong else bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            if len(self._buffer) > MAX_LINE_BYTES:
                overlong = True
                self._buffer.clear()
            self._scanned = len(self._buffer)
            chunk = await self._read()
            self._eof = not chunk
            self._buffer += chunk

    async def _read(self) -> bytes:
        """What ``fd`` holds now (``b""`` at EOF), waiting for it in the event loop when it can.

        A connection reset by the client (``ECONNRESET``: a socket it closed while our answers sat
        unread in its queue) is the end of input too: nothing more will come.
        """
        try:
            if self._pollable:
                try:
                    await anyio.wait_readable(self._fd)
                except (OSError, NotImplementedError):  # a regular file, or a loop without readers
                    self._pollable = False
                else:
                    return os.read(self._fd, _CHUNK)
            return await anyio.to_thread.run_sync(os.read, self._fd, _CHUNK)
        except ConnectionResetError:
            return b""
