"""The stdio server's output writer: cancellable while a pipe is full, and stray output kept off the wire."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio

from engram_memory.adapters._nonblocking import reopened_pipe
from engram_memory.adapters._stdout import OutputClosedError, StdoutWrites, _writer, claimed_stdout
from tests.test_nonblocking_writes import default_socket_timeout, filled

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux descriptors and /proc")

MESSAGE = "".join(chr(0x20 + n % 0x2000) for n in range(300_000))  # multi-byte UTF-8, several pipefuls


def _read_all(fd: int, into: bytearray) -> None:
    while chunk := os.read(fd, 1 << 16):
        into += chunk


def test_a_write_to_a_pipe_nobody_reads_is_cancellable_and_leaves_whole_bytes() -> None:
    read, write = os.pipe()
    private = reopened_pipe(write)
    assert private is not None
    try:
        assert os.get_blocking(private) is False
        assert os.get_blocking(write) is True  # the original open file keeps its mode

        async def write_briefly() -> bool:
            with anyio.move_on_after(0.3) as scope:
                await StdoutWrites(private, in_loop=True).write(MESSAGE)
            return scope.cancelled_caught

        assert anyio.run(write_briefly) is True  # the pipe filled; the write waited in the event loop
    finally:
        os.close(private)
        os.close(write)
    written = bytearray()
    try:
        _read_all(read, written)
    finally:
        os.close(read)
    encoded = MESSAGE.encode("utf-8")
    assert 0 < len(written) < len(encoded)
    assert encoded.startswith(written)


def test_a_pipe_that_is_read_gets_every_byte_in_order() -> None:
    read, write = os.pipe()
    received = bytearray()
    reader = threading.Thread(target=_read_all, args=(read, received))
    reader.start()
    private = reopened_pipe(write)
    assert private is not None

    async def write_twice() -> None:
        writes = StdoutWrites(private, in_loop=True)
        await writes.write(MESSAGE)
        await writes.write("\n")
        await writes.flush()

    try:
        anyio.run(write_twice)
    finally:
        os.close(private)
        os.close(write)
        reader.join()
        os.close(read)
    assert bytes(received) == MESSAGE.encode("utf-8") + b"\n"


def test_a_regular_file_is_written_in_a_worker_thread(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with _writer(fd) as writes:
            assert writes._in_loop is False
            anyio.run(writes.write, MESSAGE)
    finally:
        os.close(fd)
    assert path.read_bytes() == MESSAGE.encode("utf-8")


def test_a_socket_nobody_reads_is_written_from_the_event_loop_its_mode_untouched() -> None:
    ours, theirs = socket.socketpair()
    try:
        with _writer(ours.fileno()) as writes:
            assert writes._in_loop is True

            async def write_briefly() -> bool:
                with anyio.move_on_after(0.3) as scope:
                    await writes.write(MESSAGE * 20)  # more than the socket buffers hold
                return scope.cancelled_caught

            assert anyio.run(write_briefly) is True
            assert ours.getblocking() is True
        theirs.settimeout(0)
        received = bytearray()
        with contextlib.suppress(BlockingIOError):
            while chunk := theirs.recv(1 << 16):
                received += chunk
    finally:
        ours.close()
        theirs.close()
    assert 0 < len(received) < len(MESSAGE.encode("utf-8")) * 20
    assert (MESSAGE * 20).encode("utf-8").startswith(received)


def test_a_write_to_a_pipe_whose_reader_closed_says_the_client_closed_it() -> None:
    read, write = os.pipe()
    private = reopened_pipe(write)
    assert private is not None
    os.close(read)
    try:
        for writes in (StdoutWrites(write, in_loop=False), StdoutWrites(private, in_loop=True)):
            with pytest.raises(OutputClosedError) as raised:
                anyio.run(writes.write, "{}\n")
            assert isinstance(raised.value.__cause__, BrokenPipeError)
    finally:
        os.close(private)
        os.close(write)


def _left_socket(how: str) -> socket.socket:
    """Our end of a connection the client left: ``closed`` (a UNIX socket) or ``reset`` (TCP, RST sent)."""
    if how == "closed":
        ours, peer = socket.socketpair()
        peer.close()
        return ours
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    peer.close()
    select.select([ours], [], [], 5)  # the reset has arrived: the socket reads (an error)
    return ours


@pytest.mark.parametrize(("how", "cause"), [("closed", BrokenPipeError), ("reset", ConnectionResetError)])
def test_a_write_to_a_socket_the_client_left_says_the_client_closed_it(how: str, cause: type[OSError]) -> None:
    with _left_socket(how) as ours:
        writes = StdoutWrites(ours.fileno(), in_loop=True, write_now=lambda data: ours.send(data, socket.MSG_DONTWAIT))
        with pytest.raises(OutputClosedError) as raised:
            anyio.run(writes.write, "{}\n")
        assert type(raised.value.__cause__) is cause


def test_a_write_refused_for_another_reason_keeps_its_error() -> None:
    read_only = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="Bad file descriptor") as raised:  # not the client leaving
            anyio.run(StdoutWrites(read_only, in_loop=True).write, "{}\n")
        assert raised.value.errno == errno.EBADF
    finally:
        os.close(read_only)


CLAIMING_SCRIPT = """
import os, sys, anyio
from engram_memory.adapters._stdout import claimed_stdout

stdout = os.fstat(1)
print("before", flush=True)
if sys.argv[1] == "stderr-closed":
    os.close(2)
with claimed_stdout() as writes:
    print("stray print", flush=True)
    os.write(1, b"stray write\\n")
    assert os.get_blocking(1) and os.get_blocking(writes._fd) is not writes._in_loop
    anyio.run(writes.write, '{"jsonrpc": "2.0"}\\n')
    if sys.argv[1] == "flush-fails":
        class Broken:
            def write(self, text): return len(text)
            def flush(self): raise BrokenPipeError
        sys.stdout = Broken()
