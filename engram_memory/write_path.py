"""The four mutating operations: capture, request_admission, withdraw, forget.

Each runs: idempotency lookup (a replay returns the original response) → confirmation gate →
lifecycle checks (refusals write nothing) → one unit of work that appends the journal event,
updates state and indexes, binds the idempotency key and consumes the confirmation.

Keys: withdraw and forget doom the candidate's or record's key in their unit and destroy it (and
the scope's other doomed keys) right after commit, answering only once they are gone; a vault
failure or a crash in between leaves the candidate withdrawn, or the record erased from every
index, and unreadable, its key doomed (the answer is ``MUTATION_OUTCOME_UNKNOWN``: a retry replays
the call once the key is destroyed, and ``MemoryAdmin.reap_keys`` destroys it too). reject
destroys the candidate key (and the doomed ones) right after commit. Accept dooms the candidate key
in its unit (the candidate's envelope is deleted there; its content lives on in the record, sealed
under the record's own key) and destroys doomed keys in batches of :data:`DESTROY_BATCH`, so a key
outlives its accept only until the batch fills or the scope's next reject, withdraw or forget —
whichever comes first — or ``MemoryAdmin.reap_keys`` or ``MemoryService.close``. Capture and
accept seal under fresh keys through the unit's :class:`~engram_memory.mutation_guard.Attempt`, so a
unit that does not commit leaves no key behind.
Idempotency keys are scoped to (scope, principal) across the four tools; the stored intent is the
digest of (tool, canonical arguments).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from engram_memory.canonical import (
    Domain,
    canonical_bytes,
    digest,
    epoch_ms,
    format_cursor,
    format_instant,
    parse_instant,
    receipt_digest,
)
from engram_memory.context import ADMISSION, CAPTURE, FORGET, WITHDRAW, Confirmation, HostBinding
from engram_memory.errors import (
    EngramError,
    ErrorCode,
    KeyUnavailableError,
    ProtocolError,
    SealIntegrityError,
)
from engram_memory.journal import build_event, journal_instant
from engram_memory.lifecycle import check_admissible, check_forgettable, check_withdrawable, duplicate_value
from engram_memory.mutation_guard import Attempt, MutationGuard
from engram_memory.ports import (
    AdmissionRequest,
    CandidateRow,
    Capturer,
    Clock,
    IndexedDocument,
    KeyVault,
    Policy,
    RecordRow,
    SealedEnvelope,
    Store,
    StoreReader,
    UnitOfWork,
)
from engram_memory.ranking.tokenizer import term_frequencies
from engram_memory.records import (
    build_record,
    candidate_context,
    candidate_id_for,
    complete_payload,
    record_context,
    transaction_receipt,
    trust_binding,
)
from engram_memory.results import (
    AdmissionOutcome,
    CaptureResult,
    ForgetResult,
    LifecycleReceipt,
    RequestAdmissionResult,
    WithdrawResult,
    from_json,
)
from engram_memory.wire.args import CaptureArgs, ForgetArgs, RequestAdmissionArgs, WithdrawArgs
from engram_memory.wire.converter import unstructure_args

__all__ = ["DECISION_MAX_AGE", "DESTROY_BATCH", "WritePath", "store_admitted_record"]

_log = logging.getLogger("engram_memory")
DECISION_MAX_AGE: Final = timedelta(seconds=300)
"""An admission decision older than this is ``POLICY_STALE``."""
DESTROY_BATCH: Final = 16
"""Accepts destroy the scope's doomed candidate keys once this many wait (one vault call)."""


def capturer_of(envelope: dict[str, Any]) -> Capturer | None:
    """Who captured an opened candidate envelope; ``None`` for one of schema 1, which did not record it."""
    captured_by = envelope.get("captured_by")
    if captured_by is None:
        return None
    return Capturer(
        principal=captured_by["principal"], agent_id=captured_by["agent_id"], session=captured_by["session"]
    )


