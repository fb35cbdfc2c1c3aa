"""Serve a :class:`~engram_memory.MemoryService` as an MCP server (official Python SDK, v2).

Needs the ``mcp`` extra (``mcp>=2,<3`` and ``anyio``; ``pip install ".[mcp]"`` from a clone); the
core never imports this module. Importing it without the extra raises :class:`ModuleNotFoundError`
(``.name`` is the missing module) whose message says how to install the extra.

It is deliberately thin: the tool descriptors, the argument validation and the envelope all come
from the core as plain dicts, and this module only wraps them in SDK types.

It uses the SDK's low-level :class:`mcp.server.lowlevel.Server`, never the decorator API
(``MCPServer.tool()``): that API derives its own schemas from type hints, coerces ``"10"`` to
``10`` and silently drops unknown keys, where the contract wants closed schemas, no coercion and
``INVALID_SCHEMA`` for an extra key. The low-level server advertises our ``inputSchema``
without ever applying it, so the arguments reach :meth:`MemoryService.call_tool` as the SDK
parsed them: no defaults, no coercion. Two things are lost before this module sees a message.
The SDK's JSON parser keeps the last of duplicate keys, so a duplicated argument would not be
refused (the core refuses it where it parses JSON itself, ``parse_json``):
:func:`serve_stdio` reads its input itself and refuses such a message; over HTTP, wrap the SDK's
app in :func:`screen_json_bodies`, which refuses it in each POSTed body. And the integer literal
``-0``, which ``parse_json`` refuses, reaches the core as ``0`` (the same number; ``-0.0`` stays a
float and is refused).

What crosses the wire:

* ``tools/list`` — exactly :meth:`MemoryService.list_tools` for the caller's binding
  (``name``, ``title``, ``description``, ``inputSchema``, ``outputSchema``, ``annotations``).
* ``tools/call`` — a ``CallToolResult`` whose ``structuredContent`` is the envelope, with one text
  item carrying the same envelope as JSON and ``isError = not ok`` (see
  :func:`~engram_memory.wire.envelope.to_mcp_call_result`).
* :class:`~engram_memory.errors.ProtocolError` — a JSON-RPC error with its code and constant
  message (``-32602`` unknown or ungranted tool, ``-32603`` trusted call context unavailable);
  never an envelope.
* Any other exception — ``-32603`` "Internal server error", logged here with its traceback. The
  adapter does this itself: on the handshake-era JSON-RPC path (stdio, legacy HTTP) the SDK 2.3
  would otherwise answer ``code 0`` with ``str(exception)`` as the message.

Example (a single-tenant stdio server)::

    import anyio
    from engram_memory import ALL_TOOLS, HostBinding, connect
    from engram_memory.adapters.mcp import serve_stdio

    # withdraw and forget need a human confirmation, which a fixed binding cannot carry
    tools = ALL_TOOLS - {"engram_memory_withdraw", "engram_memory_forget"}
    binding = HostBinding(tenant_id="acme", workspace_id="platform", principal="alice",
                          agent_id="agent", session="stdio", purpose_ref="engineering-decisions",
                          tools=tools)
    anyio.run(serve_stdio, connect("memory:"), binding)
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from typing import Any, Final, TypeAlias, TypeVar, cast

from engram_memory._version import __version__
from engram_memory.adapters import MCP_EXTRA
from engram_memory.context import HostBinding
from engram_memory.errors import JsonRpcCode, ProtocolError
from engram_memory.service import MemoryService
from engram_memory.wire.envelope import to_mcp_call_result

try:
    import anyio.to_thread
    import mcp.types as mcp_types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

    from engram_memory.adapters._http_screen import ASGIApp, screen_json_bodies
    from engram_memory.adapters._stdin import StdinLines
    from engram_memory.adapters._stdio_relay import AnsweringReads
    from engram_memory.adapters._stdout import OutputClosedError, claimed_stdout
except ImportError as exc:  # the extra is not installed (or is another SDK version)
    _message = f"{__name__} needs {MCP_EXTRA} ({exc})"
    if isinstance(exc, ModuleNotFoundError):  # stays one, so pytest.importorskip still skips
        raise ModuleNotFoundError(_message, name=exc.name, path=exc.path) from exc
    raise ImportError(_message, name=exc.name, path=exc.path) from exc

__all__ = [
    "DEFAULT_CALLS_PER_TENANT",
    "DEFAULT_SERVER_NAME",
    "ASGIApp",
    "BindingFor",
    "RequestContext",
    "build_server",
    "envelope_result",
    "screen_json_bodies",
    "serve_stdio",
    "tool_from_descriptor",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_STDIO_IN_USE: Final = threading.Lock()
"""Held while :func:`serve_stdio` serves: the process has one stdin and one stdout."""

DEFAULT_SERVER_NAME: Final = "engram-memory"
INTERNAL_ERROR_MESSAGE: Final = "Internal server error"

RequestContext: TypeAlias = ServerRequestContext[Any, Any]
"""The SDK's per-request context, as handed to the host's :data:`BindingFor` callback."""

BindingFor: TypeAlias = Callable[[RequestContext], HostBinding | Awaitable[HostBinding]]
"""Builds the :class:`~engram_memory.HostBinding` of one request (sync, or async returning it).

