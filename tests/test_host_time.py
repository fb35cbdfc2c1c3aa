"""Host time: the clock read through ``GuardedClock``, host datetimes in any zone, a policy's own stamp.

* A host clock that raises or answers no aware ``datetime`` is ``CAPABILITY_UNAVAILABLE`` (not
  ``MUTATION_OUTCOME_UNKNOWN``, which would send the agent retrying a call that never started),
  with nothing written.
* Deadlines, confirmation windows and decision ages count elapsed time even when both ends share
  one ``tzinfo`` object whose offset changes (Python subtracts such datetimes by wall clock).
* A policy may stamp ``issued_at`` with the host clock while it decides.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import attrs
import pytest

from engram_memory import Confirmation, DefaultPolicy, ManualClock, MemoryService
from engram_memory.clock_guard import GuardedClock
from engram_memory.context import ADMISSION, CAPTURE, SEARCH
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ports import AdmissionDecision, AdmissionRequest
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PolicyOverride
from engram_memory.wire.args import SearchArgs
from tests.read_fixtures import (
    SECRET,
    START,
    DocSpec,
    ReadHarness,
    capture_args,
    fail,
    idempotency_key,
    make_binding,
    ok,
)

WITHDRAW = "engram_memory_withdraw"


class _Shifting(tzinfo):
    """A zone at UTC+2 for ``fold=0`` and UTC+1 for ``fold=1``: an autumn DST change, every day.

    One instance shared by two datetimes makes Python subtract and compare them by wall clock,
    ignoring both offsets, as it does for one ``zoneinfo.ZoneInfo``.
    """

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=1) if dt is not None and dt.fold else timedelta(hours=2)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "SHIFT"


SHIFTING = _Shifting()


class _FixedClock:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def now(self) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _spec(key: str) -> DocSpec:
    return DocSpec(key=key, primary=f"host time {key} note")


def _service(clock: Any, policy: Any = None) -> tuple[MemoryService, InMemoryStore]:
    store = InMemoryStore(secret=SECRET)
    policy = policy if policy is not None else DefaultPolicy(admission="accept")
    return MemoryService(store=store, vault=InMemoryKeyVault(), policy=policy, clock=clock), store


# --------------------------------------------------------------------------- a broken host clock


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("clock down"),
        OSError(5, "io"),
        datetime(2026, 1, 1),  # noqa: DTZ001 - the naive answer under test
        "2026-01-01T00:00:00.000Z",
        1_767_225_600,
        None,
    ],
    ids=["raises", "raises-oserror", "naive", "str", "int", "none"],
)
def test_a_broken_host_clock_is_capability_unavailable_and_writes_nothing(answer: object) -> None:
    service, store = _service(_FixedClock(answer))
    binding = make_binding()
    capture = fail(service.call_tool(CAPTURE, capture_args(_spec("clock")), binding), ErrorCode.CAPABILITY_UNAVAILABLE)
    assert capture["retriable"] is False
    assert store.scopes() == []  # nothing written, not even the scope
    search = {"query": "clock", "purpose_ref": binding.purpose_ref}
    fail(service.call_tool(SEARCH, search, binding), ErrorCode.CAPABILITY_UNAVAILABLE)
    with pytest.raises(EngramError) as caught:
        service.search(binding, SearchArgs(query="clock", purpose_ref=binding.purpose_ref))
    assert caught.value.code is ErrorCode.CAPABILITY_UNAVAILABLE


def test_an_engram_error_the_clock_raises_keeps_its_code() -> None:
    service, _ = _service(_FixedClock(EngramError(ErrorCode.RATE_LIMITED)))
    binding = make_binding()
    error = fail(service.call_tool(CAPTURE, capture_args(_spec("rate")), binding), ErrorCode.RATE_LIMITED)
    assert error["retriable"] is True


def test_the_guarded_clock_reads_the_host_instant_in_utc() -> None:
    local = datetime(2026, 10, 25, 2, 30, tzinfo=SHIFTING, fold=1)  # 01:30Z
    read = GuardedClock(_FixedClock(local)).now()
    assert read == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    assert read.tzinfo is UTC
    assert GuardedClock(_FixedClock(local)).inner.now() is local


def test_the_service_keeps_the_host_clock_it_was_given() -> None:
    clock = ManualClock(START)
    service, _ = _service(clock)
    assert service.clock is clock


# --------------------------------------------------------------------------- host datetimes in a shifting zone


def test_host_datetimes_are_kept_in_utc() -> None:
    binding = attrs.evolve(make_binding(), deadline=datetime(2026, 10, 25, 2, 50, tzinfo=SHIFTING))
    assert binding.deadline == datetime(2026, 10, 25, 0, 50, tzinfo=UTC)
    assert binding.deadline is not None
    assert binding.deadline.tzinfo is UTC
    confirmation = Confirmation(
        id="c-1",
        tool=WITHDRAW,
        target="t",
        operation_digest="d",
        requested_at=datetime(2026, 10, 25, 2, 30, tzinfo=SHIFTING),
        approved_at=datetime(2026, 10, 25, 2, 31, tzinfo=SHIFTING, fold=1),
    )
    assert (confirmation.requested_at, confirmation.approved_at) == (
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 31, tzinfo=UTC),
    )


def test_a_deadline_that_passed_in_elapsed_time_is_exceeded_whatever_the_wall_clocks_say() -> None:
    """The clock reads 02:10 after the change (01:10Z); the deadline 02:50 before it (00:50Z) is past."""
    clock = ManualClock(datetime(2026, 10, 25, 2, 10, tzinfo=SHIFTING, fold=1))
    service, store = _service(clock)
    binding = attrs.evolve(make_binding(), deadline=datetime(2026, 10, 25, 2, 50, tzinfo=SHIFTING))
    fail(service.call_tool(CAPTURE, capture_args(_spec("late")), binding), ErrorCode.DEADLINE_EXCEEDED)
    assert store.scopes() == []
    search = {"query": "late", "purpose_ref": binding.purpose_ref}
    fail(service.call_tool(SEARCH, search, binding), ErrorCode.DEADLINE_EXCEEDED)


def _withdraw_with(requested_at: datetime, approved_at: datetime, now: datetime) -> dict[str, Any]:
    harness = ReadHarness(start=now.astimezone(UTC))
    binding = make_binding()
    candidate_id, _ = harness.pending(binding, _spec("zone-withdraw"))
    args = {"candidate_id": candidate_id, "idempotency_key": idempotency_key("zone:withdraw"), "reason_ref": "r:t"}
    confirmation = Confirmation(
        id="confirmation-zone",
        tool=WITHDRAW,
        target=candidate_id,
        operation_digest=harness.service.operation_digest(WITHDRAW, args, binding),
        requested_at=requested_at,
        approved_at=approved_at,
    )
    return harness.call(WITHDRAW, args, attrs.evolve(binding, confirmation=confirmation))


def test_an_approval_61_minutes_after_its_request_is_refused_across_the_autumn_change() -> None:
    """02:30 (+2) to 02:31 (+1) reads as 1 min on the wall clock but took 61 min."""
    requested = datetime(2026, 10, 25, 2, 30, tzinfo=SHIFTING)
    approved = datetime(2026, 10, 25, 2, 31, tzinfo=SHIFTING, fold=1)
    now = approved.astimezone(UTC) + timedelta(seconds=5)
    error = fail(_withdraw_with(requested, approved, now), ErrorCode.GATE_FAILED)
    assert error["retriable"] is False
    fail(
        _withdraw_with(requested.astimezone(UTC), approved.astimezone(UTC), now), ErrorCode.GATE_FAILED
    )  # the same instants in UTC: the same answer


def test_an_approval_2_minutes_after_its_request_is_accepted_although_the_wall_clocks_differ_by_62() -> None:
    """01:59 (+1, 00:59Z) to 03:01 (+2, 01:01Z): 2 min elapsed, 62 min on the wall clocks."""
    requested = datetime(2026, 10, 25, 1, 59, tzinfo=SHIFTING, fold=1)  # 00:59Z
    approved = datetime(2026, 10, 25, 3, 1, tzinfo=SHIFTING)  # 01:01Z
    value = ok(_withdraw_with(requested, approved, approved.astimezone(UTC) + timedelta(seconds=5)))
    assert (value["receipt"]["to_state"], value["replayed"]) == ("withdrawn", False)


# --------------------------------------------------------------------------- a policy that stamps its own decision


def _stamping_policy(clock: ManualClock, *, late_by: timedelta, stamp_offset: timedelta = timedelta(0)) -> Any:
    """Accepts; while deciding, the host clock moves ``late_by`` and the decision is stamped with it."""
    base = DefaultPolicy(admission="accept")

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        clock.advance(late_by)
        return attrs.evolve(base.decide(request, now), issued_at=clock.now() + stamp_offset)

    return PolicyOverride(base, decide=decide)


def _admit(service: MemoryService) -> dict[str, Any]:
    binding = make_binding()
    captured = ok(service.call_tool(CAPTURE, capture_args(_spec("stamped")), binding))
    args = {"candidate_id": captured["candidate_id"], "idempotency_key": idempotency_key("stamped:admit")}
    return service.call_tool(ADMISSION, args, binding)


def test_a_decision_stamped_by_the_host_clock_while_deciding_is_accepted() -> None:
    clock = ManualClock(START)
    service, _ = _service(clock, _stamping_policy(clock, late_by=timedelta(milliseconds=3)))
    value = ok(_admit(service))
    assert value["outcome"]["status"] == "accepted"


def test_a_decision_stamped_after_the_services_own_reading_is_still_stale() -> None:
    clock = ManualClock(START)
    policy = _stamping_policy(clock, late_by=timedelta(milliseconds=3), stamp_offset=timedelta(milliseconds=1))
    service, _ = _service(clock, policy)
    error = fail(_admit(service), ErrorCode.POLICY_STALE)
    assert error["retriable"] is True


def test_a_decision_stamped_in_a_shifting_zone_counts_its_elapsed_age() -> None:
    """Issued 02:55 (+2, 00:55Z), decided at 02:00 (+1, 01:00Z): 5 min old, not 55 min in the future."""
    clock = ManualClock(datetime(2026, 10, 25, 2, 0, tzinfo=SHIFTING, fold=1))
    base = DefaultPolicy(admission="accept")
    issued = datetime(2026, 10, 25, 2, 55, tzinfo=SHIFTING)

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        return attrs.evolve(base.decide(request, now), issued_at=issued)

    service, _ = _service(clock, PolicyOverride(base, decide=decide))
    assert ok(_admit(service))["outcome"]["status"] == "accepted"


class _RaisingOffset(tzinfo):
    """A zone whose offset cannot be computed."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        raise RuntimeError("zone database unavailable")

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "BROKEN"


