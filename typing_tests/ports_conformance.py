"""The reference backends satisfy the ports structurally (checked by mypy, never run)."""

from __future__ import annotations

from pathlib import Path

from engram_memory import DefaultPolicy, ManualClock, SystemClock
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.ports import Clock, KeyVault, Policy, Ranker, Store
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore


def reference_backends(directory: Path, master_key: bytes) -> None:
    """Each assignment fails the type check if the backend drifts from its port."""
    stores: list[Store] = [
        InMemoryStore(),
        SQLiteStore(directory / "memory.db"),
        SQLiteStore(directory / "memory.db", synchronous="NORMAL", read_only=True),
    ]
    vaults: list[KeyVault] = [
        InMemoryKeyVault(),
        SQLiteKeyVault(directory / "memory.db.vault", master_key),
        SQLiteKeyVault(directory / "memory.db.vault", master_key_file=directory / "memory.db.key"),
    ]
    ranker: Ranker = LexicalRanker()
    policy: Policy = DefaultPolicy(tools=frozenset())
    clocks: list[Clock] = [SystemClock(), ManualClock()]
    del stores, vaults, ranker, policy, clocks


def the_core_accepts_no_other_store(directory: Path) -> None:
    """A store missing a port method is refused where a ``Store`` is expected."""

    class HalfStore:
        def close(self) -> None: ...

    store: Store = HalfStore()  # type: ignore[assignment]
    del store, directory
