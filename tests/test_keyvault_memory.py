"""The key vault conformance suite bound to the in-memory reference vault."""

from __future__ import annotations

import pytest

from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import KeyVault
from engram_memory.testing import KeyVaultConformance
from engram_memory.testing.keyvault import KeyMaterial


def _reveal(vault: KeyVault, key_ref: str) -> bytes:
    assert isinstance(vault, InMemoryKeyVault)
    return vault._keys[key_ref]


class TestInMemoryKeyVault(KeyVaultConformance):
    @pytest.fixture
    def vault(self) -> InMemoryKeyVault:
        return InMemoryKeyVault()

    @pytest.fixture
    def key_material(self) -> KeyMaterial | None:
        return _reveal


def test_holds_tracks_destruction() -> None:
    vault = InMemoryKeyVault()
    envelope = vault.seal("context", b"plaintext")
    assert vault.holds(envelope.key_ref)
    vault.destroy(envelope.key_ref)
    assert not vault.holds(envelope.key_ref)


def test_the_vault_is_synchronous() -> None:
    assert InMemoryKeyVault().destroys_synchronously is True