def store_admitted_record(
    unit: UnitOfWork, seal: Callable[[str, bytes], SealedEnvelope], scope: str, record: dict[str, Any], cursor: int
) -> None:
    """Write an accepted record in ``unit``: its row, its body sealed (``seal``) under a new key, its index entry."""
    record_id = record["record_id"]
    sealed = seal(record_context(scope, record_id), canonical_bytes(record))
    valid_time = record["valid_time"]
    expires_at = record["retention"].get("expires_at")
    expires_ms = epoch_ms(parse_instant(expires_at)) if expires_at is not None else None
    unit.put_record(
        RecordRow(
            record_id=record_id,
            state="accepted_current",
            record_digest=record["record_digest"],
            payload_digest=record["payload_digest"],
            sealed=sealed,
            recorded_cursor=int(record["recorded_cursor"]),
            accepted_cursor=cursor,
            valid_from=valid_time["t"],
            valid_to=valid_time.get("t_end"),
            expires_at_ms=expires_ms,
        )
    )
    lengths, terms = term_frequencies(record)
    unit.index_document(
        IndexedDocument(
            record_id=record_id,
            lengths=lengths,
            terms=terms,
            valid_from=valid_time["t"],
            valid_to=valid_time.get("t_end"),
            expires_at_ms=expires_ms,
        )
    )


