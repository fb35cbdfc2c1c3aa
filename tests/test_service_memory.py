"""The service conformance suite bound to the in-memory store and key vault."""

from __future__ import annotations

import pytest

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import ServiceConformance, ServiceFactory
from engram_memory.testing.fakes import inmemory_replace_event_body, inmemory_scope_contents
from engram_memory.testing.service import ReplaceEventBody, ScopeContents


class TestInMemoryService(ServiceConformance):
    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        store = InMemoryStore(secret=b"s" * 32)
        vault = InMemoryKeyVault()

        def factory(clock: Clock) -> MemoryService:
            return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

        return factory

    @pytest.fixture
    def scope_contents(self) -> ScopeContents | None:
        return inmemory_scope_contents

    @pytest.fixture
    def replace_event_body(self) -> ReplaceEventBody | None:
        return inmemory_replace_event_body