@pytest.mark.parametrize(
    "answer",
    [
        datetime(2026, 1, 1, tzinfo=_RaisingOffset()),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=1))),  # before UTC's first instant
    ],
    ids=["offset-raises", "before-utc-range"],
)
def test_a_clock_instant_that_cannot_be_read_in_utc_is_capability_unavailable(answer: datetime) -> None:
    service, store = _service(_FixedClock(answer))
    binding = make_binding()
    error = fail(service.call_tool(CAPTURE, capture_args(_spec("edge")), binding), ErrorCode.CAPABILITY_UNAVAILABLE)
    assert error["retriable"] is False
    assert store.scopes() == []


def test_a_never_deadline_west_of_greenwich_is_kept_as_the_last_utc_instant() -> None:
    """``datetime.max`` in a zone behind UTC is beyond UTC's range: it means "never", not an error."""
    never = datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))
    binding = attrs.evolve(make_binding(), deadline=never)
    assert binding.deadline == datetime.max.replace(tzinfo=UTC)
    service, _ = _service(ManualClock(START))
    assert ok(service.call_tool(CAPTURE, capture_args(_spec("never")), binding))["status"] == "committed_pending"
    earliest = datetime.min.replace(tzinfo=timezone(timedelta(hours=5)))
    assert attrs.evolve(make_binding(), deadline=earliest).deadline == datetime.min.replace(tzinfo=UTC)


