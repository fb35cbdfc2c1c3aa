"""Journal time never decreases as the cursor grows (``recorded_at``, the reference's bug not repeated).

Each mutation reads the clock before it waits for its unit of work, and a host clock can step
back: the event's ``recorded_at`` is the later of the call's instant and the last event's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory import Confirmation, DefaultPolicy, ManualClock, MemoryAdmin, MemoryService, connect
from engram_memory.canonical import format_instant
from engram_memory.context import ADMISSION, CAPTURE, GET
from engram_memory.journal import journal_instant
from engram_memory.ports import JournalEvent
from tests.read_fixtures import START, DocSpec, capture_args, idempotency_key, make_binding, ok

WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
SECOND = timedelta(seconds=1)


@pytest.fixture(params=["memory", "sqlite"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryService]:
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'memory.db'}"
    opened = connect(url, policy=DefaultPolicy(admission="accept"), clock=ManualClock(START))
    yield opened
    opened.close()


def _clock(service: MemoryService) -> ManualClock:
    assert isinstance(service.clock, ManualClock)
    return service.clock


def _times(service: MemoryService) -> list[tuple[int, str, str]]:
    binding = make_binding()
    with service.store.read(binding.scope) as reader:
        bodies = [json.loads(event.body) for event in reader.events()]
    return [(int(body["cursor"]), body["operation"], body["recorded_at"]) for body in bodies]


def _capture(service: MemoryService, key: str) -> dict[str, Any]:
    spec = DocSpec(key=key, primary=f"journal time {key} note")
    return ok(service.call_tool(CAPTURE, capture_args(spec), make_binding()))


def _confirmed(service: MemoryService, tool: str, args: dict[str, Any], target: str) -> dict[str, Any]:
    binding = make_binding()
    now = _clock(service).now()
    confirmation = Confirmation(
        id=f"confirmation-{target}-{tool}",
        tool=tool,
        target=target,
        operation_digest=service.operation_digest(tool, args, binding),
        requested_at=now - timedelta(seconds=10),
        approved_at=now,
    )
    return ok(service.call_tool(tool, args, attrs.evolve(binding, confirmation=confirmation)))


def test_every_mutation_after_a_clock_step_back_keeps_the_last_events_time(service: MemoryService) -> None:
    clock = _clock(service)
    clock.advance(10 * SECOND)
    later = format_instant(clock.now())
    kept = _capture(service, "first")  # recorded at START + 10 s
    clock.set(START)  # the host clock steps back 10 s
    captured = _capture(service, "second")
    withdrawn = _capture(service, "third")
    admitted = ok(
        service.call_tool(
            ADMISSION,
            {"candidate_id": kept["candidate_id"], "idempotency_key": idempotency_key("first:admit")},
            make_binding(),
        )
    )
    record_id = admitted["outcome"]["record_id"]
    withdraw_args = {
        "candidate_id": withdrawn["candidate_id"],
        "idempotency_key": idempotency_key("third:withdraw"),
        "reason_ref": "r:t",
    }
    _confirmed(service, WITHDRAW, withdraw_args, withdrawn["candidate_id"])
    forget_args = {"record_id": record_id, "idempotency_key": idempotency_key("first:forget"), "reason_ref": "r:t"}
    _confirmed(service, FORGET, forget_args, record_id)
    assert _times(service) == [
        (1, "capture", later),
        (2, "capture", later),
        (3, "capture", later),
        (4, "accept", later),
        (5, "withdraw", later),
        (6, "tombstone", later),
    ]
    assert captured["cursor"] == "2"
    report = MemoryAdmin(service).verify(tenant_id="tenant-a", workspace_id="workspace-1")
    assert (report.ok, report.high_water) == (True, 6)


def test_a_capture_after_a_step_back_keeps_its_own_time_in_its_record(
    service: MemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    """The event carries journal time; the record keeps the capture's instant (its retention is judged on it)."""
    clock = _clock(service)
    clock.advance(10 * SECOND)
    first_at = format_instant(clock.now())
    _capture(service, "early")
    clock.set(START)
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        second = _capture(service, "late")
    assert "the clock is behind the journal's last event" in caplog.text
    admitted = ok(
        service.call_tool(
            ADMISSION,
            {"candidate_id": second["candidate_id"], "idempotency_key": idempotency_key("late:admit")},
            make_binding(),
        )
    )
    binding = make_binding()
    record = ok(
        service.call_tool(
            GET, {"record_id": admitted["outcome"]["record_id"], "purpose_ref": binding.purpose_ref}, binding
        )
    )["record"]
    assert record["recorded_at"] == format_instant(START)  # the capture's own instant
    assert record["trust"]["issued_at"] == format_instant(START)
    assert record["recorded_cursor"] == "2"
    assert [at for _, _, at in _times(service)] == [first_at] * 3  # capture, capture, accept: journal time


def test_a_clock_less_than_a_second_behind_is_not_logged(
    service: MemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _clock(service)
    clock.advance(SECOND)
    _capture(service, "close-a")
    clock.set(START + timedelta(milliseconds=1))
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        _capture(service, "close-b")
    assert "behind the journal" not in caplog.text
    assert [at for _, _, at in _times(service)] == [format_instant(START + SECOND)] * 2


def test_time_moves_on_once_the_clock_passes_the_last_event(service: MemoryService) -> None:
    clock = _clock(service)
    clock.advance(5 * SECOND)
    _capture(service, "step-a")
    clock.set(START + 2 * SECOND)
    _capture(service, "step-b")
    clock.set(START + 7 * SECOND)
    _capture(service, "step-c")
    expected = [format_instant(START + 5 * SECOND)] * 2 + [format_instant(START + 7 * SECOND)]
    assert [at for _, _, at in _times(service)] == expected


@attrs.frozen
class _OneEvent:
    """A reader whose journal holds one event with ``body`` (none when ``high_water`` is 0)."""

    body: bytes
    high_water_cursor: int = 1

    def high_water(self) -> int:
        return self.high_water_cursor

    def events(self, after: int = 0) -> Iterator[JournalEvent]:
        if after < self.high_water_cursor:
            yield JournalEvent(cursor=1, event_digest="sha256:" + "0" * 64, body=self.body)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"cursor": "1"}',
        b'{"recorded_at": 17}',
        b'{"recorded_at": "2026-99-99T00:00:00.000Z"}',
    ],
)
def test_a_last_event_without_a_readable_time_does_not_hold_the_clock_back(body: bytes) -> None:
    reader: Any = _OneEvent(body)
    assert journal_instant(reader, START) == format_instant(START)


def test_an_empty_journal_takes_the_clock_and_a_later_event_time_wins() -> None:
    empty: Any = _OneEvent(b'{"recorded_at": "2030-01-01T00:00:00.000Z"}', high_water_cursor=0)
    assert journal_instant(empty, START) == format_instant(START)
    later: Any = _OneEvent(b'{"recorded_at": "2030-01-01T00:00:00.000Z"}')
    assert journal_instant(later, START) == "2030-01-01T00:00:00.000Z"
    earlier: Any = _OneEvent(b'{"recorded_at": "2020-01-01T00:00:00.000Z"}')
    assert journal_instant(earlier, START) == format_instant(START)
