"""Standard output for the stdio MCP server: written from the event loop, so a stalled client cannot pin a thread.

The SDK's own stdout writer writes in a worker thread. When the client stops reading, the pipe
fills, that thread blocks in ``write``, and no cancellation reaches it: Ctrl-C then waited
forever for the write to return. When stdout is a pipe (as an MCP client starts its server), it
is opened again here, as a new open file of the same pipe in non-blocking mode, and
:class:`StdoutWrites` writes what it takes, waiting for room in the event loop (cancellable). The
mode is the new open file's only: whatever shares the original (stderr redirected to the same
pipe, a parent) keeps blocking writes. A socket is written the same way with non-blocking sends
(``MSG_DONTWAIT``), its mode untouched. Anything else (a regular file, as with
``> answers.jsonl``, a terminal), or a pipe that cannot be opened again (no ``/proc``), is
written in a worker thread, as the SDK does.

:func:`claimed_stdout` also keeps what the SDK's transport does with descriptor 1 while it
serves: the protocol goes to a private duplicate, and descriptor 1 points at standard error (or
the null device when there is none), so stray output (a ``print`` in a host's policy) misses the
wire.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import stat
import sys
from collections.abc import Callable, Iterator

import anyio
import anyio.to_thread

from engram_memory.adapters._nonblocking import reopened_pipe, socket_of, write_now

if sys.platform != "win32":
    import fcntl

__all__ = ["OutputClosedError", "StdoutWrites", "claimed_stdout"]

_STDOUT = 1
_STDERR = 2


class OutputClosedError(Exception):
    """The client closed its end of the protocol stream (``EPIPE`` or ``ECONNRESET``): nobody reads the answers."""


class StdoutWrites:
    """The SDK's ``stdout`` (``write`` and ``flush`` of text): UTF-8 bytes written to ``fd`` as it takes them.

    ``in_loop``: each write is made from the event loop with ``write_now``, which never blocks
    (``fd`` in non-blocking mode, or a socket's ``MSG_DONTWAIT`` send) and raises
    :class:`BlockingIOError` when ``fd`` is full; otherwise each write runs in a worker thread.
    """

    def __init__(self, fd: int, *, in_loop: bool, write_now: Callable[[memoryview], int] | None = None) -> None:
        self._fd = fd
        self._in_loop = in_loop
        self._write_now = write_now or functools.partial(os.write, fd)

    async def write(self, text: str) -> None:
        """Write all of ``text`` (UTF-8); cancellable while the descriptor is full (``in_loop``).

        Raises:
            UnicodeEncodeError: ``text`` holds a lone surrogate.
            OutputClosedError: the client closed its end (from the ``BrokenPipeError`` or
                ``ConnectionResetError`` of the write); part of ``text`` may have been written.
            OSError: the descriptor refuses the write for another reason.
        """
        data = memoryview(text.encode("utf-8"))
        try:
            while data:
                data = data[await self._write_some(data) :]
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise OutputClosedError("the client closed its end of the protocol stream") from exc

    async def flush(self) -> None:
        """Nothing is buffered: each :meth:`write` returns once its bytes are written."""

    async def _write_some(self, data: memoryview) -> int:
        if not self._in_loop:
            return await anyio.to_thread.run_sync(os.write, self._fd, data)
        while True:
            try:
                return self._write_now(data)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)


@contextlib.contextmanager
def claimed_stdout() -> Iterator[StdoutWrites]:
    """The protocol's writer on a private copy of descriptor 1, which points at stderr meanwhile.

    On the way out descriptor 1 is restored, even if flushing ``sys.stdout`` fails, and the copies
    are closed (no thread can be writing to them then: a worker thread's write is waited for).
    POSIX only (``fcntl``).
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a closed or broken sys.stdout (or None)
        sys.stdout.flush()
    wire = fcntl.fcntl(_STDOUT, fcntl.F_DUPFD_CLOEXEC, _STDERR + 1)  # never 0-2, even if one is closed
    try:
        _divert_stdout()
        try:
            with _writer(wire) as writes:
                yield writes
        finally:
            try:
                _flush_stray_output()
            finally:
                os.dup2(wire, _STDOUT)
    finally:
        os.close(wire)


def _divert_stdout() -> None:
    """Point descriptor 1 at stderr, or at the null device when stderr is closed."""
    try:
        os.dup2(_STDERR, _STDOUT)
    except OSError:
        _stdout_to_null()


def _stdout_to_null() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, _STDOUT)
    finally:
        os.close(null)


def _flush_stray_output() -> None:
    """Flush what ``sys.stdout`` holds of stray output to stderr without waiting; drop what does not fit.

    A stderr that nobody reads (``2>&1`` to a client that stopped reading, a socket from a
    Node.js client) would otherwise hold the flush, and Ctrl-C with it: the buffered bytes are
    flushed into a private pipe, then handed to stderr by :func:`write_now`.
    """
    with contextlib.suppress(OSError, ValueError):  # no stderr, or a broken or closed sys.stdout
        read, write = os.pipe()
        try:
            os.set_blocking(write, False)
            os.set_blocking(read, False)
            os.dup2(write, _STDOUT)
            with contextlib.suppress(BlockingIOError):  # more than a pipeful: the rest is dropped below
                sys.stdout.flush()
            stray = bytearray()
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(read, 1 << 16):
                    stray += chunk
            if stray:
                write_now(_STDERR, bytes(stray))
        finally:
            os.close(read)
            os.close(write)
    with contextlib.suppress(OSError, ValueError):
        _stdout_to_null()
        sys.stdout.flush()


@contextlib.contextmanager
def _writer(wire: int) -> Iterator[StdoutWrites]:
    """Writes to ``wire`` from the event loop (a pipe reopened non-blocking, a socket), else in a thread."""
    mode = os.fstat(wire).st_mode
    if stat.S_ISSOCK(mode):
        with socket_of(wire) as sock:
            yield StdoutWrites(wire, in_loop=True, write_now=lambda data: sock.send(data, socket.MSG_DONTWAIT))
        return
    private = reopened_pipe(wire) if stat.S_ISFIFO(mode) else None
    if private is None:
        yield StdoutWrites(wire, in_loop=False)
        return
    try:
        yield StdoutWrites(private, in_loop=True)
    finally:
        os.close(private)
