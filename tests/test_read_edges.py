"""Read-path edges: exact byte budgets, cursor room, cursors past the end, and the receipts' bound members.

Expected values are literal sizes, hand-built cursor bindings and receipt bodies written member by member
from the contract (hashed with the audited canonical digest), never the read path's own helpers.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from engram_memory import DefaultPolicy
from engram_memory.canonical import Domain, canonical_bytes, digest, receipt_digest
from engram_memory.errors import ErrorCode
from engram_memory.ports import RankedHit, RankingQuery, StoreReader
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.read_path import PageCursor, PageCursorCodec
from tests.read_fixtures import (
    SECRET,
    T0_MS,
    DocSpec,
    ReadHarness,
    check_get_digests,
    check_search_digests,
    fail,
    make_binding,
    ok,
)


def _spec(index: int) -> DocSpec:
    return DocSpec(
        key=f"budget-{index:03d}",
        primary=f"orbit budget note {index} " + " ".join(f"pad{index}x{n}" for n in range(40)),
        source_refs=(f"doc:budget/{index}",),
    )


def _harness(count: int) -> ReadHarness:
    harness = ReadHarness()
    for index in range(count):
        harness.admit(make_binding(), _spec(index))
    return harness


def test_the_byte_budget_counts_the_array_brackets_and_every_comma_exactly() -> None:
    """``max_packet_bytes`` bounds ``len(canonical records array)``: at the exact size every record fits,
    one byte less drops the last one (the comma before it counts)."""
    harness = _harness(12)
    binding = make_binding()
    records = ok(harness.search(binding, "orbit", limit=12, max_packet_bytes=1_048_576))["records"]
    assert len(records) == 12
    sizes = [len(canonical_bytes(packet)) for packet in records]
    count = next(k for k in range(1, 13) if 2 + sum(sizes[:k]) + (k - 1) >= 4_096)  # the budget floor is 4,096
    assert 2 <= count < 12
    exact = 2 + sum(sizes[:count]) + (count - 1)
    assert len(canonical_bytes(records[:count])) == exact  # "[" + packets joined by "," + "]"
    for budget, served in ((exact, count), (exact - 1, count - 1), (exact + sizes[count], count)):
        page = ok(harness.search(binding, "orbit", limit=12, max_packet_bytes=budget))
        assert [packet["record"]["record_id"] for packet in page["records"]] == [
            packet["record"]["record_id"] for packet in records[:served]
        ], budget
        assert len(canonical_bytes(page["records"])) <= budget
        assert [packet["rank"] for packet in page["records"]] == list(range(1, served + 1))
        assert "next_page_cursor" in page


def _binding_digest(query: str, limit: int, max_packet_bytes: int, profile_config_digest: str) -> str:
    """The documented binding of a search cursor, written out member by member."""
    binding = make_binding()
    return digest(
        Domain.PAGE_CURSOR,
        {
            "tool": "engram_memory_search",
            "scope_ref": binding.scope,
            "principal": binding.principal,
            "purpose_ref": binding.purpose_ref,
            "query": query,
            "limit": limit,
            "max_packet_bytes": max_packet_bytes,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
            "profile": "offline_lexical_v1",
            "profile_config_digest": profile_config_digest,
        },
    )


def test_a_mac_valid_cursor_at_or_past_the_end_of_the_ordering_is_stale_never_an_empty_page() -> None:
    harness = _harness(5)
    binding = make_binding()
    first = ok(harness.search(binding, "orbit", limit=2))
    receipt: dict[str, Any] = first["rank_receipt"]
    assert receipt["candidate_count"] == 5
    token: str = first["next_page_cursor"]
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    payload = json.loads(raw[:-32])
    assert payload["o"] == 2
    codec = PageCursorCodec(SECRET)
    bound = _binding_digest("orbit", 2, 65_536, receipt["profile_config_digest"])
    pins = codec.decode(token, bound)  # the binding above is the one the service used
    assert pins == PageCursor(
        offset=2, valid_as_of=payload["va"], system_as_of=int(payload["sa"]), ordering_digest=payload["od"]
    )

    def at(offset: int) -> str:
        return codec.encode(
            PageCursor(
                offset=offset,
                valid_as_of=pins.valid_as_of,
                system_as_of=pins.system_as_of,
                ordering_digest=pins.ordering_digest,
            ),
            bound,
        )

    last = ok(harness.search(binding, "orbit", limit=2, cursor=at(4)))  # the last record: no cursor follows
    assert [packet["rank"] for packet in last["records"]] == [5]
    assert "next_page_cursor" not in last
    for offset in (5, 6):
        fail(harness.search(binding, "orbit", limit=2, cursor=at(offset)), ErrorCode.STALE_PAGE)


def _revalidation(operation: str, ids: list[str], *, valid_as_of: int, cursor: str, authorization: str) -> str:
    """The documented revalidation receipt of the records actually materialised (nothing removed)."""
    return receipt_digest(
        Domain.REVALIDATION_PACKET,
        {
            "operation": operation,
            "record_ids": ids,
            "eligible_record_ids": ids,
            "removed": [],
            "valid_as_of": valid_as_of,
            "system_as_of": cursor,
            "validated_through_cursor": cursor,
            "authorization_receipt_digest": authorization,
        },
    )


def test_the_rank_receipt_binds_the_revalidated_page_and_the_snapshot_at_its_journal_event() -> None:
    harness = _harness(5)
    binding = make_binding()
    high_water, _ = harness.state(binding)
    with harness.store.read(binding.scope) as reader:
        events = list(reader.events())
    assert [event.cursor for event in events] == list(range(1, high_water + 1))
    value = ok(harness.search(binding, "orbit", limit=3))
    receipt = value["rank_receipt"]
    ids = [packet["record"]["record_id"] for packet in value["records"]]
    assert len(ids) == 3
    assert receipt["system_as_of"] == str(high_water)
    assert receipt["valid_as_of"] == T0_MS
    assert receipt["revalidation_receipt_digest"] == _revalidation(
        "recall_current",
        ids,
        valid_as_of=T0_MS,
        cursor=str(high_water),
        authorization=receipt["authorization_receipt_digest"],
    )
    assert receipt["snapshot_digest"] == receipt_digest(
        Domain.ACCEPTED_SNAPSHOT,
        {
            "snapshot_id": f"memory:snapshot-{high_water}",
            "system_as_of": str(high_water),
            "valid_as_of": T0_MS,
            "journal_event_digest": events[-1].event_digest,  # the event at system_as_of, not after it
            "eligibility_digest": digest(
                Domain.ACCEPTED_ELIGIBILITY,
                {
                    "candidate_ids_digest": receipt["candidate_ids_digest"],
                    "valid_as_of": T0_MS,
                    "system_as_of": str(high_water),
                },
            ),
        },
    )
    check_search_digests(value)


def test_the_read_receipt_is_pinned_at_the_high_water_and_revalidates_the_one_record() -> None:
    harness = _harness(3)
    binding = make_binding()
    record_id = harness.admit(binding, DocSpec(key="get-big", primary=" ".join(f"bulk{n}" for n in range(600))))
    high_water, _ = harness.state(binding)
    value = ok(harness.get(binding, record_id))
    receipt = value["read_receipt"]
    assert receipt["system_as_of"] == receipt["validated_through_cursor"] == str(high_water)
    assert receipt["valid_as_of"] == T0_MS
    assert receipt["revalidation_receipt_digest"] == _revalidation(
        "get",
        [record_id],
        valid_as_of=T0_MS,
        cursor=str(high_water),
        authorization=receipt["authorization_receipt_digest"],
    )
    check_get_digests(value)
    exact = len(canonical_bytes(value["record"]))  # the record alone is what max_packet_bytes bounds
    assert exact >= 4_096
    assert ok(harness.get(binding, record_id, max_packet_bytes=exact))["record"] == value["record"]
    fail(harness.get(binding, record_id, max_packet_bytes=exact - 1), ErrorCode.PROJECTION_OVERSIZED)


def test_a_page_followed_by_a_cursor_keeps_room_for_the_cursor() -> None:
    """Only the page that ends the ordering may use the cursor's bytes: a big second record that fits the
    transport cap without a cursor, but not with one, moves to the next page."""
    cap = 1_048_576

    def harness_with(filler: int) -> tuple[ReadHarness, list[str]]:
        harness = ReadHarness()
        binding = make_binding()
        ids = [
            harness.admit(binding, DocSpec(key="first", primary="mammoth mammoth mammoth note")),
            harness.admit(
                binding, DocSpec(key="big", primary="mammoth", context=("w" * 65_000,) * 16 + ("w" * filler,))
            ),
            harness.admit(binding, DocSpec(key="third", primary="mammoth note with more words")),
        ]
        return harness, ids

    probe_harness, probe_ids = harness_with(1_000)
    probe = ok(probe_harness.search(make_binding(), "mammoth", limit=2, max_packet_bytes=cap))
    assert [packet["record"]["record_id"] for packet in probe["records"]] == probe_ids[:2]
    cursor_member = len(b',"next_page_cursor":') + len(canonical_bytes(probe["next_page_cursor"]))
    assert cursor_member > 200
    over = 1_000 + cap - len(canonical_bytes(probe)) + 100  # with the cursor: 100 bytes over the cap
    harness, ids = harness_with(over)
    binding = make_binding()
    first = ok(harness.search(binding, "mammoth", limit=2, max_packet_bytes=cap))
    assert [packet["record"]["record_id"] for packet in first["records"]] == ids[:1]
    assert len(canonical_bytes(first)) <= cap
    second = ok(harness.search(binding, "mammoth", limit=2, max_packet_bytes=cap, cursor=first["next_page_cursor"]))
    assert [packet["record"]["record_id"] for packet in second["records"]] == ids[1:]  # ends the ordering
    assert "next_page_cursor" not in second
    assert len(canonical_bytes(second)) <= cap


class _Adjusting(LexicalRanker):
    """The reference ranker, with one hit's score or recency nudged once ``nudge`` is set (same ids, same order)."""

    def __init__(self) -> None:
        super().__init__()
        self.nudge: str | None = None

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        hits = super().rank(reader, query)
        if self.nudge == "score":
            hits[-1] = hits[-1]._replace(score=hits[-1].score / 2)
        elif self.nudge == "recency":
            hits[-1] = hits[-1]._replace(recency=0.5)
        return hits