sys.stdout = sys.__stdout__
assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (stdout.st_dev, stdout.st_ino)
print("after", flush=True)
"""


@pytest.mark.parametrize("case", ["plain", "flush-fails", "stderr-closed"])
def test_while_claimed_descriptor_1_writes_to_stderr_and_the_protocol_to_its_own_copy(case: str) -> None:
    """What the SDK's transport did with descriptor 1: stray output misses the wire, and 1 is restored."""
    ran = subprocess.run([sys.executable, "-c", CLAIMING_SCRIPT, case], capture_output=True, check=False, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == b'before\n{"jsonrpc": "2.0"}\nafter\n'  # the wire holds the protocol only
    stray = [b"stray print", b"stray write"]
    assert sorted(ran.stderr.splitlines()) == ([] if case == "stderr-closed" else stray)


def test_stderr_sharing_the_pipe_keeps_its_blocking_writes() -> None:
    """Non-blocking mode is the reopened file's only: 200 kB to a shared stderr arrive whole."""
    script = """
import os, sys, anyio
from engram_memory.adapters._stdout import claimed_stdout

with claimed_stdout() as writes:
    assert writes._in_loop and os.get_blocking(2)
    sys.stderr.write("x" * 200_000)
    sys.stderr.flush()
    anyio.run(writes.write, "done\\n")
"""
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        assert process.stdout is not None
        threading.Event().wait(1.0)  # the pipe fills before anyone reads it
        output = process.stdout.read()
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert output == b"x" * 200_000 + b"done\n"


def test_in_process_a_claim_of_a_file_writes_in_a_thread_and_restores_descriptor_1(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Under pytest descriptor 1 is a capture file: written in a worker thread, stray output to stderr."""
    before = os.fstat(1)
    with claimed_stdout() as writes:
        assert writes._in_loop is False
        os.write(1, b"stray write\n")
        anyio.run(writes.write, '{"jsonrpc": "2.0"}\n')
    assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (before.st_dev, before.st_ino)
    out, err = capfd.readouterr()
    assert out == '{"jsonrpc": "2.0"}\n'
    assert err == "stray write\n"


def test_in_process_a_claim_of_a_pipe_writes_from_the_event_loop_and_closes_its_copies() -> None:
    saved = os.dup(1)
    read, write = os.pipe()
    fds_before = set(Path("/proc/self/fd").iterdir())
    try:
        os.dup2(write, 1)
        with claimed_stdout() as writes:
            assert writes._in_loop is True
            assert os.get_blocking(write) is True
            anyio.run(writes.write, "wire\n")
        assert os.path.sameopenfile(1, write)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(write)
    try:
        assert os.read(read, 100) == b"wire\n"
    finally:
        os.close(read)
    assert set(Path("/proc/self/fd").iterdir()) <= fds_before  # no copy left open


def test_without_stderr_descriptor_1_points_at_the_null_device(monkeypatch: pytest.MonkeyPatch) -> None:
    dup2 = os.dup2
    seen: list[bool] = []

    def no_stderr(fd: int, fd2: int, inheritable: bool = True) -> int:
        if (fd, fd2) == (2, 1):
            raise OSError(9, "Bad file descriptor")
        result = dup2(fd, fd2, inheritable)
        if fd2 == 1:
            seen.append(os.path.samestat(os.fstat(1), Path(os.devnull).stat()))
        return result

    monkeypatch.setattr(os, "dup2", no_stderr)
    with claimed_stdout():
        pass
    assert seen == [True, False, True, False]  # diverted to the null device; a private pipe to flush; null; restored


def test_a_pipe_that_cannot_be_opened_again_is_written_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``/proc`` (or with it refusing), the pipe is written as the SDK wrote it."""
    read, write = os.pipe()

    def refused(*_: object, **__: object) -> int:
        raise PermissionError(13, "Permission denied")

    try:
        monkeypatch.setattr(os, "open", refused)
        with _writer(write) as writes:
            assert writes._in_loop is False
            anyio.run(writes.write, "wire\n")
        assert os.read(read, 100) == b"wire\n"
    finally:
        os.close(read)
        os.close(write)


def test_a_socket_object_ignores_the_hosts_default_timeout() -> None:
    """``socket.setdefaulttimeout`` would make each send wait in the event loop and leave the socket non-blocking."""
    ours, theirs = socket.socketpair()
    try:
        with default_socket_timeout(3), _writer(ours.fileno()) as writes:

            async def write_briefly() -> float:
                started = time.monotonic()
                with anyio.move_on_after(0.3):
                    await writes.write(MESSAGE * 20)
                return time.monotonic() - started

            assert anyio.run(write_briefly) < 2
        assert os.get_blocking(ours.fileno()) is True
    finally:
        ours.close()
        theirs.close()


FLUSHING_SCRIPT = """
import anyio
from engram_memory.adapters._stdout import claimed_stdout

with claimed_stdout() as writes:
    print("stray print")  # block-buffered: flushed on the way out, to a full stderr pipe
    anyio.run(writes.write, "wire\\n")
print("after", flush=True)
"""


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_stray_output_flushed_to_a_full_stderr_does_not_hold_the_exit(kind: str) -> None:
    ours, stderr = filled(kind)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    try:
        ran = subprocess.run(
            [sys.executable, "-c", FLUSHING_SCRIPT],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            timeout=30,
            check=False,
        )
    finally:
        os.close(stderr)
        os.close(ours)
    assert (ran.returncode, ran.stdout) == (0, b"wire\nafter\n")