class WritePath:
    """Implements the mutations over the ports; held by :class:`engram_memory.MemoryService`."""

    @property
    def guard(self) -> MutationGuard:
        """The mutation guard (idempotency, confirmation, units of work) the operations run through."""
        return self._guard

    def __init__(self, *, store: Store, vault: KeyVault, policy: Policy, clock: Clock) -> None:
        self._store = store
        self._vault = vault
        self._policy = policy
        self._clock = clock
        self._guard = MutationGuard(store=store, vault=vault, policy=policy, clock=clock)

    # ------------------------------------------------------------------ capture

    def capture(self, binding: HostBinding, args: CaptureArgs, *, gated: bool) -> CaptureResult:
        """Seal cited material as a pending candidate (see the contract for every rule)."""
        if args.payload.purpose_ref != binding.purpose_ref:
            raise ProtocolError.untrusted_context("payload purpose differs from the bound purpose")
        now = self._guard.now(binding)
        replay, confirmation = self._guard.replay_or_gate(CAPTURE, args, binding, now, gated=gated)
        if replay is not None:
            return from_json(CaptureResult, {**replay, "status": "duplicate_exact"})
        self._check_capture_policy(binding, args, now)
        intent = self._guard.intent(CAPTURE, args)
        raw = unstructure_args(args)
        completed = complete_payload(raw["payload"], binding.scope)
        payload_digest = digest(Domain.PAYLOAD, completed)
        candidate_id = candidate_id_for(binding.scope, binding.principal, args.idempotency_key)
        recorded_at = format_instant(now)  # the capture's time, in its record; the event's is journal time
        authorization = self._guard.authorization(CAPTURE, binding, candidate_id, now)
        trust = trust_binding(
            trust_class=self._policy.trust_class(binding),
            evidence_digest=args.evidence.evidence_digest,
            policy_id=self._policy.policy_id,
            policy_version=self._policy.policy_version,
            issued_at=recorded_at,
            payload_digest=payload_digest,
        )

        def work(unit: UnitOfWork, attempt: Attempt) -> dict[str, Any]:
            if unit.candidate(candidate_id) is not None:
                raise EngramError(ErrorCode.DIGEST_CONFLICT, detail="candidate identity exists")
            cursor = format_cursor(unit.high_water() + 1)
            committed_at = journal_instant(unit, now)
            record = build_record(
                completed=completed,
                payload_digest=payload_digest,
                recorded_at=recorded_at,
                recorded_cursor=cursor,
                authorization_receipt_digest=authorization,
                trust=trust,
            )
            envelope = _candidate_envelope(
                completed=completed,
                evidence=raw["evidence"],
                binding=binding,
                authorization=authorization,
                trust=trust,
                recorded_at=recorded_at,
                recorded_cursor=cursor,
            )
            sealed = attempt.seal(candidate_context(binding.scope, candidate_id), canonical_bytes(envelope))
            event, body = build_event(
                unit,
                recorded_at=committed_at,
                operation="capture",
                candidate_id=candidate_id,
                to_state="pending",
                record_digest=record["record_digest"],
                authorization_receipt_digest=authorization,
            )
            unit.append_event(event)
            unit.put_candidate(
                CandidateRow(
                    candidate_id=candidate_id,
                    state="pending",
                    created_cursor=event.cursor,
                    record_digest=record["record_digest"],
                    sealed=sealed,
                    policy_id=self._policy.policy_id,
                    policy_version=self._policy.policy_version,
                )
            )
            return CaptureResult(
                status="committed_pending",
                candidate_id=candidate_id,
                record_digest=record["record_digest"],
                cursor=cursor,
                transaction_receipt_digest=transaction_receipt(
                    operation="capture",
                    scope=binding.scope,
                    cursor=cursor,
                    event_digest=body["event_digest"],
                    committed_at=committed_at,
                    record_digest=record["record_digest"],
                ),
            ).to_json()

        value, replayed = self._guard.commit_mutation(binding, args.idempotency_key, intent, confirmation, work)
        if replayed:
            value = {**value, "status": "duplicate_exact"}
        return from_json(CaptureResult, value)

    def _check_capture_policy(self, binding: HostBinding, args: CaptureArgs, now: datetime) -> None:
        """The capture's retention and reconciliation against the clock, then against the policy.

        An expiry at or before ``now`` is an argument error (``INVALID_SCHEMA``), judged before the
        policy is asked, so no refusal (``UNAUTHORIZED``, ``POLICY_UNAVAILABLE``) ever hides it.
        """
        retention = args.payload.retention
        expires = None if retention is None or retention.expires_at is None else parse_instant(retention.expires_at)
        if expires is not None and expires <= now:
            raise EngramError(
                ErrorCode.INVALID_SCHEMA,
                pointer="/payload/retention/expires_at",
                detail="expires_at is not after capture time",
            )
        constraints = self._policy.capture_constraints(binding)
        if retention is not None:
            if retention.derivative_rule == "retain" and not constraints.allow_retain:
                raise EngramError(ErrorCode.UNAUTHORIZED, detail="retain not allowed by host policy")
            if (
                expires is not None
                and constraints.max_retention is not None
                and expires - now > constraints.max_retention
            ):
                raise EngramError(ErrorCode.UNAUTHORIZED, detail="expires_at beyond the host cap")
        reconciliation = args.payload.reconciliation
        if reconciliation is not None and not set(reconciliation.family_refs) <= constraints.family_refs:
            raise EngramError(ErrorCode.UNAUTHORIZED, detail="reconciliation family without consent")

    # ------------------------------------------------------------------ request_admission

    def request_admission(
        self, binding: HostBinding, args: RequestAdmissionArgs, *, gated: bool
    ) -> RequestAdmissionResult:
        """Ask the policy to decide a pending candidate (see the contract for every rule)."""
        now = self._guard.now(binding)
        replay, confirmation = self._guard.replay_or_gate(ADMISSION, args, binding, now, gated=gated)
        if replay is not None:
            return from_json(RequestAdmissionResult, {**replay, "replayed": True})
        return self.decide_candidate(
            binding=binding,
            candidate_id=args.candidate_id,
            now=now,
            key=args.idempotency_key,
            intent=self._guard.intent(ADMISSION, args),
            confirmation=confirmation,
            decide=None,
        )

    def decide_candidate(  # noqa: C901, PLR0911, PLR0912, PLR0915 - the admission sequence reads top to bottom
        self,
        *,
        binding: HostBinding,
        candidate_id: str,
        now: datetime,
        key: str | None,
        intent: str | None,
        confirmation: Confirmation | None,
        decide: str | None,
        readmit_forgotten: bool = False,
    ) -> RequestAdmissionResult:
        """Decide a candidate through the policy (``decide=None``) or a host adjudication.

        Content forgotten in the scope is never accepted by the policy (the decision is held
        ``pending_adjudication``). A host ``accept`` of such content needs ``readmit_forgotten``,
        else it is ``gate_failed``; the check is repeated in the unit that commits the decision, so
        a forget of the same content committing meanwhile is seen either way.
        """
        scope = binding.scope
        try:
            with self._guard.read(scope) as reader:
                try:
                    row = check_admissible(reader.candidate(candidate_id))
                except EngramError:
                    if (replay := self._won_meanwhile(reader, binding, key, intent)) is not None:
                        return replay
                    raise
                if row.state == "admitted":
                    raise _AlreadyAdmittedError(row)  # noqa: TRY301 - answered once the view is closed
                opened = self.open_candidate(scope, row)
                completed = opened["payload"]
                payload_digest = digest(Domain.PAYLOAD, completed)
                record = build_record(
                    completed=completed,
                    payload_digest=payload_digest,
                    recorded_at=opened["recorded_at"],
                    recorded_cursor=opened["recorded_cursor"],
                    authorization_receipt_digest=opened["authorization_receipt_digest"],
                    trust=opened["trust"],
                )
                if record["record_digest"] != row.record_digest:
                    raise EngramError(ErrorCode.JOURNAL_CORRUPT, detail="candidate does not re-derive")
                forgotten = reader.is_tombstoned_payload(payload_digest)
        except KeyVanishedError as vanished:
            # the key goes when a decision commits: perhaps the decision of this very call, racing itself
            with self._guard.read(scope) as fresh:
                if (replay := self._won_meanwhile(fresh, binding, key, intent)) is not None:
                    return replay
            raise self._vanished_key_error(scope, vanished.row) from vanished.__cause__
        except _AlreadyAdmittedError as admitted:
            return self._duplicate_admission(binding, admitted.row, key, intent)
        policy_changed = row.policy_id != self._policy.policy_id or row.policy_version != self._policy.policy_version
        if decide is None and policy_changed:
            raise EngramError(ErrorCode.POLICY_STALE, detail="candidate captured under another policy")
        decision, decision_digest = self._decision(
            binding=binding, row=row, record=record, opened=opened, now=now, forced=decide
        )
        guarded = decide is None  # a host adjudication may accept forgotten content; a policy decision may not
        if decision == "accept" and forgotten:
            decision = _accepting_forgotten(guarded=guarded, readmit_forgotten=readmit_forgotten)
        watches_forgotten = guarded or not readmit_forgotten
        pending = _pending_adjudication(candidate_id, row.created_cursor, decision_digest)
        if decision == "adjudication_required":
            return self._held(binding, key, intent, pending)
        authorization = self._guard.authorization(ADMISSION, binding, candidate_id, now)
        accept = decision == "accept"
        doomed: list[str] = []

        def work(unit: UnitOfWork, attempt: Attempt) -> dict[str, Any]:
            doomed.clear()
            current = check_admissible(unit.candidate(candidate_id))
            if current.state == "admitted":  # another request admitted it meanwhile
                return duplicate_value(current)
            if accept and watches_forgotten and unit.is_tombstoned_payload(payload_digest):
                # a forget of the same content committed while the policy (or the host) decided
                raise _ForgottenMeanwhileError if guarded else _forgotten_refused()
            committed_at = journal_instant(unit, now)
            event, body = build_event(
                unit,
                recorded_at=committed_at,
                operation="accept" if accept else "reject",
                candidate_id=candidate_id,
                record_id=record["record_id"] if accept else None,
                from_state="pending",
                to_state="accepted_current" if accept else "rejected",
                record_digest=record["record_digest"],
                decision_receipt_digest=decision_digest,
                authorization_receipt_digest=authorization,
            )
            unit.append_event(event)
            cursor = format_cursor(event.cursor)
            outcome = AdmissionOutcome(
                status="accepted" if accept else "rejected",
                candidate_id=candidate_id,
                record_id=record["record_id"] if accept else None,
                cursor=cursor,
                decision_receipt_digest=decision_digest,
                transaction_receipt_digest=transaction_receipt(
                    operation="accept" if accept else "reject",
                    scope=scope,
                    cursor=cursor,
                    event_digest=body["event_digest"],
                    committed_at=committed_at,
                    record_digest=record["record_digest"],
                ),
            )
            if accept:
                store_admitted_record(unit, attempt.seal, scope, record, event.cursor)
            unit.put_candidate(
                CandidateRow(
                    candidate_id=candidate_id,
                    state="admitted" if accept else "rejected",
                    created_cursor=current.created_cursor,
                    record_digest=current.record_digest,
                    sealed=None,
                    policy_id=current.policy_id,
                    policy_version=current.policy_version,
                    record_id=record["record_id"] if accept else None,
                    outcome=canonical_bytes(outcome.to_json()) if accept else None,
                )
            )
            if current.sealed is not None:
                unit.doom_key(current.sealed.key_ref)
                doomed.extend(unit.doomed_keys())
            return RequestAdmissionResult(outcome=outcome, replayed=False).to_json()

        try:
            value, replayed = self._guard.commit_mutation(binding, key, intent, confirmation, work)
        except _ForgottenMeanwhileError:
            return self._held(binding, key, intent, pending)
        if replayed:
            return from_json(RequestAdmissionResult, {**value, "replayed": True})
        if doomed and (not accept or len(doomed) >= DESTROY_BATCH):
            self._guard.destroy_keys(scope, doomed)
        return from_json(RequestAdmissionResult, value)

    def _held(
        self, binding: HostBinding, key: str | None, intent: str | None, pending: RequestAdmissionResult
    ) -> RequestAdmissionResult:
        """Answer ``pending`` after binding the key provisionally (:meth:`MutationGuard.hold`).

        The policy is asked again on a retry; the key can no longer serve another operation.
        """
        if key is None or intent is None:  # a host adjudication binds no key
            return pending
        completed = self._guard.hold(binding, key, intent)
        if completed is not None:
            return from_json(RequestAdmissionResult, {**completed, "replayed": True})
        return pending

    def _duplicate_admission(
        self, binding: HostBinding, row: CandidateRow, key: str | None, intent: str | None
    ) -> RequestAdmissionResult:
        value = duplicate_value(row)
        committed, replayed = self._guard.commit_mutation(binding, key, intent, None, lambda _unit, _attempt: value)
        return from_json(RequestAdmissionResult, {**committed, "replayed": replayed})

    def open_candidate(self, scope: str, row: CandidateRow) -> dict[str, Any]:
        """The opened envelope of a pending candidate.

        Raises:
            EngramError: ``BLOB_MISSING`` (no envelope) or ``JOURNAL_CORRUPT`` (the envelope does
                not authenticate).
            KeyVanishedError: the key is gone (see :meth:`_vanished_key_error`): a racing decision or
                withdraw, or a lost key; a fresh view tells which.
        """
        if row.sealed is None:
            raise EngramError(ErrorCode.BLOB_MISSING, detail="pending candidate has no envelope")
        try:
            plaintext = self._vault.open(row.sealed, candidate_context(scope, row.candidate_id))
        except KeyUnavailableError as exc:
            raise KeyVanishedError(row) from exc
        except SealIntegrityError as exc:
            raise EngramError(ErrorCode.JOURNAL_CORRUPT, detail="candidate envelope altered") from exc
        opened: dict[str, Any] = json.loads(plaintext)
        return opened

    def _won_meanwhile(
        self, reader: StoreReader, binding: HostBinding, key: str | None, intent: str | None
    ) -> RequestAdmissionResult | None:
        """The replay of this call if an identical one (same key and intent) committed since our first lookup.

        Identical calls racing each other commit once; the others find the candidate decided, or
        its key destroyed, and answer the winner's response as a replay.

        Raises:
            EngramError: ``DIGEST_CONFLICT`` when the key was bound meanwhile to other arguments.
        """
        won = reader.idempotency(binding.principal, key) if key is not None else None
        replay = self._guard.check_replay(won, intent) if intent is not None else None
        return None if replay is None else from_json(RequestAdmissionResult, {**replay, "replayed": True})

    def _vanished_key_error(self, scope: str, row: CandidateRow) -> EngramError:
        """Why a pending candidate's key was gone, looked up again in a fresh view.

        A key is only ever destroyed after the unit that dooms it has committed, so a fresh view
        shows what a racing call left, answered as it would be now: ``ALREADY_TERMINAL`` or
        ``NOT_FOUND``, or ``STORE_UNAVAILABLE`` (retriable: a retry answers ``duplicate_exact``)
        when the candidate was admitted meanwhile. Still pending with the same envelope, the key
        is lost: ``BLOB_MISSING``.
        """
        with self._guard.read(scope) as fresh:
            now = fresh.candidate(row.candidate_id)
        if now is not None and now.state == row.state and now.sealed == row.sealed:
            return EngramError(ErrorCode.BLOB_MISSING, detail="candidate key unavailable")
        try:
            check_admissible(now)
        except EngramError as refusal:
            return refusal
        return EngramError(ErrorCode.STORE_UNAVAILABLE, detail="candidate admitted meanwhile")

    def _decision(
        self,
        *,
        binding: HostBinding,
        row: CandidateRow,
        record: dict[str, Any],
        opened: dict[str, Any],
        now: datetime,
        forced: str | None,
    ) -> tuple[str, str]:
        """Obtain, wrap and validate the six-field decision envelope; return (decision, digest)."""
        if forced is not None:
            envelope = {
                "policy_id": "engram-memory:host-adjudication",
                "policy_version": self._policy.policy_version,
                "record_digest": record["record_digest"],
                "decision": forced,
                "issued_at": format_instant(now),
            }
            return forced, receipt_digest(Domain.ADMISSION_DECISION, envelope)
        request = AdmissionRequest(
            candidate_id=row.candidate_id,
            scope=binding.scope,
            record_digest=record["record_digest"],
            payload_digest=record["payload_digest"],
            payload=opened["payload"],
            evidence=opened["evidence"],
            principal=binding.principal,
            agent_id=binding.agent_id,
            session=binding.session,
            capturer=capturer_of(opened),
        )
        decision = self._policy.decide(request, now)  # a failing or malformed one: POLICY_UNAVAILABLE (GuardedPolicy)
        if decision.policy_id != row.policy_id or decision.policy_version != row.policy_version:
            raise EngramError(ErrorCode.POLICY_STALE, detail="decision from another policy")
        if decision.record_digest != record["record_digest"]:
            raise EngramError(ErrorCode.INVALID_DIGEST, detail="decision for another record")
        # issued within 300 s before the call, and not after the service's own reading once the
        # policy answered (a policy may stamp its decision with the host clock while it decides);
        # aware datetimes of different zones compare as instants
        decided_by = max(now, self._clock.now())
        if not now - DECISION_MAX_AGE <= decision.issued_at <= decided_by:
            raise EngramError(ErrorCode.POLICY_STALE, detail="decision too old or in the future")
        envelope = {
            "policy_id": decision.policy_id,
            "policy_version": decision.policy_version,
            "record_digest": decision.record_digest,
            "decision": decision.decision,
            "issued_at": format_instant(decision.issued_at),
        }
        return decision.decision, receipt_digest(Domain.ADMISSION_DECISION, envelope)

    # ------------------------------------------------------------------ withdraw

    def withdraw(self, binding: HostBinding, args: WithdrawArgs, *, gated: bool) -> WithdrawResult:
        """End a pending candidate and destroy its key (confirmation-gated).

        The key is doomed in the unit and destroyed right after commit, with every other doomed
        key of the scope, as forget does: a withdraw answers only once they are gone
        (``MUTATION_OUTCOME_UNKNOWN`` until then; a retry with the same key finishes it).
        ``key_destruction`` is ``"complete"``, or ``"pending"`` for a vault that only schedules
        destruction.
        """
        now = self._guard.now(binding)
        replay, confirmation = self._guard.replay_or_gate(WITHDRAW, args, binding, now, gated=gated)
        if replay is not None:
            return from_json(WithdrawResult, self._erased(binding.scope, replay, replayed=True))
        intent = self._guard.intent(WITHDRAW, args)
        authorization = self._guard.authorization(WITHDRAW, binding, args.candidate_id, now)
        doomed: list[str] = []

        def work(unit: UnitOfWork, _attempt: Attempt) -> dict[str, Any]:
            doomed.clear()
            current = check_withdrawable(unit.candidate(args.candidate_id))
            at = journal_instant(unit, now)
            event, body = build_event(
                unit,
                recorded_at=at,
                operation="withdraw",
                candidate_id=args.candidate_id,
                from_state="pending",
                to_state="withdrawn",
                reason_digest=digest(Domain.OPERATION, {"reason_ref": args.reason_ref}),
                authorization_receipt_digest=authorization,
            )
            unit.append_event(event)
            unit.put_candidate(
                CandidateRow(
                    candidate_id=current.candidate_id,
                    state="withdrawn",
                    created_cursor=current.created_cursor,
                    record_digest=current.record_digest,
                    sealed=None,
                    policy_id=current.policy_id,
                    policy_version=current.policy_version,
                )
            )
            if current.sealed is not None:
                unit.doom_key(current.sealed.key_ref)
            doomed.extend(unit.doomed_keys())
            return WithdrawResult(
                receipt=self._receipt(
                    operation="withdraw",
                    from_state="pending",
                    to_state="withdrawn",
                    scope=binding.scope,
                    body=body,
                    authorization=authorization,
                    at=at,
                ),
                replayed=False,
                key_destruction="pending"
                if current.sealed is not None and not self._vault.destroys_synchronously
                else "complete",
            ).to_json()

        value, replayed = self._guard.commit_mutation(binding, args.idempotency_key, intent, confirmation, work)
        return from_json(WithdrawResult, self._erased(binding.scope, value, replayed=replayed, doomed=doomed))

    @staticmethod
    def _receipt(
        *, operation: str, from_state: str, to_state: str, scope: str, body: dict[str, Any], authorization: str, at: str
    ) -> LifecycleReceipt:
        return from_json(
            LifecycleReceipt,
            {
                "event_id": body["event_id"],
                "operation": operation,
                "from_state": from_state,
                "to_state": to_state,
                "cursor": body["cursor"],
                "event_digest": body["event_digest"],
                "authorization_receipt_digest": authorization,
                "transaction_receipt_digest": transaction_receipt(
                    operation=operation,
                    scope=scope,
                    cursor=body["cursor"],
                    event_digest=body["event_digest"],
                    committed_at=at,
                ),
            },
        )

    # ------------------------------------------------------------------ forget

    def forget(self, binding: HostBinding, args: ForgetArgs, *, gated: bool) -> ForgetResult:
        """Tombstone an admitted record: destroy its body key and purge it from every index."""
        now = self._guard.now(binding)
        replay, confirmation = self._guard.replay_or_gate(FORGET, args, binding, now, gated=gated)
        if replay is not None:
            return from_json(ForgetResult, self._erased(binding.scope, replay, replayed=True))
        intent = self._guard.intent(FORGET, args)
        authorization = self._guard.authorization(FORGET, binding, args.record_id, now)
        doomed: list[str] = []

        def work(unit: UnitOfWork, _attempt: Attempt) -> dict[str, Any]:
            doomed.clear()
            current = check_forgettable(unit.record(args.record_id))
            at = journal_instant(unit, now)
            event, body = build_event(
                unit,
                recorded_at=at,
                operation="tombstone",
                record_id=current.record_id,
                from_state=current.state,
                to_state="tombstoned",
                record_digest=current.record_digest,
                reason_digest=digest(Domain.OPERATION, {"reason_ref": args.reason_ref}),
                authorization_receipt_digest=authorization,
            )
            unit.append_event(event)
            unit.unindex(current.record_id)
            unit.add_tombstone(current.payload_digest)
            unit.put_record(
                RecordRow(
                    record_id=current.record_id,
                    state="tombstoned",
                    record_digest=current.record_digest,
                    payload_digest=current.payload_digest,
                    sealed=None,
                    recorded_cursor=current.recorded_cursor,
                    accepted_cursor=current.accepted_cursor,
                    valid_from=current.valid_from,
                    valid_to=current.valid_to,
                    expires_at_ms=current.expires_at_ms,
                    trust_valid=current.trust_valid,
                )
            )
            if current.sealed is not None:
                unit.doom_key(current.sealed.key_ref)
            doomed.extend(unit.doomed_keys())
            coverage = digest(
                Domain.COVERAGE,
                {"record_id": current.record_id, "indexes": ["lexical"], "cursor": body["cursor"]},
            )
            return ForgetResult(
                receipt=self._receipt(
                    operation="tombstone",
                    from_state=current.state,
                    to_state="tombstoned",
                    scope=binding.scope,
                    body=body,
                    authorization=authorization,
                    at=at,
                ),
                replayed=False,
                projection_invalidation="complete",
                coverage_receipt_digest=coverage,
            ).to_json()

        value, replayed = self._guard.commit_mutation(binding, args.idempotency_key, intent, confirmation, work)
        return from_json(ForgetResult, self._erased(binding.scope, value, replayed=replayed, doomed=doomed))

    def _erased(
        self, scope: str, value: dict[str, Any], *, replayed: bool, doomed: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The answer of a committed withdraw or forget, once its keys are destroyed.

        A fresh call destroys the keys its unit ``doomed``; a replay, every doomed key of the scope
        (an earlier attempt may have left its own). Raises as :meth:`_finish_erasure`.
        """
        self._finish_erasure(scope, None if replayed else doomed)
        return {**value, "replayed": True} if replayed else value

    def _finish_erasure(self, scope: str, doomed: Sequence[str] | None = None) -> None:
        """Destroy the keys a committed withdraw or forget doomed (default: every doomed key of the scope).

        A withdraw or forget, fresh or replayed, answers only once they are gone.

        Raises:
            EngramError: ``MUTATION_OUTCOME_UNKNOWN`` (retriable) while the vault cannot destroy
                them: the erasure has committed (the candidate is withdrawn, or the record is
                erased from the index, and unreadable) but its key is not gone yet; a retry with
                the same key and arguments replays it once the key is destroyed.
        """
        replayed = doomed is None
        if doomed is None:
            with self._guard.read(scope) as reader:
                doomed = reader.doomed_keys()
        try:
            self._guard.destroy_doomed(scope, doomed)
        except EngramError as exc:
            if replayed:  # the scope's doomed keys: this erasure's own may be gone already
                _log.exception("replayed erasure: the scope's doomed keys are not destroyed; a retry destroys them")
            else:
                _log.exception("erasure committed but its key is not destroyed; a retry of the call destroys it")
            raise EngramError(
                ErrorCode.MUTATION_OUTCOME_UNKNOWN, detail="erasure committed; its key is not destroyed yet"
            ) from exc


class _AlreadyAdmittedError(Exception):
    """The candidate is already admitted: its duplicate answer binds the key in a unit, after the view."""

    def __init__(self, row: CandidateRow) -> None:
        super().__init__("candidate already admitted")
        self.row = row


class KeyVanishedError(Exception):
    """A pending candidate's key was not in the vault (a racing erasure, or a lost key)."""

    def __init__(self, row: CandidateRow) -> None:
        super().__init__("candidate key unavailable")
        self.row = row


class _ForgottenMeanwhileError(Exception):
    """The content to accept was forgotten after the admission's snapshot: the decision must not stand."""


def _accepting_forgotten(*, guarded: bool, readmit_forgotten: bool) -> str:
    """What an ``accept`` of content forgotten in the scope becomes (DESIGN D7).

    A policy's accept is held (``adjudication_required``); a host's stands only with
    ``readmit_forgotten``.

    Raises:
        EngramError: ``gate_failed`` for a host accept without ``readmit_forgotten``.
    """
    if guarded:
        return "adjudication_required"
    if not readmit_forgotten:
        raise _forgotten_refused()
    return "accept"


def _forgotten_refused() -> EngramError:
    """A host ``accept`` of content forgotten in the scope, without ``readmit_forgotten``."""
    return EngramError(ErrorCode.GATE_FAILED, detail="content forgotten in this scope; readmit_forgotten not given")


def _pending_adjudication(candidate_id: str, created_cursor: int, decision_digest: str) -> RequestAdmissionResult:
    """The ``pending_adjudication`` outcome (the candidate stays pending; no event is written)."""
    cursor = format_cursor(created_cursor)
    pending = {"candidate_id": candidate_id, "cursor": cursor, "decision_receipt_digest": decision_digest}
    return RequestAdmissionResult(
        outcome=AdmissionOutcome(
            status="pending_adjudication",
            candidate_id=candidate_id,
            cursor=cursor,
            decision_receipt_digest=decision_digest,
            transaction_receipt_digest=digest(Domain.ADMISSION_PENDING, pending),
        ),
        replayed=False,
    )


def _candidate_envelope(
    *,
    completed: dict[str, Any],
    evidence: dict[str, Any],
    binding: HostBinding,
    authorization: str,
    trust: dict[str, Any],
    recorded_at: str,
    recorded_cursor: str,
) -> dict[str, Any]:
    """What a pending candidate seals (envelope schema 2): everything its record will be built from.

    The completed payload, the evidence as captured, who captured it (``captured_by``, read back by
    :func:`capturer_of`), and the capture's authorization, trust, time and cursor.
    """
    return {
        "schema_version": 2,
        "payload": completed,
        "evidence": evidence,
        "captured_by": {"principal": binding.principal, "agent_id": binding.agent_id, "session": binding.session},
        "authorization_receipt_digest": authorization,
        "trust": trust,
        "recorded_at": recorded_at,
        "recorded_cursor": recorded_cursor,
    }
