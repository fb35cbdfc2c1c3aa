"""How ``serve_stdio`` ends, in process: the transport replaced by fakes that end the way a real one does.

The end-to-end behaviour (real pipes and sockets, the ``serve-mcp`` command) is in
``test_mcp_stdio.py``; these tests pin what ``serve_stdio`` does with each way its server's task
group can end, and that its one-per-process lock is always released.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip("mcp")

import anyio

from engram_memory import HostBinding, connect
from engram_memory.adapters import mcp as mcp_adapter
from engram_memory.adapters._stdout import OutputClosedError
from engram_memory.testing import make_binding

BINDING: HostBinding = make_binding()


class _FakeServer:
    """What ``build_server`` returns, reduced to what ``serve_stdio`` calls; ``run`` ends with ``ending``."""

    def __init__(self, ending: BaseException) -> None:
        self.ending = ending

    def create_initialization_options(self) -> None:
        return None

    async def run(self, *_streams: object) -> None:
        await anyio.lowlevel.checkpoint()
        raise self.ending


class _FakeReads:
    def __init__(self, *_streams: object) -> None:
        pass

    def writes(self, stream: object) -> object:
        return stream


class _FakeLines:
    def __init__(self, _fd: int) -> None:
        self.refusals: list[object] = []


class _Stdin:
    def fileno(self) -> int:
        return 0


@contextlib.contextmanager
def _no_claim() -> Iterator[None]:
    yield None


@contextlib.asynccontextmanager
async def _streams(**_files: object) -> AsyncIterator[tuple[object, object]]:
    yield object(), object()


def _serve(monkeypatch: pytest.MonkeyPatch, ending: BaseException) -> None:
    monkeypatch.setattr(mcp_adapter, "build_server", lambda *_args, **_kwargs: _FakeServer(ending))
    monkeypatch.setattr(mcp_adapter, "StdinLines", _FakeLines)
    monkeypatch.setattr(mcp_adapter, "claimed_stdout", _no_claim)
    monkeypatch.setattr(mcp_adapter, "stdio_server", _streams)
    monkeypatch.setattr(mcp_adapter, "AnsweringReads", _FakeReads)
    monkeypatch.setattr(sys, "stdin", _Stdin())
    service = connect("memory:")
    try:
        anyio.run(mcp_adapter.serve_stdio, service, BINDING)
    finally:
        service.close()


def _lock_is_free() -> bool:
    if not mcp_adapter._STDIO_IN_USE.acquire(blocking=False):
        return False
    mcp_adapter._STDIO_IN_USE.release()
    return True


def test_a_closed_output_ends_the_server_normally_and_says_so_at_info(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ending = BaseExceptionGroup("transport", [BaseExceptionGroup("writer", [OutputClosedError("gone")])])
    with caplog.at_level(logging.INFO, logger="engram_memory.adapters.mcp"):
        _serve(monkeypatch, ending)
    assert caplog.messages == ["stdio client closed its end of stdout; the server stops"]
    assert _lock_is_free()


def test_a_stream_closed_while_shutting_down_is_no_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ending = BaseExceptionGroup("transport", [anyio.BrokenResourceError(), anyio.ClosedResourceError()])
    with caplog.at_level(logging.INFO, logger="engram_memory.adapters.mcp"):
        _serve(monkeypatch, ending)
    assert caplog.messages == []
    assert _lock_is_free()


def test_any_other_failure_is_raised_without_the_expected_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    ending = BaseExceptionGroup("transport", [OutputClosedError("gone"), anyio.BrokenResourceError(), KeyError("x")])
    with pytest.raises(BaseExceptionGroup) as raised:
        _serve(monkeypatch, ending)
    assert [type(error) for error in raised.value.exceptions] == [KeyError]
    assert _lock_is_free()


def test_a_second_serve_stdio_is_refused_while_one_serves_and_the_first_keeps_the_lock() -> None:
    assert mcp_adapter._STDIO_IN_USE.acquire(blocking=False)
    try:
        service = connect("memory:")
        try:
            with pytest.raises(RuntimeError, match="already serving this process's stdin and stdout"):
                anyio.run(mcp_adapter.serve_stdio, service, BINDING)
        finally:
            service.close()
        assert not _lock_is_free()  # the refused call did not release the serving call's lock
    finally:
        mcp_adapter._STDIO_IN_USE.release()
