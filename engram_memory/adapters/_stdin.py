"""Lines of standard input for the stdio MCP server: read without a blocking worker thread, strict UTF-8.

The SDK's own stdin reader blocks a worker thread in ``readline``, which no cancellation reaches:
after Ctrl-C the server kept its files open, answering nothing, until a line arrived or stdin
closed. This reader waits for the descriptor to be readable in the event loop (cancellable), then
reads what is there. A descriptor the event loop cannot watch (a regular file, as with
``< requests.jsonl``) is read in a worker thread instead, where a read never waits long.

The SDK also decodes stdin with ``errors="replace"``, so a capture holding invalid UTF-8 was
committed with U+FFFD in place of the bytes. Here such a line is handed on as text that is not
JSON: the SDK drops it as it drops any message it cannot parse, and nothing is written.
"""

from __future__ import annotations

import os
from typing import Final

import anyio
import anyio.to_thread

__all__ = ["StdinLines"]

_CHUNK: Final = 1 << 16
_UNDECODABLE: Final = "\x00 a line that is not valid UTF-8"
"""What an undecodable line becomes: not JSON, so the SDK drops it without an answer."""


class StdinLines:
    """``async for line in StdinLines(fd)``: the lines of ``fd``, without their line feeds, until EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False
        self._pollable = True

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while b"\n" not in self._buffer and not self._eof:
            chunk = await self._read()
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            raise StopAsyncIteration
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError:
            return _UNDECODABLE

    async def _read(self) -> bytes:
        """What ``fd`` holds now (``b""`` at EOF), waiting for it in the event loop when it can."""
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except (OSError, NotImplementedError):  # a regular file, or a loop without readers
                self._pollable = False
            else:
                return os.read(self._fd, _CHUNK)
        return await anyio.to_thread.run_sync(os.read, self._fd, _CHUNK)
