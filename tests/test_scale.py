"""Scale: thousands of admitted records in one SQLite scope, searched through the service.

The scope is loaded with the store-level fast path (``preload_admitted``, proven equivalent to the
service in ``test_corpus.py``); everything measured afterwards goes through ``call_tool``. ``N``
defaults to 5,000 so the module stays well under 30 s in CI; set ``ENGRAM_SCALE_N`` for a bigger
local run (the 100k figures belong to ``benchmarks/run.py``). No timing is asserted: CI machines
are too noisy. What is asserted is what must hold at any size: index statistics, ranking and
paging, parity with the in-memory store, isolation from a neighbour tenant, erasure, and a
journal that still verifies.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from engram_memory import Confirmation, DefaultPolicy, HostBinding, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ranking.tokenizer import field_texts, tokenize
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing.corpus import PURPOSE, SyntheticCorpus, admission_key, preload_admitted

N = int(os.environ.get("ENGRAM_SCALE_N", "5000"))
NEIGHBOUR_N = 200
PARITY_N = 1000
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
POLICY = DefaultPolicy(admission="accept")
CORPUS = SyntheticCorpus()


def binding_for(tenant: int) -> HostBinding:
    return CORPUS.tenants[tenant].binding("scale")


@dataclass
class Loaded:
    service: MemoryService
    clock: ManualClock
    ids: list[str]
    neighbour_ids: list[str]
    path: Path


def _load(service: MemoryService, tenant: int, count: int) -> list[str]:
    return preload_admitted(
        service.store,
        service.vault,
        binding_for(tenant),
        CORPUS.documents(tenant, count),
        policy=POLICY,
        now=NOW,
        batch=1000,
    )


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    path: Path = tmp_path_factory.mktemp("scale") / "scale.db"
    clock = ManualClock(NOW + timedelta(hours=1))
    service = MemoryService(
        store=SQLiteStore(path, synchronous="NORMAL"), vault=InMemoryKeyVault(), policy=POLICY, clock=clock
    )
    ids = _load(service, 0, N)
    neighbour_ids = _load(service, 1, NEIGHBOUR_N)
    yield Loaded(service=service, clock=clock, ids=ids, neighbour_ids=neighbour_ids, path=path)
    service.close()


def _value(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["ok"] is True, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _search(service: MemoryService, binding: HostBinding, terms: list[str], **extra: Any) -> dict[str, Any]:
    args = {"query": " ".join(terms), "purpose_ref": PURPOSE, **extra}
    return _value(service.call_tool("engram_memory_search", args, binding))


def _text(record: dict[str, Any]) -> set[str]:
    return {token for text in field_texts(record).values() for token in tokenize(text)}


def test_index_statistics_count_every_record(loaded: Loaded) -> None:
    with loaded.service.store.read(binding_for(0).scope) as reader:
        stats = reader.index_stats()
        assert stats.documents == N
        assert reader.high_water() == 2 * N
    with loaded.service.store.read(binding_for(1).scope) as reader:
        assert reader.index_stats().documents == NEIGHBOUR_N


@pytest.mark.parametrize("selectivity", ["selective", "common"])
@pytest.mark.parametrize("terms", [1, 3, 8])
def test_search_ranks_records_that_contain_the_terms(loaded: Loaded, selectivity: str, terms: int) -> None:
    binding = binding_for(0)
    for query in CORPUS.queries(3, terms, selectivity):  # type: ignore[arg-type]
        value = _search(loaded.service, binding, list(query))
        records = [packet["record"] for packet in value["records"]]
        assert [packet["rank"] for packet in value["records"]] == list(range(1, len(records) + 1))
        scores = [packet["score"] for packet in value["records"]]
        assert scores == sorted(scores, reverse=True)
        for record in records:
            assert _text(record) & set(query)
            assert record["record_id"] in loaded.ids
        assert value["rank_receipt"]["candidate_count"] <= 2000
        if selectivity == "common":
            assert len(records) == 10


def test_a_common_query_is_capped_at_2000_candidates_and_pages_without_repeats(loaded: Loaded) -> None:
    binding = binding_for(0)
    query = CORPUS.query_terms(8, "common")
    seen: list[str] = []
    value = _search(loaded.service, binding, query, limit=50)
    candidates = value["rank_receipt"]["candidate_count"]
    assert 100 < candidates <= 2000
    pages = 0
    while len(seen) < 200:
        page = [packet["record"]["record_id"] for packet in value["records"]]
        assert page  # max_packet_bytes (64 KiB) may end a page before 50 records, never at 0
        seen += page
        pages += 1
        value = _search(loaded.service, binding, query, limit=50, page_cursor=value["next_page_cursor"])
    assert len(seen) == len(set(seen))
    assert pages >= 4


def test_parity_with_the_in_memory_store(loaded: Loaded) -> None:
    """Same documents, same clock: SQLite and in-memory answer with the same ranked records."""
    clock = ManualClock(NOW + timedelta(hours=1))
    sqlite_side = MemoryService(
        store=SQLiteStore(loaded.path.with_name("parity.db"), synchronous="NORMAL"),
        vault=InMemoryKeyVault(),
        policy=POLICY,
        clock=clock,
    )
    memory_side = MemoryService(store=InMemoryStore(), vault=InMemoryKeyVault(), policy=POLICY, clock=clock)
    try:
        assert _load(sqlite_side, 2, PARITY_N) == _load(memory_side, 2, PARITY_N)
        binding = binding_for(2)
        for selectivity in ("selective", "common"):
            for query in CORPUS.queries(4, 3, selectivity):
                a = _search(sqlite_side, binding, list(query))
                b = _search(memory_side, binding, list(query))
                assert a["records"] == b["records"]
                assert a["rank_receipt"]["ordered_ids_digest"] == b["rank_receipt"]["ordered_ids_digest"]
                assert a["rank_receipt"]["candidate_count"] == b["rank_receipt"]["candidate_count"]
    finally:
        sqlite_side.close()


def test_the_neighbour_tenant_sees_only_its_own_records(loaded: Loaded) -> None:
    neighbour = binding_for(1)
    query = CORPUS.query_terms(8, "common")
    value = _search(loaded.service, neighbour, query, limit=50)
    assert value["rank_receipt"]["candidate_count"] <= NEIGHBOUR_N
    assert {packet["record"]["record_id"] for packet in value["records"]} <= set(loaded.neighbour_ids)
    stranger = loaded.ids[0]
    refused = loaded.service.call_tool("engram_memory_get", {"record_id": stranger, "purpose_ref": PURPOSE}, neighbour)
    assert refused["error"]["code"] == "NOT_FOUND"


def test_writes_on_top_of_the_scope_then_forget_and_verify(loaded: Loaded) -> None:
    service, binding = loaded.service, binding_for(0)
    # capture + admit a new record on top of N
    args = CORPUS.capture_arguments(0, N)
    captured = _value(service.call_tool("engram_memory_capture", args, binding))
    admit = {"candidate_id": captured["candidate_id"], "idempotency_key": admission_key(args["idempotency_key"])}
    record_id = _value(service.call_tool("engram_memory_request_admission", admit, binding))["outcome"]["record_id"]
    got = _value(service.call_tool("engram_memory_get", {"record_id": record_id, "purpose_ref": PURPOSE}, binding))
    assert got["record"]["record_id"] == record_id

    # forget a preloaded record: gone from search and get, index shrinks, journal still verifies
    victim = next(
        rid
        for i, rid in enumerate(loaded.ids)
        if "t_end" not in CORPUS.capture_arguments(0, i)["payload"]["valid_time"]
    )
    record = _value(service.call_tool("engram_memory_get", {"record_id": victim, "purpose_ref": PURPOSE}, binding))[
        "record"
    ]
    forget = {"record_id": victim, "idempotency_key": "scale-forget-000001", "reason_ref": "reason:scale"}
    now = loaded.clock.now()
    confirmation = Confirmation(
        id="confirmation-" + uuid.uuid4().hex,
        tool="engram_memory_forget",
        target=victim,
        operation_digest=service.operation_digest("engram_memory_forget", forget, binding),
        requested_at=now - timedelta(seconds=10),
        approved_at=now,
    )
    _value(service.call_tool("engram_memory_forget", forget, attrs.evolve(binding, confirmation=confirmation)))
    gone = service.call_tool("engram_memory_get", {"record_id": victim, "purpose_ref": PURPOSE}, binding)
    assert gone["error"]["code"] == "NOT_FOUND"
    primary = tokenize(field_texts(record)["primary"])
    value = _search(service, binding, primary[:8], limit=50)
    assert victim not in {packet["record"]["record_id"] for packet in value["records"]}
    with service.store.read(binding.scope) as reader:
        assert reader.index_stats().documents == N  # + 1 admitted - 1 forgotten
    owner = CORPUS.tenants[0]
    assert MemoryAdmin(service).verify(tenant_id=owner.tenant_id, workspace_id=owner.workspace_id).ok