def test_the_cursor_binds_every_score_and_recency_of_the_ordering_not_only_the_ids() -> None:
    for nudge in ("score", "recency"):
        harness = _harness(5)
        ranker = _Adjusting()
        harness.use_ranker(ranker)
        binding = make_binding()
        first = ok(harness.search(binding, "orbit", limit=2))
        again = ok(harness.search(binding, "orbit", limit=2, cursor=first["next_page_cursor"]))
        assert [packet["rank"] for packet in again["records"]] == [3, 4]
        ranker.nudge = nudge  # the last hit (not on the next page) changes; ids and order do not
        fail(harness.search(binding, "orbit", limit=2, cursor=first["next_page_cursor"]), ErrorCode.STALE_PAGE)
        ranker.nudge = None
        assert ok(harness.search(binding, "orbit", limit=2, cursor=first["next_page_cursor"])) == again


def test_redaction_receipts_name_the_policy_version_in_force() -> None:
    """Search and get receipts of the redaction bind the policy's version (here "7", never a default)."""
    harness = ReadHarness(policy=DefaultPolicy(admission="accept", policy_version="7"))
    binding = make_binding()
    record_id = harness.admit(binding, _spec(0))
    value = ok(harness.search(binding, "orbit"))
    [packet] = value["records"]
    expected = receipt_digest(
        Domain.RECALL_REDACTION,
        {
            "record_id": record_id,
            "source_record_digest": packet["record"]["record_digest"],
            "policy_version": "7",
            "redacted_fields": [],
        },
        "redaction_receipt_digest",
    )
    assert packet["redaction_receipt_digest"] == expected
    check_search_digests(value, policy_version="7")
    got = ok(harness.get(binding, record_id))
    assert got["redaction_receipt_digest"] == expected
    check_get_digests(got, policy_version="7")


