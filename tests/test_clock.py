"""The system clock and the manual clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from engram_memory.clock import ManualClock, SystemClock


def test_system_clock_is_aware_utc() -> None:
    now = SystemClock().now()
    assert now.tzinfo is UTC
    assert now.utcoffset() == timedelta(0)
    # A loose bound (a day): the clock is the wall clock, not a constant.
    assert abs(now - datetime.now(UTC)) < timedelta(days=1)


def test_manual_clock_defaults_to_2026_01_01_utc() -> None:
    assert ManualClock().now() == datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    assert ManualClock().now().tzinfo is UTC


def test_manual_clock_keeps_its_start_and_does_not_move_by_itself() -> None:
    start = datetime(2030, 6, 15, 12, 30, 45, 123000, tzinfo=timezone(timedelta(hours=2)))
    clock = ManualClock(start)
    assert clock.now() == start
    assert clock.now() == start
    assert clock.now().utcoffset() == timedelta(hours=2)


def test_manual_clock_refuses_a_naive_start() -> None:
    with pytest.raises(ValueError, match=r"^start must be timezone-aware$"):
        ManualClock(datetime(2026, 1, 1))  # noqa: DTZ001 - the naive value under test


def test_advance_moves_by_exactly_delta() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    clock.advance(timedelta(seconds=1, milliseconds=500))
    assert clock.now() == datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    clock.advance(timedelta(days=31))
    assert clock.now() == datetime(2026, 2, 1, 0, 0, 1, 500000, tzinfo=UTC)
    clock.advance(timedelta(0))
    assert clock.now() == datetime(2026, 2, 1, 0, 0, 1, 500000, tzinfo=UTC)


def test_set_jumps_to_the_moment() -> None:
    clock = ManualClock()
    clock.set(datetime(2027, 3, 4, 5, 6, 7, tzinfo=UTC))
    assert clock.now() == datetime(2027, 3, 4, 5, 6, 7, tzinfo=UTC)
    clock.set(datetime(2025, 12, 31, tzinfo=UTC))  # backwards too
    assert clock.now() == datetime(2025, 12, 31, tzinfo=UTC)


def test_set_refuses_a_naive_moment_and_keeps_the_time() -> None:
    clock = ManualClock(datetime(2026, 5, 5, tzinfo=UTC))
    with pytest.raises(ValueError, match=r"^moment must be timezone-aware$"):
        clock.set(datetime(2026, 6, 6))  # noqa: DTZ001 - the naive value under test
    assert clock.now() == datetime(2026, 5, 5, tzinfo=UTC)


def test_concurrent_advances_all_count() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(1000):
            clock.advance(timedelta(milliseconds=1))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.now() == datetime(2026, 1, 1, 0, 0, 8, tzinfo=UTC)
