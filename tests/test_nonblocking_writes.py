"""Writing to a descriptor now or not at all: what must never hold Ctrl-C (stray output, the interrupted line)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory.adapters import _nonblocking
from engram_memory.adapters._nonblocking import socket_of, write_now

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux descriptors and /proc")

DATA = b"x" * 200_000  # more than any pipe or socket buffer here takes at once


def _open_fds() -> set[str]:
    return {path.name for path in Path("/proc/self/fd").iterdir()}


def filled(kind: str) -> tuple[int, int]:
    """A pipe or a socket (as a Node.js client gives its child) with no room left: (the reading end, the
    writing end, which blocks as a client's would)."""
    if kind == "socket":
        theirs, ours = socket.socketpair()
        theirs.settimeout(0)
        with contextlib.suppress(BlockingIOError):
            while True:
                theirs.send(b"y" * 4096)
        theirs.settimeout(None)
        return ours.detach(), theirs.detach()
    read, write = os.pipe()
    filler = _nonblocking.reopened_pipe(write)  # a non-blocking open file of its own: ``write`` stays blocking
    assert filler is not None
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(filler, b"y" * 4096)
    os.close(filler)
    return read, write


@contextlib.contextmanager
def default_socket_timeout(seconds: float) -> Iterator[None]:
    """``socket.setdefaulttimeout(seconds)`` meanwhile, as a host may set it."""
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(before)


@pytest.fixture(name="full_pipe")
def _full_pipe() -> Iterator[tuple[int, int]]:
    read, write = filled("pipe")
    yield read, write
    os.close(read)
    os.close(write)


def test_a_full_pipe_takes_nothing_and_keeps_blocking(full_pipe: tuple[int, int]) -> None:
    _, write = full_pipe
    assert write_now(write, DATA) == 0
    assert os.get_blocking(write) is True


def test_a_pipe_with_room_takes_what_fits_in_order() -> None:
    read, write = os.pipe()
    try:
        written = write_now(write, DATA)
        os.set_blocking(read, False)
        got = os.read(read, len(DATA))
    finally:
        os.close(read)
        os.close(write)
    assert 0 < written < len(DATA)
    assert got == DATA[:written]


def test_without_proc_a_pipe_gets_at_most_one_atomic_write(
    full_pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_nonblocking, "reopened_pipe", lambda fd: None)
    _, write = full_pipe
    assert write_now(write, DATA) == 0  # no room: select says so
    read, roomy = os.pipe()
    try:
        assert write_now(roomy, DATA) == 4096  # PIPE_BUF: taken whole or not at all, never waited for
    finally:
        os.close(read)
        os.close(roomy)


def test_a_full_socket_takes_what_fits_and_keeps_its_mode() -> None:
    ours, theirs = socket.socketpair()
    try:
        with default_socket_timeout(5):
            first = write_now(ours.fileno(), DATA * 20)
            assert 0 < first < len(DATA) * 20
            assert write_now(ours.fileno(), DATA) == 0  # full now: nothing, at once
        assert os.get_blocking(ours.fileno()) is True
    finally:
        ours.close()
        theirs.close()


def test_a_regular_file_takes_everything(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        assert write_now(fd, DATA) == len(DATA)
    finally:
        os.close(fd)
    assert path.read_bytes() == DATA


def test_a_closed_descriptor_raises() -> None:
    read, write = os.pipe()
    os.close(read)
    os.close(write)
    with pytest.raises(OSError, match="Bad file descriptor"):
        write_now(write, b"x")


def test_a_socket_object_that_cannot_be_set_up_leaves_nothing_open(monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = socket.socketpair()
    ours.settimeout(0)  # non-blocking: the host's own choice, to be kept
    real = fcntl.fcntl
    calls: list[int] = []

    def failing_setfl(fd: int, command: int, *args: int) -> int:
        calls.append(command)
        if command == fcntl.F_SETFL and len(calls) == 2:  # the first restore fails; the second succeeds
            raise OSError(5, "Input/output error")
        return int(real(fd, command, *args))

    try:
        before = _open_fds()
        monkeypatch.setattr(fcntl, "fcntl", failing_setfl)
        with pytest.raises(OSError, match="Input/output error"):
            socket_of(ours.fileno())
        monkeypatch.undo()
        assert _open_fds() == before
        assert os.get_blocking(ours.fileno()) is False
    finally:
        ours.close()
        theirs.close()
