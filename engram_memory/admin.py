"""``MemoryAdmin``: host maintenance that never reaches the agent through the six tools."""

from __future__ import annotations

from typing import Literal

from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.journal import VerifyReport, state_digest, verify_scope
from engram_memory.ports import SealedEnvelope
from engram_memory.results import RequestAdmissionResult
from engram_memory.service import MemoryService

__all__ = ["MemoryAdmin"]

_MAINTENANCE = "host:maintenance"


class MemoryAdmin:
    """Maintenance over the same store, vault and policy as a :class:`MemoryService`.

    Scopes are named by tenant and workspace, as the host knows them.
    """

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    def _binding(self, tenant_id: str, workspace_id: str) -> HostBinding:
        return HostBinding(
            tenant_id=tenant_id,
            workspace_id=workspace_id,
            principal=_MAINTENANCE,
            agent_id=_MAINTENANCE,
            session=_MAINTENANCE,
            purpose_ref=_MAINTENANCE,
            tools=frozenset(),  # maintenance is never one of the agent's tools
        )

    def adjudicate(
        self,
        *,
        tenant_id: str,
        workspace_id: str,
        candidate_id: str,
        decision: Literal["accept", "reject"],
    ) -> RequestAdmissionResult:
        """Accept or reject a candidate left ``pending_adjudication``, as the host.

        This is the only way to admit content that was forgotten in the scope (the forgotten-content
        guard, DESIGN D7, holds such a candidate ``pending_adjudication`` for an agent's request):
        the host's decision here is the human judgement that re-admits it.

        Raises:
            EngramError: ``NOT_FOUND`` for an unknown candidate, ``ALREADY_TERMINAL`` when it was
                rejected or withdrawn (an admitted one answers ``duplicate_exact``).
        """
        if decision not in {"accept", "reject"}:
            raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="/decision")
        binding = self._binding(tenant_id, workspace_id)
        return self._service._write.decide_candidate(  # noqa: SLF001 - same package
            binding=binding,
            candidate_id=candidate_id,
            now=self._service.clock.now(),
            key=None,
            intent=None,
            confirmation=None,
            decide=decision,
        )

    def verify(self, *, tenant_id: str, workspace_id: str) -> VerifyReport:
        """Re-derive the scope's journal chain and state; report the first bad cursor."""
        scope = self._binding(tenant_id, workspace_id).scope
        return self.verify_scope(scope)

    def verify_scope(self, scope: str) -> VerifyReport:
        """:meth:`verify` for a scope key (as listed by ``store.scopes()``).

        The store is read from one snapshot but keys are opened in the live vault, so a key that
        an erasure destroyed after the snapshot looks missing: such a key is checked against a
        fresh view, and a row that no longer holds it is not reported.
        """
        store = self._service.store

        def erased_meanwhile(item: Literal["candidate", "record"], item_id: str, sealed: SealedEnvelope) -> bool:
            with store.read(scope) as fresh:
                row = fresh.candidate(item_id) if item == "candidate" else fresh.record(item_id)
            return row is None or row.sealed != sealed

        with store.read(scope) as reader:
            return verify_scope(reader, self._service.vault, scope, erased_meanwhile=erased_meanwhile)

    def state_digest(self, *, tenant_id: str, workspace_id: str) -> str:
        """Digest of the scope's folded state (equal across backends for the same trace)."""
        scope = self._binding(tenant_id, workspace_id).scope
        with self._service.store.read(scope) as reader:
            return state_digest(reader)

    def reap_keys(self) -> int:
        """Destroy keys whose destruction was committed but not confirmed; return how many.

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable) when the vault could not destroy some
                of them: they stay doomed, and a later call retries them. A failure is never
                reported as "nothing to reap".
        """
        return self._service._write.guard.reap()  # noqa: SLF001 - same package
