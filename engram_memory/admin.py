"""``MemoryAdmin``: host maintenance that never reaches the agent through the six tools."""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from engram_memory.canonical import Domain, digest
from engram_memory.context import HostBinding
from engram_memory.errors import EngramError, ErrorCode, ProtocolError
from engram_memory.journal import VerifyReport, state_digest, verify_scope
from engram_memory.ports import CandidateRow, Capturer, SealedEnvelope, StoreReader
from engram_memory.results import RequestAdmissionResult
from engram_memory.service import MemoryService
from engram_memory.store_access import available_view
from engram_memory.write_path import KeyVanishedError, capturer_of

_VERIFY_SNAPSHOTS: Final = 3
"""Snapshots :meth:`MemoryAdmin.verify_scope` reads at most while keys vanish under it."""
_Sealed = tuple[Literal["candidate", "record"], str, SealedEnvelope]
"""A sealed body met by verify: (item kind, its id, its envelope)."""


@attrs.define
class _KeySieve:
    """Verify's ``erased_meanwhile``: keys destroyed after the snapshot, told from lost ones after the view.

    In a pass, a missing key not yet told apart is skipped and kept as a suspect (``True``); in the
    final pass, or once found lost, it is reported (``False``).
    """

    erased: set[_Sealed] = attrs.field(factory=set)
    lost: set[_Sealed] = attrs.field(factory=set)
    suspects: list[_Sealed] = attrs.field(factory=list)
    passes: int = 0
    final: bool = False

    def __call__(self, item: Literal["candidate", "record"], item_id: str, sealed: SealedEnvelope) -> bool:
        found = (item, item_id, sealed)
        if found in self.erased:
            return True
        if found in self.lost or self.final:
            return False
        self.suspects.append(found)
        return True

    def sort(self, fresh: StoreReader) -> bool:
        """File this pass's suspects by a fresh view (a row no longer holding its key was erased); any lost?"""
        for item, item_id, sealed in self.suspects:
            row = fresh.candidate(item_id) if item == "candidate" else fresh.record(item_id)
            (self.erased if row is None or row.sealed != sealed else self.lost).add((item, item_id, sealed))
        found_lost = any(suspect in self.lost for suspect in self.suspects)
        self.suspects.clear()
        return found_lost


__all__ = ["MemoryAdmin", "PendingCandidate"]

_MAINTENANCE = "host:maintenance"
_MAINTENANCE_BINDING = HostBinding(
    tenant_id=_MAINTENANCE,
    workspace_id=_MAINTENANCE,
    principal=_MAINTENANCE,
    agent_id=_MAINTENANCE,
    session=_MAINTENANCE,
    purpose_ref=_MAINTENANCE,
    tools=frozenset(),  # maintenance is never one of the agent's tools
)
"""The binding maintenance runs under; each method sets its scope's tenant and workspace."""


