"""``connect(url, ...)``: wire a store, a key vault, a policy and a clock into a MemoryService."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

from engram_memory.clock import SystemClock
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import Clock, KeyVault, Policy, Ranker, Store
from engram_memory.service import MemoryService
from engram_memory.stores.memory import InMemoryStore

__all__ = ["connect"]

_SQLITE: Final = "sqlite:///"


def connect(
    url: str,
    *,
    policy: Policy | None = None,
    clock: Clock | None = None,
    vault: KeyVault | None = None,
    ranker: Ranker | None = None,
    audit_ids: Callable[[], str] | None = None,
    master_key: bytes | None = None,
    synchronous: Literal["FULL", "NORMAL"] = "FULL",
) -> MemoryService:
    """Open a memory service.

    * ``"memory:"`` — an in-memory store and key vault, gone when the process ends.
    * ``"sqlite:///relative/path.db"`` or ``"sqlite:////absolute/path.db"`` — the embedded default:
      a :class:`~engram_memory.stores.sqlite.SQLiteStore` at that path and, unless ``vault`` is
      given, a :class:`~engram_memory.keyvaults.sqlite.SQLiteKeyVault` beside it (``<path>.vault``)
      whose data keys are wrapped under ``master_key`` or, when none is given, under a key file
      ``<path>.key`` created with owner-only permissions. ``synchronous`` is ``"FULL"`` (durable at
      every commit, the default) or ``"NORMAL"`` (faster; the last commits may be lost on power
      failure, never corrupted). ``sqlite:///:memory:`` is refused: use ``"memory:"``.

    The policy defaults to :class:`~engram_memory.DefaultPolicy` (every candidate waits for host
    adjudication), the clock to the system clock.

    Raises:
        ValueError: an unsupported or malformed URL.
    """
    policy = policy if policy is not None else DefaultPolicy()
    clock = clock if clock is not None else SystemClock()
    store: Store
    if url == "memory:":
        store = InMemoryStore()
        vault = vault if vault is not None else InMemoryKeyVault()
    elif url.startswith(_SQLITE):
        path = url.removeprefix(_SQLITE)
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ValueError("sqlite URL needs a file path; use 'memory:' for an in-memory service")
        from engram_memory.stores.sqlite import SQLiteStore  # noqa: PLC0415 - the core never imports sqlite3

        store = SQLiteStore(path, synchronous=synchronous)
        if vault is None:
            from engram_memory.keyvaults.sqlite import SQLiteKeyVault  # noqa: PLC0415 - same

            try:
                if master_key is not None:
                    vault = SQLiteKeyVault(path + ".vault", master_key)
                else:
                    vault = SQLiteKeyVault(path + ".vault", master_key_file=path + ".key")
            except BaseException:
                store.close()
                raise
    else:
        raise ValueError("unsupported memory URL; use 'memory:' or 'sqlite:///path'")
    extra = {"audit_ids": audit_ids} if audit_ids is not None else {}
    return MemoryService(store=store, vault=vault, policy=policy, clock=clock, ranker=ranker, **extra)
