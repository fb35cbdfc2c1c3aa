"""The stdio server's input reader: lines of a descriptor, screened, cancellable while it waits."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio
import anyio.to_thread

from engram_memory.adapters import _json_screen as screen_module
from engram_memory.adapters import _stdin as stdin_module
from engram_memory.adapters._json_screen import REFUSED_LINE, Refusal, refusal_answer, screened
from engram_memory.adapters._stdin import StdinLines
from engram_memory.wire.converter import MAX_RAW_JSON_BYTES

CONTENT = (
    b'{"jsonrpc": "2.0"}\nsecond line\n\xff not utf-8\n\n \t\r\n\xc3\xa9t\xc3\xa9\n'
    b'{"a": {"b": 1, "\\u0062": 2}}\n[{"k": 1, "K": 2}, {"k": 3}]\nno final newline'
)
EXPECTED = [
    '{"jsonrpc": "2.0"}',
    REFUSED_LINE,  # not JSON
    REFUSED_LINE,  # not UTF-8
    REFUSED_LINE,  # not JSON; the blank lines before it are skipped
    REFUSED_LINE,  # "b" twice in a nested object (once escaped)
    '[{"k": 1, "K": 2}, {"k": 3}]',  # the same key in two objects is no duplicate
    REFUSED_LINE,  # not JSON either, and no final newline
]


EXPECTED_REFUSALS: list[Refusal] = [
    (-32600, None),  # JSON, not a request
    (-32700, None),  # not JSON
    (-32700, None),  # not UTF-8
    (-32700, None),
    (-32600, None),  # JSON, not a request (and a duplicate key)
    (-32600, None),  # an array
    (-32700, None),
]


async def _lines(fd: int) -> list[tuple[str, Refusal]]:
    """Each line handed on, with the refusal queued for it (one per line, in order)."""
    lines = StdinLines(fd)
    read = [line async for line in lines]
    assert len(lines.refusals) == len(read)
    return list(zip(read, lines.refusals, strict=True))


def test_a_pipe_gives_its_lines_screened_and_skips_blank_ones() -> None:
    read, write = os.pipe()
    try:
        os.write(write, CONTENT)
        os.close(write)
        assert anyio.run(_lines, read) == list(zip(EXPECTED, EXPECTED_REFUSALS, strict=True))
    finally:
        os.close(read)


def test_a_regular_file_the_event_loop_cannot_watch_is_read_all_the_same(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(CONTENT)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert anyio.run(_lines, fd) == list(zip(EXPECTED, EXPECTED_REFUSALS, strict=True))
    finally:
        os.close(fd)


def test_an_empty_input_has_no_lines() -> None:
    read, write = os.pipe()
    os.close(write)
    try:
        assert anyio.run(_lines, read) == []
    finally:
        os.close(read)


def _reset_by_the_client() -> socket.socket:
    """Our end of a socket whose client sent two lines, then closed with our answer unread in its queue."""
    ours, client = socket.socketpair()
    client.sendall(b'{"jsonrpc": "2.0"}\n{"k": 1}\n')
    ours.sendall(b"an answer the client never reads\n")
    client.close()
    return ours


def test_a_socket_the_client_reset_ends_the_input_after_the_lines_read() -> None:
    """``ECONNRESET`` is the end of input, where it used to stop the server with a traceback."""
    with _reset_by_the_client() as plain:
        assert os.read(plain.fileno(), 1 << 16) == b'{"jsonrpc": "2.0"}\n{"k": 1}\n'
        with pytest.raises(ConnectionResetError):  # what a plain read gets once the lines are read
            os.read(plain.fileno(), 1 << 16)
    with _reset_by_the_client() as ours:
        read = anyio.run(_lines, ours.fileno())
    assert read == [('{"jsonrpc": "2.0"}', (-32600, None)), ('{"k": 1}', (-32600, None))]


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


def test_a_line_whose_json_is_too_deep_for_the_screen_is_refused() -> None:
    """The screen fails closed: what it cannot parse never reaches the SDK's parser."""
    deep = b"[" * 100_000 + b"]" * 100_000
    read, write = os.pipe()

    async def feed_and_read() -> list[tuple[str, Refusal]]:
        lines = StdinLines(read)
        got: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, _write_all, write, deep + b"\n")
            got.append(await lines.__anext__())
        return list(zip(got, lines.refusals, strict=True))

    try:
        assert anyio.run(feed_and_read) == [(REFUSED_LINE, (-32700, None))]
    finally:
        os.close(read)


