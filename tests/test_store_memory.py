"""The store conformance suite bound to the in-memory reference store."""

from __future__ import annotations

import pytest

from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()


def test_a_given_secret_is_kept() -> None:
    assert InMemoryStore(secret=b"k" * 32).secret() == b"k" * 32
