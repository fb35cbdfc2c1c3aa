"""The write path on the in-memory reference adapters, observed down to the raw partition.

The backend-neutral behaviour of every rule lives in ``ServiceConformance`` (bound in
``test_service_memory.py``). This module adds what only the in-memory adapters let us observe:
the complete partition before and after every refusal, which keys the vault still holds, byte-level
journal tampering, races forced at a precise point, and a vault that fails to destroy.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ErrorCode, JsonRpcCode, ManualClock, MemoryAdmin, MemoryService, ProtocolError
from engram_memory.canonical import format_instant, record_id_from_digest
from engram_memory.context import HostBinding
from engram_memory.errors import (
    EngramError,
    KeyUnavailableError,
    StoreConflictError,
    StoreCorruptError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.mutation_guard import Attempt, MutationGuard
from engram_memory.ports import AdmissionDecision, AdmissionRequest, CandidateRow, RecordRow, SealedEnvelope
from engram_memory.records import candidate_context
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import ServiceConformance
from engram_memory.testing.fakes import (
    CAPTURE,
    VALID_FROM_MS,
    WITHDRAW,
    Harness,
    PolicyOverride,
    StoreWrapper,
    capture_args,
    fail,
    inmemory_scope_contents,
    make_binding,
    make_key,
    ok,
)
from engram_memory.write_path import DESTROY_BATCH

ACCEPT = DefaultPolicy(admission="accept")
REJECT = DefaultPolicy(admission="reject")
A = make_binding("tenant-a", "workspace-1", "principal-1")
B = make_binding("tenant-b", "workspace-1", "principal-1")


class FlakyVault(InMemoryKeyVault):
    """An in-memory vault whose ``destroy`` fails the first ``failures`` times (a KMS outage)."""

    def __init__(self, failures: int = 0) -> None:
        super().__init__()
        self.failures = failures

    def destroy(self, *key_refs: str) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("injected: KMS unavailable")
        super().destroy(*key_refs)


class RacingStore(StoreWrapper):
    """Delegates to an InMemoryStore, running ``competitor`` just before the first unit of work."""

    def __init__(self, inner: InMemoryStore, competitor: Callable[[], object]) -> None:
        super().__init__(inner)
        self.competitor: Callable[[], object] | None = competitor

    def write(self, scope: str) -> AbstractContextManager[Any]:
        if self.competitor is not None:
            competitor, self.competitor = self.competitor, None
            competitor()
        return self.inner.write(scope)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def vault() -> FlakyVault:
    return FlakyVault()


@pytest.fixture
def harness(store: InMemoryStore, vault: FlakyVault, clock: ManualClock) -> Harness:
    return Harness(MemoryService(store=store, vault=vault, policy=ACCEPT, clock=clock), clock)


def _frozen(store: InMemoryStore, vault: InMemoryKeyVault, scope: str = A.scope) -> str:
    """Everything the partition holds (sets sorted) plus the vault's key refs, as one string."""
    partition = store.raw_partition(scope)
    rows: list[CandidateRow | RecordRow] = [*partition.candidates.values(), *partition.records.values()]
    sealed_bytes = [
        (row.sealed.key_ref, row.sealed.nonce, row.sealed.ciphertext) for row in rows if row.sealed is not None
    ]
    return repr(
        (
            partition.events,
            sorted(partition.idempotency.items()),
            sorted(partition.candidates.items()),
            sorted(partition.records.items()),
            sorted(partition.tombstones),
            sorted(partition.confirmations),
            sorted(partition.documents.items()),
            sorted((term, sorted(docs)) for term, docs in partition.occurrences.items()),
            partition.total_lengths,
            sorted(partition.doomed),
            sealed_bytes,
            sorted(vault._keys),
        )
    )


def _sealed(store: InMemoryStore, candidate_id: str, scope: str = A.scope) -> SealedEnvelope:
    row = store.raw_partition(scope).candidates[candidate_id]
    assert row.sealed is not None
    return row.sealed


# --------------------------------------------------------------------------- every refusal writes nothing

Refusal = Callable[[Harness], tuple[Callable[[], dict[str, Any]], ErrorCode | None]]


