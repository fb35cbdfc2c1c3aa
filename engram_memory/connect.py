"""``connect(url, ...)``: wire a store, a key vault, a policy and a clock into a MemoryService."""

from __future__ import annotations

from collections.abc import Callable

from engram_memory.clock import SystemClock
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import Clock, KeyVault, Policy, Ranker
from engram_memory.service import MemoryService
from engram_memory.stores.memory import InMemoryStore

__all__ = ["connect"]


def connect(
    url: str,
    *,
    policy: Policy | None = None,
    clock: Clock | None = None,
    vault: KeyVault | None = None,
    ranker: Ranker | None = None,
    audit_ids: Callable[[], str] | None = None,
) -> MemoryService:
    """Open a memory service.

    ``"memory:"`` gives an in-memory store and key vault (lost when the process ends). The policy
    defaults to :class:`~engram_memory.DefaultPolicy` (every candidate waits for host
    adjudication), the clock to the system clock.

    Raises:
        ValueError: an unsupported URL scheme.
    """
    policy = policy if policy is not None else DefaultPolicy()
    clock = clock if clock is not None else SystemClock()
    if url == "memory:":
        store = InMemoryStore()
        vault = vault if vault is not None else InMemoryKeyVault()
    else:
        raise ValueError("unsupported memory URL; use 'memory:'")
    extra = {"audit_ids": audit_ids} if audit_ids is not None else {}
    return MemoryService(store=store, vault=vault, policy=policy, clock=clock, ranker=ranker, **extra)
