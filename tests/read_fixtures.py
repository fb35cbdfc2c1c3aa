"""Builders for the read-path tests: document specs, capture arguments, a harness and verifiers.

A :class:`DocSpec` names the texts of each component kind, the citation source refs, the valid
time and an optional retention expiry; :func:`capture_args` turns it into valid
``engram_memory_capture`` arguments. :class:`ReadHarness` drives a ``MemoryService`` over an
``InMemoryStore`` through ``call_tool`` only (envelopes in, envelopes out).
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import attrs

from engram_memory import ALL_TOOLS, DefaultPolicy, ErrorCode, HostBinding, ManualClock, MemoryAdmin, MemoryService
from engram_memory.canonical import Domain, digest, epoch_ms, receipt_digest, record_id_from_digest
from engram_memory.context import ADMISSION, CAPTURE, FORGET, GET, SEARCH, WITHDRAW, Confirmation
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import Policy, Ranker
from engram_memory.stores.memory import InMemoryStore

START: Final = datetime(2026, 1, 1, tzinfo=UTC)
T0_MS: Final = epoch_ms(START)
DAY_MS: Final = 86_400_000
PURPOSE: Final = "purpose:read-path-tests"
SECRET: Final = b"\x07" * 32

Kind = Literal["decision", "evidence", "context"]


@attrs.frozen(kw_only=True)
class DocSpec:
    """One record to capture: texts per component kind, citation source refs and times.

    The primary component (``primary`` text, of kind ``primary_kind``) comes first, then the
    ``decision``, ``evidence`` and ``context`` components in that order. Every component cites
    the first citation; there is one citation per source ref.
    """

    key: str
    primary: str
    primary_kind: Kind = "context"
    decision: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    source_refs: tuple[str, ...] = ("src:notes",)
    t: int = T0_MS - 30 * DAY_MS
    t_end: int | None = None
    expires_at: str | None = None

    def components(self) -> list[tuple[Kind, str]]:
        """``(kind, text)`` of every component in payload order (the primary first)."""
        out: list[tuple[Kind, str]] = [(self.primary_kind, self.primary)]
        out += [("decision", text) for text in self.decision]
        out += [("evidence", text) for text in self.evidence]
        out += [("context", text) for text in self.context]
        return out


def content_digest(text: str) -> str:
    """``sha256:`` + hex of the UTF-8 bytes of ``text``."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def idempotency_key(label: str) -> str:
    """An idempotency key (at least 16 ASCII bytes) from a short label."""
    return f"read-path-key:{label}"


def capture_args(spec: DocSpec, *, purpose_ref: str = PURPOSE) -> dict[str, Any]:
    """Valid ``engram_memory_capture`` arguments for ``spec``."""
    citations = [
        {
            "citation_id": f"cite-{index}",
            "source_ref": source_ref,
            "locator": {"scheme": "line", "value": str(index + 1)},
            "content_digest": content_digest(f"{spec.key}:{source_ref}"),
        }
        for index, source_ref in enumerate(spec.source_refs)
    ]
    components = [
        {"component_id": f"comp-{index}", "kind": kind, "text": text, "citation_ids": ["cite-0"]}
        for index, (kind, text) in enumerate(spec.components())
    ]
    valid_time: dict[str, Any] = {"t": spec.t}
    if spec.t_end is not None:
        valid_time["t_end"] = spec.t_end
    payload: dict[str, Any] = {
        "schema_version": 2,
        "purpose_ref": purpose_ref,
        "valid_time": valid_time,
        "components": components,
        "primary_component_id": "comp-0",
        "primary_event": {"at": spec.t, "type_ref": "event:observed", "citation_id": "cite-0"},
        "citations": citations,
    }
    if spec.expires_at is not None:
        payload["retention"] = {"derivative_rule": "make-ineligible", "expires_at": spec.expires_at}
    return {
        "idempotency_key": idempotency_key(spec.key),
        "payload": payload,
        "evidence": {
            "evidence_ref": f"evidence:{spec.key}",
            "evidence_digest": content_digest("evidence " + spec.key),
            "citation_ids": ["cite-0"],
        },
    }


def make_binding(
    tenant: str = "tenant-a",
    principal: str = "principal-1",
    *,
    workspace: str = "workspace-1",
    purpose_ref: str = PURPOSE,
    deadline: datetime | None = None,
) -> HostBinding:
    """A binding granting every tool."""
    return HostBinding(
        tenant_id=tenant,
        workspace_id=workspace,
        principal=principal,
        agent_id="agent-1",
        session="session-1",
        purpose_ref=purpose_ref,
        tools=ALL_TOOLS,
        deadline=deadline,
    )


