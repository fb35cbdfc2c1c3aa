"""Edges of the write path and the mutation guard found by a mutation audit.

Each test pins one rule whose mutant the rest of the suite let through; expected values are
literals from the contract (codes, retriable flags, states), never the library computing itself.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from engram_memory import DefaultPolicy, ErrorCode, JsonRpcCode, ManualClock, MemoryService, ProtocolError
from engram_memory.canonical import Domain, digest
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.fakes import (
    CAPTURE,
    FORGET,
    GET,
    SEARCH,
    WITHDRAW,
    Harness,
    PolicyOverride,
    capture_args,
    fail,
    inmemory_scope_contents,
    make_binding,
    make_key,
    ok,
)

ACCEPT = DefaultPolicy(admission="accept")
A = make_binding("tenant-a", "workspace-1", "principal-1")


class LazyVault(InMemoryKeyVault):
    """An in-memory vault that declares its destruction asynchronous (a KMS with a deletion window)."""

    @property
    def destroys_synchronously(self) -> bool:
        return False


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


def _harness(store: InMemoryStore, vault: InMemoryKeyVault, clock: ManualClock) -> Harness:
    return Harness(MemoryService(store=store, vault=vault, policy=ACCEPT, clock=clock), clock)


def test_withdraw_with_an_asynchronous_vault_answers_key_destruction_pending(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """Contract: ``key_destruction`` is ``"complete"`` only when the vault destroyed the key synchronously."""
    harness = _harness(store, LazyVault(), clock)
    candidate_id = harness.pending(A, make_key("lazy-withdraw"))
    value = ok(harness.withdraw(A, candidate_id, make_key("lazy-withdraw-w")))
    assert value["key_destruction"] == "pending"
    assert value["replayed"] is False
    assert value["receipt"]["to_state"] == "withdrawn"


def test_a_tombstone_changes_only_the_state_and_the_body_of_the_record_row(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """forget rewrites the row as ``tombstoned`` without a body; every other column is carried over as it was."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    expires = clock.now() + timedelta(days=30)
    _, record_id = harness.accepted(
        A,
        make_key("tomb-row"),
        retention={"derivative_rule": "make-ineligible", "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.000Z")},
        valid_time={"t": 1_700_000_000_000, "t_end": 1_800_000_000_000},
    )
    with store.write(A.scope) as unit:  # a row whose trust a host revoked out of band
        row = unit.record(record_id)
        assert row is not None
        unit.put_record(attrs.evolve(row, trust_valid=False))
    ok(harness.forget(A, record_id, make_key("tomb-row-f")))
    after = store.raw_partition(A.scope).records[record_id]
    assert after == attrs.evolve(row, state="tombstoned", sealed=None, trust_valid=False)
    assert (after.valid_from, after.valid_to, after.expires_at_ms) == (
        1_700_000_000_000,
        1_800_000_000_000,
        int(expires.timestamp()) * 1000,
    )