def test_a_policy_that_decides_for_longer_than_300_s_and_stamps_the_call_instant_is_accepted() -> None:
    """A human or slow reviewer: ``issued_at`` is the call's ``now``; the decision arrives 301 s later."""
    clock = ManualClock(START)
    base = DefaultPolicy(admission="accept")

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        clock.advance(timedelta(seconds=301))
        return base.decide(request, now)

    service, _ = _service(clock, PolicyOverride(base, decide=decide))
    assert ok(_admit(service))["outcome"]["status"] == "accepted"


def test_a_decision_issued_more_than_300_s_before_the_call_is_stale() -> None:
    clock = ManualClock(START)
    base = DefaultPolicy(admission="accept")

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        return attrs.evolve(base.decide(request, now), issued_at=now - timedelta(seconds=300, milliseconds=1))

    service, _ = _service(clock, PolicyOverride(base, decide=decide))
    fail(_admit(service), ErrorCode.POLICY_STALE)


def test_a_decision_issued_before_utc_began_is_stale_not_an_overflow() -> None:
    clock = ManualClock(START)
    base = DefaultPolicy(admission="accept")
    ancient = datetime.min.replace(tzinfo=timezone(timedelta(hours=2)))

    def decide(request: AdmissionRequest, now: datetime) -> AdmissionDecision:
        return attrs.evolve(base.decide(request, now), issued_at=ancient)

    service, _ = _service(clock, PolicyOverride(base, decide=decide))
    fail(_admit(service), ErrorCode.POLICY_STALE)