def _scope_binding(tenant_id: str, workspace_id: str) -> HostBinding:
    """The maintenance binding of (``tenant_id``, ``workspace_id``), each id checked by the service's own rule.

    Every service call refuses a binding whose tenant or workspace is empty, not valid Unicode
    text, or not in NFC (-32603); maintenance refuses the same ids, one at a time so that the
    error names the one at fault, instead of reading a scope no agent can ever have.

    Raises:
        TypeError: an id is not a ``str``.
        ValueError: an id is empty, holds a lone surrogate or is not in Unicode NFC.
    """
    binding = _MAINTENANCE_BINDING
    for name, value in (("tenant_id", tenant_id), ("workspace_id", workspace_id)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str")
        change: dict[str, Any] = {name: value}
        binding = attrs.evolve(binding, **change)
        try:
            MemoryService._check_context(binding)  # noqa: SLF001 - same package: the one rule for host ids
        except ProtocolError:
            raise ValueError(f"{name} must be non-empty, valid Unicode text in NFC") from None
    return binding


@attrs.frozen(kw_only=True)
class PendingCandidate:
    """A candidate waiting for a decision, opened for the host's reviewer (never for an agent).

    ``payload`` is the payload as it would be admitted (defaults completed) and ``evidence`` the
    evidence bundle as captured, attestation included; ``trust`` is the trust the policy assigned
    at capture. ``record_digest`` is the digest the admitted record would carry. ``forgotten`` is
    ``True`` when a record of the same payload was forgotten in the scope (its payload digest is
    among the tombstones): accepting it re-admits content that a forget erased, which no policy
    does by itself (the forgotten-content guard, DESIGN D7) and only the host's ``adjudicate`` can.
    ``captured_by`` is the binding that captured it (``None`` for a candidate sealed by a
    pre-release that did not record it).
    """

    candidate_id: str
    created_cursor: int
    recorded_at: str
    record_digest: str
    policy_id: str
    policy_version: str
    trust: dict[str, Any]
    payload: dict[str, Any]
    evidence: dict[str, Any]
    forgotten: bool
    captured_by: Capturer | None


class MemoryAdmin:
    """Maintenance over the same store, vault and policy as a :class:`MemoryService`.

    Scopes are named by tenant and workspace, as the host knows them. Every method that takes
    them refuses an id that no :class:`~engram_memory.HostBinding` could use (see :meth:`scope`).
    Every method that reads the store raises :class:`~engram_memory.EngramError`
    ``STORE_UNAVAILABLE`` (retriable) when it is closed or busy past its timeout.
    """

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    @staticmethod
    def scope(*, tenant_id: str, workspace_id: str) -> str:
        """The opaque scope key of (``tenant_id``, ``workspace_id``).

        It is the key ``store.scopes()`` lists, :meth:`verify_scope` takes and ``engram-memory
        verify`` and ``stats`` print. The ids are checked as every service call checks a
        :class:`~engram_memory.HostBinding`'s (which refuses them with -32603).

        Raises:
            TypeError: an id is not a ``str``.
            ValueError: an id is empty, holds a lone surrogate or is not in Unicode NFC.
        """
        return _scope_binding(tenant_id, workspace_id).scope

    def adjudicate(
        self,
        *,
        tenant_id: str,
        workspace_id: str,
        candidate_id: str,
        decision: Literal["accept", "reject"],
        readmit_forgotten: bool = False,
    ) -> RequestAdmissionResult:
        """Accept or reject a candidate left ``pending_adjudication``, as the host.

        This is the only way to admit content that was forgotten in the scope (the forgotten-content
        guard, DESIGN D7, holds such a candidate ``pending_adjudication`` for an agent's request):
        the host's decision here is the human judgement that re-admits it, and it says so with
        ``readmit_forgotten=True``. Without it, accepting content forgotten in the scope is
        ``gate_failed`` and nothing is written. The check runs in the same unit of work as the
        decision, so a forget of the same content that commits after the reviewer looked (see
        :meth:`pending_candidate`'s ``forgotten``) is caught too. A reject needs no flag.

        ``outcome.status`` says what happened: ``accepted`` or ``rejected`` when this call decided
        the candidate, ``duplicate_exact`` (with its ``record_id``) when it was admitted before,
        whatever ``decision`` says: a reject does not undo an admission (forget the record instead).
        Whether a candidate's content was forgotten is :meth:`pending_candidate`'s ``forgotten``.

        Raises:
            EngramError: ``INVALID_SCHEMA`` (pointer ``/decision``) for a ``decision`` other than
                ``"accept"`` or ``"reject"``; ``NOT_FOUND`` for an unknown candidate,
                ``ALREADY_TERMINAL`` when it was rejected or withdrawn (an admitted one answers
                ``duplicate_exact``), ``gate_failed`` for an ``accept`` of forgotten content
                without ``readmit_forgotten``; ``BLOB_MISSING`` or ``JOURNAL_CORRUPT`` when the
                candidate's envelope is missing, does not authenticate or does not re-derive;
                ``STORE_UNAVAILABLE`` (retriable) when the store or the vault cannot serve the
                call now, ``MUTATION_OUTCOME_UNKNOWN`` (retriable) when the store cannot tell
                whether the decision committed, ``POLICY_UNAVAILABLE`` when the host policy fails
                to give its id or version (it is not asked to decide).
            TypeError, ValueError: ``tenant_id`` or ``workspace_id`` is refused (see :meth:`scope`),
                or ``readmit_forgotten`` is not a ``bool``.
        """
        if decision not in {"accept", "reject"}:
            raise EngramError(ErrorCode.INVALID_SCHEMA, pointer="/decision")
        if type(readmit_forgotten) is not bool:
            raise TypeError("readmit_forgotten must be a bool")
        binding = _scope_binding(tenant_id, workspace_id)
        return self._service._write.decide_candidate(  # noqa: SLF001 - same package
            binding=binding,
            candidate_id=candidate_id,
            now=self._service._clock.now(),  # noqa: SLF001 - same package
            key=None,
            intent=None,
            confirmation=None,
            decide=decision,
            readmit_forgotten=readmit_forgotten,
        )

    def pending_candidates(self, *, tenant_id: str, workspace_id: str) -> list[PendingCandidate]:
        """Every ``pending`` candidate of the scope, opened, oldest first: what a reviewer decides on.

        Each says whether its content was forgotten in the scope before (``forgotten``), so that a
        reviewer never re-admits erased content without knowing it.

        Candidate inspection is host maintenance (founding document §0): an agent never sees a
        candidate's content through the six tools. Each envelope is opened in the vault; a
        candidate decided or withdrawn while the list is read is left out.

        Raises:
            EngramError: ``BLOB_MISSING`` (a pending candidate's key is lost),
                ``JOURNAL_CORRUPT`` (its envelope does not authenticate) or ``STORE_UNAVAILABLE``.
            TypeError, ValueError: ``tenant_id`` or ``workspace_id`` is refused (see :meth:`scope`).
        """
        scope = _scope_binding(tenant_id, workspace_id).scope
        with available_view(self._service.store, scope) as reader:
            rows = [row for row in reader.candidates() if row.state == "pending"]
        return self._opened(scope, sorted(rows, key=lambda row: row.created_cursor))

    def pending_candidate(self, *, tenant_id: str, workspace_id: str, candidate_id: str) -> PendingCandidate | None:
        """One candidate as :meth:`pending_candidates` lists it, or ``None`` unless it is ``pending``.

        ``None`` covers an unknown candidate and one admitted, rejected or withdrawn (also while it
        is read). A reviewer deciding one candidate reads its ``forgotten`` here first: accepting
        it through :meth:`adjudicate` re-admits erased content.

        Raises:
            EngramError: ``BLOB_MISSING``, ``JOURNAL_CORRUPT`` or ``STORE_UNAVAILABLE``, as for
                :meth:`pending_candidates`.
            TypeError, ValueError: ``tenant_id`` or ``workspace_id`` is refused (see :meth:`scope`).
        """
        scope = _scope_binding(tenant_id, workspace_id).scope
        with available_view(self._service.store, scope) as reader:
            row = reader.candidate(candidate_id)
        opened = self._opened(scope, [row] if row is not None and row.state == "pending" else [])
        return opened[0] if opened else None

    def _opened(self, scope: str, rows: list[CandidateRow]) -> list[PendingCandidate]:
        """The pending ``rows`` opened, in order, each with ``forgotten``; one that left ``pending`` is left out."""
        opened = [(row, self._open_pending(scope, row)) for row in rows]
        with available_view(self._service.store, scope) as reader:
            forgotten = {
                row.candidate_id: reader.is_tombstoned_payload(digest(Domain.PAYLOAD, envelope["payload"]))
                for row, envelope in opened
                if envelope is not None
            }
        return [
            PendingCandidate(
                candidate_id=row.candidate_id,
                created_cursor=row.created_cursor,
                recorded_at=envelope["recorded_at"],
                record_digest=row.record_digest,
                policy_id=row.policy_id,
                policy_version=row.policy_version,
                trust=envelope["trust"],
                payload=envelope["payload"],
                evidence=envelope["evidence"],
                forgotten=forgotten[row.candidate_id],
                captured_by=capturer_of(envelope),
            )
            for row, envelope in opened
            if envelope is not None
        ]

    def _open_pending(self, scope: str, row: CandidateRow) -> dict[str, Any] | None:
        """A pending candidate's opened envelope; ``None`` if it left ``pending`` since it was listed."""
        try:
            return self._service._write.open_candidate(scope, row)  # noqa: SLF001 - same package
        except KeyVanishedError:
            with available_view(self._service.store, scope) as fresh:
                now = fresh.candidate(row.candidate_id)
            if now is None or now.state != "pending" or now.sealed != row.sealed:
                return None
            raise EngramError(ErrorCode.BLOB_MISSING, detail="pending candidate key unavailable") from None

    def verify(self, *, tenant_id: str, workspace_id: str) -> VerifyReport:
        """Re-derive the scope's journal chain and state; report the first bad cursor.

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable): the store is closed or busy.
            TypeError, ValueError: ``tenant_id`` or ``workspace_id`` is refused (see :meth:`scope`).
        """
        scope = _scope_binding(tenant_id, workspace_id).scope
        return self.verify_scope(scope)

    def verify_scope(self, scope: str) -> VerifyReport:
        """:meth:`verify` for a scope key (as listed by ``store.scopes()``).

        The store is read from one snapshot but keys are opened in the live vault, so a key that
        an erasure destroyed after the snapshot looks missing. Such a key is looked up again in a
        fresh view once the snapshot's view is closed (a store may serialise views): a row that no
        longer holds it was erased meanwhile and is not reported; a row that still holds it is
        ``BLOB_MISSING``, reported by verifying again (at most three snapshots in all).

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable): the store is closed or busy.
        """
        store, vault = self._service.store, self._service.vault
        sieve = _KeySieve()
        while True:
            sieve.final = sieve.passes == _VERIFY_SNAPSHOTS - 1
            with available_view(store, scope) as reader:
                report = verify_scope(reader, vault, scope, erased_meanwhile=sieve)
            sieve.passes += 1
            if not sieve.suspects:
                return report
            with available_view(store, scope) as fresh:
                if not sieve.sort(fresh):
                    return report

    def state_digest(self, *, tenant_id: str, workspace_id: str) -> str:
        """Digest of the scope's folded state (equal across backends for the same trace).

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable): the store is closed or busy.
            TypeError, ValueError: ``tenant_id`` or ``workspace_id`` is refused (see :meth:`scope`).
        """
        scope = _scope_binding(tenant_id, workspace_id).scope
        with available_view(self._service.store, scope) as reader:
            return state_digest(reader)

    def reap_keys(self) -> int:
        """Destroy keys whose destruction was committed but not confirmed; return how many.

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable) when the vault could not destroy some
                of them (its failure is the cause): they stay doomed, and a later call retries
                them; else when the store cannot be read (closed, or busy past its timeout; the
                store's ``StoreUnavailableError`` is the cause): the scopes it could read are
                reaped, the others' keys stay doomed. A failure is never reported as "nothing to
                reap".
        """
        return self._service._write.guard.reap()  # noqa: SLF001 - same package
