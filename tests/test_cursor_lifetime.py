"""``page_cursor_lifetime``: a page cursor older than the service's bound is ``STALE_PAGE``.

The age is counted from the cursor's pinned ``valid_as_of`` (the instant its first page was
ranked at), so every later cursor of the same walk shares the first page's deadline.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService, connect
from engram_memory.context import SEARCH
from engram_memory.errors import EngramError, ErrorCode
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.page_cursor import lifetime_ms
from engram_memory.stores.memory import InMemoryStore
from engram_memory.wire.args import SearchArgs
from tests.read_fixtures import SECRET, START, DocSpec, ReadHarness, fail, make_binding, ok

MINUTE = timedelta(minutes=1)


def _service(lifetime: timedelta | None) -> tuple[MemoryService, ManualClock]:
    """Five admitted "orbit" records; a service over them with ``lifetime``, its clock at ``START``."""
    harness = ReadHarness()
    for index in range(5):
        harness.admit(make_binding(), DocSpec(key=f"walk-{index}", primary=f"orbit walk {index}"))
    service = MemoryService(
        store=harness.store,
        vault=harness.vault,
        policy=DefaultPolicy(admission="accept"),
        clock=harness.clock,
        page_cursor_lifetime=lifetime,
    )
    return service, harness.clock


def _page(service: MemoryService, cursor: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"query": "orbit", "purpose_ref": make_binding().purpose_ref, "limit": 2}
    if cursor is not None:
        args["page_cursor"] = cursor
    return service.call_tool(SEARCH, args, make_binding())


def _ids(page: dict[str, Any]) -> list[str]:
    return [packet["record"]["record_id"] for packet in page["records"]]


def test_a_cursor_is_served_up_to_its_lifetime_and_stale_one_millisecond_after() -> None:
    service, clock = _service(MINUTE)
    first = ok(_page(service))
    clock.advance(MINUTE)  # exactly the lifetime: still served
    second = ok(_page(service, first["next_page_cursor"]))
    assert second["rank_receipt"]["valid_as_of"] == first["rank_receipt"]["valid_as_of"]
    assert [packet["rank"] for packet in second["records"]] == [3, 4]
    clock.advance(timedelta(milliseconds=1))  # the next cursor was pinned at the first page's instant
    error = fail(_page(service, second["next_page_cursor"]), ErrorCode.STALE_PAGE)
    assert error["retriable"] is False
    assert error["message"] == "the page cursor is no longer valid"  # constant: no age, no pins
    restarted = ok(_page(service))  # what STALE_PAGE tells the caller to do
    assert restarted["rank_receipt"]["valid_as_of"] == first["rank_receipt"]["valid_as_of"] + 60_001
    assert len(_ids(restarted)) == 2


def test_the_walk_within_the_lifetime_returns_what_a_service_without_one_returns() -> None:
    bounded, bounded_clock = _service(MINUTE)
    unbounded, unbounded_clock = _service(None)
    pages: list[list[dict[str, Any]]] = []
    for service, clock in ((bounded, bounded_clock), (unbounded, unbounded_clock)):
        walk = [ok(_page(service))]
        while "next_page_cursor" in walk[-1]:
            clock.advance(timedelta(seconds=20))
            walk.append(ok(_page(service, walk[-1]["next_page_cursor"])))
        pages.append(walk)
    assert [_ids(page) for page in pages[0]] == [_ids(page) for page in pages[1]]
    assert sum(len(_ids(page)) for page in pages[0]) == 5


def test_without_a_lifetime_a_cursor_is_served_after_a_year() -> None:
    service, clock = _service(None)
    first = ok(_page(service))
    at_once = ok(_page(service, first["next_page_cursor"]))
    clock.advance(timedelta(days=400))
    later = ok(_page(service, first["next_page_cursor"]))
    assert later["records"] == at_once["records"]
    assert later["rank_receipt"]["valid_as_of"] == at_once["rank_receipt"]["valid_as_of"]


def test_the_typed_api_raises_stale_page_for_an_expired_cursor() -> None:
    service, clock = _service(MINUTE)
    binding = make_binding()
    first = service.search(binding, SearchArgs(query="orbit", purpose_ref=binding.purpose_ref, limit=2))
    assert first.next_page_cursor is not None
    clock.advance(MINUTE + timedelta(milliseconds=1))
    with pytest.raises(EngramError) as caught:
        service.search(
            binding,
            SearchArgs(query="orbit", purpose_ref=binding.purpose_ref, limit=2, page_cursor=first.next_page_cursor),
        )
    assert (caught.value.code, caught.value.retriable) == (ErrorCode.STALE_PAGE, False)


def test_connect_passes_the_lifetime_to_the_service() -> None:
    clock = ManualClock(START)
    service = connect("memory:", policy=DefaultPolicy(admission="accept"), clock=clock, page_cursor_lifetime=MINUTE)
    try:
        harness = ReadHarness()
        harness.service = service
        for index in range(3):
            harness.admit(make_binding(), DocSpec(key=f"connect-{index}", primary=f"orbit connect {index}"))
        first = ok(_page(service))
        clock.advance(MINUTE + timedelta(milliseconds=1))
        fail(_page(service, first["next_page_cursor"]), ErrorCode.STALE_PAGE)
    finally:
        service.close()


@pytest.mark.parametrize(
    ("lifetime", "expected"),
    [(None, None), (timedelta(milliseconds=1), 1), (timedelta(microseconds=1_999), 1), (timedelta(hours=1), 3_600_000)],
)
def test_the_lifetime_counts_whole_milliseconds(lifetime: timedelta | None, expected: int | None) -> None:
    assert lifetime_ms(lifetime) == expected


@pytest.mark.parametrize("lifetime", [timedelta(0), timedelta(microseconds=999), timedelta(seconds=-1)])
def test_a_lifetime_under_one_millisecond_is_refused(lifetime: timedelta, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one millisecond"):
        MemoryService(store=InMemoryStore(secret=SECRET), vault=InMemoryKeyVault(), page_cursor_lifetime=lifetime)
    with pytest.raises(ValueError, match="at least one millisecond"):
        connect(f"sqlite:///{tmp_path / 'memory.db'}", page_cursor_lifetime=lifetime)
    assert list(tmp_path.iterdir()) == []  # refused before any file is created


@pytest.mark.parametrize("lifetime", [60, 60.0, "PT1M", True])
def test_a_lifetime_that_is_not_a_timedelta_is_refused(lifetime: object, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="timedelta or None") as caught:
        MemoryService(
            store=InMemoryStore(secret=SECRET),
            vault=InMemoryKeyVault(),
            page_cursor_lifetime=lifetime,  # type: ignore[arg-type]
        )
    assert caught.value.__notes__ == [f"got {type(lifetime).__name__}"]
    with pytest.raises(TypeError, match="timedelta or None"):
        connect(f"sqlite:///{tmp_path / 'memory.db'}", page_cursor_lifetime=lifetime)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
