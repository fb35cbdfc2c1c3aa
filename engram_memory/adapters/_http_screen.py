"""An ASGI middleware that screens each POSTed JSON body before an MCP HTTP transport parses it.

The SDK's Streamable HTTP transport parses a request body with parsers that keep the last of
duplicate keys, where the core refuses them: a duplicated argument was validated and used with
its last value, while a proxy reading the first saw other arguments. :func:`screen_json_bodies`
reads the body first, whole, and answers HTTP 400 with a JSON-RPC error for what the screen of
:mod:`engram_memory.adapters._json_screen` refuses: ``-32600`` "Invalid Request" with the
request's id for a key given twice in one object (``id`` null when the id cannot be read or is
itself duplicated, or is a string the answer cannot carry); ``-32700`` "Parse error" with ``id``
null for a body that is not UTF-8 JSON to the standard ``json`` module. The screen fails closed:
the SDK's newer request path parses bytes with ``json.loads``, which also takes a UTF-8 byte order
mark or UTF-16, and a review got duplicated arguments past an earlier version that way. A body
over the limit is answered 413 without being read further. Everything else reaches the wrapped
application unchanged, the body replayed as one message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import anyio
from mcp.server.streamable_http_manager import DEFAULT_MAX_REQUEST_BODY_SIZE

from engram_memory.adapters._json_screen import (
    PARSE_ERROR,
    REFUSED_LINE,
    REQUEST_INVALID,
    SCREEN_IN_LOOP_BYTES,
    Refusal,
    screened,
    screened_off_loop,
)

__all__ = ["SCREENS_AT_ONCE", "ASGIApp", "screen_json_bodies"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI 3 application (a Starlette app, such as the SDK's ``streamable_http_app()``)."""

_MESSAGES: Final = {PARSE_ERROR: "Parse error", REQUEST_INVALID: "Invalid Request"}
_TOO_LARGE: Final = b"Request body too large"
SCREENS_AT_ONCE: Final = 2
"""Bodies over 64 KiB screened at once in worker threads, per wrapped app; the others wait their turn."""


def screen_json_bodies(app: ASGIApp, *, max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> ASGIApp:
    """``app`` behind the JSON screen: a POST body refused as the module docstring says never reaches it.

    Args:
        app: the SDK's app (``server.streamable_http_app()``). Wrap it alone, never a host
            application with other routes: every POST that reaches the screen is screened as a
            JSON-RPC message (the SDK's newer request path parses a body whatever its content
            type, so the screen cannot tell by that).
        max_body_bytes: the largest body read; a longer one (declared by ``Content-Length`` or
            as it arrives) is answered 413 "Request body too large", as the SDK does. The
            default is the SDK's own default ``max_request_body_size`` (4 MiB); a host that
            raises that limit raises this one with it (the core reads arguments of up to 8 MiB
            of JSON text).

    Every other request (not ``POST``, not HTTP: lifespan, websocket) reaches ``app`` untouched.
    A client that disconnects while its body is read, or while a large body waits for its screen
    or is screened, gets no answer and reaches nothing. At most :data:`SCREENS_AT_ONCE` bodies over 64 KiB are
    parsed at once, per wrapped app (a 4 MiB body built to be slow takes about half a second and
    a hundred megabytes to parse).

    Raises:
        TypeError: ``max_body_bytes`` is not an ``int``.
        ValueError: ``max_body_bytes`` is below 1.
    """
    if type(max_body_bytes) is not int:
        raise TypeError("max_body_bytes must be an int")
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be at least 1")
    screens = anyio.CapacityLimiter(SCREENS_AT_ONCE)

    async def screened_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        body = _TooLarge() if _declared_length(scope) > max_body_bytes else await _read_body(receive, max_body_bytes)
        if body is None:  # the client left
            return
        if isinstance(body, _TooLarge):  # declared, or grown as it arrived: the rest is not read
            await _answer(send, 413, b"text/plain; charset=utf-8", _TOO_LARGE)
            return
        screen = await _screened_while_connected(body, receive, screens)
        if screen is None:  # the client left while its body waited or was screened
            return
        text, refusal = screen
        if text == REFUSED_LINE:
            code, ident = refusal or (REQUEST_INVALID, None)  # a notification or response: answered all the same
            error = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": _MESSAGES[code]}}
            await _answer(send, 400, b"application/json", json.dumps(error).encode())
            return
        await app(scope, _replaying(body, receive), send)

    return screened_app


_LENGTH_DIGITS = 19
"""The most digits a ``Content-Length`` is read with (2**63 has 19)."""


class _TooLarge:
    """A body over the limit, as declared by its ``Content-Length`` or as it arrived."""


def _declared_length(scope: Scope) -> int:
    """The ``Content-Length`` the request declares, or 0 when it declares none (or an unreadable one).

    A length of more than 19 digits is over any limit: it reads as ``2**63`` (Python would refuse
    to convert more than 4,300 digits).
    """
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            if not value.isdigit():
                return 0
            return int(value) if len(value) <= _LENGTH_DIGITS else 2**63
    return 0


async def _read_body(receive: Receive, limit: int) -> bytes | _TooLarge | None:
    """The whole body, :class:`_TooLarge` once it passes ``limit``, or ``None`` if the client disconnects."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return _TooLarge()
        if not message.get("more_body", False):
            return bytes(body)


async def _screened_while_connected(
    body: bytes, receive: Receive, screens: anyio.CapacityLimiter
) -> tuple[str, Refusal] | None:
    """The screen of ``body``, or ``None`` when the client disconnects before it is done.

    A large body may wait for one of the :data:`SCREENS_AT_ONCE` places: a client that leaves
    meanwhile gives up its turn instead of having its body parsed for nobody (a parse already
    running finishes, keeping its place, and is thrown away). After a whole body, the only
    message ASGI delivers is the disconnect, so nothing read here needs replaying.
    """
    if len(body) <= SCREEN_IN_LOOP_BYTES:
        return screened(body)
    result: tuple[str, Refusal] | None = None
    left = False
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            group.cancel_scope.cancel()

        async def screen() -> None:
            nonlocal result
            result = await screened_off_loop(body, limiter=screens)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        group.start_soon(screen)
    return None if left else result


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read handed back first, as one message."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()  # what follows the body (a disconnect)
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _answer(send: Send, status: int, content_type: bytes, content: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
