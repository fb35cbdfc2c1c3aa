"""The mutation guard: idempotency reservation, the confirmation gate and the unit of work.

Every mutation goes through it (founding document §0 "mutation guard"; DESIGN D4, D8, D13):

* **Idempotency.** Keys are scoped to (scope, principal) across the four mutating tools; the bound
  intent is the digest of (tool, canonical arguments). Same key and intent: the original response;
  same key, other intent: ``DIGEST_CONFLICT`` with nothing written. The binding commits in the same
  unit of work as the mutation, so replays survive restarts. An admission left
  ``pending_adjudication`` holds its key provisionally (:meth:`MutationGuard.hold`).
* **Confirmation gate.** Bound to tool, target and operation digest, approved within 300 s of its
  request, used within 30 s of approval (checked when the call starts and again in its unit of
  work, so a mutation that reaches its commit later is refused), and consumed (single use) there.
* **Unit of work.** Port errors become memory errors: busy → ``STORE_UNAVAILABLE`` (retriable), an
  unknown commit outcome → ``MUTATION_OUTCOME_UNKNOWN``, corruption → its code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from engram_memory.canonical import Domain, canonical_bytes, digest, format_instant
from engram_memory.context import ADMISSION, CAPTURE, FORGET, WITHDRAW, Confirmation, HostBinding, now_within_deadline
from engram_memory.errors import (
    EngramError,
    ErrorCode,
    ProtocolError,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)
from engram_memory.ports import (
    Clock,
    IdempotencyRow,
    KeyVault,
    Policy,
    SealedEnvelope,
    Store,
    StoreReader,
    UnitOfWork,
)
from engram_memory.records import authorization_for, without_spelled_out_defaults
from engram_memory.store_access import read_view
from engram_memory.wire.args import CaptureArgs, ForgetArgs, RequestAdmissionArgs, WithdrawArgs
from engram_memory.wire.converter import unstructure_args

__all__ = [
    "CONFIRMATION_MAX_AGE",
    "CONFIRMATION_TTL",
    "MUTATING_TOOLS",
    "Attempt",
    "Mutation",
    "MutationGuard",
    "operation_target",
]

_log = logging.getLogger("engram_memory")
_T = TypeVar("_T")

CONFIRMATION_TTL: Final = timedelta(seconds=300)
"""The longest allowed gap between a confirmation's request and its approval."""
CONFIRMATION_MAX_AGE: Final = timedelta(seconds=30)
"""A confirmed call must run within this long after approval."""
_COMMIT_ATTEMPTS: Final = 3
ALWAYS_GATED: Final = frozenset({WITHDRAW, FORGET})
MUTATING_TOOLS: Final = frozenset({CAPTURE, ADMISSION, *ALWAYS_GATED})

Mutation = CaptureArgs | RequestAdmissionArgs | WithdrawArgs | ForgetArgs


def operation_target(args: Mutation) -> str:
    """The target a confirmation names: the candidate, the record, or (capture) the key."""
    if isinstance(args, RequestAdmissionArgs | WithdrawArgs):
        return args.candidate_id
    if isinstance(args, ForgetArgs):
        return args.record_id
    return args.idempotency_key


class Attempt:
    """One run of a mutation's unit of work, as its body sees it.

    :meth:`seal` seals under a fresh vault key and remembers the key, so the guard can destroy it
    if the unit does not commit. :meth:`last_checks` runs the checks that can still refuse the
    mutation inside its unit: the binding's deadline (``DEADLINE_EXCEEDED``), then the
    confirmation's 30 s window and single use (``gate_failed``; consumed here). It runs at most
    once.
    """

    def __init__(self, vault: KeyVault, checks: Callable[[], None]) -> None:
        self._vault = vault
        self._checks: Callable[[], None] | None = checks
        self.fresh_keys: list[str] = []

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        """:meth:`KeyVault.seal <engram_memory.ports.KeyVault.seal>`, remembering the new key."""
        sealed = self._vault.seal(context, plaintext)
        self.fresh_keys.append(sealed.key_ref)
        return sealed

    def last_checks(self) -> None:
        """Refuse the mutation now if its deadline passed or its confirmation expired or was used."""
        checks, self._checks = self._checks, None
        if checks is not None:
            checks()


