"""The JSON screen of an MCP message's bytes, before the SDK parses them (stdio lines, HTTP bodies).

The SDK's parser keeps the last of duplicate keys (where the core refuses them) and decodes
invalid UTF-8 in some transports with replacement characters. :func:`screened` parses a message
once more, as the SDK's parser does, and tells what to hand on and how to answer it if the SDK
cannot parse it (:func:`refusal_answer`).
"""

from __future__ import annotations

import json
from typing import Any, Final

import anyio
import anyio.to_thread

from engram_memory.canonical import has_utf8_form
from engram_memory.wire.converter import MAX_RAW_JSON_BYTES
from engram_memory.wire.limits import MAX_ARGUMENT_BYTES

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PARSE_ERROR",
    "REFUSED_LINE",
    "REQUEST_INVALID",
    "Refusal",
    "refusal_answer",
    "screened",
    "screened_off_loop",
]

MAX_MESSAGE_BYTES: Final = MAX_RAW_JSON_BYTES + MAX_ARGUMENT_BYTES
"""The longest message read (9 MiB): the longest argument text the core parses, with a mebibyte
for the JSON-RPC message around it."""
SCREEN_IN_LOOP_BYTES: Final = 1 << 16
"""Messages up to this long are screened in the event loop by :func:`screened_off_loop`; longer ones
in a worker thread."""
REFUSED_LINE: Final = "\x00 a message refused before parsing: not UTF-8, a key twice, an unwritable id, or too long"
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
        return REQUEST_INVALID, ident if _answerable_id(ident) else None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return REQUEST_INVALID, None


def _answerable_id(ident: object) -> bool:
    """Whether an answer can carry ``ident``: an integer, or a string with a UTF-8 form (no lone surrogate)."""
    if isinstance(ident, str):
        return has_utf8_form(ident)
    return isinstance(ident, int) and not isinstance(ident, bool)


def screened(line: bytes) -> tuple[str, Refusal]:
    r"""``line`` decoded (or :data:`REFUSED_LINE`), and the answer should the SDK refuse it.

    Refused: text that is not UTF-8, text the standard ``json`` module does not parse (the screen
    fails closed: the SDK's parsers accept some such text, a UTF-8 byte order mark for one, and
    would then parse it without the duplicate check), JSON holding a key twice in one object,
    and a message whose ``id`` is a string with a lone surrogate (``"\ud800"``), which the SDK
    accepts but cannot write back: its answer failed to serialise and the server stopped.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return REFUSED_LINE, (PARSE_ERROR, None)
    try:
        message = json.loads(text, object_pairs_hook=_refusing_duplicates, parse_int=_bounded_int)
    except _DuplicateKeyError:
        return REFUSED_LINE, _refusal_of_duplicate(text)
    except (ValueError, RecursionError):  # not JSON to us: refused, whatever another parser makes of it
        return REFUSED_LINE, (PARSE_ERROR, None)
    answer = refusal_answer(message)
    if isinstance(message, dict) and isinstance(message.get("id"), str) and not _answerable_id(message["id"]):
        return REFUSED_LINE, answer
    return text, answer


def _refusal_of_duplicate(text: str) -> Refusal:
    """The answer to a message refused for a duplicate key: its id, unless ``id`` is the duplicate."""
    objects: list[list[tuple[str, Any]]] = []

    def collect(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        objects.append(pairs)
        return dict(pairs)

    try:  # the first parse stopped at the duplicate: what follows it is read only now
        message = json.loads(text, object_pairs_hook=collect, parse_int=_bounded_int)
    except RecursionError:  # nested too deeply: JSON, but its id cannot be read
        return REQUEST_INVALID, None
    except ValueError:  # not JSON after all
        return PARSE_ERROR, None
    answer = refusal_answer(message)
    if answer is not None and isinstance(message, dict) and [key for key, _ in objects[-1]].count("id") > 1:
        return REQUEST_INVALID, None  # which id? (the outer object is the last collected)
    return answer


async def screened_off_loop(message: bytes, *, limiter: anyio.CapacityLimiter | None = None) -> tuple[str, Refusal]:
    """:func:`screened`, in a worker thread when ``message`` is over :data:`SCREEN_IN_LOOP_BYTES`.

    ``limiter`` bounds how many such threads run at once (anyio's default pool otherwise), and a
    thread keeps its place until its parse ends: a cancellation then waits for it (about half a
    second for a 4 MiB message built to be slow). Without a limiter a cancellation does not wait:
    the caller is cancelled at once, and the parse runs to its end unobserved (seconds at most,
    for a 9 MiB message built to be slow; an interpreter exiting meanwhile waits for it).
    """
    if len(message) > SCREEN_IN_LOOP_BYTES:
        abandon = limiter is None
        return await anyio.to_thread.run_sync(screened, message, abandon_on_cancel=abandon, limiter=limiter)
    return screened(message)