def test_a_page_with_a_cursor_may_fill_the_transport_cap_to_the_byte() -> None:
    """A first page of one record and a cursor: at exactly 1,048,576 bytes it is served, one byte more is too large."""
    cap = 1_048_576

    def search_value(filler: int, max_packet_bytes: int = cap) -> dict[str, Any]:
        harness = ReadHarness()
        binding = make_binding()
        texts = ("w" * 65_000,) * 16 + ("w" * filler,)
        harness.admit(binding, DocSpec(key="big-doc", primary="mammoth", context=texts))
        harness.admit(binding, DocSpec(key="small-doc", primary="mammoth small note"))
        return harness.search(binding, "mammoth", limit=1, max_packet_bytes=max_packet_bytes)

    probe = ok(search_value(1_000))
    assert "next_page_cursor" in probe
    exact = 1_000 + cap - len(canonical_bytes(probe))
    served = ok(search_value(exact))
    assert "next_page_cursor" in served
    assert len(canonical_bytes(served)) == cap
    fail(search_value(exact + 1), ErrorCode.RESULT_TOO_LARGE)
    # one byte over the cap: within a max_packet_bytes equal to its records array it is RESULT_TOO_LARGE
    # (the budget holds it, the transport does not); one byte below that array it is PROJECTION_OVERSIZED
    array = len(canonical_bytes(served["records"])) + 1
    served_again = ok(search_value(exact, max_packet_bytes=array - 1))
    assert served_again["records"] == served["records"]
    fail(search_value(exact + 1, max_packet_bytes=array), ErrorCode.RESULT_TOO_LARGE)
    fail(search_value(exact + 1, max_packet_bytes=array - 1), ErrorCode.PROJECTION_OVERSIZED)


def test_a_get_value_may_fill_the_transport_cap_to_the_byte() -> None:
    cap = 1_048_576

    def get_value(filler: int) -> dict[str, Any]:
        harness = ReadHarness()
        binding = make_binding()
        texts = ("w" * 65_000,) * 16 + ("w" * filler,)
        record_id = harness.admit(binding, DocSpec(key="big-get", primary="mammoth", context=texts))
        return harness.get(binding, record_id, max_packet_bytes=cap)

    probe = ok(get_value(1_000))
    exact = 1_000 + cap - len(canonical_bytes(probe))
    served = ok(get_value(exact))
    assert len(canonical_bytes(served)) == cap
    check_get_digests(served)
    fail(get_value(exact + 1), ErrorCode.RESULT_TOO_LARGE)
