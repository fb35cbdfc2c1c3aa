"""The differential service state machine on the in-memory store and key vault."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import ServiceFactory, service_machine


def _fresh_backend() -> ServiceFactory:
    store = InMemoryStore()
    vault = InMemoryKeyVault()

    def factory(clock: Clock) -> MemoryService:
        return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

    return factory


InMemoryServiceMachine = service_machine(_fresh_backend)

TestInMemoryServiceMachine = InMemoryServiceMachine.TestCase
TestInMemoryServiceMachine.settings = settings(
    max_examples=200,
    stateful_step_count=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
