"""``ServiceConformance``: the six-tool contract end to end, on any Store and KeyVault.

Bind it with one fixture returning a :data:`~engram_memory.testing.fakes.ServiceFactory`: a
callable ``(clock) -> MemoryService`` that returns a service over the *same* store and vault on
every call (the suite calls it again to model a restart)::

    class TestMyService(ServiceConformance):
        @pytest.fixture
        def service_factory(self) -> ServiceFactory:
            store, vault = MyStore(...), MyVault(...)
            return lambda clock: MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

Every test goes through ``call_tool`` (JSON arguments in, envelope out) and
:class:`~engram_memory.MemoryAdmin` (adjudication, state digests, pending candidates). Tests name
the rule they check (§3.n of the founding document, Dn of the design). Capability fixtures,
``None`` by default:

* ``scope_contents(store, scope) -> bytes``: everything the backend holds for a scope outside
  sealed ciphertexts (enables the plaintext scans of D6);
* ``replace_event_body(store, scope, cursor, body)``: overwrite one stored event body (enables the
  tamper test of D14);
* ``term_traces(store, scope, term) -> bool``: whether the store holds anything of a term for a
  scope (enables the check that a forget leaves nothing of the words only its record held);
* ``complete_destruction(vault)``: finishes the key destructions a vault scheduled; required for
  a vault whose ``destroys_synchronously`` is ``False``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest import mock

import attrs
import pytest

from engram_memory.canonical import canonical_bytes, format_instant, is_digest, parse_instant, record_id_from_digest
from engram_memory.clock import ManualClock
from engram_memory.context import ALL_TOOLS, HostBinding
from engram_memory.errors import (
    PUBLIC_MESSAGES,
    RETRIABLE,
    EngramError,
    ErrorCode,
    JsonRpcCode,
    KeyUnavailableError,
    ProtocolError,
    StoreOutcomeUnknownError,
    StoreUnavailableError,
)
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import (
    AdmissionDecision,
    AdmissionRequest,
    CaptureConstraints,
    IdempotencyRow,
    SealedEnvelope,
    Store,
)
from engram_memory.records import candidate_context, record_context
from engram_memory.service import MemoryService
from engram_memory.testing.fakes import (
    ADMISSION,
    CAPTURE,
    FORGET,
    GET,
    SEARCH,
    VALID_FROM_MS,
    WITHDRAW,
    Harness,
    PolicyOverride,
    ServiceFactory,
    StoreWrapper,
    capture_args,
    content_digest,
    distinctive_words,
    fail,
    make_binding,
    make_key,
    ok,
    with_policy,
)
from engram_memory.testing.keyvault import CompleteDestruction, finish_destruction
from engram_memory.testing.store import TermTraces

__all__ = ["ReplaceEventBody", "ScopeContents", "ServiceConformance"]

ScopeContents = Callable[[Store, str], bytes]
"""Everything a backend holds for a scope except sealed ciphertexts, as bytes to scan."""
ReplaceEventBody = Callable[[Store, str, int, bytes], None]
"""Overwrites the stored body of the event at a cursor of a scope."""

ACCEPT = DefaultPolicy(admission="accept")
REJECT = DefaultPolicy(admission="reject")
ADJUDICATE = DefaultPolicy(admission="adjudicate")

A = make_binding("tenant-a", "workspace-1", "principal-1")
A2 = make_binding("tenant-a", "workspace-1", "principal-2")
A_WS2 = make_binding("tenant-a", "workspace-2", "principal-1")
B = make_binding("tenant-b", "workspace-1", "principal-1")

A_PAST = ManualClock().now() - timedelta(days=1)
"""A deadline long gone for the suite's clock."""

UNKNOWN_CANDIDATE = "candidate_" + "0" * 64
UNKNOWN_RECORD = record_id_from_digest("sha256:" + "0" * 64)
_RECORD_ID = re.compile(r"^mem_[a-z2-7]+$")


def _flagged(value: dict[str, Any], **flags: Any) -> bytes:
    """Canonical bytes of ``value`` with replay flags set (``status`` / ``replayed``)."""
    return canonical_bytes({**value, **flags})


def _outcome_flagged(value: dict[str, Any]) -> bytes:
    return canonical_bytes({**value, "replayed": True})


def _no_audit(envelope: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in envelope.items() if key != "auditId"}


def _withdraw_args(candidate_id: str, key: str, reason_ref: str = "reason:no-longer-true") -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key, "reason_ref": reason_ref}


def _forget_args(record_id: str, key: str, reason_ref: str = "reason:erasure-request") -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key, "reason_ref": reason_ref}


def _admission_args(candidate_id: str, key: str) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key}


def _scope_state(harness: Harness, binding: HostBinding) -> tuple[object, ...]:
    """High water, state digest, doomed keys, indexed ids and index statistics of the binding's scope."""
    with harness.service.store.read(binding.scope) as reader:
        stored = (sorted(reader.doomed_keys()), sorted(reader.indexed_ids()), reader.index_stats())
    return (*harness.state(binding), *stored)


def _protocol_code(call: Callable[[], object]) -> JsonRpcCode:
    with pytest.raises(ProtocolError) as info:
        call()
    return info.value.code


# ---------------------------------------------------------------------- receipts recomputed by hand
# The receipt tests rebuild each receipt body themselves and hash it with hashlib under the literal
# domain of docs/contract.md ("Digest domains"), never through the library's digest or receipt code.

_PAYLOAD_DOMAIN = b"graphify-memory/payload/v2\x00"
_CAPTURE_IDENTITY_DOMAIN = b"graphify-memory/capture-identity/v1\x00"
_ASSERTED_TRUST_DOMAIN = b"graphify-memory/asserted-trust/v1\x00"
_RECORD_DOMAIN = b"graphify-memory/record/v2\x00"
_EVENT_DOMAIN = b"graphify-memory/memory-journal-event/v1\x00"
_TRANSACTION_DOMAIN = b"graphify-memory/canonical-transaction/v1\x00"
_DECISION_DOMAIN = b"graphify-memory/admission-decision/v1\x00"
_PENDING_DOMAIN = b"graphify-memory/admission-pending/v1\x00"
_SCOPE_KEY_DOMAIN = b"engram-memory/scope-key/v1\x00"
_OPERATION_DOMAIN = b"engram-memory/operation/v1\x00"
_AUTHORIZATION_DOMAIN = b"engram-memory/authorization/v1\x00"
_COVERAGE_DOMAIN = b"engram-memory/coverage/v1\x00"

_POLICY_ID = "engram-memory:default-policy"
_POLICY_VERSION = "1"
_ZERO_DIGEST = "sha256:" + "0" * 64
_T0 = "2026-01-01T00:00:00.000Z"
"""The suite clock's start (``ManualClock()``), spelled as an instant."""


def _by_hand(domain: bytes, value: Any) -> str:
    """``sha256:`` + hex SHA-256 of ``domain`` followed by the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(domain + canonical_bytes(value)).hexdigest()


def _scope_ref(binding: HostBinding) -> str:
    """The scope key of the binding's (tenant, workspace), derived by hand (and checked against ``scope``)."""
    scope = _by_hand(_SCOPE_KEY_DOMAIN, {"tenant_id": binding.tenant_id, "workspace_id": binding.workspace_id})
    assert scope == binding.scope
    return scope


def _authorization(tool: str, binding: HostBinding, target: str, checked_at: str) -> str:
    """The ``AUTHORIZATION`` receipt of a call by ``binding`` on ``target`` under the default policy."""
    body = {
        "tool": tool,
        "scope_ref": _scope_ref(binding),
        "principal": binding.principal,
        "agent_id": binding.agent_id,
        "session": binding.session,
        "purpose_ref": binding.purpose_ref,
        "target": target,
        "policy_id": _POLICY_ID,
        "policy_version": _POLICY_VERSION,
        "checked_at": checked_at,
    }
    return _by_hand(_AUTHORIZATION_DOMAIN, body)


def _transaction(
    operation: str, binding: HostBinding, cursor: str, event_digest: str, at: str, *, record_digest: str | None = None
) -> str:
    """The ``TRANSACTION`` receipt; ``record_digest`` is bound by capture, accept and reject only."""
    body = {
        "operation": operation,
        "scope_ref": _scope_ref(binding),
        "cursor": cursor,
        "event_digest": event_digest,
        "committed_at": at,
    }
    if record_digest is not None:
        body["record_digest"] = record_digest
    return _by_hand(_TRANSACTION_DOMAIN, body)


def _decision(decision: str, record_digest: str, issued_at: str, *, policy_id: str = _POLICY_ID) -> str:
    """The ``ADMISSION_DECISION`` receipt of a decision of the default policy (or ``policy_id``), version 1."""
    body = {
        "policy_id": policy_id,
        "policy_version": _POLICY_VERSION,
        "record_digest": record_digest,
        "decision": decision,
        "issued_at": issued_at,
    }
    return _by_hand(_DECISION_DOMAIN, body)


def _journal_event(harness: Harness, binding: HostBinding, cursor: str) -> dict[str, Any]:
    """The body of the scope's event at ``cursor``, after checking its digest by hand."""
    with harness.service.store.read(binding.scope) as reader:
        event = next(reader.events(after=int(cursor) - 1))
    body: dict[str, Any] = json.loads(event.body)
    assert body["cursor"] == cursor
    assert body["event_digest"] == event.event_digest
    assert _by_hand(_EVENT_DOMAIN, {k: v for k, v in body.items() if k != "event_digest"}) == event.event_digest
    return body


def _record_id(record_digest: str) -> str:
    """``mem_`` + the lower-case, unpadded base32 of the digest's 32 bytes."""
    return "mem_" + base64.b32encode(bytes.fromhex(record_digest.removeprefix("sha256:"))).decode().rstrip("=").lower()


def _record_digest(record: dict[str, Any]) -> str:
    """The ``RECORD`` digest of a record body: every field but ``record_id`` and ``record_digest``."""
    return _by_hand(_RECORD_DOMAIN, {k: v for k, v in record.items() if k not in {"record_id", "record_digest"}})


class _WriteFaults(StoreWrapper):
    """A Store wrapper that fails chosen ``write`` calls (before or after the inner commit)."""

    def __init__(self, inner: Store, *, unavailable: int = 0, outcome_unknown: int = 0) -> None:
        super().__init__(inner)
        self._unavailable = unavailable
        self._outcome_unknown = outcome_unknown

    @contextmanager
    def write(self, scope: str) -> Iterator[Any]:
        if self._unavailable:
            self._unavailable -= 1
            raise StoreUnavailableError("injected: store busy")
        with self.inner.write(scope) as unit:
            yield unit
        if self._outcome_unknown:
            self._outcome_unknown -= 1
            raise StoreOutcomeUnknownError("injected: connection lost after COMMIT")


class _SlowWrites(StoreWrapper):
    """A Store wrapper whose units of work take ``delay`` of the manual clock to reach their body."""

    def __init__(self, inner: Store, clock: ManualClock, delay: timedelta) -> None:
        super().__init__(inner)
        self._clock = clock
        self._delay = delay

    @contextmanager
    def write(self, scope: str) -> Iterator[Any]:
        self._clock.advance(self._delay)
        with self.inner.write(scope) as unit:
            yield unit


