"""The service conformance suite bound to the in-memory store and key vault; the constructor's defaults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_memory import DefaultPolicy, MemoryService, SystemClock
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.ports import Clock
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PURPOSE, ServiceConformance, ServiceFactory, capture_args, make_binding, make_key
from engram_memory.testing.fakes import InMemoryCapabilities
from engram_memory.wire import CaptureArgs, RequestAdmissionArgs, SearchArgs, parse_args


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
