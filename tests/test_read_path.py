"""The read path end to end through ``call_tool``: pagination, cursors, isolation, get, digests,
redaction, budgets, infrastructure failures, and that reading never writes."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import attrs
import jsonschema
import pytest

from engram_memory import DefaultPolicy, ErrorCode, MemoryService
from engram_memory.canonical import Domain, canonical_bytes, digest, format_instant, receipt_digest
from engram_memory.errors import EngramError, KeyUnavailableError, StoreCorruptError, StoreUnavailableError
from engram_memory.ports import RankedHit, RankingQuery, SealedEnvelope, Store, StoreReader
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.read_path import TRANSPORT_CAP, PageCursor, PageCursorCodec, redact_record
from engram_memory.records import record_context
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import PolicyOverride, StoreWrapper
from engram_memory.wire import SearchArgs, parse_args
from engram_memory.wire.descriptors import tool_descriptors
from tests.read_fixtures import (
    DAY_MS,
    START,
    T0_MS,
    DocSpec,
    ReadHarness,
    check_get_digests,
    check_search_digests,
    fail,
    make_binding,
    ok,
    without_audit,
)

RANK_RECEIPT_FIELDS = {
    "request_digest",
    "authorization_receipt_digest",
    "profile",
    "profile_version",
    "profile_config_digest",
    "valid_as_of",
    "system_as_of",
    "snapshot_id",
    "snapshot_digest",
    "candidate_count",
    "candidate_ids_digest",
    "scoring_formula_ref",
    "ordered_ids_digest",
    "revalidation_receipt_digest",
    "projection_receipt_digests",
    "issued_at",
    "receipt_digest",
}
READ_RECEIPT_FIELDS = {
    "record_id",
    "record_digest",
    "valid_as_of",
    "system_as_of",
    "validated_through_cursor",
    "authorization_receipt_digest",
    "revalidation_receipt_digest",
    "checked_at",
    "receipt_digest",
}
UNKNOWN_ID = "mem_" + "a" * 52


def orbit_spec(index: int) -> DocSpec:
    """A record about orbits with a varied term frequency and field lengths."""
    words = " ".join(["orbit"] * (1 + index % 4))
    filler = " ".join(f"word{index}x{n}" for n in range(index % 7))
    return DocSpec(
        key=f"orbit-{index:03d}",
        primary=f"{words} insertion note {index} {filler}",
        decision=(f"decision {index} about the orbit burn",) if index % 3 == 0 else (),
        evidence=(f"telemetry {index} confirms",) if index % 5 == 0 else (),
        source_refs=(f"doc:mission/{index}",),
    )


def other_spec(index: int) -> DocSpec:
    return DocSpec(key=f"other-{index:03d}", primary=f"ground station maintenance log {index}")


def single_ranking(harness: ReadHarness, query: str, *, valid_as_of: int = T0_MS) -> list[RankedHit]:
    binding = make_binding()
    ranker = harness.service.ranker
    with harness.store.read(binding.scope) as reader:
        return ranker.rank(
            reader, RankingQuery(terms=tuple(ranker.tokenize(query)), valid_as_of=valid_as_of, now_ms=T0_MS)
        )


def flat(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [packet for page in pages for packet in page["records"]]


@pytest.fixture(scope="module")
def big() -> ReadHarness:
    """120 records matching "orbit" and 10 that do not, in tenant-a."""
    harness = ReadHarness()
    binding = make_binding()
    for index in range(120):
        harness.admit(binding, orbit_spec(index))
    for index in range(10):
        harness.admit(binding, other_spec(index))
    return harness


@pytest.fixture
def small() -> ReadHarness:
    """20 records matching "orbit" in tenant-a (a fresh harness per test)."""
    harness = ReadHarness()
    for index in range(20):
        harness.admit(make_binding(), orbit_spec(index))
    return harness


# --------------------------------------------------------------------------- pagination


def test_walking_every_page_returns_each_record_once_in_order(big: ReadHarness) -> None:
    binding = make_binding()
    expected = single_ranking(big, "orbit")
    assert len(expected) == 120
    reference = big.walk(binding, "orbit", limit=50, max_packet_bytes=1_048_576)
    assert [len(page["records"]) for page in reference] == [50, 50, 20]
    packets = flat(reference)
    assert [p["record"]["record_id"] for p in packets] == [hit.record_id for hit in expected]
    assert [p["score"] for p in packets] == [hit.score for hit in expected]
    assert [p["rank"] for p in packets] == list(range(1, 121))
    receipts = [page["rank_receipt"] for page in reference]
    for field in ("ordered_ids_digest", "candidate_ids_digest", "valid_as_of", "system_as_of", "snapshot_digest"):
        assert len({str(receipt[field]) for receipt in receipts}) == 1
    assert all(receipt["candidate_count"] == 120 for receipt in receipts)
    for limit in (7, 13, 1):
        pages = big.walk(binding, "orbit", limit=limit)
        assert all(len(page["records"]) == limit for page in pages[:-1])
        assert flat(pages) == packets
    default_budget = big.walk(binding, "orbit", limit=50)  # 65,536 bytes: the budget ends pages first
    assert len(default_budget) > 3
    assert flat(default_budget) == packets


def test_a_small_byte_budget_splits_pages_and_resumes_exactly(big: ReadHarness) -> None:
    binding = make_binding()
    packets = flat(big.walk(binding, "orbit", limit=50, max_packet_bytes=1_048_576))
    pages = big.walk(binding, "orbit", limit=50, max_packet_bytes=4096)
    assert len(pages) > 20
    assert flat(pages) == packets
    for page, following in itertools.pairwise(pages):
        size = len(canonical_bytes(page["records"]))
        assert size <= 4096
        overflow = len(canonical_bytes([*page["records"], following["records"][0]]))
        assert overflow > 4096, "a page stops only before the record that would overflow"
    for page in pages:
        check_search_digests(page)


def test_page_cursor_pins_survive_a_clock_move_without_expiry(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=5))
    small.clock.advance(timedelta(hours=1))
    second = ok(small.search(binding, "orbit", limit=5, cursor=first["next_page_cursor"]))
    assert second["rank_receipt"]["valid_as_of"] == first["rank_receipt"]["valid_as_of"] == T0_MS
    assert second["rank_receipt"]["system_as_of"] == first["rank_receipt"]["system_as_of"]
    assert second["rank_receipt"]["issued_at"] == format_instant(START + timedelta(hours=1))
    assert second["records"][0]["rank"] == 6


def test_the_same_cursor_gives_the_same_page(small: ReadHarness) -> None:
    """Re-sending a cursor serves the same second page, byte for byte (ranks 6-10, none of page 1)."""
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=5))
    cursor = first.get("next_page_cursor")
    assert cursor is not None
    second = ok(small.search(binding, "orbit", limit=5, cursor=cursor))
    assert second == ok(small.search(binding, "orbit", limit=5, cursor=cursor))
    assert [packet["rank"] for packet in second["records"]] == [6, 7, 8, 9, 10]
    first_ids = {packet["record"]["record_id"] for packet in first["records"]}
    assert first_ids.isdisjoint(packet["record"]["record_id"] for packet in second["records"])


def test_a_matching_admission_between_pages_is_stale(small: ReadHarness) -> None:
    binding = make_binding()
    cursor = ok(small.search(binding, "orbit", limit=5))["next_page_cursor"]
    small.admit(binding, orbit_spec(500))
    fail(small.search(binding, "orbit", limit=5, cursor=cursor), ErrorCode.STALE_PAGE)


def test_a_forget_between_pages_is_stale(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=5))
    small.forget(binding, first["records"][0]["record"]["record_id"])
    fail(small.search(binding, "orbit", limit=5, cursor=first["next_page_cursor"]), ErrorCode.STALE_PAGE)


def test_an_unrelated_admission_keeps_the_ordering_and_the_pages(small: ReadHarness) -> None:
    binding = make_binding()
    expected = flat(small.walk(binding, "orbit", limit=5))
    first = ok(small.search(binding, "orbit", limit=5))
    small.admit(binding, other_spec(1))  # moves the high water, not the ordering at the pins
    cursor = first["next_page_cursor"]
    pages = [first]
    while cursor is not None:
        page = ok(small.search(binding, "orbit", limit=5, cursor=cursor))
        assert page["rank_receipt"]["system_as_of"] == first["rank_receipt"]["system_as_of"]
        pages.append(page)
        cursor = page.get("next_page_cursor")
    assert flat(pages) == expected


def test_an_edited_cursor_is_stale(small: ReadHarness) -> None:
    binding = make_binding()
    cursor = ok(small.search(binding, "orbit", limit=5))["next_page_cursor"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for position, char in enumerate(cursor):
        replacement = alphabet[(alphabet.index(char) + 1) % len(alphabet)]
        edited = cursor[:position] + replacement + cursor[position + 1 :]
        fail(small.search(binding, "orbit", limit=5, cursor=edited), ErrorCode.STALE_PAGE)
    for edited in (cursor[:-1], cursor + "A", cursor[1:], "!" + cursor[1:], "x", cursor.upper()):
        fail(small.search(binding, "orbit", limit=5, cursor=edited), ErrorCode.STALE_PAGE)


class _CountingRanker(LexicalRanker):
    """The reference ranker (same profile and config), counting its ``rank`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        self.calls += 1
        return super().rank(reader, query)


def test_a_cursor_is_bound_to_principal_scope_purpose_query_and_parameters(small: ReadHarness) -> None:
    """A cursor re-sent under another principal, scope, purpose, query or parameter is STALE_PAGE,
    refused by the token's binding itself, before anything is ranked.

    The other tenant and workspace hold at least as many journal events as tenant-a, so the
    high-water pin cannot refuse them. The ranker count is what shows that the binding refused:
    with the scope unbound, the ordering digest would still refuse later (record ids differ per
    scope), and the STALE_PAGE alone would not tell.
    """
    ranker = _CountingRanker()
    small.use_ranker(ranker)
    binding = make_binding()
    options: dict[str, Any] = {"limit": 5}
    cursor = ok(small.search(binding, "orbit", **options))["next_page_cursor"]
    other_scopes = (make_binding("tenant-b"), make_binding(workspace="workspace-2"))
    for other_scope in other_scopes:
        for index in range(20):
            small.admit(other_scope, orbit_spec(index))
        assert small.state(other_scope)[0] >= small.state(binding)[0]
        assert len(ok(small.search(other_scope, "orbit", **options))["records"]) == 5  # a page 2 exists there
    for other_binding, query, changed in (
        (make_binding(principal="principal-2"), "orbit", options),
        *((other_scope, "orbit", options) for other_scope in other_scopes),
        (make_binding(purpose_ref="purpose:another-task"), "orbit", options),
        (binding, "orbit insertion", options),
        (binding, "Orbit", options),
        (binding, "orbit", {"limit": 6}),
        (binding, "orbit", {"limit": 5, "max_packet_bytes": 8192}),
        (binding, "orbit", {"limit": 5, "capability_policy": {"minimum_channels": "lexical", "network": "allow"}}),
    ):
        calls = ranker.calls
        fail(small.search(other_binding, query, cursor=cursor, **changed), ErrorCode.STALE_PAGE)
        assert ranker.calls == calls, (other_binding, query, changed)
    calls = ranker.calls
    served = ok(small.search(binding, "orbit", cursor=cursor, **options))
    assert [packet["rank"] for packet in served["records"]] == [6, 7, 8, 9, 10]
    assert ranker.calls == calls + 1


def test_a_cursor_from_another_store_or_above_the_high_water_is_stale(small: ReadHarness) -> None:
    binding = make_binding()
    cursor = ok(small.search(binding, "orbit", limit=5))["next_page_cursor"]
    same_secret = ReadHarness()  # same test secret, fewer events: system_as_of is above its high water
    for index in range(3):
        same_secret.admit(binding, orbit_spec(index))
    fail(same_secret.search(binding, "orbit", limit=5, cursor=cursor), ErrorCode.STALE_PAGE)
    other = MemoryService(
        store=InMemoryStore(), vault=small.vault, policy=small.policy, clock=small.clock, ranker=LexicalRanker()
    )
    args = {"query": "orbit", "purpose_ref": binding.purpose_ref, "limit": 5, "page_cursor": cursor}
    fail(other.call_tool("engram_memory_search", args, binding), ErrorCode.STALE_PAGE)


def test_cursor_codec_round_trip_and_binding() -> None:
    codec = PageCursorCodec(b"k" * 32)
    pins = PageCursor(offset=7, valid_as_of=T0_MS, system_as_of=42, ordering_digest=digest(Domain.PAGE_CURSOR, {}))
    token = codec.encode(pins, "sha256:" + "1" * 64)
    assert len(token.encode()) <= 512
    assert codec.decode(token, "sha256:" + "1" * 64) == pins
    for other_codec, binding_digest in (
        (codec, "sha256:" + "2" * 64),
        (PageCursorCodec(b"j" * 32), "sha256:" + "1" * 64),
    ):
        with pytest.raises(EngramError) as caught:
            other_codec.decode(token, binding_digest)
        assert caught.value.code == ErrorCode.STALE_PAGE


# --------------------------------------------------------------------------- isolation


def test_tenants_never_see_count_or_score_against_each_other() -> None:
    harness = ReadHarness()
    tenant_a, tenant_b = make_binding("tenant-a"), make_binding("tenant-b")
    a_ids = {harness.admit(tenant_a, DocSpec(key=f"a{i}", primary=f"lantern survey {i}")) for i in range(5)}
    b_ids = {
        harness.admit(tenant_b, DocSpec(key=f"b{i}", primary="lantern " * (1 + i % 3) + f"log {i}")) for i in range(6)
    }
    before = ok(harness.search(tenant_b, "lantern log", limit=3))
    before_walk = flat(harness.walk(tenant_b, "lantern log", limit=3))
    assert {p["record"]["record_id"] for p in before_walk} == b_ids
    assert before["rank_receipt"]["candidate_count"] == 6
    for i in range(30):
        a_ids.add(harness.admit(tenant_a, DocSpec(key=f"a-more{i}", primary=f"lantern lantern log {i}")))
    after = ok(harness.search(tenant_b, "lantern log", limit=3))
    assert after == before  # same clock: byte-identical, receipts and cursor included
    assert flat(harness.walk(tenant_b, "lantern log", limit=3)) == before_walk
    a_results = flat(harness.walk(tenant_a, "lantern log", limit=50))
    assert {p["record"]["record_id"] for p in a_results} == a_ids
    # a cursor issued to A is refused to B, and A's ids are NOT_FOUND for B
    a_cursor = ok(harness.search(tenant_a, "lantern log", limit=3))["next_page_cursor"]
    fail(harness.search(tenant_b, "lantern log", limit=3, cursor=a_cursor), ErrorCode.STALE_PAGE)
    unknown = harness.get(tenant_b, UNKNOWN_ID)
    for record_id in a_ids:
        assert without_audit(harness.get(tenant_b, record_id)) == without_audit(unknown)


# --------------------------------------------------------------------------- get


def test_get_returns_an_eligible_record_with_verifiable_digests() -> None:
    harness = ReadHarness()
    binding = make_binding()
    spec = DocSpec(key="g1", primary="beacon firmware note", decision=("ship beacon 2",))
    record_id = harness.admit(binding, spec)
    value = ok(harness.get(binding, record_id))
    assert set(value) == {"record", "redacted_fields", "redaction_receipt_digest", "read_receipt", "packet_digest"}
    assert set(value["read_receipt"]) == READ_RECEIPT_FIELDS
    assert value["record"]["record_id"] == record_id
    assert value["redacted_fields"] == []
    receipt = value["read_receipt"]
    assert receipt["valid_as_of"] == T0_MS
    assert receipt["system_as_of"] == receipt["validated_through_cursor"] == str(harness.state(binding)[0])
    assert receipt["checked_at"] == format_instant(START)
    check_get_digests(value)


def test_every_ineligible_id_is_the_same_not_found() -> None:
    harness = ReadHarness(start=START - timedelta(days=1))
    binding = make_binding()
    word = "ineligibility"
    eligible = harness.admit(binding, DocSpec(key="ok", primary=f"{word} baseline"))
    _, pending = harness.pending(binding, DocSpec(key="pending", primary=f"{word} pending"))
    withdrawn = harness.withdraw(binding, DocSpec(key="withdrawn", primary=f"{word} withdrawn"))
    rejected = harness.reject(binding, DocSpec(key="rejected", primary=f"{word} rejected"))
    tombstoned = harness.admit(binding, DocSpec(key="tomb", primary=f"{word} tombstoned"))
    harness.forget(binding, tombstoned)
    expired = harness.admit(
        binding,
        DocSpec(key="expired", primary=f"{word} expired", expires_at=format_instant(START - timedelta(hours=1))),
    )
    future = harness.admit(binding, DocSpec(key="future", primary=f"{word} future", t=T0_MS + DAY_MS))
    ended = harness.admit(binding, DocSpec(key="ended", primary=f"{word} ended", t=T0_MS - 9 * DAY_MS, t_end=T0_MS - 1))
    untrusted = harness.admit(binding, DocSpec(key="untrusted", primary=f"{word} untrusted"))
    disputed = harness.admit(binding, DocSpec(key="disputed", primary=f"{word} disputed"))
    with harness.store.write(binding.scope) as unit:
        row = unit.record(untrusted)
        assert row is not None
        unit.put_record(attrs.evolve(row, trust_valid=False))
        row = unit.record(disputed)
        assert row is not None
        unit.put_record(attrs.evolve(row, state="accepted_disputed"))
        unit.unindex(disputed)
    other_scope = harness.admit(make_binding("tenant-b"), DocSpec(key="other", primary=f"{word} other tenant"))
    harness.clock.set(START)
    assert ok(harness.get(binding, eligible))["record"]["record_id"] == eligible
    unknown = without_audit(harness.get(binding, UNKNOWN_ID))
    assert unknown["error"] == {"code": "NOT_FOUND", "message": "memory target not found", "retriable": False}
    for record_id in (
        pending,
        withdrawn,
        rejected,
        tombstoned,
        expired,
        future,
        ended,
        untrusted,
        disputed,
        other_scope,
    ):
        assert without_audit(harness.get(binding, record_id)) == unknown, record_id
    found = flat(harness.walk(binding, word, limit=50))
    assert [p["record"]["record_id"] for p in found] == [eligible]


# --------------------------------------------------------------------------- digests and receipts


def test_every_search_digest_recomputes_from_the_value(small: ReadHarness) -> None:
    binding = make_binding()
    value = ok(small.search(binding, "orbit burn", limit=50))
    assert set(value) == {"records", "rank_receipt", "response_digest"}
    assert set(value["rank_receipt"]) == RANK_RECEIPT_FIELDS
    check_search_digests(value)
    receipt = value["rank_receipt"]
    ids = [packet["record"]["record_id"] for packet in value["records"]]
    config = small.service.ranker.config()
    assert receipt["profile_config_digest"] == digest(Domain.RECALL_PROFILE_CONFIG, config)
    assert receipt["ordered_ids_digest"] == digest(Domain.RECALL_ORDERED, {"ordered_ids": ids})
    assert receipt["candidate_ids_digest"] == digest(Domain.RECALL_CANDIDATES, {"candidate_ids": ids})
    assert receipt["candidate_count"] == len(ids) == 20
    assert receipt["request_digest"] == digest(
        Domain.RECALL_REQUEST,
        {
            "query": "orbit burn",
            "purpose_ref": binding.purpose_ref,
            "profile": "offline_lexical_v1",
            "valid_as_of": T0_MS,
            "system_as_of": receipt["system_as_of"],
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
            "budgets": {"max_candidates": 2000, "max_results": 50, "max_packet_bytes": 65536},
        },
    )
    assert receipt["profile"] == "offline_lexical_v1"
    assert receipt["profile_version"] == "1.0.0"
    assert receipt["scoring_formula_ref"] == "graphify-memory:offline-lexical-recency:v1"
    assert receipt["projection_receipt_digests"] == []
    assert receipt["issued_at"] == format_instant(START)
    assert receipt["system_as_of"] == str(small.state(binding)[0])
    for packet in value["records"]:
        assert packet["redacted_fields"] == []
        assert packet["redaction_receipt_digest"] == receipt_digest(
            Domain.RECALL_REDACTION,
            {
                "record_id": packet["record"]["record_id"],
                "source_record_digest": packet["record"]["record_digest"],
                "policy_version": "1",
                "redacted_fields": [],
            },
            "redaction_receipt_digest",
        )


def test_a_tampered_response_fails_verification(small: ReadHarness) -> None:
    value = ok(small.search(make_binding(), "orbit", limit=3))
    value["records"][0]["score"] = 0.5
    with pytest.raises(AssertionError):
        check_search_digests(value)


# --------------------------------------------------------------------------- redaction


def test_redaction_keeps_only_the_allowlist_and_the_record_id() -> None:
    harness = ReadHarness(policy=DefaultPolicy(admission="accept", redaction=("/components", "/citations")))
    binding = make_binding()
    record_id = harness.admit(binding, DocSpec(key="r1", primary="redaction probe text"))
    full = ReadHarness()
    full_id = full.admit(binding, DocSpec(key="r1", primary="redaction probe text"))
    full_record = ok(full.get(binding, full_id))["record"]
    expected_removed = sorted("/" + key for key in full_record if key not in {"components", "citations", "record_id"})
    value = ok(harness.search(binding, "redaction"))
    packet = value["records"][0]
    assert set(packet["record"]) == {"components", "citations", "record_id"}
    assert packet["record"]["record_id"] == record_id
    assert packet["redacted_fields"] == expected_removed == sorted(packet["redacted_fields"])
    assert packet["record"]["components"] == full_record["components"]
    check_search_digests(value)
    got = ok(harness.get(binding, record_id))
    assert set(got["record"]) == {"components", "citations", "record_id"}
    assert got["redacted_fields"] == expected_removed
    check_get_digests(got)


NESTED_ALLOWLIST = (
    "/components",
    "/primary_event/at",
    "/reconciliation/family_refs",
    "/retention/derivative_rule",
    "/trust/class",
    "/valid_time/t",
)


def test_a_record_kept_in_part_matches_the_published_output_schemas() -> None:
    """Nested pointers keep part of each object-valued field; search and get still match their schemas.

    The full record matches too, and the partial objects are exactly what the pointers address.
    """
    harness = ReadHarness(policy=DefaultPolicy(admission="accept", redaction=NESTED_ALLOWLIST))
    binding = make_binding()
    record_id = harness.admit(binding, DocSpec(key="n1", primary="nested redaction probe"))
    full = ReadHarness()
    full_record = ok(full.get(binding, full.admit(binding, DocSpec(key="n1", primary="nested redaction probe"))))[
        "record"
    ]
    validators = {
        descriptor["name"]: jsonschema.Draft202012Validator(descriptor["outputSchema"])
        for descriptor in tool_descriptors()
    }
    searched = harness.search(binding, "nested")
    got = harness.get(binding, record_id)
    for tool, envelope in (("engram_memory_search", searched), ("engram_memory_get", got)):
        assert not list(validators[tool].iter_errors(envelope)), tool
    record = ok(got)["record"]
    assert ok(searched)["records"][0]["record"] == record
    assert record == {
        "record_id": record_id,
        "components": full_record["components"],
        "primary_event": {"at": full_record["primary_event"]["at"]},
        "reconciliation": {"family_refs": full_record["reconciliation"]["family_refs"]},
        "retention": {"derivative_rule": full_record["retention"]["derivative_rule"]},
        "trust": {"class": full_record["trust"]["class"]},
        "valid_time": {"t": full_record["valid_time"]["t"]},
    }
    kept_whole_or_in_part = {
        "record_id",
        "components",
        "primary_event",
        "reconciliation",
        "retention",
        "trust",
        "valid_time",
    }
    assert ok(got)["redacted_fields"] == sorted("/" + key for key in full_record if key not in kept_whole_or_in_part)
    assert not list(validators["engram_memory_get"].iter_errors(full.get(binding, full_record["record_id"])))
    unknown_member = {**record, "trust": {"class": "asserted", "owner": "x"}}
    assert not validators["engram_memory_get"].is_valid(
        {**got, "output": {**got["output"], "value": {**ok(got), "record": unknown_member}}}
    )


def test_redact_record_pointer_rules() -> None:
    record: dict[str, Any] = {
        "record_id": "mem_x",
        "a/b": 1,
        "t~": 2,
        "trust": {"class": "asserted", "issued_at": "x"},
        "components": [{"text": "secret"}],
    }
    redacted, removed = redact_record(record, ("/trust/class", "/components/0/text", "/a~1b", "bad", "/x~2"))
    assert redacted == {"record_id": "mem_x", "trust": {"class": "asserted"}, "a/b": 1}
    assert removed == ["/components", "/t~0"]
    whole, none_removed = redact_record(record, ("",))
    assert whole == record
    assert none_removed == []
    nested_after_whole, _ = redact_record(record, ("/trust", "/trust/class"))
    assert nested_after_whole["trust"] == record["trust"]
    assert redact_record(record, None) == (record, [])
    assert redact_record(record, ())[0] == {"record_id": "mem_x"}


# --------------------------------------------------------------------------- refusals and budgets


def test_a_required_semantic_channel_is_ranking_unavailable(small: ReadHarness) -> None:
    binding = make_binding()
    policy = {"minimum_channels": "lexical_and_semantic", "network": "allow"}
    error = fail(small.search(binding, "orbit", capability_policy=policy), ErrorCode.RANKING_UNAVAILABLE)
    assert error["retriable"] is True


class _SemanticClaim(LexicalRanker):
    @property
    def channels(self) -> frozenset[str]:
        return frozenset({"lexical", "semantic"})


def test_a_ranker_with_a_semantic_channel_serves_lexical_and_semantic(small: ReadHarness) -> None:
    binding = make_binding()
    service = MemoryService(
        store=small.store, vault=small.vault, policy=small.policy, clock=small.clock, ranker=_SemanticClaim()
    )
    args = {
        "query": "orbit",
        "purpose_ref": binding.purpose_ref,
        "capability_policy": {"minimum_channels": "lexical_and_semantic", "network": "forbid"},
    }
    assert ok(service.call_tool("engram_memory_search", args, binding))["records"]


def test_a_single_oversized_record_is_projection_oversized() -> None:
    harness = ReadHarness()
    binding = make_binding()
    small_id = harness.admit(binding, DocSpec(key="small", primary="mammoth mammoth mammoth note"))
    huge_id = harness.admit(binding, DocSpec(key="huge", primary="mammoth " + "wide " * 1200))
    value = ok(harness.search(binding, "mammoth", max_packet_bytes=4096))
    assert [p["record"]["record_id"] for p in value["records"]] == [small_id]
    fail(
        harness.search(binding, "mammoth", max_packet_bytes=4096, cursor=value["next_page_cursor"]),
        ErrorCode.PROJECTION_OVERSIZED,
    )
    fail(harness.search(binding, "wide", max_packet_bytes=4096), ErrorCode.PROJECTION_OVERSIZED)
    fail(harness.get(binding, huge_id, max_packet_bytes=4096), ErrorCode.PROJECTION_OVERSIZED)
    assert ok(harness.get(binding, huge_id))["record"]["record_id"] == huge_id
    assert len(flat(harness.walk(binding, "mammoth"))) == 2


def test_a_value_over_the_transport_cap_is_result_too_large() -> None:
    harness = ReadHarness()
    binding = make_binding()
    cap = 1_048_576

    def spec(key: str, filler: int) -> DocSpec:
        chunk = "x" * 65_000
        texts = (chunk,) * 16 + ("y" * filler,)
        return DocSpec(key=key, primary=f"{key} record", context=texts)

    probe_id = harness.admit(binding, spec("colossal", 1000))
    probe = ok(harness.get(binding, probe_id, max_packet_bytes=cap))
    probe_size = len(canonical_bytes(probe["record"]))
    target = cap - 400  # the packet fits max_packet_bytes, the value with its receipt does not
    packet_overhead = len(canonical_bytes(ok(harness.search(binding, "colossal", max_packet_bytes=cap))["records"][0]))
    packet_overhead -= probe_size
    big_id = harness.admit(binding, spec("gigantic", 1000 + target - probe_size - packet_overhead))
    fail(harness.search(binding, "gigantic", max_packet_bytes=cap), ErrorCode.RESULT_TOO_LARGE)
    fail(harness.get(binding, big_id, max_packet_bytes=cap), ErrorCode.RESULT_TOO_LARGE)
    fail(harness.search(binding, "gigantic"), ErrorCode.PROJECTION_OVERSIZED)
    assert (
        ok(harness.search(binding, "colossal", max_packet_bytes=cap))["records"][0]["record"]["record_id"] == probe_id
    )


def test_a_passed_deadline_is_deadline_exceeded(small: ReadHarness) -> None:
    late = make_binding(deadline=START)
    fail(small.search(late, "orbit"), ErrorCode.DEADLINE_EXCEEDED)
    fail(small.get(late, UNKNOWN_ID), ErrorCode.DEADLINE_EXCEEDED)


# --------------------------------------------------------------------------- reading never writes


def _snapshot(store: InMemoryStore, scope: str) -> tuple[Any, ...]:
    partition = store.raw_partition(scope)
    return (
        list(partition.events),
        dict(partition.idempotency),
        dict(partition.candidates),
        dict(partition.records),
        set(partition.tombstones),
        set(partition.confirmations),
        dict(partition.documents),
        {term: dict(docs) for term, docs in partition.occurrences.items()},
        list(partition.total_lengths),
        set(partition.doomed),
    )


class _CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__(secret=b"\x07" * 32)
        self.reads = 0
        self.writes = 0

    @contextlib.contextmanager
    def read(self, scope: str) -> Iterator[Any]:
        self.reads += 1
        with super().read(scope) as reader:
            yield reader

    @contextlib.contextmanager
    def write(self, scope: str) -> Iterator[Any]:
        self.writes += 1
        with super().write(scope) as unit:
            yield unit


def test_search_and_get_never_write_and_read_one_view() -> None:
    harness = ReadHarness()
    store = _CountingStore()
    harness.store = store
    harness.use(harness.policy)
    binding = make_binding()
    ids = [harness.admit(binding, orbit_spec(index)) for index in range(12)]
    before_state = harness.state(binding)
    before = _snapshot(store, binding.scope)
    scopes = store.scopes()
    store.reads = store.writes = 0
    pages = harness.walk(binding, "orbit", limit=5)
    assert store.reads == len(pages) == 3
    harness.search(binding, "orbit", limit=5, cursor="bogus")
    harness.search(
        binding, "orbit", capability_policy={"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    )
    for record_id in ids:
        ok(harness.get(binding, record_id))
    harness.get(binding, UNKNOWN_ID)
    ok(harness.search(make_binding("tenant-never-seen"), "orbit"))
    harness.get(make_binding("tenant-never-seen"), ids[0])
    assert store.writes == 0
    assert harness.state(binding) == before_state
    assert _snapshot(store, binding.scope) == before
    assert store.scopes() == scopes
    assert make_binding("tenant-never-seen").scope not in store._partitions


# --------------------------------------------------------------------------- infrastructure failures


def test_a_destroyed_body_key_is_blob_missing_never_an_empty_success(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=3))["records"][0]["record"]["record_id"]
    with small.store.read(binding.scope) as reader:
        row = reader.record(first)
    assert row is not None
    assert row.sealed is not None
    small.vault.destroy(row.sealed.key_ref)
    fail(small.search(binding, "orbit", limit=3), ErrorCode.BLOB_MISSING)
    fail(small.get(binding, first), ErrorCode.BLOB_MISSING)


def test_a_missing_body_is_blob_missing(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=3))["records"][0]["record"]["record_id"]
    with small.store.write(binding.scope) as unit:
        row = unit.record(first)
        assert row is not None
        unit.put_record(attrs.evolve(row, sealed=None))
    fail(small.search(binding, "orbit", limit=3), ErrorCode.BLOB_MISSING)
    fail(small.get(binding, first), ErrorCode.BLOB_MISSING)


def test_an_altered_body_is_journal_corrupt(small: ReadHarness) -> None:
    binding = make_binding()
    records = ok(small.search(binding, "orbit", limit=3))["records"]
    first, second = (packet["record"]["record_id"] for packet in records[:2])
    with small.store.write(binding.scope) as unit:
        row, other = unit.record(first), unit.record(second)
        assert row is not None
        assert other is not None
        assert row.sealed is not None
        flipped = bytes([row.sealed.ciphertext[0] ^ 1]) + row.sealed.ciphertext[1:]
        unit.put_record(
            attrs.evolve(
                row, sealed=SealedEnvelope(key_ref=row.sealed.key_ref, nonce=row.sealed.nonce, ciphertext=flipped)
            )
        )
        unit.put_record(attrs.evolve(other, sealed=row.sealed))  # a valid body sealed for another record
    fail(small.search(binding, "orbit", limit=1), ErrorCode.JOURNAL_CORRUPT)
    fail(small.get(binding, first), ErrorCode.JOURNAL_CORRUPT)
    fail(small.get(binding, second), ErrorCode.JOURNAL_CORRUPT)


def test_a_body_that_does_not_re_derive_is_journal_corrupt(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=3))["records"][0]["record"]["record_id"]
    with small.store.write(binding.scope) as unit:
        row = unit.record(first)
        assert row is not None
        forged = small.vault.seal(record_context(binding.scope, first), b'{"record_id": "' + first.encode() + b'"}')
        unit.put_record(attrs.evolve(row, sealed=forged))
    fail(small.search(binding, "orbit", limit=3), ErrorCode.JOURNAL_CORRUPT)
    fail(small.get(binding, first), ErrorCode.JOURNAL_CORRUPT)


class _StaleRanker(LexicalRanker):
    """Returns a record whose row is no longer eligible (as a stale external index would)."""

    def __init__(self, extra: str) -> None:
        self.extra = extra

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        return [RankedHit(record_id=self.extra, score=2.0, recency=1.0, lexical=1.0), *super().rank(reader, query)]


def test_a_ranked_record_that_is_not_eligible_is_projection_stale(small: ReadHarness) -> None:
    binding = make_binding()
    tombstoned = ok(small.search(binding, "orbit", limit=1))["records"][0]["record"]["record_id"]
    small.forget(binding, tombstoned)
    service = MemoryService(
        store=small.store, vault=small.vault, policy=small.policy, clock=small.clock, ranker=_StaleRanker(tombstoned)
    )
    args = {"query": "orbit", "purpose_ref": binding.purpose_ref}
    fail(service.call_tool("engram_memory_search", args, binding), ErrorCode.PROJECTION_STALE)


class _ForgettingVault:
    """Opens like the real vault, except that the first open of ``victim`` erases it meanwhile."""

    def __init__(self, harness: ReadHarness, victim: str, scope: str) -> None:
        self.inner = harness.vault
        self.store = harness.store
        self.victim = victim
        self.scope = scope
        self.fired = False

    @property
    def destroys_synchronously(self) -> bool:
        return True

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        return self.inner.seal(context, plaintext)

    def destroy(self, *key_refs: str) -> None:
        self.inner.destroy(*key_refs)

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        with self.store.read(self.scope) as reader:
            row = reader.record(self.victim)
        if not self.fired and row is not None and row.sealed == envelope:
            self.fired = True
            with self.store.write(self.scope) as unit:  # a forget that commits while the search reads
                unit.unindex(self.victim)
                unit.put_record(attrs.evolve(row, state="tombstoned", sealed=None))
            self.inner.destroy(envelope.key_ref)
            raise KeyUnavailableError("destroyed meanwhile")
        return self.inner.open(envelope, context)


def test_a_record_forgotten_during_the_read_is_retried_or_not_found(small: ReadHarness) -> None:
    binding = make_binding()
    victim = ok(small.search(binding, "orbit", limit=1))["records"][0]["record"]["record_id"]
    vault = _ForgettingVault(small, victim, binding.scope)
    service = MemoryService(store=small.store, vault=vault, policy=small.policy, clock=small.clock)
    args = {"query": "orbit", "purpose_ref": binding.purpose_ref, "limit": 50}
    value = ok(service.call_tool("engram_memory_search", args, binding))
    assert vault.fired
    assert victim not in {packet["record"]["record_id"] for packet in value["records"]}
    assert len(value["records"]) == 19
    other = value["records"][0]["record"]["record_id"]
    vault = _ForgettingVault(small, other, binding.scope)
    service = MemoryService(store=small.store, vault=vault, policy=small.policy, clock=small.clock)
    get_args = {"record_id": other, "purpose_ref": binding.purpose_ref}
    fail(service.call_tool("engram_memory_get", get_args, binding), ErrorCode.NOT_FOUND)


class _ErasingVault(_ForgettingVault):
    """Erases every record it is asked to open (a store under a storm of forgets)."""

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        with self.store.read(self.scope) as reader:
            victim = next((row for row in reader.records() if row.sealed == envelope), None)
        if victim is not None:
            self.victim, self.fired = victim.record_id, False
        return super().open(envelope, context)


def test_a_search_that_keeps_losing_records_is_store_unavailable(small: ReadHarness) -> None:
    binding = make_binding()
    vault = _ErasingVault(small, "", binding.scope)
    service = MemoryService(store=small.store, vault=vault, policy=small.policy, clock=small.clock)
    args = {"query": "orbit", "purpose_ref": binding.purpose_ref}
    error = fail(service.call_tool("engram_memory_search", args, binding), ErrorCode.STORE_UNAVAILABLE)
    assert error["retriable"] is True


def test_an_unreadable_body_is_journal_corrupt(small: ReadHarness) -> None:
    binding = make_binding()
    first = ok(small.search(binding, "orbit", limit=3))["records"][0]["record"]["record_id"]
    with small.store.write(binding.scope) as unit:
        row = unit.record(first)
        assert row is not None
        unit.put_record(attrs.evolve(row, sealed=small.vault.seal(record_context(binding.scope, first), b"not json")))
    fail(small.get(binding, first), ErrorCode.JOURNAL_CORRUPT)


class _RaisingPolicy(DefaultPolicy):
    def redaction_allowlist(self, binding: Any) -> tuple[str, ...] | None:
        raise RuntimeError("policy backend down")


def test_a_failing_redaction_policy_is_policy_unavailable(small: ReadHarness) -> None:
    binding = make_binding()
    record_id = ok(small.search(binding, "orbit", limit=1))["records"][0]["record"]["record_id"]
    small.use(_RaisingPolicy(admission="accept"))
    fail(small.search(binding, "orbit"), ErrorCode.POLICY_UNAVAILABLE)
    fail(small.get(binding, record_id), ErrorCode.POLICY_UNAVAILABLE)
    fail(small.search(binding, "nothingmatches"), ErrorCode.POLICY_UNAVAILABLE)


class _BrokenStore(InMemoryStore):
    def __init__(self, error: Exception | None) -> None:
        super().__init__()
        self.error = error

    @contextlib.contextmanager
    def read(self, scope: str) -> Iterator[Any]:
        if self.error is not None:
            raise self.error
        with super().read(scope) as reader:
            yield reader


def test_store_failures_are_reported_never_empty() -> None:
    binding = make_binding()
    for error, code in (
        (StoreUnavailableError("locked"), ErrorCode.STORE_UNAVAILABLE),
        (StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "bad row"), ErrorCode.JOURNAL_CORRUPT),
    ):
        harness = ReadHarness()
        harness.store = _BrokenStore(error)
        harness.use(harness.policy)
        fail(harness.search(binding, "orbit"), code)
        fail(harness.get(binding, UNKNOWN_ID), code)


LEAKY_DETAIL = "secret detail: dsn=postgres://memory:hunter2@db.internal/tenant-a"


class _UnexpectedReadFailure(StoreWrapper):
    """Writes go through; opening a read view raises an exception that no port declares."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.reads = 0

    def read(self, scope: str) -> contextlib.AbstractContextManager[StoreReader]:
        self.reads += 1
        raise RuntimeError(LEAKY_DETAIL)


def test_an_unexpected_read_failure_is_capability_unavailable_and_leaks_nothing() -> None:
    """A non-port exception inside search or get is CAPABILITY_UNAVAILABLE (not retriable) with the
    constant message; neither the exception's text nor its type reaches the envelope."""
    harness = ReadHarness()
    binding = make_binding()
    record_id = harness.admit(binding, DocSpec(key="unexpected-read-1", primary="orbit unexpected"))
    store = _UnexpectedReadFailure(harness.store)
    harness.service = MemoryService(store=store, vault=harness.vault, policy=harness.policy, clock=harness.clock)
    expected = {"code": "CAPABILITY_UNAVAILABLE", "message": "a required capability is unavailable", "retriable": False}
    purpose = binding.purpose_ref
    for tool, args in (
        ("engram_memory_search", {"query": "orbit", "purpose_ref": purpose}),
        ("engram_memory_get", {"record_id": record_id, "purpose_ref": purpose}),
        ("engram_memory_get", {"record_id": UNKNOWN_ID, "purpose_ref": purpose}),
    ):
        reads = store.reads
        envelope = harness.call(tool, args, binding)
        assert store.reads == reads + 1, "the failure must come from the store's read"
        assert set(envelope) == {"ok", "auditId", "redactionClass", "error"}
        assert envelope["ok"] is False
        assert envelope["error"] == expected
        text = json.dumps(envelope, ensure_ascii=False)
        for leaked in (LEAKY_DETAIL, "secret detail", "hunter2", "db.internal", "RuntimeError"):
            assert leaked not in text


def test_a_last_page_is_bounded_by_the_transport_cap_without_a_cursor() -> None:
    """The page that ends the ordering issues no cursor, so it may use the bytes a cursor would take."""

    def search_value(last: int) -> dict[str, Any]:
        harness = ReadHarness()
        binding = make_binding()
        texts = ("w" * 65_000,) * 16 + ("w" * last,)
        harness.admit(binding, DocSpec(key="big-doc-1", primary="mammoth", context=texts))
        return harness.search(binding, "mammoth", max_packet_bytes=TRANSPORT_CAP)

    probe = ok(search_value(1000))
    assert "next_page_cursor" not in probe
    exact = 1000 + TRANSPORT_CAP - len(canonical_bytes(probe))  # the value then has exactly the cap's size
    served = ok(search_value(exact))
    assert len(canonical_bytes(served)) == TRANSPORT_CAP
    assert "next_page_cursor" not in served
    fail(search_value(exact + 1), ErrorCode.RESULT_TOO_LARGE)


class _FailingRanker(LexicalRanker):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        raise self.error


def test_a_failing_ranker_is_ranking_unavailable_and_store_failures_keep_their_code() -> None:
    binding = make_binding()
    for error, code in (
        (ConnectionError("semantic channel down"), ErrorCode.RANKING_UNAVAILABLE),
        (StoreUnavailableError("locked"), ErrorCode.STORE_UNAVAILABLE),
        (StoreCorruptError(ErrorCode.JOURNAL_CORRUPT, "bad row"), ErrorCode.JOURNAL_CORRUPT),
    ):
        harness = ReadHarness()
        harness.admit(binding, DocSpec(key="ranker-failure-1", primary="orbit"))
        harness.use_ranker(_FailingRanker(error))
        envelope = harness.search(binding, "orbit")
        fail(envelope, code)
        assert envelope["error"]["retriable"] is (code is not ErrorCode.JOURNAL_CORRUPT)


@pytest.mark.parametrize(
    ("column", "value"),
    [("expires_at_ms", None), ("valid_to", None), ("valid_from", T0_MS - 40 * DAY_MS)],
)
def test_a_row_whose_times_disagree_with_its_sealed_body_is_never_served(column: str, value: int | None) -> None:
    harness = ReadHarness()
    binding = make_binding()
    expires = format_instant(START + timedelta(days=1))
    spec = DocSpec(key="tampered-times-1", primary="quasar", t_end=T0_MS + DAY_MS, expires_at=expires)
    record_id = harness.admit(binding, spec)
    assert ok(harness.get(binding, record_id))["record"]["record_id"] == record_id
    with harness.store.read(binding.scope) as reader:
        row = reader.record(record_id)
    assert row is not None
    with harness.store.write(binding.scope) as unit:  # an edit of the row alone, as on disk
        changes: dict[str, Any] = {column: value}
        unit.put_record(attrs.evolve(row, **changes))

    fail(harness.get(binding, record_id), ErrorCode.JOURNAL_CORRUPT)
    fail(harness.search(binding, "quasar"), ErrorCode.JOURNAL_CORRUPT)


class _NetworkRanker(LexicalRanker):
    """A ranker that says it contacts the network; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def uses_network(self) -> bool:
        return True

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        self.calls += 1
        return super().rank(reader, query)


@pytest.mark.parametrize("overridden", [False, True], ids=["policy", "kit-policy-override"])
@pytest.mark.parametrize(
    ("network_rule", "policy_allows", "runs"),
    [("forbid", False, False), ("forbid", True, False), ("allow", False, False), ("allow", True, True)],
)
def test_a_ranker_that_uses_the_network_runs_only_when_search_and_policy_both_allow_it(
    network_rule: str, policy_allows: bool, runs: bool, overridden: bool
) -> None:
    """Both the search and the policy must allow it; the kit's ``PolicyOverride`` keeps its base's network rule."""
    harness = ReadHarness()
    binding = make_binding()
    record_id = harness.admit(binding, DocSpec(key="network-ranker-1", primary="nebula"))
    ranker = _NetworkRanker()
    policy = DefaultPolicy(admission="accept", network=policy_allows)
    harness.use(PolicyOverride(policy, policy_version="override-1") if overridden else policy)
    harness.use_ranker(ranker)
    envelope = harness.search(binding, "nebula", capability_policy={"network": network_rule})
    if runs:
        assert [packet["record"]["record_id"] for packet in ok(envelope)["records"]] == [record_id]
        assert ranker.calls == 1
    else:
        fail(envelope, ErrorCode.RANKING_UNAVAILABLE)
        assert ranker.calls == 0


def test_the_reference_ranker_never_uses_the_network(small: ReadHarness) -> None:
    assert LexicalRanker().uses_network is False
    binding = make_binding()
    assert ok(small.search(binding, "orbit", capability_policy={"network": "forbid"}))["records"]


def _binary_id(number: int) -> str:
    return "mem_" + format(number, "b").translate(str.maketrans("01", "ab"))


class _ReshapingRanker(LexicalRanker):
    def __init__(self, transform: Any) -> None:
        self.transform = transform

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        hits: list[RankedHit] = self.transform(super().rank(reader, query))
        return hits


def _scored(value: object) -> Any:
    return lambda hits: [hit._replace(score=value) for hit in hits]


@pytest.mark.parametrize(
    "transform",
    [
        lambda hits: hits + hits[:1],
        lambda hits: hits + [RankedHit(_binary_id(n), 0.0, 1.0, 0.0) for n in range(2000)],  # all distinct
        tuple,
        _scored(float("nan")),
        _scored(float("-inf")),
        _scored("1.0"),
        _scored(None),
        _scored(True),  # noqa: FBT003 - the value under test
        _scored(10**400),  # no float holds it
        lambda hits: [hit._replace(recency=float("inf")) for hit in hits],
        lambda hits: [hit._replace(record_id=7) for hit in hits],
        lambda hits: [hit._replace(record_id=hit.record_id + "\u00e9") for hit in hits],
        lambda hits: [hit._replace(record_id=hit.record_id + "\0") for hit in hits],
        lambda hits: [hit._replace(record_id=hit.record_id + "\ud800") for hit in hits],
    ],
    ids=[
        "a record twice",
        "over 2,000 candidates",
        "a tuple",
        "a NaN score",
        "an infinite score",
        "a str score",
        "a None score",
        "a bool score",
        "an int no float holds",
        "an infinite recency",
        "an int record id",
        "a non-ASCII record id",
        "a record id with NUL",
        "a lone surrogate in a record id",
    ],
)
@pytest.mark.parametrize("limit", [10, 1])  # with limit 1 the page issues a cursor (the ordering digest)
def test_a_ranker_answer_that_breaks_the_contract_is_ranking_unavailable(transform: Any, limit: int) -> None:
    harness = ReadHarness()
    binding = make_binding()
    for key in ("broken-ranker-1", "broken-ranker-2"):
        harness.admit(binding, DocSpec(key=key, primary="pulsar"))
    state = harness.state(binding)
    harness.use_ranker(_ReshapingRanker(transform))
    error = fail(harness.search(binding, "pulsar", limit=limit), ErrorCode.RANKING_UNAVAILABLE)
    assert error["retriable"] is True
    with pytest.raises(EngramError) as info:  # the typed search too: never a CanonicalError or struct.error
        harness.service.search(
            binding, parse_args(SearchArgs, {"query": "pulsar", "purpose_ref": binding.purpose_ref, "limit": limit})
        )
    assert info.value.code is ErrorCode.RANKING_UNAVAILABLE
    assert harness.state(binding) == state


def test_int_and_negative_zero_scores_answer_as_json_floats() -> None:
    """A distance ranker's best hit scores -0.0, which JSON cannot carry: it answers 0.0, pages included."""
    harness = ReadHarness()
    binding = make_binding()
    ids = [harness.admit(binding, DocSpec(key=f"zero-score-{n}", primary="pulsar")) for n in range(2)]

    def distances(hits: list[RankedHit]) -> list[RankedHit]:
        return [hit._replace(score=-0.0 if index == 0 else -1, recency=1) for index, hit in enumerate(hits)]

    harness.use_ranker(_ReshapingRanker(distances))
    first = ok(harness.search(binding, "pulsar", limit=1))
    [packet] = first["records"]
    assert (type(packet["score"]), math.copysign(1.0, packet["score"])) == (float, 1.0)
    assert packet["score"] == 0.0
    second = ok(harness.search(binding, "pulsar", limit=1, cursor=first["next_page_cursor"]))
    [last] = second["records"]
    assert (type(last["score"]), last["score"]) == (float, -1.0)
    assert sorted([packet["record"]["record_id"], last["record"]["record_id"]]) == sorted(ids)