It receives the SDK's :class:`mcp.server.context.ServerRequestContext` of the ``tools/list`` or
``tools/call`` request. Useful fields: ``request`` (the transport's request object, e.g. the
Starlette ``Request`` on Streamable HTTP, with its authenticated user and headers; ``None`` on
stdio), ``session`` (a ``ServerSession`` view for this request: the SDK makes a new one per
request, so it identifies no connection), ``request_id``, ``protocol_version``,
``method`` and ``lifespan_context``. ``params`` and ``meta`` come from the client and must never
be the source of tenant, workspace, principal, purpose or confirmation: those are the host's.

Raising :class:`~engram_memory.errors.ProtocolError` (for example
``ProtocolError.untrusted_context()`` when the caller cannot be identified) answers the request
with the matching JSON-RPC error; any other exception answers ``-32603``, and so does an answer
that is not a ``HostBinding`` ("trusted call context unavailable"). A sync callback runs on the
event loop, so it must not block: use an async one for I/O.
"""


@contextmanager
def _wire_errors(method: str) -> Iterator[None]:
    """Turn every failure of a handler into a JSON-RPC error that reveals nothing internal."""
    try:
        yield
    except MCPError:
        raise
    except ProtocolError as error:
        raise MCPError(int(error.code), error.public_message) from error
    except Exception as error:
        _log.exception("MCP %s handler failed", method)
        raise MCPError(int(JsonRpcCode.INTERNAL_ERROR), INTERNAL_ERROR_MESSAGE) from error


def tool_from_descriptor(descriptor: dict[str, Any]) -> mcp_types.Tool:
    """Wrap one core tool descriptor (camelCase keys, as on the wire) in the SDK's ``Tool``.

    The ``inputSchema`` and ``outputSchema`` dicts are carried as they are.
    """
    return mcp_types.Tool.model_validate(descriptor)


def envelope_result(envelope: dict[str, Any]) -> mcp_types.CallToolResult:
    """Wrap a result envelope in the SDK's ``CallToolResult``, as ``to_mcp_call_result`` carries it."""
    return mcp_types.CallToolResult.model_validate(to_mcp_call_result(envelope))


async def _resolve_binding(binding_for: BindingFor, ctx: RequestContext) -> HostBinding:
    """The callback's binding; anything but a ``HostBinding`` (or an awaitable of one) is ``-32603``."""
    answer: object = binding_for(ctx)
    if inspect.isawaitable(answer):
        answer = await answer
    if not isinstance(answer, HostBinding):
        raise ProtocolError.untrusted_context("binding_for did not answer a HostBinding")
    return answer


