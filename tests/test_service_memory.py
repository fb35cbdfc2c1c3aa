"""The service conformance suite bound to the in-memory store and key vault."""

from __future__ import annotations

import pytest

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import ServiceConformance, ServiceFactory
from engram_memory.testing.fakes import InMemoryCapabilities


class TestInMemoryService(InMemoryCapabilities, ServiceConformance):
    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        store = InMemoryStore(secret=b"s" * 32)
        vault = InMemoryKeyVault()

        def factory(clock: Clock) -> MemoryService:
            return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

        return factory
