"""The conformance kits check scheduled destruction too: a vault that schedules its destructions
passes the KeyVault and the service kits only if they happen, and one that never destroys fails."""

from __future__ import annotations

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Clock, KeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import Harness, ServiceConformance, ServiceFactory, with_policy
from engram_memory.testing.fakes import InMemoryCapabilities
from engram_memory.testing.keyvault import CompleteDestruction, KeyVaultConformance
from engram_memory.testing.service import ACCEPT


class SchedulingVault(InMemoryKeyVault):
    """Queues destructions and carries them out on ``drain`` (as a remote KMS would, later)."""

    def __init__(self, *, drains: bool = True) -> None:
        super().__init__()
        self.queued: list[str] = []
        self.drains = drains

    @property
    def destroys_synchronously(self) -> bool:
        return False

    def destroy(self, *key_refs: str) -> None:
        self.queued += key_refs

    def drain(self) -> None:
        if self.drains:
            super().destroy(*self.queued)
        self.queued.clear()


def _drain(vault: KeyVault) -> None:
    assert isinstance(vault, SchedulingVault)
    vault.drain()


class TestASchedulingVaultThatDestroys(KeyVaultConformance):
    @pytest.fixture
    def vault(self) -> KeyVault:
        return SchedulingVault()

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        return _drain


def test_a_scheduling_vault_without_a_way_to_finish_fails_the_kit() -> None:
    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="complete_destruction"):
        kit.test_a_destroyed_key_is_unavailable(SchedulingVault(), None)


@pytest.mark.parametrize("check", ["test_a_destroyed_key_is_unavailable", "test_one_call_destroys_several_keys"])
def test_a_vault_that_never_destroys_fails_the_kit(check: str) -> None:
    kit = KeyVaultConformance()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        getattr(kit, check)(SchedulingVault(drains=False), _drain)


def _services(vault: SchedulingVault) -> ServiceFactory:
    """Services over one in-memory store and ``vault``."""
    store = InMemoryStore(secret=b"s" * 32)

    def factory(clock: Clock) -> MemoryService:
        return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

    return factory


class TestAServiceOnASchedulingVault(InMemoryCapabilities, ServiceConformance):
    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        return _services(SchedulingVault())

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        return _drain


def test_a_service_on_a_vault_that_never_destroys_fails_the_service_kit() -> None:
    clock = ManualClock()
    harness = Harness(with_policy(_services(SchedulingVault(drains=False))(clock), ACCEPT), clock)
    kit = TestAServiceOnASchedulingVault()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        kit.test_withdraw_ends_the_candidate_and_destroys_its_key(harness, _drain)
