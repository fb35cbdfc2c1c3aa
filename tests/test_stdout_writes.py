"""The stdio server's output writer: cancellable while a pipe is full, and stray output kept off the wire."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio

from engram_memory.adapters._stdout import StdoutWrites, _non_blocking

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX descriptors")

MESSAGE = "".join(chr(0x20 + n % 0x2000) for n in range(300_000))  # multi-byte UTF-8, several pipefuls


def _read_all(fd: int, into: bytearray) -> None:
    while chunk := os.read(fd, 1 << 16):
        into += chunk


def test_a_write_to_a_pipe_nobody_reads_is_cancellable_and_leaves_whole_bytes() -> None:
    read, write = os.pipe()
    try:
        with _non_blocking(write) as in_loop:
            assert in_loop is True
            assert os.get_blocking(write) is False

            async def write_briefly() -> bool:
                with anyio.move_on_after(0.3) as scope:
                    await StdoutWrites(write, in_loop=True).write(MESSAGE)
                return scope.cancelled_caught

            assert anyio.run(write_briefly) is True  # the pipe filled; the write waited in the event loop
        assert os.get_blocking(write) is True  # set back
        os.close(write)
        written = bytearray()
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

    async def write_twice() -> None:
        writes = StdoutWrites(write, in_loop=True)
        await writes.write(MESSAGE)
        await writes.write("\n")
        await writes.flush()

    try:
        with _non_blocking(write):
            anyio.run(write_twice)
    finally:
        os.close(write)
        reader.join()
        os.close(read)
    assert bytes(received) == MESSAGE.encode("utf-8") + b"\n"


def test_a_regular_file_is_left_blocking_and_written_in_a_worker_thread(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with _non_blocking(fd) as in_loop:
            assert in_loop is False
            assert os.get_blocking(fd) is True
            anyio.run(StdoutWrites(fd, in_loop=False).write, MESSAGE)
    finally:
        os.close(fd)
    assert path.read_bytes() == MESSAGE.encode("utf-8")


def test_a_write_the_descriptor_refuses_raises() -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        with _non_blocking(write), pytest.raises(BrokenPipeError):
            anyio.run(StdoutWrites(write, in_loop=True).write, "{}\n")
    finally:
        os.close(write)


CLAIMING_SCRIPT = """
import os, anyio
from engram_memory.adapters._stdout import claimed_stdout

print("before", flush=True)
with claimed_stdout() as writes:
    print("stray print")  # flushed to stderr at the latest on the way out
    os.write(1, b"stray write\\n")
    assert not os.get_blocking(writes._fd)
    anyio.run(writes.write, '{"jsonrpc": "2.0"}\\n')
assert os.get_blocking(1)
print("after")
"""


def test_while_claimed_descriptor_1_writes_to_stderr_and_the_protocol_to_its_duplicate() -> None:
    """What the SDK's transport did with descriptor 1: stray output misses the wire, and 1 is restored."""
    ran = subprocess.run([sys.executable, "-c", CLAIMING_SCRIPT], capture_output=True, check=False, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == b'before\n{"jsonrpc": "2.0"}\nafter\n'
    assert sorted(ran.stderr.splitlines()) == [b"stray print", b"stray write"]
