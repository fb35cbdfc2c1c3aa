"""Standard output for the stdio MCP server: written from the event loop, so a stalled client cannot pin a thread.

The SDK's own stdout writer writes in a worker thread. When the client stops reading, the pipe
fills, that thread blocks in ``write``, and no cancellation reaches it: Ctrl-C then waited
forever for the write to return. Here a pipe or a socket is put in non-blocking mode while the
server runs, and :class:`StdoutWrites` writes what it takes, waiting for room in the event loop
(cancellable). Anything else (a regular file, as with ``> answers.jsonl``, or a terminal) is
written in a worker thread, as the SDK does.

:func:`claimed_stdout` also keeps what the SDK's transport does with descriptor 1 while it
serves: the protocol goes to a private duplicate, and descriptor 1 points at standard error, so
stray output (a ``print`` in a host's policy) misses the wire.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator

import anyio
import anyio.to_thread

if sys.platform != "win32":
    import fcntl

__all__ = ["StdoutWrites", "claimed_stdout"]

_STDOUT = 1
_STDERR = 2


class StdoutWrites:
    """The SDK's ``stdout`` (``write`` and ``flush`` of text): UTF-8 bytes written to ``fd`` as it takes them.

    ``in_loop``: ``fd`` is in non-blocking mode and is written from the event loop; otherwise each
    write runs in a worker thread.
    """

    def __init__(self, fd: int, *, in_loop: bool) -> None:
        self._fd = fd
        self._in_loop = in_loop

    async def write(self, text: str) -> None:
        """Write all of ``text`` (UTF-8); cancellable while the descriptor is full (``in_loop``).

        Raises:
            UnicodeEncodeError: ``text`` holds a lone surrogate.
            OSError: the descriptor refuses the write (``BrokenPipeError`` once the client closed it).
        """
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[await self._write_some(data) :]

    async def flush(self) -> None:
        """Nothing is buffered: each :meth:`write` returns once its bytes are written."""

    async def _write_some(self, data: memoryview) -> int:
        if not self._in_loop:
            return await anyio.to_thread.run_sync(os.write, self._fd, data)
        while True:
            try:
                return os.write(self._fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)


@contextlib.contextmanager
def claimed_stdout() -> Iterator[StdoutWrites]:
    """The protocol's writer on a private duplicate of descriptor 1, which points at stderr meanwhile.

    On the way out the duplicate's blocking mode and descriptor 1 are restored, and the duplicate
    is closed (no thread can be writing to it then: a worker thread's write is waited for). Where
    descriptor 1 cannot be diverted (no stderr), stray output reaches the wire, as with the SDK.
    POSIX only (``fcntl``).
    """
    sys.stdout.flush()
    wire = fcntl.fcntl(_STDOUT, fcntl.F_DUPFD_CLOEXEC, _STDERR + 1)  # never 0-2, even if one is closed
    try:
        with contextlib.suppress(OSError):  # no stderr to divert to
            os.dup2(_STDERR, _STDOUT)
        try:
            with _non_blocking(wire) as in_loop:
                yield StdoutWrites(wire, in_loop=in_loop)
        finally:
            sys.stdout.flush()
            os.dup2(wire, _STDOUT)
    finally:
        os.close(wire)


@contextlib.contextmanager
def _non_blocking(fd: int) -> Iterator[bool]:
    """``fd`` in non-blocking mode meanwhile if it is a pipe or a socket (``True``); else untouched (``False``).

    The mode belongs to the open file, which ``fd`` shares with every duplicate of it, so it is
    set back on the way out.
    """
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        yield False
        return
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield True
    finally:
        os.set_blocking(fd, blocking)
