"""``GuardedClock``: the host's clock, read as an aware UTC instant or refused.

The service reads time only through this wrapper. A host clock that raises, or answers anything
but a timezone-aware ``datetime``, makes the call ``CAPABILITY_UNAVAILABLE`` (not retriable: the
clock is the host's configuration), before anything is written, instead of an infrastructure
failure (which a mutation would report as ``MUTATION_OUTCOME_UNKNOWN``). The instant is
converted to UTC, so that every subtraction and comparison the service makes counts elapsed
time: Python compares two datetimes that share a ``tzinfo`` object (one ``ZoneInfo``, say) by
their wall-clock fields, across a daylight-saving change too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from engram_memory.errors import EngramError, ErrorCode
from engram_memory.ports import Clock

__all__ = ["GuardedClock"]


def _aware_in_utc(instant: object) -> datetime | None:
    """``instant`` in UTC, or ``None`` when it is not an aware ``datetime`` (may raise, as its zone may)."""
    if isinstance(instant, datetime) and instant.utcoffset() is not None:
        return instant.astimezone(UTC)
    return None


class GuardedClock:
    """Reads ``inner`` and returns its instant in UTC; ``CAPABILITY_UNAVAILABLE`` when it cannot."""

    def __init__(self, inner: Clock) -> None:
        self.inner = inner

    def now(self) -> datetime:
        """The host clock's instant, in UTC.

        Raises:
            EngramError: ``CAPABILITY_UNAVAILABLE`` when the clock raises (an ``EngramError`` it
                raises keeps its code) or answers something other than an aware ``datetime``.
        """
        try:
            instant: object = self.inner.now()
            in_utc = _aware_in_utc(instant)
        except EngramError:
            raise
        except Exception as exc:  # the clock, its zone's offset, or an instant beyond UTC's range
            detail = f"host clock failed: {type(exc).__name__}"
            raise EngramError(ErrorCode.CAPABILITY_UNAVAILABLE, detail=detail) from exc
        if in_utc is None:
            raise EngramError(ErrorCode.CAPABILITY_UNAVAILABLE, detail="host clock answered no aware datetime")
        return in_utc
