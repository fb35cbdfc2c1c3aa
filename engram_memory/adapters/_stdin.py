"""Lines of standard input for the stdio MCP server: read without a blocking worker thread, screened.

The SDK's own stdin reader blocks a worker thread in ``readline``, which no cancellation reaches:
after Ctrl-C the server kept its files open, answering nothing, until a line arrived or stdin
closed. This reader waits for the descriptor to be readable in the event loop (cancellable), then
reads what is there. A descriptor the event loop cannot watch (a regular file, as with
``< requests.jsonl``) is read in a worker thread instead, where a read never waits long.

Each line is screened before the SDK parses it:

* a line that is not valid UTF-8 (the SDK would decode it with ``errors="replace"``, and a
  capture was committed with U+FFFD in place of the bytes), and a JSON message holding the same
  key twice in one object, at any depth (the SDK's parser keeps the last value, where the core
  refuses duplicates), are handed on as :data:`REFUSED_LINE`, text that is not JSON: the SDK
  fails to parse it, and :func:`~engram_memory.adapters.mcp.serve_stdio` answers ``-32700``;
* a blank line is skipped: it holds no message.

Any other line is handed on as read; whether it is a JSON-RPC message is the SDK's to decide.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

import anyio
import anyio.to_thread

__all__ = ["REFUSED_LINE", "StdinLines"]

_CHUNK: Final = 1 << 16
REFUSED_LINE: Final = "\x00 a line refused before parsing: not UTF-8, or a key twice in one object"
"""What a refused line becomes: not JSON, so the SDK cannot parse it."""


class _DuplicateKeyError(Exception):
    """One JSON object of the line holds the same key twice."""


def _refusing_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _DuplicateKeyError
    return value


def _screened(line: bytes) -> str:
    """``line`` decoded, or :data:`REFUSED_LINE` (not UTF-8, or JSON with a duplicate key)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return REFUSED_LINE
    try:
        json.loads(text, object_pairs_hook=_refusing_duplicates)
    except _DuplicateKeyError:
        return REFUSED_LINE
    except (ValueError, RecursionError):  # not JSON at all: the SDK refuses it on its own
        pass
    return text


class StdinLines:
    """``async for line in StdinLines(fd)``: the screened, non-blank lines of ``fd``, without line feeds, until EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False
        self._pollable = True

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            while b"\n" not in self._buffer and not self._eof:
                chunk = await self._read()
                self._eof = not chunk
                self._buffer += chunk
            if not self._buffer:
                raise StopAsyncIteration
            line, _, self._buffer = self._buffer.partition(b"\n")
            if line.strip():
                return _screened(line)

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