def _write_all(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as stream:
        stream.write(data)


DEEP_AFTER_DUPLICATE = (
    b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"a":[{"k":1,"k":2},'
    + b"[" * 100_000  # deeper than the json module reads on any supported Python (3.13 reads 5,000)
    + b"]" * 100_000
    + b"]}}}"
)


@pytest.mark.parametrize(
    ("line", "text", "refusal"),
    [
        (b'{"jsonrpc":"2.0","id":3,"method":"ping"}', None, (-32600, 3)),  # the SDK would parse it: unused
        (b'{"jsonrpc":"2.0","id":"r1","method":"x","params":{"a":1,"a":2}}', REFUSED_LINE, (-32600, "r1")),
        (b'{"jsonrpc":"2.0","id":4,"id":5,"method":"ping"}', REFUSED_LINE, (-32600, None)),  # which id?
        (b'{"jsonrpc":"2.0","method":"notifications/x","params":{"k":1,"k":1}}', REFUSED_LINE, None),
        (b'{"jsonrpc":"2.0","id":6,"result":{"k":1,"k":2}}', REFUSED_LINE, None),  # a response: no answer
        (b'{"jsonrpc":"2.0","id":6,"id":6,"result":{}}', REFUSED_LINE, None),  # nor with its id twice
        (b'{"jsonrpc":"2.0","id":6,"id":7,"error":{"code":1}}', REFUSED_LINE, None),
        (b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"n":' + b"9" * 5000 + b"}}", None, (-32600, 7)),
        (b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"x"}', None, (-32600, None)),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', None, (-32600, None)),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x"}', None, (-32600, None)),
        (b'{"jsonrpc":"2.0","id":null,"method":"x"}', None, (-32600, None)),
        (b"[1, 2]", None, (-32600, None)),
        (b'{"id": 8}', None, (-32600, None)),  # neither a request nor a response
        (b"{", REFUSED_LINE, (-32700, None)),
        (b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","id":1,"method":"x"}', REFUSED_LINE, (-32700, None)),  # a BOM
        (b'{"jsonrpc":"2.0","id":5,"method":"x","params":{"k":1,"k":2},', REFUSED_LINE, (-32700, None)),
        (b'{"jsonrpc":"2.0","id":5,"method":"x","params":{"k":1,"k":2}} x', REFUSED_LINE, (-32700, None)),
        (b"\xff", REFUSED_LINE, (-32700, None)),
        (b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', REFUSED_LINE, (-32600, None)),  # unwritable id
        (b'{"jsonrpc":"2.0","id":"\\ud800","method":"x","params":{"a":1,"a":2}}', REFUSED_LINE, (-32600, None)),
        (b'{"jsonrpc":"2.0","id":"\\udfff","result":{}}', REFUSED_LINE, None),
        (b'{"jsonrpc":"2.0","id":"\\ud83d\\ude00","method":"x"}', None, (-32600, "\U0001f600")),  # a pair is fine
        (DEEP_AFTER_DUPLICATE, REFUSED_LINE, (-32600, None)),  # too deep to read its id once the duplicate is seen
    ],
)
def test_a_line_is_screened_and_gets_the_answer_json_rpc_gives_it(
    line: bytes, text: str | None, refusal: Refusal
) -> None:
    screened_line, answer = screened(line)
    assert screened_line == (line.decode() if text is None else text)
    assert answer == refusal


def test_the_answer_to_a_parsed_value_follows_json_rpc() -> None:
    assert refusal_answer({"jsonrpc": "2.0", "id": 0, "method": "m"}) == (-32600, 0)
    assert refusal_answer({"jsonrpc": "2.0", "id": "", "method": "m"}) == (-32600, "")
    assert refusal_answer({"method": "m"}) is None  # a notification
    assert refusal_answer({"id": 1, "error": {}}) is None  # a response
    assert refusal_answer("text") == (-32600, None)


class _Watched(StdinLines):
    """Records how many bytes it holds each time it reads more."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.held: list[int] = []

    async def _read(self) -> bytes:
        self.held.append(len(self._buffer))
        return await super()._read()


def _feed(
    data: bytes, *, limit: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[str, Refusal]], int]:
    """The lines of ``data`` through a pipe fed by a thread, with a line limit; and the most bytes held."""
    monkeypatch.setattr(stdin_module, "MAX_LINE_BYTES", limit)
    monkeypatch.setattr(stdin_module, "_CHUNK", chunk)
    read, write = os.pipe()
    lines = _Watched(read)

    async def feed_and_read() -> list[str]:
        got: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, _write_all, write, data)
            got.extend([line async for line in lines])
        return got

    try:
        got = anyio.run(feed_and_read)
    finally:
        os.close(read)
    return list(zip(got, lines.refusals, strict=True)), max(lines.held)


def test_a_line_over_the_limit_is_refused_as_it_is_read_and_never_held_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    at_limit = b'{"jsonrpc":"2.0","id":2,"method":"x","params":{"t":"' + b"a" * 45 + b'"}}'
    assert len(at_limit) == 100
    data = b"".join(
        [
            at_limit + b"\n",  # exactly the limit: handed on
            at_limit + b"b\n",  # one byte over, inside one read
            b'{"id": 3, "t": "' + b"c" * 200_000 + b'"}\n',  # over, across thousands of reads
            ping + b"\n",
            b"d" * 150,  # over, ended by EOF
        ]
    )
    got, held = _feed(data, limit=100, chunk=64, monkeypatch=monkeypatch)
    assert got == [
        (at_limit.decode(), (-32600, 2)),
        (REFUSED_LINE, (-32700, None)),
        (REFUSED_LINE, (-32700, None)),
        (ping.decode(), (-32600, 1)),
        (REFUSED_LINE, (-32700, None)),
    ]
    assert held <= 100 + 64  # at most the limit and one read, never the 200 kB line


def test_a_line_feed_read_past_the_limit_still_ends_an_over_long_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit holds when the one read that crosses it also brings the line feed."""
    got, _ = _feed(b"e" * 90 + b"f" * 30 + b'\n"ok"\n', limit=100, chunk=4096, monkeypatch=monkeypatch)
    assert got == [(REFUSED_LINE, (-32700, None)), ('"ok"', (-32600, None))]


def test_a_large_line_is_screened_in_a_worker_thread_and_refused_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    screened_in: list[str] = []
    screen = screen_module.screened

    def recording(line: bytes) -> tuple[str, Refusal]:
        screened_in.append(threading.current_thread().name)
        return screen(line)

    monkeypatch.setattr(screen_module, "screened", recording)
    large = b'{"jsonrpc":"2.0","id":9,"method":"x","params":{"t":"' + b"g" * 70_000 + b'","t":1}}'
    got, _ = _feed(large + b"\n[]\n", limit=stdin_module.MAX_LINE_BYTES, chunk=1 << 16, monkeypatch=monkeypatch)
    assert got == [(REFUSED_LINE, (-32600, 9)), ("[]", (-32600, None))]
    assert screened_in[0] != threading.main_thread().name  # the large one, off the event loop
    assert screened_in[1] == threading.main_thread().name


def test_the_line_limit_leaves_room_for_the_largest_argument_text_and_its_message() -> None:
    assert stdin_module.MAX_LINE_BYTES == MAX_RAW_JSON_BYTES + 1_048_576 == 9 * 1_048_576


def test_a_cancelled_screen_in_a_worker_thread_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a long screen ends the reader at once; the thread finishes unobserved."""

    screen = screen_module.screened

    def slow(line: bytes) -> tuple[str, Refusal]:
        time.sleep(1.5)
        return screen(line)

    async def cancel_soon() -> float:
        started = time.monotonic()
        with anyio.move_on_after(0.1):
            await screen_module.screened_off_loop(b"[" + b" " * screen_module.SCREEN_IN_LOOP_BYTES + b"]")
        return time.monotonic() - started

    monkeypatch.setattr(screen_module, "screened", slow)
    assert anyio.run(cancel_soon) < 1.0