def _capture_conflict(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    h.pending(A, make_key("r-conflict"))
    return (lambda: h.capture(A, make_key("r-conflict"), words=("zqotherwords",))), ErrorCode.DIGEST_CONFLICT


# One argument changed under the same key; the omitted optional members are sent with other values than
# their defaults (a default spelled out is the omitted member, a replay: test_write_edges).
_ONE_FIELD: dict[str, tuple[tuple[str | int, ...], Any]] = {
    "evidence digest": (("evidence", "evidence_digest"), "sha256:" + "e" * 64),
    "evidence attestation": (("evidence", "attestation"), "attested by the reviewer"),
    "payload retention": (("payload", "retention"), {"derivative_rule": "retain"}),
    "payload valid_time": (("payload", "valid_time", "t"), VALID_FROM_MS + 1),
    "payload reconciliation": (("payload", "reconciliation"), {"family_refs": ["family-x"]}),
    "citation locator": (("payload", "citations", 0, "locator", "value"), "13"),
}


def _capture_one_field(field: str) -> Refusal:
    """The same capture key with only ``field`` changed: DIGEST_CONFLICT."""
    path, value = _ONE_FIELD[field]

    def refusal(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
        key = make_key("r-one-field")
        h.pending(A, key)
        changed = capture_args(key)
        parent: Any = changed
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = value
        assert changed != capture_args(key)
        return (lambda: h.call(CAPTURE, changed, A)), ErrorCode.DIGEST_CONFLICT

    return refusal


def _capture_replay(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    h.pending(A, make_key("r-replay"))
    return (lambda: h.capture(A, make_key("r-replay"))), None


def _capture_retain(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    return (lambda: h.capture(A, make_key("r-retain"), retention={"derivative_rule": "retain"})), ErrorCode.UNAUTHORIZED


def _capture_cap(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    expires = format_instant(h.clock.now() + timedelta(days=366))
    retention = {"derivative_rule": "make-ineligible", "expires_at": expires}
    return (lambda: h.capture(A, make_key("r-cap"), retention=retention)), ErrorCode.UNAUTHORIZED


def _capture_past(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    retention = {"derivative_rule": "make-ineligible", "expires_at": format_instant(h.clock.now())}
    return (lambda: h.capture(A, make_key("r-past"), retention=retention)), ErrorCode.INVALID_SCHEMA


def _capture_family(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    reconciliation = {"family_refs": ["family:unconsented"]}
    return (lambda: h.capture(A, make_key("r-family"), reconciliation=reconciliation)), ErrorCode.UNAUTHORIZED


def _capture_extra(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    return (lambda: h.capture(A, make_key("r-extra"), extra={"confirmed": True})), ErrorCode.INVALID_SCHEMA


def _capture_deadline(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    late = attrs.evolve(A, deadline=h.clock.now())
    return (lambda: h.capture(late, make_key("r-deadline"))), ErrorCode.DEADLINE_EXCEEDED


def _admission_unknown(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    h.pending(A, make_key("r-known"))
    return (lambda: h.admit(A, "candidate_" + "1" * 64, make_key("r-unknown"))), ErrorCode.NOT_FOUND


def _admission_terminal(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-terminal"))
    ok(h.withdraw(A, candidate_id, make_key("r-terminal-w")))
    return (lambda: h.admit(A, candidate_id, make_key("r-terminal-a"))), ErrorCode.ALREADY_TERMINAL


def _admission_stale(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-stale"))
    h.use(DefaultPolicy(admission="accept", policy_version="2"))
    return (lambda: h.admit(A, candidate_id, make_key("r-stale-a"))), ErrorCode.POLICY_STALE


def _admission_pending(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-pending"))
    h.use(DefaultPolicy(admission="adjudicate"))
    ok(h.admit(A, candidate_id, make_key("r-pending-a")))  # holds the key (see the test below)
    return (lambda: h.admit(A, candidate_id, make_key("r-pending-a"))), None


def test_pending_adjudication_writes_only_the_provisional_key_binding(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    """§3.5: the key is bound to its intent with an empty response; nothing else changes."""
    candidate_id = harness.pending(A, make_key("held-pending"))
    harness.use(DefaultPolicy(admission="adjudicate"))
    before = _frozen(store, vault)
    held = store.raw_partition(A.scope).idempotency
    bound_before = dict(held)
    assert ok(harness.admit(A, candidate_id, make_key("held-request")))["outcome"]["status"] == "pending_adjudication"
    added = {pair: row for pair, row in held.items() if pair not in bound_before}
    assert list(added) == [(A.principal, make_key("held-request"))]
    assert next(iter(added.values())).response == b""
    for pair in added:
        del held[pair]
    assert _frozen(store, vault) == before


def _admission_replay(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-areplay"))
    ok(h.admit(A, candidate_id, make_key("r-areplay-a")))
    return (lambda: h.admit(A, candidate_id, make_key("r-areplay-a"))), None


def _withdraw_gate(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-gate"))
    args = {"candidate_id": candidate_id, "idempotency_key": make_key("r-gate-w"), "reason_ref": "reason:x"}
    stale = h.clock.now() - timedelta(seconds=31)
    return (lambda: h.confirmed(WITHDRAW, args, A, approved_at=stale)), ErrorCode.GATE_FAILED


def _withdraw_illegal(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id, _ = h.accepted(A, make_key("r-illegal"))
    return (lambda: h.withdraw(A, candidate_id, make_key("r-illegal-w"))), ErrorCode.ILLEGAL_TRANSITION


def _withdraw_reused_confirmation(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    first = h.pending(A, make_key("r-once-1"))
    second = h.pending(A, make_key("r-once-2"))
    args = {"candidate_id": first, "idempotency_key": make_key("r-once-w1"), "reason_ref": "reason:x"}
    ok(h.confirmed(WITHDRAW, args, A, confirmation_id="approval-r"))
    again = {"candidate_id": second, "idempotency_key": make_key("r-once-w2"), "reason_ref": "reason:x"}
    return (lambda: h.confirmed(WITHDRAW, again, A, confirmation_id="approval-r")), ErrorCode.GATE_FAILED


def _withdraw_replay(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    candidate_id = h.pending(A, make_key("r-wreplay"))
    ok(h.withdraw(A, candidate_id, make_key("r-wreplay-w")))
    return (lambda: h.withdraw(A, candidate_id, make_key("r-wreplay-w"))), None


def _forget_terminal(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    _, record_id = h.accepted(A, make_key("r-forget"))
    ok(h.forget(A, record_id, make_key("r-forget-f")))
    return (lambda: h.forget(A, record_id, make_key("r-forget-f2"))), ErrorCode.ALREADY_TERMINAL


def _forget_would_be(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    value = ok(h.capture(A, make_key("r-would-be")))
    record_id = record_id_from_digest(value["record_digest"])
    return (lambda: h.forget(A, record_id, make_key("r-would-be-f"))), ErrorCode.NOT_FOUND


def _forget_replay(h: Harness) -> tuple[Callable[[], dict[str, Any]], ErrorCode | None]:
    _, record_id = h.accepted(A, make_key("r-freplay"))
    ok(h.forget(A, record_id, make_key("r-freplay-f")))
    return (lambda: h.forget(A, record_id, make_key("r-freplay-f"))), None


REFUSALS: dict[str, Refusal] = {
    "capture: same key, other content": _capture_conflict,
    **{f"capture: same key, other {field}": _capture_one_field(field) for field in _ONE_FIELD},
    "capture: exact replay": _capture_replay,
    "capture: retain without permission": _capture_retain,
    "capture: expires_at beyond the cap": _capture_cap,
    "capture: expires_at at capture time": _capture_past,
    "capture: unconsented family": _capture_family,
    "capture: confirmed true": _capture_extra,
    "capture: deadline": _capture_deadline,
    "admission: unknown candidate": _admission_unknown,
    "admission: withdrawn candidate": _admission_terminal,
    "admission: policy version changed": _admission_stale,
    "admission: pending_adjudication": _admission_pending,
    "admission: exact replay": _admission_replay,
    "withdraw: confirmation too old": _withdraw_gate,
    "withdraw: admitted candidate": _withdraw_illegal,
    "withdraw: reused confirmation id": _withdraw_reused_confirmation,
    "withdraw: exact replay": _withdraw_replay,
    "forget: tombstoned record": _forget_terminal,
    "forget: pending candidate's would-be record id": _forget_would_be,
    "forget: exact replay": _forget_replay,
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refusal_or_replay_leaves_the_partition_and_the_vault_untouched(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, case: str
) -> None:
    call, code = REFUSALS[case](harness)
    before = _frozen(store, vault)
    envelope = call()
    if code is None:
        ok(envelope)
    else:
        fail(envelope, code)
    assert _frozen(store, vault) == before


def test_a_missing_confirmation_leaves_the_partition_untouched(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    candidate_id = harness.pending(A, make_key("no-confirmation"))
    before = _frozen(store, vault)
    args = {"candidate_id": candidate_id, "idempotency_key": make_key("no-confirmation-w"), "reason_ref": "reason:x"}
    with pytest.raises(ProtocolError) as info:
        harness.call(WITHDRAW, args, A)
    assert info.value.code == JsonRpcCode.INTERNAL_ERROR
    assert _frozen(store, vault) == before


# --------------------------------------------------------------------------- D6 keys and plaintext


def test_every_ending_destroys_the_candidate_key_and_forget_the_body_key(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    withdrawn = harness.pending(A, make_key("k-withdrawn"))
    rejected = harness.pending(A, make_key("k-rejected"))
    accepted = harness.pending(A, make_key("k-accepted"))
    keys = {cid: _sealed(store, cid).key_ref for cid in (withdrawn, rejected, accepted)}
    assert all(vault.holds(key) for key in keys.values())
    assert ok(harness.withdraw(A, withdrawn, make_key("k-w")))["key_destruction"] == "complete"
    record_id = ok(harness.admit(A, accepted, make_key("k-a")))["outcome"]["record_id"]
    harness.use(REJECT)
    ok(harness.admit(A, rejected, make_key("k-r")))
    assert not any(vault.holds(key) for key in keys.values())
    record_row = store.raw_partition(A.scope).records[record_id]
    assert record_row.sealed is not None
    body_key = record_row.sealed.key_ref
    assert vault.holds(body_key)
    ok(harness.forget(A, record_id, make_key("k-f")))
    assert not vault.holds(body_key)
    assert store.raw_partition(A.scope).doomed == set()


def _accepted_keys(harness: Harness, store: InMemoryStore, binding: HostBinding, label: str, count: int) -> list[str]:
    """Capture and accept ``count`` candidates; return their (now doomed) candidate key refs."""
    keys = []
    for index in range(count):
        candidate_id = harness.pending(binding, make_key(f"{label}-{index}"))
        keys.append(_sealed(store, candidate_id, binding.scope).key_ref)
        ok(harness.admit(binding, candidate_id, make_key(f"{label}-{index}-a")))
    return keys


def test_accepts_destroy_candidate_keys_in_batches(harness: Harness, store: InMemoryStore, vault: FlakyVault) -> None:
    assert DESTROY_BATCH == 16  # docs/contract.md: "Accept destroys doomed keys in batches of 16"
    waiting = _accepted_keys(harness, store, A, "batch", 15)
    assert all(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == set(waiting)
    assert all(row.sealed is None for row in store.raw_partition(A.scope).candidates.values())
    waiting += _accepted_keys(harness, store, A, "batch-last", 1)
    assert not any(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == set()


def test_a_batch_the_vault_refuses_is_logged_and_waits_for_the_next_accept(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, caplog: pytest.LogCaptureFixture
) -> None:
    """The accept that fills the batch still succeeds: its keys stay doomed, and the next accept destroys them."""
    waiting = _accepted_keys(harness, store, A, "refused-batch", 15)
    vault.failures = 1
    with caplog.at_level("ERROR", logger="engram_memory"):
        waiting += _accepted_keys(harness, store, A, "refused-batch-last", 1)
    assert caplog.messages == ["key destruction deferred; MemoryAdmin.reap_keys will retry"]
    assert all(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == set(waiting)
    waiting += _accepted_keys(harness, store, A, "refused-batch-next", 1)
    assert not any(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == set()


@pytest.mark.parametrize("ending", ["reject", "withdraw", "forget"])
def test_a_reject_withdraw_or_forget_destroys_every_key_accepts_left_waiting(
    ending: str, harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    record_id = ok(harness.admit(A, harness.pending(A, make_key("end-first")), make_key("end-first-a")))["outcome"][
        "record_id"
    ]
    waiting = _accepted_keys(harness, store, A, "end", 3)
    elsewhere = _accepted_keys(harness, store, B, "other-scope", 2)
    candidate_id = harness.pending(A, make_key("end-last"))
    if ending == "reject":
        harness.use(REJECT)
        assert ok(harness.admit(A, candidate_id, make_key("end-last-r")))["outcome"]["status"] == "rejected"
    elif ending == "withdraw":
        assert ok(harness.withdraw(A, candidate_id, make_key("end-last-w")))["key_destruction"] == "complete"
    else:
        ok(harness.forget(A, record_id, make_key("end-last-f")))
    assert not any(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == set()
    assert all(vault.holds(key) for key in elsewhere)  # another scope's keys wait for its own batch
    assert store.raw_partition(B.scope).doomed == set(elsewhere)


def test_close_destroys_every_key_accepts_left_waiting(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    waiting = _accepted_keys(harness, store, A, "close", 2) + _accepted_keys(harness, store, B, "close-b", 2)
    assert all(vault.holds(key) for key in waiting)
    harness.service.close()
    assert not any(vault.holds(key) for key in waiting)
    assert store.raw_partition(A.scope).doomed == store.raw_partition(B.scope).doomed == set()
    harness.service.close()  # idempotent


def test_the_withdrawn_envelope_never_opens_again(harness: Harness, store: InMemoryStore, vault: FlakyVault) -> None:
    candidate_id = harness.pending(A, make_key("reopen"))
    sealed = _sealed(store, candidate_id)
    context = candidate_context(A.scope, candidate_id)
    assert json.loads(vault.open(sealed, context))["payload"]["scope_ref"] == A.scope
    ok(harness.withdraw(A, candidate_id, make_key("reopen-w")))
    assert not vault.holds(sealed.key_ref)
    with pytest.raises(KeyUnavailableError):
        vault.open(sealed, context)


def test_pending_words_sit_only_in_the_ciphertext_until_admission(harness: Harness, store: InMemoryStore) -> None:
    words = ("zqpendingalpha", "zqpendingbeta", "zqpendinggamma")
    candidate_id = harness.pending(A, make_key("scan"), words=words, attestation="zqattestedonly")
    partition = store.raw_partition(A.scope)
    scanned = b"".join(
        [
            *(event.body for event in partition.events),
            *(repr(attrs.evolve(row, sealed=None)).encode() for row in partition.candidates.values()),
            *(repr(sorted(partition.idempotency.items())).encode(),),
        ]
    )
    everything = inmemory_scope_contents(store, A.scope)
    for word in (*words, "zqattestedonly"):
        assert word.encode() not in scanned
        assert word.encode() not in everything
    ok(harness.admit(A, candidate_id, make_key("scan-a")))
    everything = inmemory_scope_contents(store, A.scope)
    assert all(word.encode() in everything for word in words)
    assert all(partition.occurrences.get(word) for word in words)
    assert b"zqattestedonly" not in everything


def test_a_key_destruction_reported_complete_is_complete(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    """D6: ``key_destruction: "complete"`` only when the vault confirmed the destruction.

    A withdraw whose vault fails after the commit answers ``MUTATION_OUTCOME_UNKNOWN`` (its key
    doomed); the retry replays it once the key is gone, and only then says "complete".
    """
    candidate_id = harness.pending(A, make_key("kms-down"))
    key_ref = _sealed(store, candidate_id).key_ref
    vault.failures = 1
    fail(harness.withdraw(A, candidate_id, make_key("kms-down-w")), ErrorCode.MUTATION_OUTCOME_UNKNOWN, retriable=True)
    assert store.raw_partition(A.scope).candidates[candidate_id].state == "withdrawn"
    assert store.raw_partition(A.scope).doomed == {key_ref}
    assert vault.holds(key_ref)
    value = ok(harness.withdraw(A, candidate_id, make_key("kms-down-w")))
    assert (value["replayed"], value["key_destruction"]) == (True, "complete")
    assert not vault.holds(key_ref)
    assert store.raw_partition(A.scope).doomed == set()


def test_reap_keys_finishes_a_failed_destruction(harness: Harness, store: InMemoryStore, vault: FlakyVault) -> None:
    candidate_id = harness.pending(A, make_key("reap"))
    key_ref = _sealed(store, candidate_id).key_ref
    vault.failures = 1
    fail(harness.withdraw(A, candidate_id, make_key("reap-w")), ErrorCode.MUTATION_OUTCOME_UNKNOWN, retriable=True)
    assert vault.holds(key_ref)
    assert store.raw_partition(A.scope).doomed == {key_ref}
    vault.failures = 1
    with pytest.raises(EngramError) as failed:  # a failure is never "nothing to reap"
        MemoryAdmin(harness.service).reap_keys()
    assert failed.value.code is ErrorCode.STORE_UNAVAILABLE
    assert vault.holds(key_ref)
    assert store.raw_partition(A.scope).doomed == {key_ref}
    assert MemoryAdmin(harness.service).reap_keys() == 1
    assert not vault.holds(key_ref)
    assert store.raw_partition(A.scope).doomed == set()
    assert MemoryAdmin(harness.service).reap_keys() == 0


def test_a_vault_failing_to_seal_is_retriable_and_writes_nothing(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    harness.pending(A, make_key("seal-ok"))
    before = _frozen(store, vault)

    def broken(context: str, plaintext: bytes) -> SealedEnvelope:
        raise RuntimeError("injected: KMS unavailable")

    vault.seal = broken  # type: ignore[method-assign]
    error = fail(harness.capture(A, make_key("seal-down")), ErrorCode.MUTATION_OUTCOME_UNKNOWN)
    assert error["retriable"] is True
    assert _frozen(store, vault) == before


# --------------------------------------------------------------------------- keys of units that do not commit


class CommitFaults(StoreWrapper):
    """Delegates to an InMemoryStore; the next units of work fail after their body ran.

    ``StoreOutcomeUnknownError`` is raised after the inner unit committed; any other error inside
    it, so the inner unit rolls back.
    """

    def __init__(
        self, inner: InMemoryStore, faults: list[Exception], after_fault: Callable[[], object] | None = None
    ) -> None:
        super().__init__(inner)
        self.faults = faults
        self.after_fault = after_fault

    @contextmanager
    def write(self, scope: str) -> Iterator[Any]:
        fault = self.faults.pop(0) if self.faults else None
        try:
            with self.inner.write(scope) as unit:
                yield unit
                if fault is not None and not isinstance(fault, StoreOutcomeUnknownError):
                    raise fault
            if fault is not None:
                raise fault
        finally:
            if fault is not None and self.after_fault is not None:
                self.after_fault()


def _faulty(
    harness: Harness,
    store: InMemoryStore,
    vault: InMemoryKeyVault,
    faults: list[Exception],
    after_fault: Callable[[], object] | None = None,
) -> Harness:
    faulty_store = CommitFaults(store, faults, after_fault)
    service = MemoryService(store=faulty_store, vault=vault, policy=ACCEPT, clock=harness.clock)
    return Harness(service, harness.clock)


def _stored_key_refs(store: InMemoryStore, scope: str = A.scope) -> list[str]:
    partition = store.raw_partition(scope)
    rows: list[CandidateRow | RecordRow] = [*partition.candidates.values(), *partition.records.values()]
    return sorted(row.sealed.key_ref for row in rows if row.sealed is not None)


ROLLED_BACK: dict[str, tuple[list[Exception], ErrorCode]] = {
    "unavailable": ([StoreUnavailableError("injected: disk full")], ErrorCode.STORE_UNAVAILABLE),
    "every attempt loses a race": ([StoreConflictError("injected: lost race")] * 3, ErrorCode.STORE_UNAVAILABLE),
}


@pytest.mark.parametrize("operation", ["capture", "accept"])
@pytest.mark.parametrize("fault", list(ROLLED_BACK))
def test_a_unit_that_does_not_commit_leaves_no_key_behind(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, operation: str, fault: str
) -> None:
    """A capture or accept whose unit rolls back after sealing destroys the keys it sealed under."""
    candidate_id = harness.pending(A, make_key("rolled-back-pending"))
    before = _frozen(store, vault)
    faults, code = ROLLED_BACK[fault]
    faulty = _faulty(harness, store, vault, list(faults))
    if operation == "capture":
        envelope = faulty.capture(A, make_key("rolled-back"))
    else:
        envelope = faulty.admit(A, candidate_id, make_key("rolled-back"))
    fail(envelope, code, retriable=True)
    assert _frozen(store, vault) == before
    assert ok(harness.admit(A, candidate_id, make_key("rolled-back-admit")))["outcome"]["status"] == "accepted"


@pytest.mark.parametrize("operation", ["capture", "accept"])
def test_a_store_found_corrupt_inside_the_unit_is_journal_corrupt_and_leaves_no_key_behind(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, operation: str
) -> None:
    """Corruption met in the unit is not retriable (never STORE_UNAVAILABLE), and the unit's keys go."""
    candidate_id = harness.pending(A, make_key("corrupt-pending"))
    before = _frozen(store, vault)
    faulty = _faulty(harness, store, vault, [StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "injected: malformed page")])
    if operation == "capture":
        envelope = faulty.capture(A, make_key("corrupt"))
    else:
        envelope = faulty.admit(A, candidate_id, make_key("corrupt"))
    fail(envelope, ErrorCode.JOURNAL_CORRUPT, retriable=False)
    assert _frozen(store, vault) == before


def test_keys_of_a_unit_that_did_not_commit_stay_when_the_vault_cannot_destroy_them(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, caplog: pytest.LogCaptureFixture
) -> None:
    """Best effort: the call answers its own failure, not the vault's, and the error is logged; the key that
    stays encrypts nothing the store holds."""
    vault.failures = 1
    faulty = _faulty(harness, store, vault, [StoreUnavailableError("injected: disk full")])
    with caplog.at_level("ERROR", logger="engram_memory"):
        fail(faulty.capture(A, make_key("stray-key")), ErrorCode.STORE_UNAVAILABLE, retriable=True)
    assert [record.getMessage() for record in caplog.records] == [
        "keys of a mutation that did not commit were not destroyed"
    ]
    assert len(vault._keys) == 1
    assert _stored_key_refs(store) == []
    assert harness.high_water(A) == 0


def test_a_body_that_runs_the_last_checks_itself_is_not_checked_again(clock: ManualClock) -> None:
    """``commit_mutation`` runs the last checks after the body unless the body ran them first (right before
    an irreversible step, :class:`Attempt`): a deadline that passes after that point no longer refuses."""
    guard = MutationGuard(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=ACCEPT, clock=clock)
    binding = attrs.evolve(A, deadline=clock.now() + timedelta(seconds=1))

    def body(checks_first: bool) -> Callable[[Any, Attempt], dict[str, Any]]:
        def run(_unit: Any, attempt: Attempt) -> dict[str, Any]:
            if checks_first:
                attempt.last_checks()
            clock.advance(timedelta(seconds=2))  # the irreversible step takes its time
            return {"done": checks_first}

        return run

    assert guard.commit_mutation(binding, None, None, None, body(checks_first=True)) == ({"done": True}, False)
    binding = attrs.evolve(A, deadline=clock.now() + timedelta(seconds=1))
    with pytest.raises(EngramError) as refused:
        guard.commit_mutation(binding, None, None, None, body(checks_first=False))
    assert refused.value.code is ErrorCode.DEADLINE_EXCEEDED


def test_a_lost_race_destroys_the_losing_attempts_key_and_keeps_the_winners(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    faulty = _faulty(harness, store, vault, [StoreConflictError("injected: lost race")])
    candidate_id = faulty.pending(A, make_key("second-attempt"))
    assert sorted(vault._keys) == _stored_key_refs(store) == [_sealed(store, candidate_id).key_ref]


def test_a_rerun_that_replays_the_winner_destroys_the_losing_attempts_key(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    """D4: a lost race re-run finds the same key bound by the winner; the loser's key goes."""
    winner: dict[str, Any] = {}
    faulty = _faulty(
        harness,
        store,
        vault,
        [StoreConflictError("injected: lost race")],
        lambda: winner.update(harness.capture(A, make_key("raced-key"))),
    )
    loser = ok(faulty.capture(A, make_key("raced-key")))
    assert loser["status"] == "duplicate_exact"
    assert loser["candidate_id"] == ok(winner)["candidate_id"]
    assert sorted(vault._keys) == _stored_key_refs(store) == [_sealed(store, loser["candidate_id"]).key_ref]


@pytest.mark.parametrize("lost", [1, 2])
def test_a_mutation_is_run_three_times_before_a_lost_race_is_store_unavailable(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, lost: int
) -> None:
    """Two lost races are re-run and the third run commits; only a third lost race is STORE_UNAVAILABLE."""
    faulty = _faulty(harness, store, vault, [StoreConflictError("injected: lost race")] * lost)
    value = ok(faulty.capture(A, make_key(f"three-runs-{lost}")))
    assert value["status"] == "committed_pending"
    assert value["cursor"] == "1"
    assert sorted(vault._keys) == _stored_key_refs(store) == [_sealed(store, value["candidate_id"]).key_ref]
    again = _faulty(harness, store, vault, [StoreConflictError("injected: lost race")] * 3)
    fail(again.capture(A, make_key(f"three-runs-{lost}-b")), ErrorCode.STORE_UNAVAILABLE, retriable=True)
    assert harness.high_water(A) == 1


def test_an_accept_rerun_after_a_lost_race_counts_each_doomed_key_once(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    """The batch of 16 counts distinct doomed keys: a lost race's rolled-back run adds none."""
    waiting = _accepted_keys(harness, store, A, "rerun-batch", 7)
    candidate_id = harness.pending(A, make_key("rerun-batch-last"))
    waiting.append(_sealed(store, candidate_id).key_ref)
    faulty = _faulty(harness, store, vault, [StoreConflictError("injected: lost race")])
    assert ok(faulty.admit(A, candidate_id, make_key("rerun-batch-last-a")))["outcome"]["status"] == "accepted"
    assert len(set(waiting)) == 8
    assert store.raw_partition(A.scope).doomed == set(waiting)
    assert all(vault.holds(key) for key in waiting)


def test_an_unknown_outcome_keeps_the_key_the_committed_unit_needs(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    """D13: after MUTATION_OUTCOME_UNKNOWN the unit may have committed, so its key stays."""
    faulty = _faulty(harness, store, vault, [StoreOutcomeUnknownError("injected: connection lost after COMMIT")])
    fail(faulty.capture(A, make_key("unknown")), ErrorCode.MUTATION_OUTCOME_UNKNOWN, retriable=True)
    replay = ok(harness.capture(A, make_key("unknown")))
    assert replay["status"] == "duplicate_exact"
    assert sorted(vault._keys) == _stored_key_refs(store)
    assert ok(harness.admit(A, replay["candidate_id"], make_key("unknown-admit")))["outcome"]["status"] == "accepted"


def test_a_deadline_passing_while_sealing_leaves_no_key_behind(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """The in-unit deadline check refuses the capture after its seal; the key goes with it."""
    harness.pending(A, make_key("deadline-pending"))
    before = _frozen(store, vault)
    seal = vault.seal

    def slow_seal(context: str, plaintext: bytes) -> SealedEnvelope:
        clock.advance(timedelta(seconds=2))
        return seal(context, plaintext)

    vault.seal = slow_seal  # type: ignore[method-assign]
    late = attrs.evolve(A, deadline=clock.now() + timedelta(seconds=1))
    fail(harness.capture(late, make_key("deadline-while-sealing")), ErrorCode.DEADLINE_EXCEEDED)
    assert _frozen(store, vault) == before


# --------------------------------------------------------------------------- D14 journal tampering


def test_every_flipped_byte_of_an_event_is_journal_corrupt_at_its_cursor(
    harness: Harness, store: InMemoryStore
) -> None:
    _, record_id = harness.accepted(A, make_key("flip"))
    harness.pending(A, make_key("flip-later"))
    events = store.raw_partition(A.scope).events
    original = events[1]
    admin = MemoryAdmin(harness.service)
    for position in range(len(original.body)):
        mutated = bytearray(original.body)
        mutated[position] ^= 0x01
        events[1] = attrs.evolve(original, body=bytes(mutated))
        report = admin.verify(tenant_id="tenant-a", workspace_id="workspace-1")
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, 2), position
    events[1] = original
    assert admin.verify(tenant_id="tenant-a", workspace_id="workspace-1").ok
    assert record_id


def test_a_forged_event_digest_is_journal_corrupt(harness: Harness, store: InMemoryStore) -> None:
    harness.pending(A, make_key("forged-1"))
    harness.pending(A, make_key("forged-2"))
    events = store.raw_partition(A.scope).events
    events[0] = attrs.evolve(events[0], event_digest="sha256:" + "f" * 64)
    report = MemoryAdmin(harness.service).verify(tenant_id="tenant-a", workspace_id="workspace-1")
    assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, 1)


def test_a_removed_event_is_a_cursor_gap(harness: Harness, store: InMemoryStore) -> None:
    for index in range(3):
        harness.pending(A, make_key(f"gap-{index}"))
    del store.raw_partition(A.scope).events[1]
    report = MemoryAdmin(harness.service).verify(tenant_id="tenant-a", workspace_id="workspace-1")
    assert (report.ok, report.code, report.cursor) == (False, ErrorCode.CURSOR_GAP, 2)


def test_a_state_row_that_disagrees_with_the_journal_is_journal_corrupt(harness: Harness, store: InMemoryStore) -> None:
    candidate_id = harness.pending(A, make_key("fold"))
    harness.pending(A, make_key("fold-later"))
    candidates = store.raw_partition(A.scope).candidates
    candidates[candidate_id] = attrs.evolve(candidates[candidate_id], state="withdrawn", sealed=None)
    report = MemoryAdmin(harness.service).verify(tenant_id="tenant-a", workspace_id="workspace-1")
    assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, 1)


def test_a_pending_candidate_that_lost_its_envelope_is_blob_missing_and_nothing_is_decided(
    harness: Harness, store: InMemoryStore, vault: FlakyVault
) -> None:
    candidate_id = harness.pending(A, make_key("lost-envelope"))
    row = store.raw_partition(A.scope).candidates[candidate_id]
    with store.write(A.scope) as unit:
        unit.put_candidate(attrs.evolve(row, sealed=None))
    before = _frozen(store, vault)
    fail(harness.admit(A, candidate_id, make_key("lost-envelope-admit")), ErrorCode.BLOB_MISSING, retriable=False)
    with pytest.raises(EngramError) as refused:
        harness.admin.pending_candidates(tenant_id=A.tenant_id, workspace_id=A.workspace_id)
    assert refused.value.code is ErrorCode.BLOB_MISSING
    assert _frozen(store, vault) == before


def test_forgetting_a_record_whose_body_is_already_gone_still_erases_it(harness: Harness, store: InMemoryStore) -> None:
    """A lost body never blocks an erasure: the record is tombstoned and unindexed, and the scope verifies again."""
    _, record_id = harness.accepted(A, make_key("bodiless"))
    row = store.raw_partition(A.scope).records[record_id]
    with store.write(A.scope) as unit:
        unit.put_record(attrs.evolve(row, sealed=None))
    admin = harness.admin
    assert admin.verify(tenant_id=A.tenant_id, workspace_id=A.workspace_id).code is ErrorCode.BLOB_MISSING
    value = ok(harness.forget(A, record_id, make_key("bodiless-forget")))
    assert value["receipt"]["to_state"] == "tombstoned"
    partition = store.raw_partition(A.scope)
    assert partition.records[record_id].state == "tombstoned"
    assert record_id not in partition.documents
    assert row.payload_digest in partition.tombstones
    assert admin.verify(tenant_id=A.tenant_id, workspace_id=A.workspace_id).ok


# --------------------------------------------------------------------------- races


def test_concurrent_identical_captures_commit_once(harness: Harness) -> None:
    """D4: racing retries of one capture give one committed_pending and duplicate_exact for the rest."""
    barrier = threading.Barrier(6)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        envelope = harness.capture(A, make_key("race"))
        with lock:
            results.append(envelope)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(ok(envelope)["status"] for envelope in results)
    assert statuses == ["committed_pending"] + ["duplicate_exact"] * 5
    assert len({ok(envelope)["candidate_id"] for envelope in results}) == 1
    assert harness.high_water(A) == 1


def _racing_service(
    store: InMemoryStore, vault: InMemoryKeyVault, clock: ManualClock, competitor: Callable[[], object]
) -> Harness:
    racing = RacingStore(store, competitor)
    return Harness(MemoryService(store=racing, vault=vault, policy=ACCEPT, clock=clock), clock)


def test_an_admission_that_loses_a_race_answers_duplicate_exact(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """D4: the loser of two admissions under different keys sees the winner's record id."""
    candidate_id = harness.pending(A, make_key("race-admission"))
    winner: dict[str, Any] = {}
    loser = _racing_service(
        store, vault, clock, lambda: winner.update(harness.admit(A, candidate_id, make_key("race-admission-1")))
    )
    envelope = loser.admit(A, candidate_id, make_key("race-admission-2"))
    record_id = ok(winner)["outcome"]["record_id"]
    outcome = ok(envelope)["outcome"]
    assert (outcome["status"], outcome["record_id"]) == ("duplicate_exact", record_id)


def test_an_admission_that_loses_a_race_to_its_own_key_answers_the_winner_replayed(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """D4: the same key and intent committed first by a racing call is found in the unit: its replay, one accept."""
    candidate_id = harness.pending(A, make_key("race-twin"))
    key = make_key("race-twin-admission")
    winner: dict[str, Any] = {}
    loser = _racing_service(store, vault, clock, lambda: winner.update(harness.admit(A, candidate_id, key)))
    value = ok(loser.admit(A, candidate_id, key))
    assert ok(winner)["replayed"] is False
    assert value == {**ok(winner), "replayed": True}
    events = store.raw_partition(A.scope).events
    assert [json.loads(event.body)["operation"] for event in events] == ["capture", "accept"]


def test_a_pending_adjudication_that_loses_a_race_to_its_own_key_replays_the_winner(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """§3.5: the same key and intent decided meanwhile is answered as the replay it now is."""
    candidate_id = harness.pending(A, make_key("race-hold"))
    key = make_key("race-hold-request")
    winner: dict[str, Any] = {}
    loser = _racing_service(store, vault, clock, lambda: winner.update(harness.admit(A, candidate_id, key)))
    loser.use(DefaultPolicy(admission="adjudicate"))
    value = ok(loser.admit(A, candidate_id, key))
    assert value["replayed"] is True
    assert value["outcome"] == ok(winner)["outcome"]
    assert value["outcome"]["status"] == "accepted"


def test_a_deadline_passing_while_the_policy_decides_holds_no_key(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """The provisional binding of a pending_adjudication is a write: refused once the deadline passed."""
    candidate_id = harness.pending(A, make_key("slow-policy"))
    adjudicate = DefaultPolicy(admission="adjudicate")

    def slow(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        clock.advance(timedelta(seconds=2))
        return adjudicate.decide(request, now)

    harness.use(PolicyOverride(adjudicate, decide=slow))
    before = _frozen(store, vault)
    late = attrs.evolve(A, deadline=clock.now() + timedelta(seconds=1))
    fail(harness.admit(late, candidate_id, make_key("slow-policy-request")), ErrorCode.DEADLINE_EXCEEDED)
    assert _frozen(store, vault) == before


def test_a_withdraw_that_loses_a_race_answers_already_terminal(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """D5: the loser of two withdraws under different keys gets ALREADY_TERMINAL."""
    candidate_id = harness.pending(A, make_key("race-withdraw"))
    loser = _racing_service(
        store, vault, clock, lambda: ok(harness.withdraw(A, candidate_id, make_key("race-withdraw-1")))
    )
    envelope = loser.withdraw(A, candidate_id, make_key("race-withdraw-2"))
    fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)


def _record_on_a_flaky_vault(
    store: InMemoryStore, clock: ManualClock, label: str
) -> tuple[Harness, FlakyVault, str, SealedEnvelope]:
    """A service over ``store`` and a :class:`FlakyVault`, one admitted record, and its body's envelope."""
    vault = FlakyVault()
    harness = Harness(MemoryService(store=store, vault=vault, policy=ACCEPT, clock=clock), clock)
    _, record_id = harness.accepted(A, make_key(label))
    body_key = store.raw_partition(A.scope).records[record_id].sealed
    assert body_key is not None
    return harness, vault, record_id, body_key


def test_a_forget_that_loses_a_race_to_its_own_key_destroys_the_key_before_answering(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """A forget replayed inside its unit (the same key committed meanwhile) answers only once the key is gone."""
    harness, vault, record_id, body_key = _record_on_a_flaky_vault(store, clock, "race-forget")
    key = make_key("race-forget-f")

    def competitor() -> None:  # the same forget commits first, but its vault call fails
        vault.failures = 1
        fail(harness.forget(A, record_id, key), ErrorCode.MUTATION_OUTCOME_UNKNOWN, retriable=True)
        assert store.raw_partition(A.scope).doomed >= {body_key.key_ref}

    loser = _racing_service(store, vault, clock, competitor)
    value = ok(loser.forget(A, record_id, key))
    assert value["replayed"] is True
    assert value["receipt"]["to_state"] == "tombstoned"
    assert not vault.holds(body_key.key_ref)
    assert store.raw_partition(A.scope).doomed == set()


def test_a_forget_whose_key_outlives_it_is_logged_and_a_retry_finishes_it(
    store: InMemoryStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator can alert on a forget that committed but could not destroy its key (as on a deferred destruction)."""
    harness, vault, record_id, body_key = _record_on_a_flaky_vault(store, clock, "logged-forget")
    vault.failures = 1
    with caplog.at_level("ERROR", logger="engram_memory"):
        fail(harness.forget(A, record_id, make_key("logged-forget-f")), ErrorCode.MUTATION_OUTCOME_UNKNOWN)
    assert caplog.messages == ["erasure committed but its key is not destroyed; a retry of the call destroys it"]
    assert vault.holds(body_key.key_ref)
    caplog.clear()
    vault.failures = 1
    with caplog.at_level("ERROR", logger="engram_memory"):  # a replay destroys every doomed key of the scope
        fail(harness.forget(A, record_id, make_key("logged-forget-f")), ErrorCode.MUTATION_OUTCOME_UNKNOWN)
    assert caplog.messages == ["replayed erasure: the scope's doomed keys are not destroyed; a retry destroys them"]
    assert ok(harness.forget(A, record_id, make_key("logged-forget-f")))["replayed"] is True
    assert not vault.holds(body_key.key_ref)


def test_a_withdraw_that_loses_a_race_to_its_own_key_answers_the_winner_replayed(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """D4: the same withdraw key and arguments committed meanwhile is answered as a replay (``replayed: true``)."""
    candidate_id = harness.pending(A, make_key("race-own-withdraw"))
    key = make_key("race-own-withdraw-w")
    winner: dict[str, Any] = {}
    loser = _racing_service(store, vault, clock, lambda: winner.update(harness.withdraw(A, candidate_id, key)))
    value = ok(loser.withdraw(A, candidate_id, key))
    assert ok(winner)["replayed"] is False
    assert value["replayed"] is True
    assert value["receipt"] == ok(winner)["receipt"]
    assert value["key_destruction"] == "complete"


def test_a_confirmation_used_by_a_racing_call_is_gate_failed_in_the_unit(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """The single use is checked again in the unit: the loser is gate_failed (not retriable), nothing written."""
    first = harness.pending(A, make_key("shared-confirmation-1"))
    second = harness.pending(A, make_key("shared-confirmation-2"))
    shared = "confirmation-shared-by-two-calls"

    def withdraw_args(candidate_id: str, key: str) -> dict[str, Any]:
        return {"candidate_id": candidate_id, "idempotency_key": key, "reason_ref": "reason:no-longer-true"}

    def competitor() -> None:
        args = withdraw_args(first, make_key("shared-confirmation-w1"))
        ok(harness.confirmed(WITHDRAW, args, A, confirmation_id=shared))

    loser = _racing_service(store, vault, clock, competitor)
    before_key = _sealed(store, second).key_ref
    envelope = loser.confirmed(
        WITHDRAW, withdraw_args(second, make_key("shared-confirmation-w2")), A, confirmation_id=shared
    )
    fail(envelope, ErrorCode.GATE_FAILED, retriable=False)
    assert store.raw_partition(A.scope).candidates[second].state == "pending"
    assert vault.holds(before_key)
    assert harness.high_water(A) == 3


class ReadRacingStore(StoreWrapper):
    """Delegates to an InMemoryStore, running ``competitor`` just before its ``nth`` read view (1-based)."""

    def __init__(self, inner: InMemoryStore, nth: int, competitor: Callable[[], object]) -> None:
        super().__init__(inner)
        self.reads = 0
        self.nth = nth
        self.competitor = competitor

    def read(self, scope: str) -> AbstractContextManager[Any]:
        self.reads += 1
        if self.reads == self.nth:
            self.competitor()
        return self.inner.read(scope)


def test_an_admission_whose_own_key_decided_it_after_the_lookup_answers_the_replay(
    harness: Harness, store: InMemoryStore, vault: FlakyVault, clock: ManualClock
) -> None:
    """D4: a candidate rejected meanwhile under the same key and intent is that call's replay, not ALREADY_TERMINAL."""
    candidate_id = harness.pending(A, make_key("race-own-admission"))
    key = make_key("race-own-admission-a")
    harness.use(REJECT)
    winner: dict[str, Any] = {}
    racing = ReadRacingStore(store, 2, lambda: winner.update(harness.admit(A, candidate_id, key)))
    loser = Harness(MemoryService(store=racing, vault=vault, policy=REJECT, clock=clock), clock)
    value = ok(loser.admit(A, candidate_id, key))
    assert racing.reads >= 2
    assert ok(winner)["replayed"] is False
    assert ok(winner)["outcome"]["status"] == "rejected"
    assert value == {**ok(winner), "replayed": True}


# --------------------------------------------------------------------------- the rule index


RULES = ("§3.1", "§3.2", "§3.3", "§3.4", "§3.5", "§3.6", "D1", "D4", "D5", "D6", "D7", "D8", "D9", "D13", "D14")


def _tests_citing(rule: str) -> list[str]:
    pattern = re.compile(re.escape(rule) + r"(?![0-9.])")
    return [
        name
        for name, member in inspect.getmembers(ServiceConformance, inspect.isfunction)
        if name.startswith("test_") and pattern.search(member.__doc__ or "")
    ]


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_has_a_conformance_test(rule: str) -> None:
    """Each rule of §3 and each D-rule under test is cited by at least one ServiceConformance test."""
    assert _tests_citing(rule), rule


def test_the_rule_index_is_read_from_docstrings() -> None:
    source = inspect.getsource(ServiceConformance)
    tree = ast.parse(source)
    documented = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and ast.get_docstring(node)
    ]
    assert len(documented) == len([n for n in dir(ServiceConformance) if n.startswith("test_")])
