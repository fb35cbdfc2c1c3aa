"""Writing to a descriptor now or not at all: output that must never hold Ctrl-C.

Standard library only (the CLI uses it without the ``mcp`` extra). A pipe is written through a
non-blocking open file of its own, a socket with a non-blocking send, anything else only when
``select`` says it has room; what the descriptor does not take at once is dropped. The mode of
the open file the descriptor shares with others (a parent, ``2>&1``) is never changed.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import sys

if sys.platform != "win32":
    import fcntl

__all__ = ["reopened_pipe", "socket_of", "write_now"]


def reopened_pipe(fd: int) -> int | None:
    """A new non-blocking open file of the pipe ``fd`` writes to, or ``None`` when it cannot be opened again.

    Opening ``/proc/self/fd/N`` of a pipe opens the pipe again (Linux); a non-blocking open for
    writing never waits.
    """
    try:
        private = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if os.path.sameopenfile(private, fd):
        return private
    os.close(private)  # pragma: no cover - a /proc that is not Linux's
    return None


def socket_of(fd: int) -> socket.socket:
    """A socket object over a duplicate of ``fd``, the open file's status flags as they were.

    A new socket object takes the process's default timeout (``socket.setdefaulttimeout``), which
    would make its sends wait and put the shared open file in non-blocking mode: it gets none,
    and the flags are set back. Nothing is left open on failure. POSIX only (``fcntl``).
    """
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    duplicate = os.dup(fd)
    try:
        sock = socket.socket(fileno=duplicate)
    except BaseException:
        os.close(duplicate)
        raise
    try:
        sock.settimeout(None)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    except BaseException:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        sock.close()
        raise
    return sock


def write_now(fd: int, data: bytes) -> int:
    """Write what ``fd`` takes of ``data`` without waiting; the rest is dropped. Returns the bytes written.

    Raises:
        OSError: ``fd`` is closed or refuses the write (``BrokenPipeError`` once its reader left).
    """
    mode = os.fstat(fd).st_mode
    if stat.S_ISSOCK(mode):
        with socket_of(fd) as sock, contextlib.suppress(BlockingIOError):
            return sock.send(data, socket.MSG_DONTWAIT)
        return 0
    if stat.S_ISFIFO(mode):
        private = reopened_pipe(fd)
        if private is not None:
            try:
                return os.write(private, data)
            except BlockingIOError:
                return 0
            finally:
                os.close(private)
        data = data[: select.PIPE_BUF]  # no /proc: a write this short to a pipe with room never waits
    if not select.select([], [fd], [], 0)[1]:
        return 0
    return os.write(fd, data)