def ok(envelope: dict[str, Any]) -> dict[str, Any]:
    """The value of a success envelope."""
    assert envelope["ok"] is True, _brief(envelope)
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def fail(envelope: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
    """The error of a failure envelope with ``code``."""
    assert envelope["ok"] is False, _brief(envelope)
    assert envelope["error"]["code"] == code.value, _brief(envelope)
    error: dict[str, Any] = envelope["error"]
    return error


def _brief(envelope: dict[str, Any]) -> str:
    text = repr(envelope)
    return text if len(text) <= 2000 else text[:2000] + "..."


def without_audit(envelope: dict[str, Any]) -> dict[str, Any]:
    """The envelope minus its ``auditId`` (for comparing refusals)."""
    return {key: value for key, value in envelope.items() if key != "auditId"}


class ReadHarness:
    """A service over fresh in-memory ports, driven through ``call_tool``."""

    def __init__(self, *, policy: Policy | None = None, start: datetime = START) -> None:
        self.clock = ManualClock(start)
        self.store = InMemoryStore(secret=SECRET)
        self.vault = InMemoryKeyVault()
        self.policy: Policy = policy if policy is not None else DefaultPolicy(admission="accept")
        self.service = MemoryService(store=self.store, vault=self.vault, policy=self.policy, clock=self.clock)

    def use(self, policy: Policy) -> None:
        """Swap the policy (same store, vault, clock and ranker)."""
        self.policy = policy
        self.service = MemoryService(
            store=self.store, vault=self.vault, policy=policy, clock=self.clock, ranker=self.service.ranker
        )

    def use_ranker(self, ranker: Ranker) -> None:
        """Swap the ranker (same store, vault, clock and policy)."""
        self.service = MemoryService(
            store=self.store, vault=self.vault, policy=self.policy, clock=self.clock, ranker=ranker
        )

    def call(self, tool: str, args: dict[str, Any], binding: HostBinding) -> dict[str, Any]:
        """``call_tool``."""
        return self.service.call_tool(tool, args, binding)

    def capture(self, binding: HostBinding, spec: DocSpec) -> dict[str, Any]:
        """Capture ``spec``; return the capture value."""
        value = ok(self.call(CAPTURE, capture_args(spec), binding))
        assert value["status"] == "committed_pending", value
        return value

    def pending(self, binding: HostBinding, spec: DocSpec) -> tuple[str, str]:
        """Capture only; return (candidate id, the record id the candidate would get)."""
        value = self.capture(binding, spec)
        return value["candidate_id"], record_id_from_digest(value["record_digest"])

    def admit(self, binding: HostBinding, spec: DocSpec) -> str:
        """Capture and admit ``spec``; return its record id."""
        candidate_id, expected = self.pending(binding, spec)
        args = {"candidate_id": candidate_id, "idempotency_key": idempotency_key(spec.key + ":admit")}
        value = ok(self.call(ADMISSION, args, binding))
        assert value["outcome"]["status"] == "accepted", value
        record_id: str = value["outcome"]["record_id"]
        assert record_id == expected
        return record_id

    def reject(self, binding: HostBinding, spec: DocSpec) -> str:
        """Capture ``spec`` and have the host reject it; return the would-be record id."""
        candidate_id, expected = self.pending(binding, spec)
        outcome = MemoryAdmin(self.service).adjudicate(
            tenant_id=binding.tenant_id, workspace_id=binding.workspace_id, candidate_id=candidate_id, decision="reject"
        )
        assert outcome.outcome.status == "rejected"
        return expected

    def _confirmed(self, tool: str, args: dict[str, Any], binding: HostBinding, target: str) -> dict[str, Any]:
        now = self.clock.now()
        confirmation = Confirmation(
            id="confirmation-" + uuid.uuid4().hex,
            tool=tool,
            target=target,
            operation_digest=self.service.operation_digest(tool, args, binding),
            requested_at=now - timedelta(seconds=10),
            approved_at=now,
        )
        return ok(self.call(tool, args, attrs.evolve(binding, confirmation=confirmation)))

    def withdraw(self, binding: HostBinding, spec: DocSpec) -> str:
        """Capture ``spec`` and withdraw it; return the would-be record id."""
        candidate_id, expected = self.pending(binding, spec)
        args = {
            "candidate_id": candidate_id,
            "idempotency_key": idempotency_key(spec.key + ":withdraw"),
            "reason_ref": "reason:test",
        }
        self._confirmed(WITHDRAW, args, binding, candidate_id)
        return expected

    def forget(self, binding: HostBinding, record_id: str) -> None:
        """Forget an admitted record."""
        args = {"record_id": record_id, "idempotency_key": idempotency_key(record_id + ":forget"), "reason_ref": "r:t"}
        self._confirmed(FORGET, args, binding, record_id)

    def search(self, binding: HostBinding, query: str, *, cursor: str | None = None, **options: Any) -> dict[str, Any]:
        """The search envelope (``options``: limit, max_packet_bytes, capability_policy)."""
        args: dict[str, Any] = {"query": query, "purpose_ref": binding.purpose_ref, **options}
        if cursor is not None:
            args["page_cursor"] = cursor
        return self.call(SEARCH, args, binding)

    def walk(self, binding: HostBinding, query: str, **options: Any) -> list[dict[str, Any]]:
        """Every page of a search, following ``next_page_cursor``."""
        pages = [ok(self.search(binding, query, **options))]
        while "next_page_cursor" in pages[-1]:
            assert pages[-1]["records"], "a page with a cursor is never empty"
            pages.append(ok(self.search(binding, query, cursor=pages[-1]["next_page_cursor"], **options)))
            assert len(pages) < 1000
        return pages

    def get(self, binding: HostBinding, record_id: str, **options: Any) -> dict[str, Any]:
        """The get envelope."""
        return self.call(GET, {"record_id": record_id, "purpose_ref": binding.purpose_ref, **options}, binding)

    def state(self, binding: HostBinding) -> tuple[int, str]:
        """``(high water, state digest)`` of the binding's scope."""
        admin = MemoryAdmin(self.service)
        with self.store.read(binding.scope) as reader:
            high_water = reader.high_water()
        return high_water, admin.state_digest(tenant_id=binding.tenant_id, workspace_id=binding.workspace_id)


# --------------------------------------------------------------------------- verifiers


def check_full_record(record: dict[str, Any]) -> None:
    """A full record re-derives its ``record_digest`` and ``record_id``."""
    body = {key: value for key, value in record.items() if key not in {"record_id", "record_digest"}}
    assert digest(Domain.RECORD, body) == record["record_digest"]
    assert record_id_from_digest(record["record_digest"]) == record["record_id"]


def check_search_digests(value: dict[str, Any], *, policy_version: str = "1") -> None:
    """Recompute every digest of a search value from the value itself."""
    assert value["response_digest"] == receipt_digest(Domain.SEARCH_RESPONSE, value, "response_digest")
    receipt = value["rank_receipt"]
    assert receipt["receipt_digest"] == receipt_digest(Domain.RANK_RECEIPT, receipt)
    assert receipt["snapshot_id"] == "memory:snapshot-" + receipt["system_as_of"]
    for packet in value["records"]:
        record = packet["record"]
        assert packet["redaction_receipt_digest"] == receipt_digest(
            Domain.RECALL_REDACTION,
            {
                "record_id": record["record_id"],
                "source_record_digest": _record_digest_of(record),
                "policy_version": policy_version,
                "redacted_fields": packet["redacted_fields"],
            },
            "redaction_receipt_digest",
        )
        if not packet["redacted_fields"]:
            check_full_record(record)


def check_get_digests(value: dict[str, Any], *, policy_version: str = "1") -> None:
    """Recompute every digest of a get value from the value itself."""
    assert value["packet_digest"] == receipt_digest(Domain.GET_PACKET, value, "packet_digest")
    receipt = value["read_receipt"]
    assert receipt["receipt_digest"] == receipt_digest(Domain.READ_RECEIPT, receipt)
    record = value["record"]
    assert receipt["record_id"] == record["record_id"]
    if not value["redacted_fields"]:
        check_full_record(record)
        assert receipt["record_digest"] == record["record_digest"]
    assert value["redaction_receipt_digest"] == receipt_digest(
        Domain.RECALL_REDACTION,
        {
            "record_id": record["record_id"],
            "source_record_digest": receipt["record_digest"],
            "policy_version": policy_version,
            "redacted_fields": value["redacted_fields"],
        },
        "redaction_receipt_digest",
    )


def _record_digest_of(record: dict[str, Any]) -> str:
    """The record digest a (possibly redacted) packet record names: from the record, else its id."""
    if "record_digest" in record:
        found: str = record["record_digest"]
        return found
    raw = _b32decode(record["record_id"].removeprefix("mem_"))
    return "sha256:" + raw.hex()


def _b32decode(text: str) -> bytes:
    return base64.b32decode(text.upper() + "=" * (-len(text) % 8))