def intent_of(tool: str, arguments: dict[str, Any]) -> str:
    """The idempotency intent: digest of (tool, canonical JSON arguments), never time or receipts.

    A capture's ``retention`` or ``reconciliation`` equal to its default counts as omitted: a
    retry that spells out the default it first omitted (or the reverse) is a replay.
    """
    if tool == CAPTURE:
        arguments = {**arguments, "payload": without_spelled_out_defaults(arguments["payload"])}
    return digest(Domain.IDEMPOTENCY_INTENT, {"tool": tool, "arguments": arguments})


class MutationGuard:
    """Idempotency, confirmation and units of work for the write path."""

    def __init__(self, *, store: Store, vault: KeyVault, policy: Policy, clock: Clock) -> None:
        self._store = store
        self._vault = vault
        self._policy = policy
        self._clock = clock

    def operation_digest(self, tool: str, args: Mutation, binding: HostBinding) -> str:
        """The digest a human confirms: tool, scope, principal, target and canonical arguments."""
        return digest(
            Domain.OPERATION,
            {
                "tool": tool,
                "scope_ref": binding.scope,
                "principal": binding.principal,
                "target": operation_target(args),
                "arguments": unstructure_args(args),
            },
        )

    def intent(self, tool: str, args: Mutation) -> str:
        """The idempotency intent of typed arguments (:func:`intent_of`)."""
        return intent_of(tool, unstructure_args(args))

    def now(self, binding: HostBinding) -> datetime:
        """The current instant, or ``DEADLINE_EXCEEDED`` when the binding's deadline has passed."""
        return now_within_deadline(self._clock, binding)

    def replay(self, binding: HostBinding, tool: str, args: Mutation) -> dict[str, Any] | None:
        """The original response for a replayed key, ``None`` for a fresh key.

        Raises:
            EngramError: ``DIGEST_CONFLICT`` when the key is bound to another intent.
        """
        with self.read(binding.scope) as reader:
            row = reader.idempotency(binding.principal, args.idempotency_key)
        if row is None:  # a fresh key: no intent to compare
            return None
        return self.check_replay(row, self.intent(tool, args))

    @staticmethod
    def check_replay(row: IdempotencyRow | None, intent: str) -> dict[str, Any] | None:
        """The stored response if ``row`` binds ``intent``; ``DIGEST_CONFLICT`` if it binds another.

        ``None`` when nothing is bound, or only provisionally (the operation has not happened).
        """
        if row is None:
            return None
        if row.intent_digest != intent:
            raise EngramError(ErrorCode.DIGEST_CONFLICT, detail="key bound to another intent")
        if row.provisional:
            return None
        value: dict[str, Any] = json.loads(row.response)
        return value

    def hold(self, binding: HostBinding, key: str, intent: str) -> dict[str, Any] | None:
        """Bind ``key`` to ``intent`` provisionally, for an operation that did not happen yet.

        From then on the key is ``DIGEST_CONFLICT`` for any other intent, and a retry with this
        intent runs the operation again. Returns the response if a concurrent call with the same
        key and intent completed the operation first (the caller answers it as a replay).

        Raises:
            EngramError: ``DIGEST_CONFLICT`` if the key is bound to another intent meanwhile;
                ``DEADLINE_EXCEEDED`` if the binding's deadline passed before the binding commits.
        """

        def work(unit: UnitOfWork) -> dict[str, Any] | None:
            row = unit.idempotency(binding.principal, key)
            completed = self.check_replay(row, intent)
            if row is None:
                self._check_deadline(binding)
                unit.put_idempotency(binding.principal, key, IdempotencyRow(intent_digest=intent, response=b""))
            return completed

        return self.commit(binding.scope, work)

    def confirmation_required(self, tool: str, binding: HostBinding) -> bool:
        """Whether this mutation needs a confirmation (the policy is asked once per call).

        Raises:
            ProtocolError: -32603 when it does and ``binding`` carries none.
            EngramError: ``POLICY_UNAVAILABLE`` when the policy fails.
        """
        required = tool in ALWAYS_GATED or self._policy.requires_confirmation(tool, binding)
        if required and binding.confirmation is None:
            raise ProtocolError.untrusted_context("confirmation reference missing")
        return required

    def bound_confirmation(
        self, tool: str, args: Mutation, binding: HostBinding, *, required: bool
    ) -> Confirmation | None:
        """The binding's confirmation when ``required``, checked against this operation.

        Raises:
            ProtocolError: -32603 when a required confirmation is missing.
            EngramError: ``gate_failed`` when it names another tool, target or operation.
        """
        if not required:
            return None
        confirmation = binding.confirmation
        if confirmation is None:
            raise ProtocolError.untrusted_context("confirmation reference missing")
        if (
            confirmation.tool != tool
            or confirmation.target != operation_target(args)
            or confirmation.operation_digest != self.operation_digest(tool, args, binding)
        ):
            raise EngramError(ErrorCode.GATE_FAILED, detail="confirmation does not match the call")
        return confirmation

    def replay_or_gate(
        self, tool: str, args: Mutation, binding: HostBinding, now: datetime, *, gated: bool
    ) -> tuple[dict[str, Any] | None, Confirmation | None]:
        """Return ``(original response, None)`` for a replay, else ``(None, valid confirmation)``.

        ``gated``: whether the call needs a confirmation (:meth:`confirmation_required`). The
        confirmation must name this operation (tool, target, operation digest) before the key is
        looked up, so a call without a valid one learns nothing of the stored keys. A replay of a
        gated operation needs no fresh or unused one: it writes nothing, and a retry after an
        unknown outcome must be able to reuse the approval the first attempt consumed. A call with
        the same key and approval that commits between the idempotency lookup and the gate has
        consumed the approval: the gate's refusal is then answered by looking the key up again,
        as a replay.
        """
        confirmation = self.bound_confirmation(tool, args, binding, required=gated or tool in ALWAYS_GATED)
        replay = self.replay(binding, tool, args)
        if replay is None:
            try:
                return None, self.gate(confirmation, binding, now)
            except EngramError as refusal:
                if refusal.code is not ErrorCode.GATE_FAILED:
                    raise
                replay = self.replay(binding, tool, args)  # committed meanwhile by the same call?
                if replay is None:
                    raise
        return replay, None

    def gate(self, confirmation: Confirmation | None, binding: HostBinding, now: datetime) -> Confirmation | None:
        """``confirmation`` (already bound to the call) if it is within its time windows and unused.

        Raises:
            EngramError: ``gate_failed`` outside the time windows, or reused.
        """
        if confirmation is None:
            return None
        approval_wait = confirmation.approved_at - confirmation.requested_at
        since_approval = now - confirmation.approved_at
        if (
            not timedelta(0) <= approval_wait <= CONFIRMATION_TTL
            or not timedelta(0) <= since_approval <= CONFIRMATION_MAX_AGE
        ):
            raise EngramError(ErrorCode.GATE_FAILED, detail="confirmation outside its time window")
        with self.read(binding.scope) as reader:
            if reader.confirmation_used(confirmation.id):
                raise EngramError(ErrorCode.GATE_FAILED, detail="confirmation already used")
        return confirmation

    def read(self, scope: str) -> AbstractContextManager[StoreReader]:
        """A read view of ``scope`` with port errors mapped."""
        return read_view(self._store, scope)

    def commit(self, scope: str, work: Callable[[UnitOfWork], _T]) -> _T:
        """Run ``work`` in one unit of work, re-running it after a lost race; map port errors."""
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                with self._store.write(scope) as unit:
                    return work(unit)
            except StoreConflictError as exc:
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail=str(exc)) from exc
            except StoreOutcomeUnknownError as exc:
                raise EngramError(ErrorCode.MUTATION_OUTCOME_UNKNOWN, detail=str(exc)) from exc
            except StoreUnavailableError as exc:
                raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail=str(exc)) from exc
            except StoreCorruptError as exc:
                raise EngramError(exc.code, detail=str(exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def commit_mutation(
        self,
        binding: HostBinding,
        key: str | None,
        intent: str | None,
        confirmation: Confirmation | None,
        body: Callable[[UnitOfWork, Attempt], dict[str, Any]],
    ) -> tuple[dict[str, Any], bool]:
        """Run ``body`` in one unit of work that also binds the key and consumes the confirmation.

        ``body(unit, attempt)`` does the mutation's writes, sealing through ``attempt.seal`` and
        calling ``attempt.last_checks()`` right before an irreversible step (see :class:`Attempt`);
        otherwise the last checks run after the body. The body runs once per attempt (a lost race
        re-runs it). Every key an attempt sealed under is destroyed when that attempt's unit is
        known not to have committed, so a refused or failed mutation leaves no key behind; after
        ``MUTATION_OUTCOME_UNKNOWN`` the last attempt's keys are kept (its unit may have committed).

        Returns ``(value, replayed)``: if a concurrent writer bound the same key and intent first,
        its response is returned with nothing written.
        """
        runs: list[Attempt | None] = []  # one per run of the unit; None for a replay (it seals nothing)

        def work(unit: UnitOfWork) -> tuple[dict[str, Any], bool]:
            runs.append(None)
            if key is not None and intent is not None:
                existing = self.check_replay(unit.idempotency(binding.principal, key), intent)
                if existing is not None:
                    return existing, True
            attempt = runs[-1] = Attempt(self._vault, lambda: self._last_checks(unit, binding, confirmation))
            value = body(unit, attempt)
            attempt.last_checks()
            if key is not None and intent is not None:
                row = IdempotencyRow(intent_digest=intent, response=canonical_bytes(value))
                unit.put_idempotency(binding.principal, key, row)
            return value, False

        try:
            result = self.commit(binding.scope, work)
        except EngramError as exc:
            unknown = exc.code is ErrorCode.MUTATION_OUTCOME_UNKNOWN
            self._discard_fresh_keys(runs[:-1] if unknown else runs)
            raise
        except Exception:
            self._discard_fresh_keys(runs)
            raise
        self._discard_fresh_keys(runs[:-1])  # every run before the last one rolled back
        return result

    def _last_checks(self, unit: UnitOfWork, binding: HostBinding, confirmation: Confirmation | None) -> None:
        self._check_deadline(binding)
        self.consume(unit, confirmation)

    def _check_deadline(self, binding: HostBinding) -> None:
        if binding.deadline is not None and self._clock.now() >= binding.deadline:
            raise EngramError(ErrorCode.DEADLINE_EXCEEDED, detail="deadline passed before commit")

    def _discard_fresh_keys(self, runs: Sequence[Attempt | None]) -> None:
        """Destroy the keys sealed by runs whose units did not commit (best effort)."""
        fresh = [key_ref for run in runs if run is not None for key_ref in run.fresh_keys]
        if not fresh:
            return
        try:
            self._vault.destroy(*fresh)
        except Exception:  # noqa: BLE001 - the vault is foreign code; the keys encrypt nothing that was stored
            _log.exception("keys of a mutation that did not commit were not destroyed")

    def consume(self, unit: UnitOfWork, confirmation: Confirmation | None) -> None:
        """Consume a confirmation in the unit.

        Raises:
            EngramError: ``gate_failed`` if more than 30 s passed since its approval (a call that
                started in time but reached its commit too late), if the clock now reads a time
                before the approval (it stepped back since the gate was checked), or if a racing
                call used it first.
        """
        if confirmation is None:
            return
        if not timedelta(0) <= self._clock.now() - confirmation.approved_at <= CONFIRMATION_MAX_AGE:
            raise EngramError(ErrorCode.GATE_FAILED, detail="confirmation outside its window at the commit")
        if unit.confirmation_used(confirmation.id):
            raise EngramError(ErrorCode.GATE_FAILED, detail="confirmation already used")
        unit.consume_confirmation(confirmation.id)

    def authorization(self, tool: str, binding: HostBinding, target: str, now: datetime) -> str:
        """The authorization receipt digest of a call under this guard's policy."""
        return authorization_for(
            tool=tool, binding=binding, policy=self._policy, target=target, checked_at=format_instant(now)
        )

    def destroy_keys(self, scope: str, key_refs: Sequence[str]) -> int:
        """Best-effort :meth:`destroy_doomed`: a failure is logged and the keys stay doomed.

        :meth:`engram_memory.MemoryAdmin.reap_keys` retries them. Returns how many keys were destroyed.
        """
        return 0 if self._destroy_logged(scope, key_refs) else len(key_refs)

    def _destroy_logged(self, scope: str, key_refs: Sequence[str]) -> EngramError | None:
        """:meth:`destroy_doomed`, its failure logged and returned instead of raised."""
        try:
            self.destroy_doomed(scope, key_refs)
        except EngramError as exc:
            _log.exception("key destruction deferred; MemoryAdmin.reap_keys will retry")
            return exc
        return None

    def destroy_doomed(self, scope: str, key_refs: Sequence[str]) -> None:
        """Destroy committed-doomed keys in one vault call, then clear them in one unit of work.

        Once the vault has destroyed the keys, a store that cannot clear their doomed rows now
        (``StoreUnavailableError``, ``StoreConflictError`` or ``StoreOutcomeUnknownError``: its
        write lock busy past the timeout, say) is logged, not raised: the keys are gone, and the
        rows only make a later :meth:`reap` or erasure destroy them again, which is a no-op.

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable) when the vault fails (the keys stay
                doomed; a vault may have destroyed some of them: destroying them again is a
                no-op), or the store fails other than with those port errors (a defect).
        """
        if not key_refs:
            return
        try:
            self._vault.destroy(*key_refs)
        except Exception as exc:  # the vault is foreign code: any failure leaves the keys doomed
            raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail="doomed keys not destroyed") from exc
        try:
            with self._store.write(scope) as unit:
                for key_ref in key_refs:
                    unit.clear_doomed_key(key_ref)
        except (StoreUnavailableError, StoreConflictError, StoreOutcomeUnknownError):  # busy, not broken
            _log.warning("doomed keys destroyed; their doomed rows are cleared by a later reap", exc_info=True)
        except Exception as exc:  # a defect of the store adapter: answered as before, not hidden
            raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail="doomed rows not cleared") from exc

    def reap(self) -> int:
        """Destroy every scope's doomed keys; return how many.

        Every scope is tried, one vault call each; a scope whose view the store cannot give now is
        skipped, and the others are still reaped.

        Raises:
            EngramError: ``STORE_UNAVAILABLE`` (retriable) if any scope's keys could not be
                destroyed (they stay doomed; the other scopes' are destroyed): caused by the first
                scope's vault failure (the vault's own error is its cause in turn) when the vault
                failed, else by the store's ``StoreUnavailableError`` (the scopes could not be
                listed, or a scope could not be read: its keys were not asked for).
        """
        reaped, failed = 0, 0
        first_failure: EngramError | None = None
        unread: EngramError | None = None
        try:
            scopes = self._store.scopes()
        except StoreUnavailableError as exc:  # closed, or busy past its timeout: nothing was destroyed
            raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail="scopes not listed") from exc
        for scope in scopes:
            try:
                with self.read(scope) as reader:
                    doomed = reader.doomed_keys()
            except EngramError as exc:
                if exc.code is not ErrorCode.STORE_UNAVAILABLE:
                    raise
                unread = unread or exc  # busy: this scope's keys wait for the next reap
                continue
            failure = self._destroy_logged(scope, doomed)
            if failure is None:
                reaped += len(doomed)
            else:
                first_failure = first_failure or failure
                failed += len(doomed)
        if first_failure is not None:
            detail = f"{failed} doomed keys not destroyed, {reaped} were"
            raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail=detail) from first_failure
        if unread is not None:
            raise unread  # its cause is the store's error: no vault failed
        return reaped
