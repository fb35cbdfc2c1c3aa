"""The service never opens a view or a unit while its own thread has one open.

The Store port lets a store serialise views and units with one plain lock ("take turns"): a
service that opened a second view, or a unit, inside a view would then wait for itself forever.
The service conformance suite runs here over a store that refuses and records any such nesting,
and the state machine with it; the suite's own assertions must hold too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock, Store, StoreReader, UnitOfWork
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import ServiceConformance, ServiceFactory, capture_args, make_binding, make_key, ok
from engram_memory.testing.fakes import CAPTURE, StoreWrapper


class OneAtATime(StoreWrapper):
    """A store whose thread may hold one view or one unit at a time; a nested one is refused and recorded."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self._open = threading.local()
        self.nested: list[str] = []

    @contextmanager
    def _turn(self, kind: str, opener: Callable[[str], AbstractContextManager[Any]], scope: str) -> Iterator[Any]:
        holding = getattr(self._open, "kind", None)
        if holding is not None:
            self.nested.append(f"a {kind} opened inside a {holding}")
            raise AssertionError(f"the service opened a {kind} inside a {holding} of the same thread")
        self._open.kind = kind
        try:
            with opener(scope) as handle:
                yield handle
        finally:
            self._open.kind = None

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        """``inner.read``, alone on this thread."""
        return self._turn("view", self.inner.read, scope)

    def write(self, scope: str) -> AbstractContextManager[UnitOfWork]:
        """``inner.write``, alone on this thread."""
        return self._turn("unit", self.inner.write, scope)


class TestServiceTakesTurns(ServiceConformance):
    @pytest.fixture
    def turns(self) -> Iterator[OneAtATime]:
        store = OneAtATime(InMemoryStore(secret=b"t" * 32))
        yield store
        assert store.nested == []

    @pytest.fixture
    def service_factory(self, turns: OneAtATime) -> ServiceFactory:
        vault = InMemoryKeyVault()

        def factory(clock: Clock) -> MemoryService:
            return MemoryService(store=turns, vault=vault, policy=DefaultPolicy(), clock=clock)

        return factory


def test_the_wrapper_refuses_a_view_inside_a_view() -> None:
    store = OneAtATime(InMemoryStore(secret=b"t" * 32))
    with store.read("scope"), pytest.raises(AssertionError, match="a view inside a view"):
        store.read("scope").__enter__()
    assert store.nested == ["a view opened inside a view"]
    with store.write("scope"):
        pass  # the turn was given back


def test_the_admin_operations_take_turns_too() -> None:
    store = OneAtATime(InMemoryStore(secret=b"t" * 32))
    clock = ManualClock()
    service = MemoryService(store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(), clock=clock)
    admin = MemoryAdmin(service)
    binding = make_binding("t", "w", "alice")
    ids = [
        ok(service.call_tool(CAPTURE, capture_args(make_key(f"turns-{n}")), binding))["candidate_id"] for n in (1, 2)
    ]
    pending = admin.pending_candidates(tenant_id="t", workspace_id="w")
    assert [candidate.candidate_id for candidate in pending] == ids  # oldest first
    admitted = admin.adjudicate(tenant_id="t", workspace_id="w", candidate_id=ids[0], decision="accept")
    assert admitted.outcome.status == "accepted"
    again = admin.adjudicate(tenant_id="t", workspace_id="w", candidate_id=ids[0], decision="accept")
    assert again.outcome.record_id == admitted.outcome.record_id
    assert admin.verify(tenant_id="t", workspace_id="w").ok
    assert admin.reap_keys() >= 0
    assert store.nested == []
