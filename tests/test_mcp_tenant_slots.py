"""build_server limits how many calls of one tenant hold a worker thread at once."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

pytest.importorskip("mcp")

import anyio
from mcp import Client

from engram_memory import ALL_TOOLS, DefaultPolicy, HostBinding, ManualClock, MemoryService, connect
from engram_memory.adapters.mcp import DEFAULT_CALLS_PER_TENANT, RequestContext, build_server

pytestmark = pytest.mark.anyio

PURPOSE = "engineering-decisions"
GET = "engram_memory_get"
TIMEOUT = 30
ACME_CALLS = 45


@pytest.fixture(name="anyio_backend")
def _anyio_backend() -> str:
    return "asyncio"


def _binding(tenant: str) -> HostBinding:
    return HostBinding(
        tenant_id=tenant,
        workspace_id="platform",
        principal="alice",
        agent_id="agent-1",
        session="session-1",
        purpose_ref=PURPOSE,
        tools=cast("Any", ALL_TOOLS),  # mypy's attrs plugin types the converter's parameter narrowly
    )


def _binding_for(ctx: RequestContext) -> HostBinding:
    """Test device only: the tenant named in the request's ``_meta`` (a host never trusts the client for it)."""
    return _binding("globex" if (ctx.meta or {}).get("tenant") == "globex" else "acme")


class SlowAcme:
    """``call_tool`` of a service that blocks every call of tenant ``acme`` until released, counting them."""

    def __init__(self, service: MemoryService) -> None:
        self._call_tool = service.call_tool
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.finished = 0

    def __call__(self, name: str, arguments: Any, binding: HostBinding) -> dict[str, Any]:
        if binding.tenant_id == "acme":
            with self._lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            try:
                self.release.wait(TIMEOUT)
            finally:
                with self._lock:
                    self.running -= 1
                    self.finished += 1
        return self._call_tool(name, arguments, binding)


def _service(monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryService, SlowAcme]:
    service = connect("memory:", policy=DefaultPolicy(admission="accept"), clock=ManualClock())
    slow = SlowAcme(service)
    monkeypatch.setattr(service, "call_tool", slow)
    return service, slow


async def _wait_until(condition: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        while not condition():  # noqa: ASYNC110 - worker threads change the counts; nothing to wait on
            await anyio.sleep(0.01)


async def test_a_tenants_slow_calls_hold_at_most_its_share_and_another_tenant_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, slow = _service(monkeypatch)
    args = {"record_id": "mem_missing", "purpose_ref": PURPOSE}
    with anyio.fail_after(TIMEOUT):
        async with Client(build_server(service, _binding_for, max_calls_per_tenant=2)) as client:
            async with anyio.create_task_group() as group:
                for _ in range(ACME_CALLS):  # more than anyio's pool of 40 worker threads
                    group.start_soon(client.call_tool, GET, args)
                await _wait_until(lambda: slow.running == 2)
                await anyio.sleep(0.2)  # room for a third call to start, were it allowed to
                assert slow.running == 2
                other = await client.call_tool(GET, args, meta=cast("Any", {"tenant": "globex"}))  # served meanwhile
                assert other.structured_content is not None
                assert other.structured_content["error"]["code"] == "NOT_FOUND"
                slow.release.set()
            listed = await client.list_tools()  # acme's own requests run again
            assert slow.finished == ACME_CALLS
            assert slow.peak == 2
    assert len(listed.tools) == 6


async def test_without_a_limit_every_call_gets_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    service, slow = _service(monkeypatch)
    args = {"record_id": "mem_missing", "purpose_ref": PURPOSE}
    with anyio.fail_after(TIMEOUT):
        server = build_server(service, _binding_for, max_calls_per_tenant=None)
        async with Client(server) as client, anyio.create_task_group() as group:
            for _ in range(DEFAULT_CALLS_PER_TENANT + 2):
                group.start_soon(client.call_tool, GET, args)
            await _wait_until(lambda: slow.running == DEFAULT_CALLS_PER_TENANT + 2)
            slow.release.set()
    assert slow.peak == DEFAULT_CALLS_PER_TENANT + 2


async def test_the_default_limit_applies_and_a_tenants_slots_are_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    service, slow = _service(monkeypatch)
    args = {"record_id": "mem_missing", "purpose_ref": PURPOSE}
    with anyio.fail_after(TIMEOUT):
        async with Client(build_server(service, _binding_for)) as client:
            for _round in range(2):  # the second round gets the slots the first gave back
                slow.release.clear()
                async with anyio.create_task_group() as group:
                    for _ in range(DEFAULT_CALLS_PER_TENANT + 3):
                        group.start_soon(client.call_tool, GET, args)
                    await _wait_until(lambda: slow.running == DEFAULT_CALLS_PER_TENANT)
                    await anyio.sleep(0.2)
                    assert slow.running == DEFAULT_CALLS_PER_TENANT
                    slow.release.set()
    assert slow.finished == 2 * (DEFAULT_CALLS_PER_TENANT + 3)
    assert slow.peak == DEFAULT_CALLS_PER_TENANT


@pytest.mark.parametrize(("limit", "error"), [(0, ValueError), (-1, ValueError), ("2", TypeError), (True, TypeError)])
def test_a_limit_that_is_not_a_positive_int_is_refused(limit: Any, error: type[Exception]) -> None:
    service = connect("memory:")
    with pytest.raises(error, match="max_calls_per_tenant"):
        build_server(service, _binding_for, max_calls_per_tenant=limit)
