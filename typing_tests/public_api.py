"""What the public API returns, and calls that must not type-check (checked by mypy, never run)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, assert_type

from engram_memory import (
    ALL_TOOLS,
    Confirmation,
    DefaultPolicy,
    EngramError,
    ErrorCode,
    HostBinding,
    MemoryAdmin,
    MemoryService,
    PendingCandidate,
    ProtocolError,
    connect,
)
from engram_memory.results import (
    CaptureResult,
    ForgetResult,
    GetResult,
    RequestAdmissionResult,
    SearchResult,
    WithdrawResult,
)
from engram_memory.wire import (
    CaptureArgs,
    ForgetArgs,
    GetArgs,
    RequestAdmissionArgs,
    SearchArgs,
    WithdrawArgs,
    parse_args,
    parse_json,
    to_envelope,
)


def binding() -> HostBinding:
    """A binding needs every host-owned field; ``tools`` has no default."""
    return HostBinding(
        tenant_id="tenant",
        workspace_id="workspace",
        principal="alice",
        agent_id="agent",
        session="session",
        purpose_ref="purpose",
        tools=ALL_TOOLS,
    )


def the_six_operations(service: MemoryService, host: HostBinding) -> None:
    """Each typed operation takes the host binding first and returns its own result class."""
    assert_type(service.search(host, SearchArgs(query="q", purpose_ref="p")), SearchResult)
    assert_type(service.get(host, GetArgs(record_id="r", purpose_ref="p")), GetResult)
    capture = parse_args(CaptureArgs, parse_json(b"{}"))
    assert_type(capture, CaptureArgs)
    assert_type(service.capture(host, capture), CaptureResult)
    admission = RequestAdmissionArgs(candidate_id="c", idempotency_key="k" * 16)
    assert_type(service.request_admission(host, admission), RequestAdmissionResult)
    withdraw = WithdrawArgs(candidate_id="c", idempotency_key="k" * 16, reason_ref="why")
    assert_type(service.withdraw(host, withdraw), WithdrawResult)
    forget = ForgetArgs(record_id="r", idempotency_key="k" * 16, reason_ref="why")
    assert_type(service.forget(host, forget), ForgetResult)
    assert_type(service.search(host, SearchArgs(query="q", purpose_ref="p")).to_json(), dict[str, Any])


def the_json_contract(service: MemoryService, host: HostBinding) -> None:
    """The MCP-shaped entry points speak plain JSON values."""
    assert_type(service.call_tool("engram_memory_search", {"query": "q"}, host), dict[str, Any])
    assert_type(service.list_tools(host), list[dict[str, Any]])
    assert_type(service.granted_tools(host), frozenset[str])
    assert_type(service.operation_digest("engram_memory_forget", {}, host), str)
    now = datetime.now(UTC)
    built = service.confirmation(
        "engram_memory_forget", {}, host, confirmation_id="c", requested_at=now, approved_at=now
    )
    assert_type(built, Confirmation)
    assert_type(to_envelope(EngramError(ErrorCode.NOT_FOUND), "audit_1"), dict[str, Any])


def errors_are_typed(error: EngramError, protocol: ProtocolError) -> None:
    """A failure carries its code, its retriable flag and a constant message."""
    assert_type(error.code, ErrorCode)
    assert_type(error.retriable, bool)
    assert_type(error.public_message, str)
    assert_type(protocol, ProtocolError)


def host_maintenance(admin: MemoryAdmin) -> None:
    """The host's maintenance surface is keyword-only and names scopes by tenant and workspace."""
    pending = admin.pending_candidates(tenant_id="t", workspace_id="w")
    assert_type(pending, list[PendingCandidate])
    decided = admin.adjudicate(tenant_id="t", workspace_id="w", candidate_id="c", decision="accept")
    assert_type(decided, RequestAdmissionResult)
    assert_type(admin.reap_keys(), int)
    assert_type(admin.pending_candidate(tenant_id="t", workspace_id="w", candidate_id="c"), PendingCandidate | None)
    assert_type(MemoryAdmin.scope(tenant_id="t", workspace_id="w"), str)
    admin.pending_candidate(tenant_id="t", workspace_id="w")  # type: ignore[call-arg]
    admin.adjudicate(tenant_id="t", workspace_id="w", candidate_id="c", decision="maybe")  # type: ignore[arg-type]
    readmitted = admin.adjudicate(
        tenant_id="t", workspace_id="w", candidate_id="c", decision="accept", readmit_forgotten=True
    )
    assert_type(readmitted, RequestAdmissionResult)
    admin.adjudicate(
        tenant_id="t",
        workspace_id="w",
        candidate_id="c",
        decision="accept",
        readmit_forgotten="yes",  # type: ignore[arg-type]
    )
    admin.pending_candidates("t", "w")  # type: ignore[call-arg]


def opening() -> None:
    """``connect`` returns the service; its options are keywords with closed values."""
    service = connect("memory:")
    assert_type(service, MemoryService)
    assert_type(MemoryAdmin(service), MemoryAdmin)
    connect("sqlite:///memory.db", synchronous="OFF")  # type: ignore[arg-type]
    connect("memory:", DefaultPolicy(tools=frozenset()))  # type: ignore[call-arg]


def what_must_not_type_check(service: MemoryService, host: HostBinding) -> None:
    """Host-owned context is never an argument, arguments are frozen, and tools do not mix."""
    service.search(SearchArgs(query="q", purpose_ref="p"))  # type: ignore[call-arg, arg-type]
    service.search(host, GetArgs(record_id="r", purpose_ref="p"))  # type: ignore[arg-type]
    args = SearchArgs(query="q", purpose_ref="p")
    args.limit = 5  # type: ignore[misc]
    SearchArgs(query="q", purpose_ref="p", tenant_id="other")  # type: ignore[call-arg]
    HostBinding(  # type: ignore[call-arg]
        tenant_id="t", workspace_id="w", principal="p", agent_id="a", session="s", purpose_ref="p"
    )
    host.tenant_id = "other"  # type: ignore[misc]
    Confirmation(  # type: ignore[call-arg]
        id="c", tool="engram_memory_forget", target="r", requested_at=datetime.now(UTC), approved_at=datetime.now(UTC)
    )
    now = datetime.now(UTC)
    service.confirmation("engram_memory_forget", {}, host, confirmation_id="c", requested_at=now)  # type: ignore[call-arg]
    service.confirmation("engram_memory_forget", {}, host, "c", now, now)  # type: ignore[call-arg]
