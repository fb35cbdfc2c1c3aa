"""The service conformance suite bound to the in-memory store and key vault; the constructor's defaults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ErrorCode, HostBinding, ManualClock, MemoryService, SystemClock
from engram_memory.canonical import format_instant
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import CaptureConstraints, Clock
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import (
    PURPOSE,
    PolicyOverride,
    ServiceConformance,
    ServiceFactory,
    capture_args,
    fail,
    make_binding,
    make_key,
    ok,
)
from engram_memory.testing.fakes import ADMISSION, CAPTURE, GET, InMemoryCapabilities
from engram_memory.wire import CaptureArgs, RequestAdmissionArgs, SearchArgs, parse_args
from engram_memory.wire.schemas import output_schema


class TestInMemoryService(InMemoryCapabilities, ServiceConformance):
    @pytest.fixture
    def service_factory(self) -> ServiceFactory:
        store = InMemoryStore(secret=b"s" * 32)
        vault = InMemoryKeyVault()

        def factory(clock: Clock) -> MemoryService:
            return MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=clock)

        return factory


def test_the_service_defaults_the_clock_and_the_policy_as_connect_does() -> None:
    """Without ``clock=`` and ``policy=``: the system clock and ``DefaultPolicy()`` (the host adjudicates)."""
    service = MemoryService(store=InMemoryStore(secret=b"s" * 32), vault=InMemoryKeyVault())
    binding = make_binding()
    assert isinstance(service.clock, SystemClock)
    assert isinstance(service.policy, GuardedPolicy)
    assert service.policy.inner == DefaultPolicy()
    captured = service.capture(binding, parse_args(CaptureArgs, capture_args(make_key("default-capture"))))
    admission = {"candidate_id": captured.candidate_id, "idempotency_key": make_key("default-admission")}
    asked = service.request_admission(binding, parse_args(RequestAdmissionArgs, admission))
    assert asked.outcome.status == "pending_adjudication"  # DefaultPolicy admits nothing by itself
    found = service.search(binding, parse_args(SearchArgs, {"query": "anything", "purpose_ref": PURPOSE}))
    issued = datetime.fromisoformat(found.rank_receipt["issued_at"])
    # the system clock's time, not ManualClock's fixed 2026-01-01 (a wide margin: this is no timing test)
    assert abs(issued - datetime.now(UTC)) < timedelta(hours=1)
    assert abs(found.rank_receipt["valid_as_of"] - issued.timestamp() * 1000) < 1
    service.close()


def _failing_constraints(binding: HostBinding) -> CaptureConstraints:
    raise RuntimeError("policy service down")


@pytest.mark.parametrize(
    ("policy", "extra"),
    [
        (DefaultPolicy(allow_retain=False), {"retention": {"derivative_rule": "retain"}}),  # UNAUTHORIZED otherwise
        (DefaultPolicy(), {"reconciliation": {"family_refs": ["family:unconsented"]}}),  # UNAUTHORIZED otherwise
        (PolicyOverride(DefaultPolicy(), capture_constraints=_failing_constraints), {}),  # POLICY_UNAVAILABLE
    ],
    ids=["retain not allowed", "family without consent", "policy failing"],
)
def test_an_expiry_in_the_past_is_an_argument_error_whatever_the_policy_would_refuse(
    policy: object, extra: dict[str, Any]
) -> None:
    """``expires_at`` at or before capture time is ``INVALID_SCHEMA`` (fix the arguments), never hidden by a refusal."""
    clock = ManualClock()
    service = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=policy, clock=clock)  # type: ignore[arg-type]
    arguments = capture_args(make_key("past-expiry"))
    retention = {"derivative_rule": "make-ineligible", **extra.pop("retention", {})}
    arguments["payload"]["retention"] = {**retention, "expires_at": format_instant(clock.now())}
    arguments["payload"].update(extra)
    error = fail(service.call_tool(CAPTURE, arguments, make_binding()), ErrorCode.INVALID_SCHEMA)
    assert error["retriable"] is False
    assert service.store.scopes() == []


def test_a_record_carries_its_capture_cursor_time_and_authorization_as_its_schema_says() -> None:
    clock = ManualClock()
    service = MemoryService(
        store=InMemoryStore(), vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock
    )
    binding = make_binding()
    captured = ok(service.call_tool(CAPTURE, capture_args(make_key("recorded-1")), binding))
    captured_at = format_instant(clock.now())
    clock.advance(timedelta(hours=1))
    ok(service.call_tool(CAPTURE, capture_args(make_key("recorded-2")), binding))
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key("recorded-1-admit")}
    outcome = ok(service.call_tool(ADMISSION, admission, binding))["outcome"]
    assert captured["cursor"] != outcome["cursor"]  # the admission has its own cursor, later
    got = ok(service.call_tool(GET, {"record_id": outcome["record_id"], "purpose_ref": PURPOSE}, binding))
    record = got["record"]
    assert (record["recorded_cursor"], record["recorded_at"]) == (captured["cursor"], captured_at)
    described = output_schema(GET)["properties"]["record"]["properties"]
    assert "capture" in described["recorded_cursor"]["description"]
    assert "captured" in described["recorded_at"]["description"]
    assert "capture" in described["authorization_receipt_digest"]["description"]
