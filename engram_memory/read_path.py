"""The read path: search and get (being implemented; see issue "Read path")."""

from __future__ import annotations

from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.ports import Clock, KeyVault, Policy, Ranker, Store
from engram_memory.results import GetResult, SearchResult
from engram_memory.wire.args import GetArgs, SearchArgs

__all__ = ["ReadPath"]


class ReadPath:
    """Search and get over the ports."""

    def __init__(self, *, store: Store, vault: KeyVault, policy: Policy, clock: Clock, ranker: Ranker) -> None:
        self._store = store
        self._vault = vault
        self._policy = policy
        self._clock = clock
        self._ranker = ranker

    def search(self, binding: HostBinding, args: SearchArgs) -> SearchResult:
        """Not yet available."""
        raise EngramError(ErrorCode.CAPABILITY_UNAVAILABLE, detail="search not implemented yet")

    def get(self, binding: HostBinding, args: GetArgs) -> GetResult:
        """Not yet available."""
        raise EngramError(ErrorCode.CAPABILITY_UNAVAILABLE, detail="get not implemented yet")