def test_a_host_adjudication_works_across_policy_versions(store: InMemoryStore, clock: ManualClock) -> None:
    """Contract: ``MemoryAdmin.adjudicate`` is not a policy decision; another policy version is no POLICY_STALE."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    candidate_id = harness.pending(A, make_key("adjudicate-v1"))
    harness.use(DefaultPolicy(admission="accept", policy_version="2"))
    fail(harness.admit(A, candidate_id, make_key("adjudicate-v1-a")), ErrorCode.POLICY_STALE, retriable=True)
    result = harness.admin.adjudicate(
        tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=candidate_id, decision="accept"
    ).to_json()
    assert result["replayed"] is False
    assert result["outcome"]["status"] == "accepted"
    assert result["outcome"]["cursor"] == "2"
    assert store.raw_partition(A.scope).candidates[candidate_id].state == "admitted"


@pytest.mark.parametrize("admission", ["accept", "adjudicate"])
def test_a_deadline_reached_exactly_while_the_policy_decides_refuses_the_write(
    store: InMemoryStore, clock: ManualClock, admission: str
) -> None:
    """A deadline is passed at the instant it names: the unit's last check refuses with nothing written."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    candidate_id = harness.pending(A, make_key(f"exact-deadline-{admission}"))
    policy = DefaultPolicy(admission=admission)  # type: ignore[arg-type]

    def slow(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        clock.advance(timedelta(seconds=1))
        return policy.decide(request, now)

    harness.use(PolicyOverride(policy, decide=slow))
    before = inmemory_scope_contents(store, A.scope)
    late = attrs.evolve(A, deadline=clock.now() + timedelta(seconds=1))
    key = make_key(f"exact-deadline-{admission}-a")
    fail(harness.admit(late, candidate_id, key), ErrorCode.DEADLINE_EXCEEDED, retriable=True)
    assert inmemory_scope_contents(store, A.scope) == before
    assert store.raw_partition(A.scope).candidates[candidate_id].state == "pending"


@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_used_confirmation_is_gate_failed_before_the_lifecycle_is_checked(
    store: InMemoryStore, clock: ManualClock, tool: str
) -> None:
    """Contract, order of checks: the gate (4) runs before the lifecycle (5), so a reused id is gate_failed."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    used = "confirmation-used-once"
    if tool == WITHDRAW:
        target = harness.pending(A, make_key("used-gate"))
        first = {"candidate_id": target, "idempotency_key": make_key("used-gate-1"), "reason_ref": "reason:a"}
    else:
        _, target = harness.accepted(A, make_key("used-gate"))
        first = {"record_id": target, "idempotency_key": make_key("used-gate-1"), "reason_ref": "reason:a"}
    ok(harness.confirmed(tool, first, A, confirmation_id=used))
    state = harness.state(A)
    again = {**first, "idempotency_key": make_key("used-gate-2")}  # the target is terminal now, too
    fail(harness.confirmed(tool, again, A, confirmation_id=used), ErrorCode.GATE_FAILED, retriable=False)
    fail(harness.confirmed(tool, again, A), ErrorCode.ALREADY_TERMINAL, retriable=False)
    assert harness.state(A) == state


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (SEARCH, {"query": "anything", "purpose_ref": "purpose:another"}),
        (GET, {"record_id": "mem_" + "a" * 64, "purpose_ref": "purpose:another"}),
    ],
)
def test_call_tool_refuses_a_read_for_another_purpose_as_a_protocol_error(
    store: InMemoryStore, clock: ManualClock, tool: str, arguments: dict[str, str]
) -> None:
    """Contract: a ``purpose_ref`` that differs from the bound purpose is -32603, never an envelope."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    with pytest.raises(ProtocolError) as raised:
        harness.call(tool, arguments, A)
    assert raised.value.code is JsonRpcCode.INTERNAL_ERROR
    assert int(raised.value.code) == -32603


@pytest.mark.parametrize("field", ["principal", "agent_id", "session", "purpose_ref"])
def test_a_binding_field_not_in_nfc_is_a_protocol_error_and_writes_nothing(
    store: InMemoryStore, clock: ManualClock, field: str
) -> None:
    """Contract: a host-bound id not in Unicode NFC makes every call -32603 (two spellings must never both be used)."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    decomposed = "principal-e\u0301"  # "e" + COMBINING ACUTE ACCENT: NFC is "\u00e9"
    changes: dict[str, Any] = {field: decomposed}
    binding = attrs.evolve(A, **changes)
    arguments = capture_args(make_key("not-nfc"), purpose_ref=binding.purpose_ref)
    with pytest.raises(ProtocolError) as raised:
        harness.call(CAPTURE, arguments, binding)
    assert raised.value.code is JsonRpcCode.INTERNAL_ERROR
    with pytest.raises(ProtocolError):
        harness.call(SEARCH, {"query": "anything", "purpose_ref": binding.purpose_ref}, binding)
    assert store.raw_partition(A.scope).events == []


def test_a_deadline_equal_to_now_refuses_even_a_replay_or_a_read(store: InMemoryStore, clock: ManualClock) -> None:
    """Order of checks: the deadline (2) precedes the idempotency lookup (3); it is passed at its very instant."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    harness.pending(A, make_key("deadline-replay"))
    at_deadline = attrs.evolve(A, deadline=clock.now())
    fail(harness.capture(at_deadline, make_key("deadline-replay")), ErrorCode.DEADLINE_EXCEEDED, retriable=True)
    search = {"query": "anything", "purpose_ref": A.purpose_ref}
    fail(harness.call(SEARCH, search, at_deadline), ErrorCode.DEADLINE_EXCEEDED, retriable=True)
    just_before = attrs.evolve(A, deadline=clock.now() + timedelta(milliseconds=1))
    assert ok(harness.capture(just_before, make_key("deadline-replay")))["status"] == "duplicate_exact"


def test_a_capture_whose_candidate_exists_without_its_key_binding_is_digest_conflict(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """The unit re-checks the candidate identity: a lost key binding never lets a capture overwrite a candidate."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    key = make_key("identity-exists")
    candidate_id = harness.pending(A, key)
    del store.raw_partition(A.scope).idempotency[(A.principal, key)]  # the binding lost (a restored backup)
    before = inmemory_scope_contents(store, A.scope)
    envelope = harness.capture(A, key, words=("zqidentityother",))
    fail(envelope, ErrorCode.DIGEST_CONFLICT, retriable=False)
    assert inmemory_scope_contents(store, A.scope) == before
    assert store.raw_partition(A.scope).candidates[candidate_id].state == "pending"


def test_a_pending_candidate_without_an_envelope_is_withdrawn_with_nothing_left_to_destroy(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """A withdraw answers ``key_destruction: "complete"`` when the candidate holds no key at all."""
    harness = _harness(store, LazyVault(), clock)
    candidate_id = harness.pending(A, make_key("no-envelope"))
    candidates = store.raw_partition(A.scope).candidates
    candidates[candidate_id] = attrs.evolve(candidates[candidate_id], sealed=None)
    value = ok(harness.withdraw(A, candidate_id, make_key("no-envelope-w")))
    assert value["key_destruction"] == "complete"
    assert candidates[candidate_id].state == "withdrawn"


def test_a_candidate_whose_row_digest_does_not_re_derive_is_journal_corrupt(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """Admission re-derives the record from the sealed envelope: a row naming another digest is JOURNAL_CORRUPT."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    candidate_id = harness.pending(A, make_key("no-rederive"))
    candidates = store.raw_partition(A.scope).candidates
    candidates[candidate_id] = attrs.evolve(candidates[candidate_id], record_digest="sha256:" + "0" * 64)
    before = inmemory_scope_contents(store, A.scope)
    fail(harness.admit(A, candidate_id, make_key("no-rederive-a")), ErrorCode.JOURNAL_CORRUPT, retriable=False)
    assert inmemory_scope_contents(store, A.scope) == before


def _intent(tool: str, arguments: dict[str, str]) -> str:
    """The contract's IDEMPOTENCY_INTENT digest, by hashlib over the literal domain (ASCII-only arguments)."""
    body = json.dumps({"tool": tool, "arguments": arguments}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(b"engram-memory/idempotency-intent/v1\0" + body.encode("ascii")).hexdigest()


def test_the_stored_intent_is_the_digest_of_tool_and_canonical_arguments(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """Contract: the binding stores ``IDEMPOTENCY_INTENT`` of ``{tool, arguments}``; a held key stores it too."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    candidate_id = harness.pending(A, make_key("intent-bytes"))
    withdraw = {"candidate_id": candidate_id, "idempotency_key": make_key("intent-w"), "reason_ref": "reason:x"}
    ok(harness.confirmed("engram_memory_withdraw", withdraw, A))
    held_for = harness.pending(A, make_key("intent-held"))
    harness.use(DefaultPolicy(admission="adjudicate"))
    admission = {"candidate_id": held_for, "idempotency_key": make_key("intent-a")}
    assert ok(harness.call("engram_memory_request_admission", admission, A))["outcome"]["status"] == (
        "pending_adjudication"
    )
    rows = store.raw_partition(A.scope).idempotency
    assert rows[(A.principal, make_key("intent-w"))].intent_digest == _intent("engram_memory_withdraw", withdraw)
    held = rows[(A.principal, make_key("intent-a"))]
    assert (held.intent_digest, held.response) == (_intent("engram_memory_request_admission", admission), b"")


DEFAULTS_SPELLED_OUT = {"retention": {"derivative_rule": "make-ineligible"}, "reconciliation": {"family_refs": []}}


@pytest.mark.parametrize("first_spells_out", [False, True])
def test_a_capture_retried_with_its_payload_defaults_spelled_out_or_omitted_is_a_replay(
    store: InMemoryStore, clock: ManualClock, first_spells_out: bool
) -> None:
    """One content, one intent: a default spelled out counts as omitted (the intent of an omitted one is unchanged)."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    key = make_key("defaults-spelled-out")
    omitted = capture_args(key)
    spelled_out = capture_args(key)
    spelled_out["payload"].update(DEFAULTS_SPELLED_OUT)
    first, retry = (spelled_out, omitted) if first_spells_out else (omitted, spelled_out)
    original = ok(harness.call(CAPTURE, first, A))
    assert original["status"] == "committed_pending"
    assert ok(harness.call(CAPTURE, retry, A)) == {**original, "status": "duplicate_exact"}
    for name, member in DEFAULTS_SPELLED_OUT.items():
        partly = capture_args(key)
        partly["payload"][name] = member
        assert ok(harness.call(CAPTURE, partly, A))["status"] == "duplicate_exact", name
    retain = capture_args(key, retention={"derivative_rule": "retain"})
    fail(harness.call(CAPTURE, retain, A), ErrorCode.DIGEST_CONFLICT, retriable=False)  # other content
    stored = store.raw_partition(A.scope).idempotency[(A.principal, key)].intent_digest
    assert stored == digest(Domain.IDEMPOTENCY_INTENT, {"tool": CAPTURE, "arguments": omitted})  # as before


@pytest.mark.parametrize("name", [["engram_memory_search"], {"engram_memory_search": 1}, 7, b"engram_memory_search"])
def test_a_tool_name_that_is_not_a_string_is_an_unknown_tool(
    store: InMemoryStore, clock: ManualClock, name: Any
) -> None:
    """Contract: an unknown tool is -32602, whatever the transport passed as its name (never a TypeError)."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    for call in (harness.service.call_tool, harness.service.operation_digest):
        with pytest.raises(ProtocolError) as raised:
            call(name, {"query": "x", "purpose_ref": A.purpose_ref}, A)
        assert int(raised.value.code) == -32602


def test_an_attestation_that_grows_past_its_bound_in_nfc_is_refused_and_writes_nothing(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """U+1D160 is 4 bytes and its NFC three 4-byte characters: 4,096 bytes as sent, 12,288 stored."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    before = inmemory_scope_contents(store, A.scope)
    args = capture_args(make_key("attestation-grows"), attestation="\U0001d160" * 1024)
    fail(harness.call(CAPTURE, args, A), ErrorCode.INVALID_SCHEMA)
    assert inmemory_scope_contents(store, A.scope) == before


def test_a_retry_whose_attestation_differs_only_by_normalisation_replays(
    store: InMemoryStore, clock: ManualClock
) -> None:
    """6,144 bytes as sent, 4,096 in NFC: accepted (it was refused when measured as sent), and its NFC form replays."""
    harness = _harness(store, InMemoryKeyVault(), clock)
    key = make_key("attestation-nfc")
    first = ok(harness.call(CAPTURE, capture_args(key, attestation="e\u0301" * 2048), A))
    retry = ok(harness.call(CAPTURE, capture_args(key, attestation="\u00e9" * 2048), A))
    assert first["status"] == "committed_pending"
    assert retry["status"] == "duplicate_exact"
    assert retry["candidate_id"] == first["candidate_id"]