DEFAULT_CALLS_PER_TENANT: Final = 8
"""How many calls of one tenant :func:`build_server` runs in worker threads at once, by default."""


class _TenantSlots:
    """At most ``limit`` calls of one tenant hold a worker thread at a time; the others wait in the event loop.

    A tenant's limiter lives only while it has calls running or waiting, so the map never holds
    more tenants than there are calls in flight. Used from the event loop only (no lock needed).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self._calls: dict[str, int] = {}

    @asynccontextmanager
    async def held(self, tenant: str) -> AsyncIterator[None]:
        limiter = self._limiters.get(tenant)
        if limiter is None:
            limiter = self._limiters[tenant] = anyio.CapacityLimiter(self._limit)
        self._calls[tenant] = self._calls.get(tenant, 0) + 1
        try:
            async with limiter:
                yield
        finally:
            self._calls[tenant] -= 1
            if not self._calls[tenant]:
                del self._calls[tenant], self._limiters[tenant]


def _tenant_slots(limit: int | None) -> _TenantSlots | None:
    if limit is None:
        return None
    if type(limit) is not int:
        raise TypeError("max_calls_per_tenant must be an int or None")
    if limit < 1:
        raise ValueError("max_calls_per_tenant must be at least 1")
    return _TenantSlots(limit)


def build_server(
    service: MemoryService,
    binding_for: BindingFor,
    *,
    name: str = DEFAULT_SERVER_NAME,
    max_calls_per_tenant: int | None = DEFAULT_CALLS_PER_TENANT,
) -> Server[Any]:
    """Build a low-level MCP server exposing the six memory tools of ``service``.

    Args:
        service: the memory service; its synchronous calls run in a worker thread
            (``anyio.to_thread.run_sync``, anyio's default pool of 40 threads), never on the
            event loop.
        binding_for: the host's callback building the :class:`~engram_memory.HostBinding` of each
            ``tools/list`` and ``tools/call`` request (see :data:`BindingFor`).
        name: the server name announced to clients.
        max_calls_per_tenant: at most this many ``tools/list`` and ``tools/call`` requests of one
            tenant (``HostBinding.tenant_id``) run in worker threads at once; the others wait in
            the event loop, holding no thread, so one tenant's slow calls cannot take every
            thread of the pool from the others. ``None`` lifts the limit (every request then
            competes for the shared pool alone).

    Returns:
        The server; run it with ``server.run(read, write, server.create_initialization_options())``
        over any SDK transport, or see :func:`serve_stdio`.

    Raises:
        TypeError: ``max_calls_per_tenant`` is not an ``int`` or ``None``.
        ValueError: ``max_calls_per_tenant`` is below 1.
    """
    slots = _tenant_slots(max_calls_per_tenant)

    async def in_worker_thread(binding: HostBinding, call: Callable[[], _T]) -> _T:
        async with nullcontext() if slots is None else slots.held(binding.tenant_id):
            return await anyio.to_thread.run_sync(call)

    async def on_list_tools(
        ctx: RequestContext, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        del params  # one page: at most six tools
        with _wire_errors("tools/list"):
            binding = await _resolve_binding(binding_for, ctx)
            descriptors = await in_worker_thread(binding, functools.partial(service.list_tools, binding))
            # The list depends on the caller's binding: never let a shared cache serve it to another.
            return mcp_types.ListToolsResult(
                tools=[tool_from_descriptor(descriptor) for descriptor in descriptors],
                ttl_ms=0,
                cache_scope="private",
            )

    async def on_call_tool(ctx: RequestContext, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        with _wire_errors("tools/call"):
            binding = await _resolve_binding(binding_for, ctx)
            # The arguments go to the core's strict parser exactly as received: no defaults, no coercion.
            call = functools.partial(service.call_tool, params.name, params.arguments, binding)
            envelope = await in_worker_thread(binding, call)
            return envelope_result(envelope)

    return Server(name, version=__version__, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(service: MemoryService, binding: HostBinding, *, name: str = DEFAULT_SERVER_NAME) -> None:
    """Serve ``service`` over stdin/stdout for one fixed (single-tenant) ``binding`` until the client leaves.

    It returns at the end of input (a connection reset by the client is one), and also when the
    client has closed its end of stdout, once an answer meets ``EPIPE`` or ``ECONNRESET`` (an
    idle server notices at its next answer): nobody can read what follows, so the requests in
    progress are cancelled, and a mutation already running in its worker thread still commits
    or rolls back whole.

    Standard input is read and standard output written in the event loop
    (:mod:`engram_memory.adapters._stdin`, :mod:`engram_memory.adapters._stdout`), so a
    cancellation (Ctrl-C) ends the server at once, even while a client that stopped reading has
    filled a stdout pipe or socket. While serving, descriptor 1 points at stderr, so stray output misses the
    wire. The SDK parses each line it is handed in the event loop: a line built to be slow (up to
    9 MiB) holds the server, Ctrl-C included, for as long as that takes.
    A line that is not valid UTF-8, whose JSON holds a key twice in one object, or that is over
    :data:`~engram_memory.adapters._stdin.MAX_LINE_BYTES` (9 MiB; dropped as it is read) is
    refused before the SDK parses it. Such a line, and any other the SDK cannot parse, never
    reaches the service and is answered as JSON-RPC 2.0 says: ``-32700`` "Parse error" with
    ``id`` null when it is not JSON (or too long to read), ``-32600`` "Invalid Request"
    with the request's id when it is (``id`` null when the id cannot be read, or is itself
    duplicated), and not at all when it is a notification or a response. Blank lines are
    skipped. At end of input, the requests already read are answered before the server stops
    (for at most :data:`~engram_memory.adapters._stdio_relay.DRAIN_LIMIT` seconds), unless the
    client cancelled them.

    Every request runs with the same binding, so it should carry no ``confirmation`` and no
    ``audit_id`` (a fresh audit id is made per call). Without a host confirmation channel,
    ``withdraw`` and ``forget`` answer JSON-RPC ``-32603``; leave them out of ``binding.tools``
    if the agent should not see them. Log to stderr only: stdout is the protocol stream.

    Raises:
        RuntimeError: another :func:`serve_stdio` of this process is serving (there is one stdin
            and one stdout); nothing is read or written.
    """
    if not _STDIO_IN_USE.acquire(blocking=False):
        raise RuntimeError("serve_stdio is already serving this process's stdin and stdout")
    try:
        await _serve_stdio(service, binding, name)
    finally:
        _STDIO_IN_USE.release()


async def _serve_stdio(service: MemoryService, binding: HostBinding, name: str) -> None:
    if sys.stdin is None or sys.stdout is None:  # a descriptor closed when the process started
        raise RuntimeError("serve_stdio needs an open standard input and output")
    server = build_server(service, lambda _ctx: binding, name=name)
    lines = StdinLines(sys.stdin.fileno())
    stdin = cast("anyio.AsyncFile[str]", lines)  # iterated for lines only
    try:
        with nullcontext(None) if sys.platform == "win32" else claimed_stdout() as writes:
            stdout = cast("anyio.AsyncFile[str] | None", writes)  # written and flushed only
            async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
                reads = AnsweringReads(read_stream, write_stream, lines.refusals)
                await server.run(reads, reads.writes(write_stream), server.create_initialization_options())
    except BaseExceptionGroup as group:
        closed, rest = group.split(OutputClosedError)
        if rest is not None:
            # a line read while the server was shutting down meets its closed stream: not a failure
            _, rest = rest.split((anyio.BrokenResourceError, anyio.ClosedResourceError))
        if rest is not None:
            raise rest from None
        if closed is not None:
            _log.info("stdio client closed its end of stdout; the server stops")
