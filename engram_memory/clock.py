"""Clocks: the system clock for production, a settable one for tests and replays."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["ManualClock", "SystemClock"]


class SystemClock:
    """The wall clock in UTC."""

    def now(self) -> datetime:
        """The current instant."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to (deterministic tests, replays, demos)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The current (manual) instant."""
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> None:
        """Move time forward by ``delta``."""
        with self._lock:
            self._now += delta

    def set(self, moment: datetime) -> None:
        """Jump to ``moment`` (timezone-aware)."""
        if moment.tzinfo is None:
            raise ValueError("moment must be timezone-aware")
        with self._lock:
            self._now = moment