class ServiceConformance:
    """The service suite. Subclass it and override the ``service_factory`` fixture."""

    # ------------------------------------------------------------------ fixtures

    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        """Makes services over one backend (the same store and vault on every call)."""
        raise NotImplementedError("backend test classes must override the service_factory fixture")

    @pytest.fixture
    def scope_contents(self) -> ScopeContents | None:
        """Capability: everything the backend holds for a scope outside ciphertexts."""
        return None

    @pytest.fixture
    def replace_event_body(self) -> ReplaceEventBody | None:
        """Capability: overwrite one stored event body."""
        return None

    @pytest.fixture
    def term_traces(self) -> TermTraces | None:
        """Capability: whether the store holds anything of a term for a scope (see ``StoreConformance``)."""
        return None

    @pytest.fixture
    def complete_destruction(self) -> CompleteDestruction | None:
        """Required for a vault that schedules destruction (see ``KeyVaultConformance``)."""
        return None

    @pytest.fixture
    def clock(self) -> ManualClock:
        """The injected clock (2026-01-01T00:00:00Z)."""
        return ManualClock()

    @pytest.fixture
    def harness(self, service_factory: ServiceFactory, clock: ManualClock) -> Harness:
        """A harness over a fresh backend, with a policy that accepts every candidate its capturer asks to admit.

        (``DefaultPolicy(admission="accept")``: a request by another principal is held for the host.)
        """
        return Harness(with_policy(service_factory(clock), ACCEPT), clock)

    @staticmethod
    @contextmanager
    def unchanged(harness: Harness, *bindings: HostBinding, binds: bool = False) -> Iterator[None]:
        """Assert the block leaves every binding's scope (default ``A``) and its calls' keys alone.

        Per scope: high water, state digest, doomed keys, indexed ids and index statistics. Per call
        made through ``harness.call``: the idempotency row of its key for its principal, and whether
        its confirmation is used. ``binds``: the calls may bind a key that was free (a duplicate
        admission, a ``pending_adjudication`` hold); a key bound before must stay as it was.
        """
        scopes = bindings or (A,)
        before = [_scope_state(harness, binding) for binding in scopes]
        keys: dict[tuple[str, str, str], IdempotencyRow | None] = {}
        confirmations: dict[tuple[str, str], bool] = {}
        call = harness.call

        def observed(tool: str, args: dict[str, Any], binding: HostBinding) -> dict[str, Any]:
            try:
                scope = binding.scope
            except ValueError:  # ids not in NFC: the call is refused before it reaches a scope
                return call(tool, args, binding)
            key = args.get("idempotency_key")
            with harness.service.store.read(scope) as reader:
                if isinstance(key, str):
                    keys.setdefault((scope, binding.principal, key), reader.idempotency(binding.principal, key))
                if binding.confirmation is not None:
                    used = reader.confirmation_used(binding.confirmation.id)
                    confirmations.setdefault((scope, binding.confirmation.id), used)
            return call(tool, args, binding)

        with mock.patch.object(harness, "call", side_effect=observed):
            yield
        assert [_scope_state(harness, binding) for binding in scopes] == before
        for (scope, principal, key), row in keys.items():
            with harness.service.store.read(scope) as reader:
                now = reader.idempotency(principal, key)
            assert now == row or (binds and row is None), (principal, key, row, now)
        for (scope, confirmation_id), used in confirmations.items():
            with harness.service.store.read(scope) as reader:
                assert reader.confirmation_used(confirmation_id) is used, confirmation_id

    @staticmethod
    def sealed_candidate(harness: Harness, binding: HostBinding, candidate_id: str) -> SealedEnvelope:
        """The sealed envelope of a pending candidate, read through the Store port."""
        with harness.service.store.read(binding.scope) as reader:
            row = reader.candidate(candidate_id)
        assert row is not None
        assert row.sealed is not None
        return row.sealed

    @staticmethod
    def sealed_record(harness: Harness, binding: HostBinding, record_id: str) -> SealedEnvelope:
        """The sealed body of an admitted record, read through the Store port."""
        with harness.service.store.read(binding.scope) as reader:
            row = reader.record(record_id)
        assert row is not None
        assert row.sealed is not None
        return row.sealed

    @staticmethod
    def open_record(harness: Harness, binding: HostBinding, record_id: str) -> dict[str, Any]:
        """The decrypted body of an admitted record."""
        sealed = ServiceConformance.sealed_record(harness, binding, record_id)
        body: dict[str, Any] = json.loads(harness.service.vault.open(sealed, record_context(binding.scope, record_id)))
        return body

    @staticmethod
    def verified(harness: Harness, binding: HostBinding) -> int:
        """Assert the scope's journal verifies; return its high water."""
        report = harness.admin.verify(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id)
        assert report.ok, report
        return report.high_water

    # ------------------------------------------------------------------ §3.2 capture

    def test_capture_commits_a_pending_candidate(self, harness: Harness) -> None:
        """§3.2: capture answers committed_pending at cursor 1 and seals the candidate."""
        envelope = harness.capture(A, make_key("capture"))
        assert envelope["redactionClass"] == "high"
        assert isinstance(envelope["auditId"], str)
        assert envelope["auditId"]
        value = ok(envelope)
        assert set(value) == {"status", "candidate_id", "record_digest", "cursor", "transaction_receipt_digest"}
        assert value["status"] == "committed_pending"
        assert value["cursor"] == "1"
        assert _RECORD_ID.match(value["candidate_id"]) is None
        assert is_digest(value["record_digest"])
        assert is_digest(value["transaction_receipt_digest"])
        with harness.service.store.read(A.scope) as reader:
            row = reader.candidate(value["candidate_id"])
            assert row is not None
            assert row.state == "pending"
            assert row.sealed is not None
            assert list(reader.indexed_ids()) == []
            assert reader.high_water() == 1

    def test_a_pending_candidate_is_not_indexed(self, harness: Harness) -> None:
        """§3.2: a pending candidate cannot be searched: none of its words is in the index."""
        words = distinctive_words("unindexed")
        harness.pending(A, make_key("unindexed"), words=words)
        with harness.service.store.read(A.scope) as reader:
            assert all(list(reader.postings(word)) == [] for word in words)
            assert reader.index_stats().documents == 0

    def test_a_search_finds_only_the_records_holding_its_word_in_any_script(self, harness: Harness) -> None:
        """A search finds only the records holding its word: a suffix, a non-ASCII letter or a script tells them apart.

        Two admitted records hold words that differ only in a suffix ("alphabetical"/"alphabets"),
        in a non-ASCII letter ("straße"/"strasse", "café"/"cafe") or in script ("東京タワー"/"大阪城");
        each word finds its own record alone (a store that keys terms by a prefix, or drops what is
        not ASCII, mixes them).
        """
        words = {
            "first": ("東京タワー", "alphabetical", "straße", "café"),
            "second": ("大阪城", "alphabets", "strasse", "cafe"),
        }
        records = {name: harness.accepted(A, make_key(f"script-{name}"), words=held)[1] for name, held in words.items()}
        for name, held in words.items():
            for word in held:
                found = ok(harness.call(SEARCH, {"query": word, "purpose_ref": A.purpose_ref}, A))
                hits = [packet["record"]["record_id"] for packet in found["records"]]
                assert hits == [records[name]], f"a search for {word!r} found {hits}, not the {name} record alone"

    def test_a_candidate_id_is_not_a_record_id(self, harness: Harness) -> None:
        """§3.2: a candidate id given where a record id is expected fails the closed schema."""
        candidate_id = harness.pending(A, make_key("not-a-record"))
        forget = _forget_args(candidate_id, make_key("not-a-record-f"))
        with self.unchanged(harness):
            got = harness.call(GET, {"record_id": candidate_id, "purpose_ref": A.purpose_ref}, A)
            forgot = harness.confirmed(FORGET, forget, A, target=candidate_id, operation_digest="sha256:" + "0" * 64)
        fail(got, ErrorCode.INVALID_SCHEMA, retriable=False)
        fail(forgot, ErrorCode.INVALID_SCHEMA, retriable=False)

    def test_capture_is_not_a_semantic_duplicate_check(self, harness: Harness) -> None:
        """§3.1: the same content under a new key is a new candidate, not duplicate_exact."""
        words = distinctive_words("semantic")
        first = ok(harness.capture(A, make_key("semantic-1"), words=words))
        second = ok(harness.capture(A, make_key("semantic-2"), words=words))
        assert second["status"] == "committed_pending"
        assert second["candidate_id"] != first["candidate_id"]
        assert second["cursor"] == "2"

    # ------------------------------------------------------------------ §3.5 / D4 idempotency

    def test_a_capture_replay_is_duplicate_exact_and_byte_identical(self, harness: Harness) -> None:
        """§3.5/D4: same key and content replays the original value with status duplicate_exact."""
        key = make_key("replay")
        first = ok(harness.capture(A, key))
        harness.clock.advance(timedelta(hours=3))
        with self.unchanged(harness):
            again = ok(harness.capture(A, key))
        assert again["status"] == "duplicate_exact"
        assert canonical_bytes(again) == _flagged(first, status="duplicate_exact")

    def test_a_capture_replay_with_other_content_is_digest_conflict(self, harness: Harness) -> None:
        """§3.5/D4: the same key with other content is DIGEST_CONFLICT and writes nothing."""
        key = make_key("conflict")
        harness.pending(A, key)
        with self.unchanged(harness):
            envelope = harness.capture(A, key, words=distinctive_words("something else"))
        fail(envelope, ErrorCode.DIGEST_CONFLICT, retriable=False)
        assert ok(harness.capture(A, key))["status"] == "duplicate_exact"

    @pytest.mark.parametrize(
        "change",
        [
            "evidence digest",
            "evidence attestation",
            "payload retention",
            "payload valid_time",
            "payload reconciliation",
            "citation locator",
        ],
    )
    def test_a_capture_replay_with_one_field_changed_is_digest_conflict(self, harness: Harness, change: str) -> None:
        """§3.5/D4: the key binds every argument: one changed field is DIGEST_CONFLICT and writes nothing.

        The changed arguments are valid (they commit under a fresh key), and the original ones still
        replay byte-identically as ``duplicate_exact``.
        """
        harness.use(DefaultPolicy(admission="accept", family_refs=frozenset({"family:receipts"})))
        key = make_key("one-field")
        original = capture_args(key)
        first = ok(harness.call(CAPTURE, original, A))
        changed = copy.deepcopy(original)
        payload, evidence = changed["payload"], changed["evidence"]
        if change == "evidence digest":
            evidence["evidence_digest"] = content_digest("other evidence")
        elif change == "evidence attestation":
            evidence["attestation"] = "attested by the reviewer"
        elif change == "payload retention":
            expires = format_instant(harness.clock.now() + timedelta(days=30))
            payload["retention"] = {"derivative_rule": "make-ineligible", "expires_at": expires}
        elif change == "payload valid_time":
            payload["valid_time"] = {"t": VALID_FROM_MS + 1}
        elif change == "payload reconciliation":
            payload["reconciliation"] = {"family_refs": ["family:receipts"]}
        else:
            payload["citations"][0]["locator"]["value"] = "13"
        assert changed != original
        with self.unchanged(harness):
            fail(harness.call(CAPTURE, changed, A), ErrorCode.DIGEST_CONFLICT, retriable=False)
        assert canonical_bytes(ok(harness.call(CAPTURE, original, A))) == _flagged(first, status="duplicate_exact")
        fresh = ok(harness.call(CAPTURE, {**changed, "idempotency_key": make_key("one-field-fresh")}, A))
        assert fresh["status"] == "committed_pending"

    def test_a_key_used_by_another_tool_is_digest_conflict(self, harness: Harness) -> None:
        """§3.5/D4: a key bound by one tool conflicts when another mutating tool reuses it."""
        capture_key = make_key("shared-capture")
        candidate_id = harness.pending(A, capture_key)
        admission_key = make_key("shared-admission")
        outcome = ok(harness.admit(A, candidate_id, admission_key))["outcome"]
        other = harness.pending(A, make_key("shared-other"))
        with self.unchanged(harness):
            fail(harness.admit(A, other, capture_key), ErrorCode.DIGEST_CONFLICT, retriable=False)
            fail(harness.withdraw(A, other, capture_key), ErrorCode.DIGEST_CONFLICT, retriable=False)
            fail(harness.forget(A, outcome["record_id"], capture_key), ErrorCode.DIGEST_CONFLICT, retriable=False)
            fail(harness.capture(A, admission_key), ErrorCode.DIGEST_CONFLICT, retriable=False)
            fail(harness.withdraw(A, other, admission_key), ErrorCode.DIGEST_CONFLICT, retriable=False)

    def test_an_admission_key_reused_for_another_candidate_is_digest_conflict(self, harness: Harness) -> None:
        """§3.5/D4: an admission key bound to one candidate conflicts for another target.

        The original request still replays byte-identically; the other candidate is admissible under a fresh key.
        """
        first = harness.pending(A, make_key("target-1"))
        second = harness.pending(A, make_key("target-2"))
        key = make_key("target-admission")
        admitted = ok(harness.admit(A, first, key))
        with self.unchanged(harness):
            fail(harness.admit(A, second, key), ErrorCode.DIGEST_CONFLICT, retriable=False)
        assert canonical_bytes(ok(harness.admit(A, first, key))) == _outcome_flagged(admitted)
        assert ok(harness.admit(A, second, make_key("target-fresh")))["outcome"]["status"] == "accepted"

    def test_keys_are_scoped_per_principal(self, harness: Harness) -> None:
        """§3.5/D4: another principal reuses a key independently, with other content."""
        key = make_key("per-principal")
        mine = ok(harness.capture(A, key))
        theirs = ok(harness.capture(A2, key, words=distinctive_words("theirs")))
        assert theirs["status"] == "committed_pending"
        assert theirs["candidate_id"] != mine["candidate_id"]
        assert canonical_bytes(ok(harness.capture(A, key))) == _flagged(mine, status="duplicate_exact")
        assert ok(harness.capture(A2, key, words=distinctive_words("theirs")))["status"] == "duplicate_exact"

    def test_keys_are_scoped_per_scope(self, harness: Harness) -> None:
        """D1/D4: the same principal reuses a key independently in another workspace."""
        key = make_key("per-scope")
        ok(harness.capture(A, key))
        other = ok(harness.capture(A_WS2, key, words=distinctive_words("elsewhere")))
        assert other["status"] == "committed_pending"
        assert other["cursor"] == "1"

    def test_a_replay_reuses_the_retention_resolved_at_first_capture(self, harness: Harness) -> None:
        """§3.5: a retry after expires_at passed still replays (the first resolution stands)."""
        key = make_key("retention-replay")
        expires = format_instant(harness.clock.now() + timedelta(days=1))
        first = ok(harness.capture(A, key, retention={"derivative_rule": "make-ineligible", "expires_at": expires}))
        harness.clock.advance(timedelta(days=2))
        again = harness.capture(A, key, retention={"derivative_rule": "make-ineligible", "expires_at": expires})
        assert canonical_bytes(ok(again)) == _flagged(first, status="duplicate_exact")

    @pytest.mark.parametrize("key", ["short-key", "idempotency-key:cafe\u0301-nfd"])
    def test_an_invalid_idempotency_key_is_invalid_schema(self, harness: Harness, key: str) -> None:
        """§3.5: keys are NFC and at least 16 bytes."""
        with self.unchanged(harness):
            fail(harness.capture(A, key), ErrorCode.INVALID_SCHEMA, retriable=False)

    # ------------------------------------------------------------------ §3.3 / D4 / D9 admission

    def test_an_accepting_policy_admits_the_candidate(self, harness: Harness) -> None:
        """§3.3/D9: accept → accepted with the record id derived from the record digest."""
        words = distinctive_words("admitted")
        captured = ok(harness.capture(A, make_key("admit"), words=words))
        value = ok(harness.admit(A, captured["candidate_id"], make_key("admit-request")))
        outcome = value["outcome"]
        assert value["replayed"] is False
        assert outcome["status"] == "accepted"
        assert outcome["candidate_id"] == captured["candidate_id"]
        assert outcome["record_id"] == record_id_from_digest(captured["record_digest"])
        assert outcome["cursor"] == "2"
        assert is_digest(outcome["decision_receipt_digest"])
        assert is_digest(outcome["transaction_receipt_digest"])
        with harness.service.store.read(A.scope) as reader:
            record = reader.record(outcome["record_id"])
            candidate = reader.candidate(captured["candidate_id"])
            assert record is not None
            assert record.state == "accepted_current"
            assert candidate is not None
            assert candidate.state == "admitted"
            assert candidate.sealed is None
            assert all([p.record_id for p in reader.postings(word)] == [outcome["record_id"]] for word in words)
        assert self.verified(harness, A) == 2

    def test_a_rejecting_policy_rejects_the_candidate(self, harness: Harness) -> None:
        """§3.3/D9: reject → rejected (a successful outcome, not an error), nothing indexed."""
        harness.use(REJECT)
        words = distinctive_words("rejected")
        candidate_id = harness.pending(A, make_key("reject"), words=words)
        value = ok(harness.admit(A, candidate_id, make_key("reject-request")))
        assert value["outcome"]["status"] == "rejected"
        assert value["outcome"].get("record_id") is None
        assert value["replayed"] is False
        with harness.service.store.read(A.scope) as reader:
            row = reader.candidate(candidate_id)
            assert row is not None
            assert row.state == "rejected"
            assert list(reader.records()) == []
            assert all(list(reader.postings(word)) == [] for word in words)
        assert self.verified(harness, A) == 2

    def test_pending_adjudication_holds_the_key_and_a_retry_asks_again(self, harness: Harness) -> None:
        """D4/§3.5: pending_adjudication writes no event but binds its key to its intent, provisionally.

        The same key then asks the policy again; for another candidate it is DIGEST_CONFLICT.
        """
        harness.use(ADJUDICATE)
        candidate_id = harness.pending(A, make_key("adjudicate"))
        other_id = harness.pending(A, make_key("adjudicate-other"))
        key = make_key("adjudicate-request")
        for _ in range(2):
            with self.unchanged(harness, binds=True):
                value = ok(harness.admit(A, candidate_id, key))
            assert value["outcome"]["status"] == "pending_adjudication"
            assert value["replayed"] is False
            with harness.service.store.read(A.scope) as reader:
                held = reader.idempotency(A.principal, key)
            assert held is not None
            assert held.provisional
        with self.unchanged(harness):
            fail(harness.admit(A, other_id, key), ErrorCode.DIGEST_CONFLICT, retriable=False)
        harness.use(ACCEPT)
        value = ok(harness.admit(A, candidate_id, key))
        assert value["outcome"]["status"] == "accepted"
        assert value["replayed"] is False
        again = ok(harness.admit(A, candidate_id, key))
        assert again["replayed"] is True
        assert again["outcome"] == value["outcome"]
        fail(harness.admit(A, other_id, key), ErrorCode.DIGEST_CONFLICT, retriable=False)

    def test_an_admission_replay_returns_the_original_outcome(self, harness: Harness) -> None:
        """D4: the same admission key and candidate replays byte-identically with replayed true."""
        candidate_id = harness.pending(A, make_key("admission-replay"))
        key = make_key("admission-replay-request")
        first = ok(harness.admit(A, candidate_id, key))
        harness.clock.advance(timedelta(hours=1))
        with self.unchanged(harness):
            again = ok(harness.admit(A, candidate_id, key))
        assert again["replayed"] is True
        assert canonical_bytes(again) == _outcome_flagged(first)

    def test_an_admitted_candidate_under_another_key_is_duplicate_exact(self, harness: Harness) -> None:
        """D4: admission of an accepted candidate under a new key → duplicate_exact, its record id."""
        candidate_id, record_id = harness.accepted(A, make_key("dup-admission"))
        with self.unchanged(harness, binds=True):
            value = ok(harness.admit(A, candidate_id, make_key("dup-admission-again")))
        assert value["outcome"]["status"] == "duplicate_exact"
        assert value["outcome"]["record_id"] == record_id
        assert value["outcome"]["candidate_id"] == candidate_id
        assert value["replayed"] is False

    def test_an_admitted_candidate_asked_by_another_principal_is_duplicate_exact(self, harness: Harness) -> None:
        """D4: another principal of the scope gets the same duplicate_exact answer."""
        candidate_id, record_id = harness.accepted(A, make_key("dup-principal"))
        with self.unchanged(harness, binds=True):
            value = ok(harness.admit(A2, candidate_id, make_key("dup-principal-2")))
        assert value["outcome"]["status"] == "duplicate_exact"
        assert value["outcome"]["record_id"] == record_id

    @pytest.mark.parametrize("ending", ["rejected", "withdrawn"])
    def test_admission_of_an_ended_candidate_is_already_terminal(self, harness: Harness, ending: str) -> None:
        """D4/D5: request_admission on a rejected or withdrawn candidate → ALREADY_TERMINAL."""
        candidate_id = harness.pending(A, make_key("ended"))
        if ending == "rejected":
            harness.use(REJECT)
            assert ok(harness.admit(A, candidate_id, make_key("ended-reject")))["outcome"]["status"] == "rejected"
            harness.use(ACCEPT)
        else:
            ok(harness.withdraw(A, candidate_id, make_key("ended-withdraw")))
        with self.unchanged(harness):
            envelope = harness.admit(A, candidate_id, make_key("ended-again"))
        fail(envelope, ErrorCode.ALREADY_TERMINAL, retriable=False)

    def test_admission_of_an_unknown_candidate_is_not_found(self, harness: Harness) -> None:
        """D1: an unknown candidate id is NOT_FOUND and writes nothing."""
        harness.pending(A, make_key("known"))
        with self.unchanged(harness):
            fail(harness.admit(A, UNKNOWN_CANDIDATE, make_key("unknown")), ErrorCode.NOT_FOUND, retriable=False)

    @pytest.mark.parametrize("extra", [{"decision": "accept"}, {"confirmed": True}, {"status": "accepted"}])
    def test_the_agent_cannot_supply_a_decision(self, harness: Harness, extra: dict[str, Any]) -> None:
        """§3.3/D8: a decision or ``confirmed: true`` in the arguments is an extra property."""
        candidate_id = harness.pending(A, make_key("self-decide"))
        with self.unchanged(harness):
            envelope = harness.call(ADMISSION, {**_admission_args(candidate_id, make_key("self-d")), **extra}, A)
        fail(envelope, ErrorCode.INVALID_SCHEMA, retriable=False)

    def test_a_new_policy_version_makes_admission_policy_stale(self, harness: Harness) -> None:
        """D9: a candidate captured under policy version 1 is POLICY_STALE under version 2."""
        candidate_id = harness.pending(A, make_key("stale"))
        harness.use(DefaultPolicy(admission="accept", policy_version="2"))
        with self.unchanged(harness):
            envelope = harness.admit(A, candidate_id, make_key("stale-request"))
        fail(envelope, ErrorCode.POLICY_STALE, retriable=True)

    def test_the_trust_class_is_assigned_by_the_policy(self, harness: Harness) -> None:
        """§3.4/D9: the record's trust class is the policy's; the caller cannot send one."""
        harness.use(DefaultPolicy(admission="accept", trust="signed"))
        _, record_id = harness.accepted(A, make_key("trust"))
        assert self.open_record(harness, A, record_id)["trust"]["class"] == "signed"
        arguments = capture_args(make_key("trust-forged"))
        arguments["payload"]["trust"] = {"class": "signed"}
        with self.unchanged(harness):
            fail(harness.call(CAPTURE, arguments, A), ErrorCode.INVALID_SCHEMA, retriable=False)

    def test_every_component_must_cite(self, harness: Harness) -> None:
        """§3.4: a component without citations, or citing an unknown citation, is refused."""
        uncited = capture_args(make_key("uncited"))
        uncited["payload"]["components"][1]["citation_ids"] = []
        dangling = capture_args(make_key("dangling"))
        dangling["payload"]["components"][1]["citation_ids"] = ["cite-unknown"]
        with self.unchanged(harness):
            fail(harness.call(CAPTURE, uncited, A), ErrorCode.INVALID_SCHEMA, retriable=False)
            fail(harness.call(CAPTURE, dangling, A), ErrorCode.INVALID_SCHEMA, retriable=False)

    def test_a_raising_policy_is_policy_unavailable(self, harness: Harness) -> None:
        """D9: a policy whose decide raises → POLICY_UNAVAILABLE (retriable), nothing written."""

        def broken(_request: AdmissionRequest, _now: Any) -> AdmissionDecision:
            raise RuntimeError("policy engine down")

        candidate_id = harness.pending(A, make_key("raising"))
        harness.use(PolicyOverride(ACCEPT, decide=broken))
        with self.unchanged(harness):
            envelope = harness.admit(A, candidate_id, make_key("raising-request"))
        fail(envelope, ErrorCode.POLICY_UNAVAILABLE, retriable=True)

    @pytest.mark.parametrize(
        "answer",
        [
            "decide: None",
            "decide: no time zone",
            "decide: unknown decision",
            "decide: unhashable decision",
            "capture_constraints: None",
            "trust_class: outside the three",
            "trust_class: unhashable",
            "requires_confirmation: None",
        ],
    )
    def test_a_policy_answering_a_malformed_value_is_policy_unavailable(self, harness: Harness, answer: str) -> None:
        """D9/D13: a policy's malformed answer is POLICY_UNAVAILABLE (retriable), never a stored value."""

        def decide(request: AdmissionRequest, now: Any) -> AdmissionDecision:
            if answer == "decide: None":
                return None  # type: ignore[return-value]
            decided = ACCEPT.decide(request, now)
            if answer == "decide: no time zone":
                return attrs.evolve(decided, issued_at=now.replace(tzinfo=None))
            if answer == "decide: unhashable decision":
                return attrs.evolve(decided, decision=["accept"])  # type: ignore[arg-type]
            return attrs.evolve(decided, decision="maybe")  # type: ignore[arg-type]

        overrides: dict[str, Any] = {
            "decide": decide,
            "capture_constraints": lambda _binding: None,
            "trust_class": lambda _binding: ["asserted"] if answer.endswith("unhashable") else "root",
            "requires_confirmation": lambda _tool, _binding: None,
        }
        method = answer.split(":", maxsplit=1)[0]
        candidate_id = harness.pending(A, make_key("malformed-pending"))
        harness.use(PolicyOverride(ACCEPT, **{method: overrides[method]}))
        with self.unchanged(harness):
            if method == "decide":
                envelope = harness.admit(A, candidate_id, make_key("malformed-request"))
            else:
                envelope = harness.capture(A, make_key("malformed-capture"))
        fail(envelope, ErrorCode.POLICY_UNAVAILABLE, retriable=True)

    @pytest.mark.parametrize(
        ("mutation", "code"),
        [
            ("other_digest", ErrorCode.INVALID_DIGEST),
            ("too_old", ErrorCode.POLICY_STALE),
            ("future", ErrorCode.POLICY_STALE),
            ("other_version", ErrorCode.POLICY_STALE),
        ],
    )
    def test_an_invalid_decision_envelope_is_refused(self, harness: Harness, mutation: str, code: ErrorCode) -> None:
        """D9: a decision for another digest, older than 300 s, from the future, or another version."""

        def decide(request: AdmissionRequest, now: Any) -> AdmissionDecision:
            decision = ACCEPT.decide(request, now)
            changes: dict[str, Any] = {
                "other_digest": {"record_digest": "sha256:" + "1" * 64},
                "too_old": {"issued_at": now - timedelta(seconds=301)},
                "future": {"issued_at": now + timedelta(seconds=5)},
                "other_version": {"policy_version": "9"},
            }[mutation]
            return attrs.evolve(decision, **changes)

        candidate_id = harness.pending(A, make_key("decision-" + mutation))
        harness.use(PolicyOverride(ACCEPT, decide=decide))
        with self.unchanged(harness):
            envelope = harness.admit(A, candidate_id, make_key("decision-request"))
        fail(envelope, code, retriable=RETRIABLE[code])

    def test_a_decision_exactly_300_seconds_old_is_accepted(self, harness: Harness) -> None:
        """D9: the decision age bound is inclusive."""

        def decide(request: AdmissionRequest, now: Any) -> AdmissionDecision:
            return attrs.evolve(ACCEPT.decide(request, now), issued_at=now - timedelta(seconds=300))

        candidate_id = harness.pending(A, make_key("decision-300"))
        harness.use(PolicyOverride(ACCEPT, decide=decide))
        assert ok(harness.admit(A, candidate_id, make_key("decision-300-req")))["outcome"]["status"] == "accepted"

    def test_the_host_adjudicates_a_pending_candidate(self, harness: Harness) -> None:
        """D9: MemoryAdmin.adjudicate accepts or rejects a candidate left pending_adjudication."""
        harness.use(ADJUDICATE)
        first = harness.pending(A, make_key("host-1"))
        second = harness.pending(A, make_key("host-2"))
        assert ok(harness.admit(A, first, make_key("host-1-req")))["outcome"]["status"] == "pending_adjudication"
        admin = harness.admin
        accepted = admin.adjudicate(
            tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=first, decision="accept"
        )
        rejected = admin.adjudicate(
            tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=second, decision="reject"
        )
        assert accepted.outcome.status == "accepted"
        assert accepted.outcome.record_id is not None
        assert rejected.outcome.status == "rejected"
        again = admin.adjudicate(
            tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=first, decision="accept"
        )
        assert again.outcome.status == "duplicate_exact"
        assert again.outcome.record_id == accepted.outcome.record_id
        agent = ok(harness.admit(A, first, make_key("host-1-req")))["outcome"]
        assert agent["status"] == "duplicate_exact"
        assert agent["record_id"] == accepted.outcome.record_id
        with pytest.raises(EngramError) as terminal:
            admin.adjudicate(tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=second, decision="accept")
        assert terminal.value.code is ErrorCode.ALREADY_TERMINAL
        with pytest.raises(EngramError) as missing:
            admin.adjudicate(tenant_id="tenant-b", workspace_id="workspace-1", candidate_id=first, decision="accept")
        assert missing.value.code is ErrorCode.NOT_FOUND
        assert self.verified(harness, A) == 4

    def test_the_host_lists_the_pending_candidates_opened_for_review(self, harness: Harness) -> None:
        """``MemoryAdmin.pending_candidates``: each pending candidate of the scope, opened, oldest first.

        The payload (defaults completed) and the evidence as captured; decided, withdrawn and other
        scopes' candidates are left out; listing writes nothing.
        """
        harness.use(ADJUDICATE)
        first_args = capture_args(make_key("review-1"), attestation="reviewed by alice")
        first = ok(harness.call(CAPTURE, first_args, A))["candidate_id"]
        second = harness.pending(A, make_key("review-2"))
        decided = harness.pending(A, make_key("review-3"))
        withdrawn = harness.pending(A, make_key("review-4"))
        harness.pending(B, make_key("review-other-scope"))
        admin = harness.admin
        admin.adjudicate(tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=decided, decision="reject")
        ok(harness.withdraw(A, withdrawn, make_key("review-4-withdraw")))
        height = self.verified(harness, A)
        listed = admin.pending_candidates(tenant_id="tenant-a", workspace_id="workspace-1")
        assert [item.candidate_id for item in listed] == [first, second]
        assert listed[0].created_cursor < listed[1].created_cursor
        assert listed[0].evidence == first_args["evidence"]
        completed = {**first_args["payload"], "retention": {"derivative_rule": "make-ineligible"}}
        completed |= {"reconciliation": {"family_refs": []}, "scope_ref": A.scope}
        assert listed[0].payload == completed
        assert listed[0].policy_id == ADJUDICATE.policy_id
        assert listed[0].policy_version == ADJUDICATE.policy_version
        assert is_digest(listed[0].record_digest)
        assert listed[0].trust["class"] == "asserted"
        assert parse_instant(listed[0].recorded_at) == harness.clock.now()
        assert [item.forgotten for item in listed] == [False, False]
        assert self.verified(harness, A) == height
        assert admin.pending_candidates(tenant_id="tenant-a", workspace_id="workspace-9") == []
        admin.adjudicate(tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=first, decision="accept")
        assert [
            item.candidate_id for item in admin.pending_candidates(tenant_id="tenant-a", workspace_id="workspace-1")
        ] == [second]

    # ------------------------------------------------------------------ D8 confirmations

    def test_withdraw_without_confirmation_is_a_protocol_error(self, harness: Harness) -> None:
        """D8: withdraw without any confirmation → ProtocolError -32603, nothing written."""
        candidate_id = harness.pending(A, make_key("unconfirmed"))
        with self.unchanged(harness):
            code = _protocol_code(lambda: harness.call(WITHDRAW, _withdraw_args(candidate_id, make_key("w")), A))
        assert code == JsonRpcCode.INTERNAL_ERROR

    def test_forget_without_confirmation_is_a_protocol_error(self, harness: Harness) -> None:
        """D8: forget without any confirmation → ProtocolError -32603, nothing written."""
        _, record_id = harness.accepted(A, make_key("unconfirmed-forget"))
        with self.unchanged(harness):
            code = _protocol_code(lambda: harness.call(FORGET, _forget_args(record_id, make_key("f")), A))
        assert code == JsonRpcCode.INTERNAL_ERROR

    @pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
    @pytest.mark.parametrize(
        "variant",
        [
            "other_tool",
            "other_target",
            "other_digest",
            "approval_too_slow",
            "call_too_late",
            "approved_in_future",
            "approved_before_requested",
            "other_principal",
        ],
    )
    def test_an_invalid_confirmation_is_gate_failed(self, harness: Harness, tool: str, variant: str) -> None:
        """D8: a confirmation for another tool, target or digest, or out of time → gate_failed."""
        if tool == WITHDRAW:
            target = harness.pending(A, make_key("gate-target"))
            other_target = harness.pending(A, make_key("gate-other"))
            args = _withdraw_args(target, make_key("gate-call"))
            other_args = _withdraw_args(target, make_key("gate-call"), reason_ref="reason:other")
        else:
            _, target = harness.accepted(A, make_key("gate-target"))
            _, other_target = harness.accepted(A, make_key("gate-other"))
            args = _forget_args(target, make_key("gate-call"))
            other_args = _forget_args(target, make_key("gate-call"), reason_ref="reason:other")
        now = harness.clock.now()
        overrides_by_variant: dict[str, dict[str, Any]] = {
            "other_tool": {"confirmed_tool": FORGET if tool == WITHDRAW else WITHDRAW},
            "other_target": {"target": other_target},
            "other_digest": {"operation_digest": harness.service.operation_digest(tool, other_args, A)},
            "approval_too_slow": {"requested_at": now - timedelta(seconds=301), "approved_at": now},
            "call_too_late": {"requested_at": now - timedelta(seconds=40), "approved_at": now - timedelta(seconds=31)},
            "approved_in_future": {"requested_at": now, "approved_at": now + timedelta(seconds=5)},
            "approved_before_requested": {
                "requested_at": now - timedelta(seconds=5),
                "approved_at": now - timedelta(seconds=10),
            },
            "other_principal": {"operation_digest": harness.service.operation_digest(tool, args, A2)},
        }
        overrides = overrides_by_variant[variant]
        with self.unchanged(harness):
            envelope = harness.confirmed(tool, args, A, **overrides)
        fail(envelope, ErrorCode.GATE_FAILED, retriable=False)
        with harness.service.store.read(A.scope) as reader:
            assert reader.idempotency(A.principal, args["idempotency_key"]) is None

    def test_confirmation_time_bounds_are_inclusive(self, harness: Harness) -> None:
        """D8: approval 300 s after the request, and the call 30 s after approval, still pass."""
        candidate_id = harness.pending(A, make_key("bounds"))
        now = harness.clock.now()
        envelope = harness.confirmed(
            WITHDRAW,
            _withdraw_args(candidate_id, make_key("bounds-call")),
            A,
            requested_at=now - timedelta(seconds=330),
            approved_at=now - timedelta(seconds=30),
        )
        assert ok(envelope)["receipt"]["to_state"] == "withdrawn"

    @pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
    def test_a_confirmation_must_still_be_fresh_when_the_mutation_commits(self, harness: Harness, tool: str) -> None:
        """Founding document §0: "executed within 30 s" of approval, so the window is checked again in the unit.

        A call that starts 1 s after the approval but reaches its unit of work 30 s later is
        ``gate_failed`` with nothing written and the confirmation left unused; 29 s later it commits.
        """
        if tool == WITHDRAW:
            target = harness.pending(A, make_key("late-target"))
            args = _withdraw_args(target, make_key("late-call"))
        else:
            _, target = harness.accepted(A, make_key("late-target"))
            args = _forget_args(target, make_key("late-call"))
        service = harness.service
        for delay, answer in ((timedelta(seconds=30), "refused"), (timedelta(seconds=29), "committed")):
            harness.service = MemoryService(
                store=_SlowWrites(service.store, harness.clock, delay),
                vault=service.vault,
                policy=service.policy,
                clock=harness.clock,
            )
            now = harness.clock.now()
            approval = {"requested_at": now - timedelta(seconds=10), "approved_at": now - timedelta(seconds=1)}
            if answer == "refused":
                with self.unchanged(harness):
                    envelope = harness.confirmed(tool, args, A, confirmation_id="late-approval", **approval)
                fail(envelope, ErrorCode.GATE_FAILED, retriable=False)
                with service.store.read(A.scope) as reader:
                    assert not reader.confirmation_used("late-approval")
            else:
                value = ok(harness.confirmed(tool, args, A, confirmation_id="late-approval", **approval))
                assert value["receipt"]["to_state"] == ("withdrawn" if tool == WITHDRAW else "tombstoned")
        harness.service = service

    def test_a_confirmation_is_single_use(self, harness: Harness) -> None:
        """D8: a confirmation id used by one mutation is gate_failed on any later one."""
        first = harness.pending(A, make_key("once-1"))
        second = harness.pending(A, make_key("once-2"))
        _, record_id = harness.accepted(A, make_key("once-3"))
        ok(harness.confirmed(WITHDRAW, _withdraw_args(first, make_key("once-w1")), A, confirmation_id="approval-1"))
        with self.unchanged(harness):
            reused = harness.confirmed(
                WITHDRAW, _withdraw_args(second, make_key("once-w2")), A, confirmation_id="approval-1"
            )
            reused_forget = harness.confirmed(
                FORGET, _forget_args(record_id, make_key("once-f")), A, confirmation_id="approval-1"
            )
        fail(reused, ErrorCode.GATE_FAILED, retriable=False)
        fail(reused_forget, ErrorCode.GATE_FAILED, retriable=False)

    def test_capture_needs_a_confirmation_when_the_policy_says_so(self, harness: Harness) -> None:
        """D8: with confirm_capture, capture needs a valid confirmation bound to its key."""
        harness.use(DefaultPolicy(admission="accept", confirm_capture=True))
        key = make_key("confirm-capture")
        arguments = capture_args(key)
        with self.unchanged(harness):
            code = _protocol_code(lambda: harness.call(CAPTURE, arguments, A))
            assert code == JsonRpcCode.INTERNAL_ERROR
            other_digest = harness.service.operation_digest(CAPTURE, capture_args(key, words=("other",)), A)
            stale = harness.confirmed(CAPTURE, arguments, A, operation_digest=other_digest)
            fail(stale, ErrorCode.GATE_FAILED, retriable=False)
        assert ok(harness.confirmed(CAPTURE, arguments, A))["status"] == "committed_pending"

    def test_admission_needs_a_confirmation_when_the_policy_says_so(self, harness: Harness) -> None:
        """D8: with confirm_admission, request_admission needs a valid confirmation."""
        candidate_id = harness.pending(A, make_key("confirm-admission"))
        harness.use(DefaultPolicy(admission="accept", confirm_admission=True))
        arguments = _admission_args(candidate_id, make_key("confirm-admission-req"))
        with self.unchanged(harness):
            assert _protocol_code(lambda: harness.call(ADMISSION, arguments, A)) == JsonRpcCode.INTERNAL_ERROR
            fail(
                harness.confirmed(ADMISSION, arguments, A, target=UNKNOWN_CANDIDATE),
                ErrorCode.GATE_FAILED,
                retriable=False,
            )
        assert ok(harness.confirmed(ADMISSION, arguments, A))["outcome"]["status"] == "accepted"

    def test_the_operation_digest_binds_tool_scope_principal_and_arguments(self, harness: Harness) -> None:
        """D8: the digest a human approves changes with any of tool, scope, principal, arguments."""
        candidate_id = harness.pending(A, make_key("digest"))
        args = _withdraw_args(candidate_id, make_key("digest-w"))
        digests = {
            harness.service.operation_digest(WITHDRAW, args, A),
            harness.service.operation_digest(WITHDRAW, args, A2),
            harness.service.operation_digest(WITHDRAW, args, A_WS2),
            harness.service.operation_digest(WITHDRAW, {**args, "reason_ref": "reason:x"}, A),
            harness.service.operation_digest(ADMISSION, _admission_args(candidate_id, make_key("digest-w")), A),
        }
        assert len(digests) == 5
        assert all(is_digest(d) for d in digests)
        assert harness.service.operation_digest(WITHDRAW, args, A) == harness.service.operation_digest(
            WITHDRAW, args, A
        )
        with pytest.raises(ProtocolError) as info:
            harness.service.operation_digest(SEARCH, {"query": "x", "purpose_ref": A.purpose_ref}, A)
        assert info.value.code == JsonRpcCode.INVALID_PARAMS

    # ------------------------------------------------------------------ D5 / D6 withdraw

    def test_withdraw_ends_the_candidate_and_destroys_its_key(
        self, harness: Harness, complete_destruction: CompleteDestruction | None
    ) -> None:
        """D5/D6: withdraw → withdrawn, the envelope no longer opens, key destruction reported."""
        candidate_id = harness.pending(A, make_key("withdraw"))
        sealed = self.sealed_candidate(harness, A, candidate_id)
        value = ok(harness.withdraw(A, candidate_id, make_key("withdraw-call")))
        receipt = value["receipt"]
        assert value["replayed"] is False
        assert receipt["operation"] == "withdraw"
        assert receipt["from_state"] == "pending"
        assert receipt["to_state"] == "withdrawn"
        assert receipt["cursor"] == "2"
        assert all(is_digest(receipt[f]) for f in ("event_digest", "authorization_receipt_digest"))
        assert is_digest(receipt["transaction_receipt_digest"])
        sync = harness.service.vault.destroys_synchronously
        assert value["key_destruction"] == ("complete" if sync else "pending")
        finish_destruction(harness.service.vault, complete_destruction)
        with pytest.raises(KeyUnavailableError):
            harness.service.vault.open(sealed, candidate_context(A.scope, candidate_id))
        with harness.service.store.read(A.scope) as reader:
            row = reader.candidate(candidate_id)
            assert row is not None
            assert row.state == "withdrawn"
            assert row.sealed is None
            assert reader.doomed_keys() == []
        assert self.verified(harness, A) == 2

    def test_a_withdraw_replay_returns_the_original_receipt(self, harness: Harness) -> None:
        """D4: the same withdraw key and arguments replay byte-identically; other reason conflicts."""
        candidate_id = harness.pending(A, make_key("withdraw-replay"))
        key = make_key("withdraw-replay-call")
        first = ok(harness.withdraw(A, candidate_id, key))
        harness.clock.advance(timedelta(minutes=10))
        with self.unchanged(harness):
            again = ok(harness.withdraw(A, candidate_id, key))
            other = harness.withdraw(A, candidate_id, key, reason_ref="reason:changed-my-mind")
        assert canonical_bytes(again) == _outcome_flagged(first)
        fail(other, ErrorCode.DIGEST_CONFLICT, retriable=False)

    def test_withdraw_of_an_ended_candidate_is_refused(self, harness: Harness) -> None:
        """D5: withdrawn or rejected → ALREADY_TERMINAL; admitted → ILLEGAL_TRANSITION."""
        withdrawn = harness.pending(A, make_key("w-ended"))
        ok(harness.withdraw(A, withdrawn, make_key("w-ended-1")))
        admitted, _ = harness.accepted(A, make_key("w-admitted"))
        harness.use(REJECT)
        rejected = harness.pending(A, make_key("w-rejected"))
        ok(harness.admit(A, rejected, make_key("w-rejected-req")))
        with self.unchanged(harness):
            fail(harness.withdraw(A, withdrawn, make_key("w-ended-2")), ErrorCode.ALREADY_TERMINAL, retriable=False)
            fail(harness.withdraw(A, rejected, make_key("w-rej-2")), ErrorCode.ALREADY_TERMINAL, retriable=False)
            fail(harness.withdraw(A, admitted, make_key("w-adm-2")), ErrorCode.ILLEGAL_TRANSITION, retriable=False)
            fail(harness.withdraw(A, UNKNOWN_CANDIDATE, make_key("w-unk")), ErrorCode.NOT_FOUND, retriable=False)

    def test_admission_destroys_the_candidate_key(
        self, harness: Harness, complete_destruction: CompleteDestruction | None
    ) -> None:
        """D6: accept and reject both destroy the candidate's data key."""
        accepted = harness.pending(A, make_key("key-accept"))
        rejected = harness.pending(A, make_key("key-reject"))
        sealed = {cid: self.sealed_candidate(harness, A, cid) for cid in (accepted, rejected)}
        ok(harness.admit(A, accepted, make_key("key-accept-req")))
        harness.use(REJECT)
        ok(harness.admit(A, rejected, make_key("key-reject-req")))
        finish_destruction(harness.service.vault, complete_destruction)
        for candidate_id, envelope in sealed.items():
            with pytest.raises(KeyUnavailableError):
                harness.service.vault.open(envelope, candidate_context(A.scope, candidate_id))

    # ------------------------------------------------------------------ D5 / D6 forget

    def test_forget_tombstones_erases_the_body_and_purges_the_index(
        self, harness: Harness, complete_destruction: CompleteDestruction | None
    ) -> None:
        """D5/D6: forget → tombstoned, body key destroyed, postings of its words empty."""
        words = distinctive_words("forgotten")
        _, record_id = harness.accepted(A, make_key("forget"), words=words)
        sealed = self.sealed_record(harness, A, record_id)
        value = ok(harness.forget(A, record_id, make_key("forget-call")))
        receipt = value["receipt"]
        assert value["replayed"] is False
        assert value["projection_invalidation"] == "complete"
        assert is_digest(value["coverage_receipt_digest"])
        assert receipt["operation"] == "tombstone"
        assert receipt["from_state"] == "accepted_current"
        assert receipt["to_state"] == "tombstoned"
        assert receipt["cursor"] == "3"
        with harness.service.store.read(A.scope) as reader:
            row = reader.record(record_id)
            assert row is not None
            assert row.state == "tombstoned"
            assert row.sealed is None
            assert all(list(reader.postings(word)) == [] for word in words)
            assert list(reader.indexed_ids()) == []
            assert reader.index_stats().documents == 0
            assert reader.is_tombstoned_payload(row.payload_digest)
        finish_destruction(harness.service.vault, complete_destruction)
        with pytest.raises(KeyUnavailableError):
            harness.service.vault.open(sealed, record_context(A.scope, record_id))
        assert self.verified(harness, A) == 3

    def test_forget_keeps_other_records_indexed(self, harness: Harness) -> None:
        """D6: the purge removes only the forgotten record's postings."""
        _, gone = harness.accepted(A, make_key("forget-one"), words=("zqsharedword", "zqgoneword"))
        _, kept = harness.accepted(A, make_key("forget-two"), words=("zqsharedword", "zqkeptword"))
        ok(harness.forget(A, gone, make_key("forget-one-call")))
        with harness.service.store.read(A.scope) as reader:
            assert [p.record_id for p in reader.postings("zqsharedword")] == [kept]
            assert list(reader.postings("zqgoneword")) == []
            assert list(reader.indexed_ids()) == [kept]

    def test_forget_leaves_no_trace_of_the_words_only_its_record_held(
        self, harness: Harness, term_traces: TermTraces | None
    ) -> None:
        """D6: after forget nothing of the words only the forgotten record held stays in the store.

        Capability ``term_traces``: not the word, nor a digest of it (keyed or not), nor an empty
        posting list; the words another record still holds stay.
        """
        if term_traces is None:
            pytest.skip("the backend does not expose what it holds of a term")
        _, gone = harness.accepted(A, make_key("trace-gone"), words=("zqsharedtrace", "zqgonetrace", "zqgonetwice"))
        harness.accepted(A, make_key("trace-kept"), words=("zqsharedtrace", "zqkepttrace"))
        store = harness.service.store
        assert term_traces(store, A.scope, "zqgonetrace"), "term_traces finds nothing of an indexed word"
        ok(harness.forget(A, gone, make_key("trace-gone-forget")))
        left = [word for word in ("zqgonetrace", "zqgonetwice") if term_traces(store, A.scope, word)]
        assert not left, f"words only the forgotten record held left traces in the store: {left}"
        kept = [word for word in ("zqsharedtrace", "zqkepttrace") if term_traces(store, A.scope, word)]
        assert kept == ["zqsharedtrace", "zqkepttrace"], f"only {kept} of the kept record's words are traced"

    def test_forget_twice_is_already_terminal_and_a_replay_is_identical(self, harness: Harness) -> None:
        """D4/D5: a new key on a tombstone → ALREADY_TERMINAL; the same key replays."""
        _, record_id = harness.accepted(A, make_key("forget-twice"))
        key = make_key("forget-twice-call")
        first = ok(harness.forget(A, record_id, key))
        with self.unchanged(harness):
            fail(harness.forget(A, record_id, make_key("forget-twice-2")), ErrorCode.ALREADY_TERMINAL, retriable=False)
            again = ok(harness.forget(A, record_id, key))
        assert canonical_bytes(again) == _outcome_flagged(first)

    def test_forget_of_an_unknown_or_unadmitted_record_is_not_found(self, harness: Harness) -> None:
        """D1/D5: an unknown record and a pending candidate's would-be record id → NOT_FOUND."""
        pending = ok(harness.capture(A, make_key("would-be")))
        would_be = record_id_from_digest(pending["record_digest"])
        with self.unchanged(harness):
            fail(harness.forget(A, would_be, make_key("would-be-f")), ErrorCode.NOT_FOUND, retriable=False)
            fail(harness.forget(A, UNKNOWN_RECORD, make_key("unknown-f")), ErrorCode.NOT_FOUND, retriable=False)

    def test_a_tombstone_is_final(self, harness: Harness) -> None:
        """D5: after forget, adjudicating or requesting the original candidate resurrects nothing."""
        candidate_id, record_id = harness.accepted(A, make_key("final"))
        ok(harness.forget(A, record_id, make_key("final-forget")))
        again = ok(harness.admit(A, candidate_id, make_key("final-again")))["outcome"]
        assert again["status"] == "duplicate_exact"
        harness.admin.adjudicate(
            tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=candidate_id, decision="accept"
        )
        with harness.service.store.read(A.scope) as reader:
            row = reader.record(record_id)
            assert row is not None
            assert row.state == "tombstoned"
            assert list(reader.indexed_ids()) == []

    # ------------------------------------------------------------------ D14 write receipts, recomputed by hand

    def test_capture_receipts_are_recomputed_by_hand(self, harness: Harness) -> None:
        """§3.2/D14: capture's candidate id, record digest, event, authorization and transaction receipt, by hand."""
        arguments = capture_args(make_key("receipt-capture"))
        value = ok(harness.call(CAPTURE, arguments, A))
        scope = _scope_ref(A)
        identity = {"scope_ref": scope, "principal": A.principal, "idempotency_key": arguments["idempotency_key"]}
        candidate_id = "candidate_" + _by_hand(_CAPTURE_IDENTITY_DOMAIN, identity).removeprefix("sha256:")
        authorization = _authorization(CAPTURE, A, candidate_id, _T0)
        completed = {
            **arguments["payload"],
            "scope_ref": scope,
            "retention": {"derivative_rule": "make-ineligible"},
            "reconciliation": {"family_refs": []},
        }
        payload_digest = _by_hand(_PAYLOAD_DOMAIN, completed)
        trust = {
            "class": "asserted",
            "evidence_digest": arguments["evidence"]["evidence_digest"],
            "verifier_id": _POLICY_ID,
            "verifier_version": _POLICY_VERSION,
            "issued_at": _T0,
            "revocation_epoch": "0",
        }
        trust["receipt_digest"] = _by_hand(_ASSERTED_TRUST_DOMAIN, {**trust, "payload_digest": payload_digest})
        record = {
            **completed,
            "payload_digest": payload_digest,
            "recorded_at": _T0,
            "recorded_cursor": "1",
            "authorization_receipt_digest": authorization,
            "trust": trust,
        }
        record_digest = _by_hand(_RECORD_DOMAIN, record)
        sealed = self.sealed_candidate(harness, A, candidate_id)
        envelope = json.loads(harness.service.vault.open(sealed, candidate_context(A.scope, candidate_id)))
        assert envelope == {
            "schema_version": 2,
            "payload": completed,
            "evidence": arguments["evidence"],
            "captured_by": {"principal": A.principal, "agent_id": A.agent_id, "session": A.session},
            "authorization_receipt_digest": authorization,
            "trust": trust,
            "recorded_at": _T0,
            "recorded_cursor": "1",
        }
        event = _journal_event(harness, A, "1")
        assert event == {
            "schema_version": 1,
            "event_id": "evt_1",
            "cursor": "1",
            "recorded_at": _T0,
            "operation": "capture",
            "candidate_id": candidate_id,
            "to_state": "pending",
            "record_digest": record_digest,
            "authorization_receipt_digest": authorization,
            "previous_event_digest": _ZERO_DIGEST,
            "event_digest": event["event_digest"],
        }
        assert value == {
            "status": "committed_pending",
            "candidate_id": candidate_id,
            "record_digest": record_digest,
            "cursor": "1",
            "transaction_receipt_digest": _transaction(
                "capture", A, "1", event["event_digest"], _T0, record_digest=record_digest
            ),
        }

    def test_a_transaction_receipt_binds_scope_cursor_and_commit_time(self, harness: Harness) -> None:
        """§3.2/D1/D14: captures differing in scope, cursor or commit time each get the receipt computed by hand."""
        words = distinctive_words("receipt-binding")
        cases = [
            (A, "receipt-binding-1", "1", _T0),
            (A, "receipt-binding-2", "2", _T0),  # another cursor
            (A_WS2, "receipt-binding-1", "1", _T0),  # another scope
            (A, "receipt-binding-3", "3", "2026-01-01T00:00:01.500Z"),  # another commit time
        ]
        receipts = []
        for binding, label, cursor, at in cases:
            harness.clock.set(parse_instant(at))
            value = ok(harness.capture(binding, make_key(label), words=words))
            assert value["cursor"] == cursor
            event = _journal_event(harness, binding, cursor)
            assert event["recorded_at"] == at
            expected = _transaction(
                "capture", binding, cursor, event["event_digest"], at, record_digest=value["record_digest"]
            )
            assert value["transaction_receipt_digest"] == expected
            receipts.append(expected)
        assert len(set(receipts)) == len(cases)

    @pytest.mark.parametrize("admission", ["accept", "reject", "adjudicate"])
    def test_admission_receipts_are_recomputed_by_hand(self, harness: Harness, admission: str) -> None:
        """§3.3/D9/D14: an admission's decision, event, authorization and transaction receipts, by hand.

        ``pending_adjudication`` answers an ``ADMISSION_PENDING`` receipt; the host's later adjudication
        answers a decision receipt of policy ``engram-memory:host-adjudication``.
        """
        captured = ok(harness.capture(A, make_key("receipt-admission")))
        candidate_id, record_digest = captured["candidate_id"], captured["record_digest"]
        harness.use({"accept": ACCEPT, "reject": REJECT, "adjudicate": ADJUDICATE}[admission])
        harness.clock.advance(timedelta(seconds=90))
        at = "2026-01-01T00:01:30.000Z"
        value = ok(harness.admit(A, candidate_id, make_key("receipt-admission-request")))
        decided = {"accept": "accept", "reject": "reject", "adjudicate": "adjudication_required"}[admission]
        decision = _decision(decided, record_digest, at)
        if admission == "adjudicate":
            pending = {"candidate_id": candidate_id, "cursor": "1", "decision_receipt_digest": decision}
            transaction = _by_hand(_PENDING_DOMAIN, pending)
            assert value["outcome"] == {
                "status": "pending_adjudication",
                **pending,
                "transaction_receipt_digest": transaction,
            }
            assert harness.high_water(A) == 1
            harness.clock.advance(timedelta(seconds=30))
            host_at = "2026-01-01T00:02:00.000Z"
            outcome = harness.admin.adjudicate(
                tenant_id=A.tenant_id, workspace_id=A.workspace_id, candidate_id=candidate_id, decision="accept"
            ).outcome
            host_decision = _decision("accept", record_digest, host_at, policy_id="engram-memory:host-adjudication")
            event = _journal_event(harness, A, "2")
            assert (event["operation"], event["decision_receipt_digest"]) == ("accept", host_decision)
            assert outcome.decision_receipt_digest == host_decision
            assert outcome.transaction_receipt_digest == _transaction(
                "accept", A, "2", event["event_digest"], host_at, record_digest=record_digest
            )
            return
        accept = admission == "accept"
        record_id = _record_id(record_digest)
        authorization = _authorization(ADMISSION, A, candidate_id, at)
        event = _journal_event(harness, A, "2")
        assert event == {
            "schema_version": 1,
            "event_id": "evt_2",
            "cursor": "2",
            "recorded_at": at,
            "operation": admission,
            "candidate_id": candidate_id,
            **({"record_id": record_id} if accept else {}),
            "from_state": "pending",
            "to_state": "accepted_current" if accept else "rejected",
            "record_digest": record_digest,
            "decision_receipt_digest": decision,
            "authorization_receipt_digest": authorization,
            "previous_event_digest": _journal_event(harness, A, "1")["event_digest"],
            "event_digest": event["event_digest"],
        }
        assert value["outcome"] == {
            "status": "accepted" if accept else "rejected",
            "candidate_id": candidate_id,
            **({"record_id": record_id} if accept else {}),
            "cursor": "2",
            "decision_receipt_digest": decision,
            "transaction_receipt_digest": _transaction(
                admission, A, "2", event["event_digest"], at, record_digest=record_digest
            ),
        }
        if accept:
            record = self.open_record(harness, A, record_id)
            assert (record["record_id"], record["record_digest"]) == (record_id, record_digest)
            assert _record_digest(record) == record_digest
            assert (record["recorded_at"], record["recorded_cursor"]) == (_T0, "1")
            assert record["authorization_receipt_digest"] == _authorization(CAPTURE, A, candidate_id, _T0)

    def test_withdraw_receipts_are_recomputed_by_hand(self, harness: Harness) -> None:
        """D5/D14: the withdraw receipt (event, authorization and transaction digests) rebuilt by hand."""
        candidate_id = harness.pending(A, make_key("receipt-withdraw"))
        harness.clock.advance(timedelta(seconds=45))
        at = "2026-01-01T00:00:45.000Z"
        reason = "reason:receipt-withdraw"
        value = ok(harness.withdraw(A, candidate_id, make_key("receipt-withdraw-call"), reason_ref=reason))
        authorization = _authorization(WITHDRAW, A, candidate_id, at)
        event = _journal_event(harness, A, "2")
        assert event == {
            "schema_version": 1,
            "event_id": "evt_2",
            "cursor": "2",
            "recorded_at": at,
            "operation": "withdraw",
            "candidate_id": candidate_id,
            "from_state": "pending",
            "to_state": "withdrawn",
            "reason_digest": _by_hand(_OPERATION_DOMAIN, {"reason_ref": reason}),
            "authorization_receipt_digest": authorization,
            "previous_event_digest": _journal_event(harness, A, "1")["event_digest"],
            "event_digest": event["event_digest"],
        }
        assert value["receipt"] == {
            "event_id": "evt_2",
            "operation": "withdraw",
            "from_state": "pending",
            "to_state": "withdrawn",
            "cursor": "2",
            "event_digest": event["event_digest"],
            "authorization_receipt_digest": authorization,
            "transaction_receipt_digest": _transaction("withdraw", A, "2", event["event_digest"], at),
        }

    def test_forget_receipts_are_recomputed_by_hand(self, harness: Harness) -> None:
        """D5/D6/D14: the forget receipt and its coverage receipt rebuilt by hand."""
        captured = ok(harness.capture(A, make_key("receipt-forget")))
        record_digest = captured["record_digest"]
        admitted = ok(harness.admit(A, captured["candidate_id"], make_key("receipt-forget-admit")))
        record_id = admitted["outcome"]["record_id"]
        assert record_id == _record_id(record_digest)
        harness.clock.advance(timedelta(minutes=2))
        at = "2026-01-01T00:02:00.000Z"
        reason = "reason:receipt-forget"
        value = ok(harness.forget(A, record_id, make_key("receipt-forget-call"), reason_ref=reason))
        authorization = _authorization(FORGET, A, record_id, at)
        event = _journal_event(harness, A, "3")
        assert event == {
            "schema_version": 1,
            "event_id": "evt_3",
            "cursor": "3",
            "recorded_at": at,
            "operation": "tombstone",
            "record_id": record_id,
            "from_state": "accepted_current",
            "to_state": "tombstoned",
            "record_digest": record_digest,
            "reason_digest": _by_hand(_OPERATION_DOMAIN, {"reason_ref": reason}),
            "authorization_receipt_digest": authorization,
            "previous_event_digest": _journal_event(harness, A, "2")["event_digest"],
            "event_digest": event["event_digest"],
        }
        assert value == {
            "receipt": {
                "event_id": "evt_3",
                "operation": "tombstone",
                "from_state": "accepted_current",
                "to_state": "tombstoned",
                "cursor": "3",
                "event_digest": event["event_digest"],
                "authorization_receipt_digest": authorization,
                "transaction_receipt_digest": _transaction("tombstone", A, "3", event["event_digest"], at),
            },
            "replayed": False,
            "projection_invalidation": "complete",
            "coverage_receipt_digest": _by_hand(
                _COVERAGE_DOMAIN, {"record_id": record_id, "indexes": ["lexical"], "cursor": "3"}
            ),
        }

    # ------------------------------------------------------------------ D7 forgotten-content guard

    def test_forgotten_content_waits_for_the_host(self, harness: Harness) -> None:
        """§3.3/D7: identical content after forget is captured but never auto-accepted again."""
        words = distinctive_words("forgotten-content")
        _, record_id = harness.accepted(A, make_key("fc-original"), words=words)
        ok(harness.forget(A, record_id, make_key("fc-forget")))
        recaptured = ok(harness.capture(A, make_key("fc-again"), words=words))
        assert recaptured["status"] == "committed_pending"
        candidate_id = recaptured["candidate_id"]
        with self.unchanged(harness, binds=True):
            value = ok(harness.admit(A, candidate_id, make_key("fc-again-req")))
        assert value["outcome"]["status"] == "pending_adjudication"
        fresh = harness.pending(A, make_key("fc-fresh"))
        listed = harness.admin.pending_candidates(tenant_id="tenant-a", workspace_id="workspace-1")
        assert {item.candidate_id: item.forgotten for item in listed} == {candidate_id: True, fresh: False}
        with self.unchanged(harness), pytest.raises(EngramError) as refused:
            harness.admin.adjudicate(
                tenant_id="tenant-a", workspace_id="workspace-1", candidate_id=candidate_id, decision="accept"
            )
        assert refused.value.code is ErrorCode.GATE_FAILED  # re-admitting erased content is said, not implied
        result = harness.admin.adjudicate(
            tenant_id="tenant-a",
            workspace_id="workspace-1",
            candidate_id=candidate_id,
            decision="accept",
            readmit_forgotten=True,
        )
        assert result.outcome.status == "accepted"
        assert result.outcome.record_id not in {None, record_id}

    def test_forgotten_content_is_still_rejected_by_a_rejecting_policy(self, harness: Harness) -> None:
        """D7: an ordinary policy rejection of forgotten content still returns rejected."""
        words = distinctive_words("forgotten-reject")
        _, record_id = harness.accepted(A, make_key("fr-original"), words=words)
        ok(harness.forget(A, record_id, make_key("fr-forget")))
        candidate_id = harness.pending(A, make_key("fr-again"), words=words)
        harness.use(REJECT)
        assert ok(harness.admit(A, candidate_id, make_key("fr-again-req")))["outcome"]["status"] == "rejected"

    def test_the_original_capture_key_after_forget_is_a_replay(self, harness: Harness) -> None:
        """§3.3: reusing the original capture key with the same content is duplicate_exact."""
        key = make_key("fk-original")
        first = ok(harness.capture(A, key))
        ok(harness.admit(A, first["candidate_id"], make_key("fk-admit")))
        record_id = record_id_from_digest(first["record_digest"])
        ok(harness.forget(A, record_id, make_key("fk-forget")))
        with self.unchanged(harness):
            again = ok(harness.capture(A, key))
        assert canonical_bytes(again) == _flagged(first, status="duplicate_exact")

    def test_the_guard_spans_principals_but_not_scopes(self, harness: Harness) -> None:
        """D7: the guard applies to any principal of the scope, and only to that scope."""
        words = distinctive_words("guard-scope")
        _, record_id = harness.accepted(A, make_key("gs-original"), words=words)
        ok(harness.forget(A, record_id, make_key("gs-forget")))
        colleague = harness.pending(A2, make_key("gs-colleague"), words=words)
        status = ok(harness.admit(A2, colleague, make_key("gs-colleague-req")))["outcome"]["status"]
        assert status == "pending_adjudication"
        _, elsewhere = harness.accepted(A_WS2, make_key("gs-elsewhere"), words=words)
        assert _RECORD_ID.match(elsewhere)

    # ------------------------------------------------------------------ §3.6 retention

    def test_retain_needs_host_permission(self, harness: Harness) -> None:
        """§3.6: derivative_rule retain is UNAUTHORIZED unless the policy allows it."""
        retention = {"derivative_rule": "retain"}
        with self.unchanged(harness):
            fail(harness.capture(A, make_key("retain"), retention=retention), ErrorCode.UNAUTHORIZED, retriable=False)
        harness.use(DefaultPolicy(admission="accept", allow_retain=True))
        assert ok(harness.capture(A, make_key("retain"), retention=retention))["status"] == "committed_pending"

    def test_expires_at_beyond_the_cap_is_unauthorized(self, harness: Harness) -> None:
        """§3.6: expires_at beyond the host cap → UNAUTHORIZED; exactly at the cap is fine."""
        harness.use(DefaultPolicy(admission="accept", max_retention=timedelta(days=30)))
        now = harness.clock.now()

        def retention(delta: timedelta) -> dict[str, Any]:
            return {"derivative_rule": "make-ineligible", "expires_at": format_instant(now + delta)}

        with self.unchanged(harness):
            envelope = harness.capture(A, make_key("cap-over"), retention=retention(timedelta(days=30, milliseconds=1)))
        fail(envelope, ErrorCode.UNAUTHORIZED, retriable=False)
        ok(harness.capture(A, make_key("cap-exact"), retention=retention(timedelta(days=30))))

    @pytest.mark.parametrize("offset", [timedelta(0), timedelta(seconds=-1), timedelta(days=-400)])
    def test_expires_at_not_after_capture_time_is_invalid_schema(self, harness: Harness, offset: timedelta) -> None:
        """§2/§3.6: an expires_at at or before capture time is INVALID_SCHEMA."""
        retention = {"derivative_rule": "make-ineligible", "expires_at": format_instant(harness.clock.now() + offset)}
        with self.unchanged(harness):
            fail(harness.capture(A, make_key("past"), retention=retention), ErrorCode.INVALID_SCHEMA, retriable=False)

    def test_a_reconciliation_family_needs_host_consent(self, harness: Harness) -> None:
        """§2: a reconciliation family the host did not consent to is UNAUTHORIZED."""
        reconciliation = {"family_refs": ["family:a", "family:b"]}
        harness.use(DefaultPolicy(admission="accept", family_refs=frozenset({"family:a"})))
        with self.unchanged(harness):
            envelope = harness.capture(A, make_key("family"), reconciliation=reconciliation)
        fail(envelope, ErrorCode.UNAUTHORIZED, retriable=False)
        harness.use(DefaultPolicy(admission="accept", family_refs=frozenset({"family:a", "family:b"})))
        assert (
            ok(harness.capture(A, make_key("family"), reconciliation=reconciliation))["status"] == "committed_pending"
        )

    def test_retention_defaults_to_make_ineligible(self, harness: Harness) -> None:
        """§3.6/D3: an omitted retention is stored as make-ineligible, reconciliation as empty."""
        _, record_id = harness.accepted(A, make_key("defaults"))
        record = self.open_record(harness, A, record_id)
        assert record["retention"] == {"derivative_rule": "make-ineligible"}
        assert record["reconciliation"] == {"family_refs": []}
        assert record["scope_ref"] == A.scope

    # ------------------------------------------------------------------ §0 host context

    @pytest.mark.parametrize("field", ["tenant_id", "workspace_id", "principal", "agent_id", "session", "purpose_ref"])
    @pytest.mark.parametrize("tool", [CAPTURE, ADMISSION])
    def test_a_binding_missing_host_context_is_a_protocol_error(self, harness: Harness, field: str, tool: str) -> None:
        """§0: a binding without tenant, workspace, principal, agent id, session or purpose → -32603."""
        candidate_id = harness.pending(A, make_key("context"))
        blanked: dict[str, Any] = {field: ""}
        binding = attrs.evolve(A, **blanked)
        args = capture_args(make_key("context-2")) if tool == CAPTURE else _admission_args(candidate_id, make_key("c"))
        with self.unchanged(harness):
            assert _protocol_code(lambda: harness.call(tool, args, binding)) == JsonRpcCode.INTERNAL_ERROR

    def test_a_capture_for_another_purpose_is_a_protocol_error(self, harness: Harness) -> None:
        """§0: payload.purpose_ref different from the bound purpose → -32603."""
        arguments = capture_args(make_key("purpose"), purpose_ref="purpose:something-else")
        with self.unchanged(harness):
            assert _protocol_code(lambda: harness.call(CAPTURE, arguments, A)) == JsonRpcCode.INTERNAL_ERROR

    @pytest.mark.parametrize("where", ["binding", "policy"])
    def test_an_ungranted_tool_is_unknown(self, harness: Harness, where: str) -> None:
        """§0: a tool the binding or the policy does not grant → -32602 and absent from list_tools."""
        granted = ALL_TOOLS - {CAPTURE, FORGET}
        if where == "binding":
            binding = attrs.evolve(A, tools=granted)
        else:
            binding = A
            harness.use(DefaultPolicy(admission="accept", tools=granted))
        with self.unchanged(harness):
            assert _protocol_code(lambda: harness.capture(binding, make_key("ungranted"))) == JsonRpcCode.INVALID_PARAMS
            forget = _forget_args(UNKNOWN_RECORD, make_key("ungranted-f"))
            assert _protocol_code(lambda: harness.confirmed(FORGET, forget, binding)) == JsonRpcCode.INVALID_PARAMS
        names = [tool["name"] for tool in harness.service.list_tools(binding)]
        assert names == [t for t in (SEARCH, GET, ADMISSION, WITHDRAW) if t in granted]

    def test_no_granted_tool_means_memory_is_disabled(self, harness: Harness) -> None:
        """§0: a binding granting nothing lists no tool and every call is -32602."""
        binding = attrs.evolve(A, tools=frozenset())
        assert harness.service.list_tools(binding) == []
        assert _protocol_code(lambda: harness.capture(binding, make_key("disabled"))) == JsonRpcCode.INVALID_PARAMS

    def test_an_unknown_tool_is_a_protocol_error(self, harness: Harness) -> None:
        """§0: an unknown tool name → -32602."""
        code = _protocol_code(lambda: harness.call("engram_memory_admin", {}, A))
        assert code == JsonRpcCode.INVALID_PARAMS

    @pytest.mark.parametrize("tool", [CAPTURE, ADMISSION, WITHDRAW, FORGET])
    def test_a_passed_deadline_is_deadline_exceeded(self, harness: Harness, tool: str) -> None:
        """D13: a call after the host's deadline → DEADLINE_EXCEEDED (retriable), nothing written."""
        candidate_id, record_id = harness.accepted(A, make_key("deadline"))
        pending = harness.pending(A, make_key("deadline-pending"))
        late = attrs.evolve(A, deadline=harness.clock.now() - timedelta(milliseconds=1))
        arguments = {
            CAPTURE: capture_args(make_key("deadline-capture")),
            ADMISSION: _admission_args(pending, make_key("deadline-admission")),
            WITHDRAW: _withdraw_args(pending, make_key("deadline-withdraw")),
            FORGET: _forget_args(record_id, make_key("deadline-forget")),
        }[tool]
        assert candidate_id
        with self.unchanged(harness):
            envelope = harness.confirmed(tool, arguments, late)
        fail(envelope, ErrorCode.DEADLINE_EXCEEDED, retriable=True)

    # ------------------------------------------------------------------ D4 restart

    def test_replays_survive_a_new_service_over_the_same_backend(
        self, harness: Harness, service_factory: ServiceFactory, clock: ManualClock
    ) -> None:
        """D4: after a restart every mutation replays byte-identically (replayed / duplicate_exact)."""
        calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

        def run(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            value = ok(harness.confirmed(tool, arguments, A))
            calls.append((tool, arguments, value))
            return value

        captured = run(CAPTURE, capture_args(make_key("restart-capture")))
        admitted = run(ADMISSION, _admission_args(captured["candidate_id"], make_key("restart-admit")))
        doomed = run(CAPTURE, capture_args(make_key("restart-doomed")))
        run(WITHDRAW, _withdraw_args(doomed["candidate_id"], make_key("restart-withdraw")))
        run(ADMISSION, _admission_args(captured["candidate_id"], make_key("restart-dup")))
        run(FORGET, _forget_args(admitted["outcome"]["record_id"], make_key("restart-forget")))
        before = harness.state(A)
        clock.advance(timedelta(hours=6))
        restarted = Harness(with_policy(service_factory(clock), ACCEPT), clock)
        for tool, arguments, first in calls:
            again = ok(restarted.confirmed(tool, arguments, A))
            if tool == CAPTURE:
                assert canonical_bytes(again) == _flagged(first, status="duplicate_exact")
            else:
                assert canonical_bytes(again) == _outcome_flagged(first)
        assert restarted.state(A) == before

    # ------------------------------------------------------------------ D1 isolation

    def test_foreign_ids_answer_exactly_like_unknown_ids(self, harness: Harness) -> None:
        """D1: another tenant's candidate and record ids are NOT_FOUND, indistinguishably."""
        pending = harness.pending(A, make_key("iso-pending"))
        admitted, record_id = harness.accepted(A, make_key("iso-admitted"))
        withdrawn = harness.pending(A, make_key("iso-withdrawn"))
        ok(harness.withdraw(A, withdrawn, make_key("iso-withdrawn-w")))
        _, forgotten = harness.accepted(A, make_key("iso-forgotten"))
        ok(harness.forget(A, forgotten, make_key("iso-forgotten-f")))
        harness.use(REJECT)
        rejected = harness.pending(A, make_key("iso-rejected"))
        ok(harness.admit(A, rejected, make_key("iso-rejected-r")))
        harness.use(ACCEPT)
        ok(harness.capture(B, make_key("iso-b-own")))
        candidates = [pending, admitted, withdrawn, rejected]
        key = make_key("iso-probe")
        for outsider in (B, A_WS2):
            with self.unchanged(harness, A, outsider):
                probes: list[tuple[str, Callable[[str, str], dict[str, Any]], list[str], str]] = [
                    (ADMISSION, _admission_args, candidates, UNKNOWN_CANDIDATE),
                    (WITHDRAW, _withdraw_args, candidates, UNKNOWN_CANDIDATE),
                    (FORGET, _forget_args, [record_id, forgotten], UNKNOWN_RECORD),
                ]
                for tool, build, ids, unknown in probes:
                    reference = _no_audit(harness.confirmed(tool, build(unknown, key), outsider))
                    fail(reference, ErrorCode.NOT_FOUND, retriable=False)
                    for foreign in ids:
                        assert _no_audit(harness.confirmed(tool, build(foreign, key), outsider)) == reference

    def test_every_scope_has_its_own_dense_journal(self, harness: Harness) -> None:
        """D1/D14: cursors start at 1 in every scope and never reveal another scope's activity."""
        cursors: dict[str, list[str]] = {"a": [], "b": [], "w2": []}
        for index in range(3):
            for name, binding in (("a", A), ("b", B), ("w2", A_WS2)):
                if name == "b" and index == 0:
                    continue
                cursors[name].append(ok(harness.capture(binding, make_key(f"dense-{name}-{index}")))["cursor"])
        assert cursors == {"a": ["1", "2", "3"], "b": ["1", "2"], "w2": ["1", "2", "3"]}
        for binding in (A, B, A_WS2):
            with harness.service.store.read(binding.scope) as reader:
                assert [event.cursor for event in reader.events()] == list(range(1, reader.high_water() + 1))
        assert sorted(harness.service.store.scopes()) == sorted({A.scope, B.scope, A_WS2.scope})

    # ------------------------------------------------------------------ D6 plaintext

    def test_pending_plaintext_stays_inside_the_sealed_envelope(
        self, harness: Harness, scope_contents: ScopeContents | None
    ) -> None:
        """D6: a pending candidate's words appear nowhere but the ciphertext; admission indexes them.

        After admission the index holds the words, in clear or as keyed digests (a store that
        keeps its index in memory may hold them in clear; one that writes it elsewhere may not,
        see docs/backends.md, which the scan cannot tell apart): a search shows them indexed, and
        the attestation (never indexed) is still nowhere in clear.
        """
        if scope_contents is None:
            pytest.skip("the backend does not expose its raw contents")
        words = distinctive_words("sealed")
        attested = "zqattestationonlyword"
        candidate_id = harness.pending(A, make_key("sealed"), words=words, attestation=attested)
        contents = scope_contents(harness.service.store, A.scope)
        assert not [w for w in (*words, attested) if w.encode() in contents]
        ok(harness.admit(A, candidate_id, make_key("sealed-admit")))
        found = ok(harness.call(SEARCH, {"query": " ".join(words), "purpose_ref": A.purpose_ref}, A))
        assert len(found["records"]) == 1
        assert attested.encode() not in scope_contents(harness.service.store, A.scope)

    def test_forgotten_and_withdrawn_words_leave_the_store(
        self, harness: Harness, scope_contents: ScopeContents | None
    ) -> None:
        """D6: after forget or withdraw the content's words are nowhere in the scope's contents."""
        if scope_contents is None:
            pytest.skip("the backend does not expose its raw contents")
        forgotten_words = distinctive_words("erased-record")
        withdrawn_words = distinctive_words("erased-candidate")
        _, record_id = harness.accepted(A, make_key("erased-record"), words=forgotten_words)
        candidate_id = harness.pending(A, make_key("erased-candidate"), words=withdrawn_words)
        ok(harness.forget(A, record_id, make_key("erased-record-f")))
        ok(harness.withdraw(A, candidate_id, make_key("erased-candidate-w")))
        contents = scope_contents(harness.service.store, A.scope)
        assert not [w for w in (*forgotten_words, *withdrawn_words) if w.encode() in contents]

    def test_the_journal_holds_no_content(self, harness: Harness) -> None:
        """D6/D14: event bodies hold ids, states and digests only."""
        words = distinctive_words("journal-content")
        candidate_id, record_id = harness.accepted(A, make_key("journal-content"), words=words)
        ok(harness.forget(A, record_id, make_key("journal-content-f")))
        with harness.service.store.read(A.scope) as reader:
            bodies = b"".join(event.body for event in reader.events())
        assert candidate_id.encode() in bodies
        assert not [w for w in words if w.encode() in bodies]
        assert b"doc:conformance" not in bodies

    # ------------------------------------------------------------------ D14 journal

    def test_the_journal_is_a_dense_verified_chain(self, harness: Harness) -> None:
        """D14: cursors are dense from 1, each event links to the previous digest, verify passes."""
        _, record_id = harness.accepted(A, make_key("chain-1"))
        withdrawn = harness.pending(A, make_key("chain-2"))
        ok(harness.withdraw(A, withdrawn, make_key("chain-2-w")))
        ok(harness.forget(A, record_id, make_key("chain-1-f")))
        with harness.service.store.read(A.scope) as reader:
            events = list(reader.events())
        assert [event.cursor for event in events] == [1, 2, 3, 4, 5]
        previous = "sha256:" + "0" * 64
        for event in events:
            body = json.loads(event.body)
            assert body["cursor"] == str(event.cursor)
            assert body["previous_event_digest"] == previous
            assert body["event_digest"] == event.event_digest
            previous = event.event_digest
        assert self.verified(harness, A) == 5
        assert [json.loads(e.body)["operation"] for e in events] == [
            "capture",
            "accept",
            "capture",
            "withdraw",
            "tombstone",
        ]

    def test_a_flipped_byte_is_journal_corrupt_at_its_cursor(
        self, harness: Harness, replace_event_body: ReplaceEventBody | None
    ) -> None:
        """D14: flipping any byte of an event body makes verify report JOURNAL_CORRUPT there."""
        if replace_event_body is None:
            pytest.skip("the backend cannot tamper with stored events")
        _, record_id = harness.accepted(A, make_key("tamper-1"))
        harness.pending(A, make_key("tamper-2"))
        ok(harness.forget(A, record_id, make_key("tamper-f")))
        with harness.service.store.read(A.scope) as reader:
            events = list(reader.events())
        store = harness.service.store
        for event in events:
            step = max(1, len(event.body) // 40)
            for position in range(0, len(event.body), step):
                mutated = bytearray(event.body)
                mutated[position] ^= 0x01
                replace_event_body(store, A.scope, event.cursor, bytes(mutated))
                report = harness.admin.verify(tenant_id="tenant-a", workspace_id="workspace-1")
                assert (report.ok, report.code, report.cursor) == (False, ErrorCode.JOURNAL_CORRUPT, event.cursor), (
                    position,
                    report,
                )
            replace_event_body(store, A.scope, event.cursor, event.body)
        assert self.verified(harness, A) == len(events)

    def test_a_missing_candidate_key_is_blob_missing(
        self, harness: Harness, complete_destruction: CompleteDestruction | None
    ) -> None:
        """D14: a pending candidate whose key vanished → BLOB_MISSING at its cursor."""
        harness.pending(A, make_key("blob-1"))
        lost = harness.pending(A, make_key("blob-2"))
        harness.pending(A, make_key("blob-3"))
        harness.service.vault.destroy(self.sealed_candidate(harness, A, lost).key_ref)
        finish_destruction(harness.service.vault, complete_destruction)
        report = harness.admin.verify(tenant_id="tenant-a", workspace_id="workspace-1")
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.BLOB_MISSING, 2)
        with self.unchanged(harness):
            envelope = harness.admit(A, lost, make_key("blob-2-admit"))
        fail(envelope, ErrorCode.BLOB_MISSING, retriable=False)

    def test_a_missing_record_key_is_blob_missing(
        self, harness: Harness, complete_destruction: CompleteDestruction | None
    ) -> None:
        """D14: an accepted record whose body key vanished → BLOB_MISSING at its accept cursor."""
        _, record_id = harness.accepted(A, make_key("record-blob"))
        harness.pending(A, make_key("record-blob-later"))
        harness.service.vault.destroy(self.sealed_record(harness, A, record_id).key_ref)
        finish_destruction(harness.service.vault, complete_destruction)
        report = harness.admin.verify(tenant_id="tenant-a", workspace_id="workspace-1")
        assert (report.ok, report.code, report.cursor) == (False, ErrorCode.BLOB_MISSING, 2)

    # ------------------------------------------------------------------ D13 errors

    def test_failure_envelopes_are_constant_and_table_driven(self, harness: Harness) -> None:
        """D13: every failure envelope has the closed shape, constant message and table flag."""
        candidate_id = harness.pending(A, make_key("shapes"))
        envelopes = [
            harness.admit(A, UNKNOWN_CANDIDATE, make_key("shape-1")),
            harness.capture(A, make_key("shapes"), words=("zqdifferent",)),
            harness.capture(A, "short"),
            harness.call(
                ADMISSION, _admission_args(candidate_id, make_key("shape-2")), attrs.evolve(A, deadline=A_PAST)
            ),
        ]
        for envelope in envelopes:
            assert set(envelope) == {"ok", "auditId", "redactionClass", "error"}
            error = envelope["error"]
            assert set(error) == {"code", "message", "retriable"}
            code = ErrorCode(error["code"])
            assert error["message"] == PUBLIC_MESSAGES[code]
            assert error["retriable"] is RETRIABLE[code]
        audited = harness.call(CAPTURE, capture_args(make_key("audited")), attrs.evolve(A, audit_id="audit-host-1"))
        assert audited["auditId"] == "audit-host-1"

    def test_an_unavailable_store_is_retriable_and_writes_nothing(self, harness: Harness) -> None:
        """D13: a store that cannot start the unit → STORE_UNAVAILABLE (retriable); a retry succeeds."""
        service = harness.service
        faulty = MemoryService(
            store=_WriteFaults(service.store, unavailable=1), vault=service.vault, policy=ACCEPT, clock=harness.clock
        )
        key = make_key("unavailable")
        with self.unchanged(harness):
            fail(faulty.call_tool(CAPTURE, capture_args(key), A), ErrorCode.STORE_UNAVAILABLE, retriable=True)
        assert ok(faulty.call_tool(CAPTURE, capture_args(key), A))["status"] == "committed_pending"

    def test_an_unknown_commit_outcome_is_resolved_by_a_retry(self, harness: Harness) -> None:
        """D13: MUTATION_OUTCOME_UNKNOWN after a commit; the same key then replays the commit."""
        service = harness.service
        faulty = MemoryService(
            store=_WriteFaults(service.store, outcome_unknown=1),
            vault=service.vault,
            policy=ACCEPT,
            clock=harness.clock,
        )
        key = make_key("outcome-unknown")
        fail(faulty.call_tool(CAPTURE, capture_args(key), A), ErrorCode.MUTATION_OUTCOME_UNKNOWN, retriable=True)
        assert harness.high_water(A) == 1
        assert ok(faulty.call_tool(CAPTURE, capture_args(key), A))["status"] == "duplicate_exact"
        assert harness.high_water(A) == 1

    def test_a_policy_that_fails_during_capture_is_policy_unavailable(self, harness: Harness) -> None:
        """D13/§2: a policy raising while capture checks its constraints → POLICY_UNAVAILABLE."""

        def broken(_binding: HostBinding) -> CaptureConstraints:
            raise RuntimeError("policy engine down")

        harness.use(PolicyOverride(ACCEPT, capture_constraints=broken))
        with self.unchanged(harness):
            envelope = harness.capture(A, make_key("policy-down"))
        fail(envelope, ErrorCode.POLICY_UNAVAILABLE, retriable=True)

    def test_a_policy_that_fails_to_list_grants_never_escapes_call_tool(self, harness: Harness) -> None:
        """D13/§0: a policy failing to list the grants is the POLICY_UNAVAILABLE envelope (retriable), never -32602.

        Nothing is written, and the call is not mistaken for an ungranted tool: a retry may succeed.
        """

        def broken(_binding: HostBinding) -> frozenset[str]:
            raise RuntimeError("policy engine down")

        harness.use(PolicyOverride(ACCEPT, granted_tools=broken))
        with self.unchanged(harness):
            envelope = harness.capture(A, make_key("grants-down"))
        fail(envelope, ErrorCode.POLICY_UNAVAILABLE, retriable=True)
