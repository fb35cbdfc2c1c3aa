"""The stdio server's input reader: lines of a descriptor, screened, cancellable while it waits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio
import anyio.to_thread

from engram_memory.adapters._stdin import REFUSED_LINE, StdinLines

CONTENT = (
    b'{"jsonrpc": "2.0"}\nsecond line\n\xff not utf-8\n\n \t\r\n\xc3\xa9t\xc3\xa9\n'
    b'{"a": {"b": 1, "\\u0062": 2}}\n[{"k": 1, "K": 2}, {"k": 3}]\nno final newline'
)
EXPECTED = [
    '{"jsonrpc": "2.0"}',
    "second line",
    REFUSED_LINE,  # not UTF-8
    "\u00e9t\u00e9",  # the blank lines before it are skipped
    REFUSED_LINE,  # "b" twice in a nested object (once escaped)
    '[{"k": 1, "K": 2}, {"k": 3}]',  # the same key in two objects is no duplicate
    "no final newline",
]


async def _lines(fd: int) -> list[str]:
    return [line async for line in StdinLines(fd)]


def test_a_pipe_gives_its_lines_screened_and_skips_blank_ones() -> None:
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


def test_the_refused_line_is_text_no_json_parser_accepts() -> None:
    with pytest.raises(ValueError, match="Expecting value"):
        json.loads(REFUSED_LINE)


def test_a_line_whose_json_is_too_deep_for_the_screen_is_handed_on() -> None:
    """The screen refuses duplicates only: what it cannot parse is the SDK's to refuse."""
    deep = b"[" * 100_000 + b"]" * 100_000
    read, write = os.pipe()

    async def first_line() -> str:
        return await StdinLines(read).__anext__()

    async def feed_and_read() -> list[str]:
        got: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, _write_all, write, deep + b"\n")
            got.append(await first_line())
        return got

    try:
        assert anyio.run(feed_and_read) == [deep.decode()]
    finally:
        os.close(read)


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as stream:
        stream.write(data)
