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
  refuses duplicates), are handed on as :data:`REFUSED_LINE`, text that is not JSON, so the SDK
  cannot parse them;
* a line longer than :data:`MAX_LINE_BYTES` is refused as it is read, never held whole (the
  SDK would buffer it whole, however long): it is handed on as :data:`REFUSED_LINE`, answered
  ``-32700`` with ``id`` null (its id is never read);
* a blank line is skipped: it holds no message.

A line is screened in a worker thread when it is longer than :data:`_SCREEN_IN_LOOP_BYTES`, so the
event loop keeps serving while a large message is parsed.

Any other line is handed on as read; whether it is a JSON-RPC message is the SDK's to decide.
For every line handed on, :attr:`StdinLines.refusals` receives, in order, the JSON-RPC error that
answers it should the SDK fail to parse it (see :func:`refusal_answer`).
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any, Final

import anyio
import anyio.to_thread

from engram_memory.wire.converter import MAX_RAW_JSON_BYTES
from engram_memory.wire.limits import MAX_ARGUMENT_BYTES

__all__ = [
    "MAX_LINE_BYTES",
    "PARSE_ERROR",
    "REFUSED_LINE",
    "REQUEST_INVALID",
    "Refusal",
    "StdinLines",
    "refusal_answer",
]

_CHUNK: Final = 1 << 16
MAX_LINE_BYTES: Final = MAX_RAW_JSON_BYTES + MAX_ARGUMENT_BYTES
"""The longest line read (9 MiB, line feed excluded): the longest argument text the core parses,
with a mebibyte for the JSON-RPC message around it."""
_SCREEN_IN_LOOP_BYTES: Final = 1 << 16
"""Lines up to this long are screened in the event loop; longer ones in a worker thread."""
REFUSED_LINE: Final = "\x00 a line refused before parsing: not UTF-8, a key twice in one object, or too long"
"""What a refused line becomes: not JSON, so the SDK cannot parse it."""
PARSE_ERROR: Final = -32700
REQUEST_INVALID: Final = -32600
_MAX_INT_DIGITS: Final = 4300
"""Python's default limit on converting a decimal to an ``int``; a longer one names no request id."""

Refusal = tuple[int, int | str | None] | None
"""The JSON-RPC error code and id that answer a line the SDK cannot parse, or ``None``: no answer."""


class _DuplicateKeyError(Exception):
    """One JSON object of the line holds the same key twice."""


class _Unconverted:
    """An integer too long to convert (``int`` would raise): it can be no request id."""


def _refusing_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _DuplicateKeyError
    return value


def _bounded_int(text: str) -> int | _Unconverted:
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else _Unconverted()


def refusal_answer(message: object) -> Refusal:
    """How to answer a parsed JSON value that the SDK refuses as a JSON-RPC message.

    JSON-RPC 2.0: a request (``method`` and an ``id`` that is a string or an integer) gets
    ``-32600`` Invalid Request with its id; a notification (no ``id``) and a response (no
    ``method``, with ``result`` or ``error``) get no answer; anything else gets ``-32600`` with
    ``id`` null.
    """
    if not isinstance(message, dict):
        return REQUEST_INVALID, None
    ident = message.get("id")
    if "method" in message:
        if "id" not in message:
            return None
        valid = isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))
        return REQUEST_INVALID, ident if valid else None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return REQUEST_INVALID, None


def _screened(line: bytes) -> tuple[str, Refusal]:
    """``line`` decoded (or :data:`REFUSED_LINE`), and the answer should the SDK refuse it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return REFUSED_LINE, (PARSE_ERROR, None)
    try:
        message = json.loads(text, object_pairs_hook=_refusing_duplicates, parse_int=_bounded_int)
    except _DuplicateKeyError:
        return REFUSED_LINE, _refusal_of_duplicate(text)
    except (ValueError, RecursionError):  # not JSON at all: the SDK refuses it on its own
        return text, (PARSE_ERROR, None)
    return text, refusal_answer(message)


def _refusal_of_duplicate(text: str) -> Refusal:
    """The answer to a message refused for a duplicate key: its id, unless ``id`` is the duplicate."""
    objects: list[list[tuple[str, Any]]] = []

    def collect(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        objects.append(pairs)
        return dict(pairs)

    message = json.loads(text, object_pairs_hook=collect, parse_int=_bounded_int)
    answer = refusal_answer(message)
    if answer is not None and isinstance(message, dict) and [key for key, _ in objects[-1]].count("id") > 1:
        return REQUEST_INVALID, None  # which id? (the outer object is the last collected)
    return answer


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
                if len(line) > _SCREEN_IN_LOOP_BYTES:
                    text, refusal = await anyio.to_thread.run_sync(_screened, line)
                else:
                    text, refusal = _screened(line)
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
        """What ``fd`` holds now (``b""`` at EOF), waiting for it in the event loop when it can."""
        if self._pollable:
            try:
                await anyio.wait_readable(self._fd)
            except (OSError, NotImplementedError):  # a regular file, or a loop without readers
                self._pollable = False
            else:
                return os.read(self._fd, _CHUNK)
        return await anyio.to_thread.run_sync(os.read, self._fd, _CHUNK)
