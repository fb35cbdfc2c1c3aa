"""The stdio server's input reader: lines of a descriptor, strict UTF-8, cancellable while it waits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio

from engram_memory.adapters._stdin import _UNDECODABLE, StdinLines

CONTENT = b'{"jsonrpc": "2.0"}\nsecond line\n\xff not utf-8\n\xc3\xa9t\xc3\xa9\nno final newline'
EXPECTED = ['{"jsonrpc": "2.0"}', "second line", _UNDECODABLE, "\u00e9t\u00e9", "no final newline"]


async def _lines(fd: int) -> list[str]:
    return [line async for line in StdinLines(fd)]


def test_a_pipe_gives_its_lines_and_an_undecodable_one_as_text_that_is_not_json() -> None:
    read, write = os.pipe()
    try:
        os.write(write, CONTENT)
        os.close(write)
        assert anyio.run(_lines, read) == EXPECTED
    finally:
        os.close(read)


def test_a_regular_file_the_event_loop_cannot_watch_is_read_all_the_same(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(CONTENT)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert anyio.run(_lines, fd) == EXPECTED
    finally:
        os.close(fd)


def test_an_empty_input_has_no_lines() -> None:
    read, write = os.pipe()
    os.close(write)
    try:
        assert anyio.run(_lines, read) == []
    finally:
        os.close(read)


def test_waiting_for_a_line_is_cancellable() -> None:
    """A read waiting on an open, silent pipe ends at once when its scope is cancelled."""
    read, write = os.pipe()

    async def wait_briefly() -> bool:
        with anyio.move_on_after(0.2) as scope:
            await StdinLines(read).__anext__()
        return scope.cancelled_caught

    try:
        assert anyio.run(wait_briefly) is True
    finally:
        os.close(read)
        os.close(write)
