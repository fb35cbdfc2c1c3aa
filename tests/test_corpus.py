"""The synthetic corpus: deterministic, valid capture arguments, Zipf vocabulary, query selectivity.

Also checks that the store-level fast path (``preload_admitted``) writes exactly what the service
writes for the same captures and admissions (same state digest), so benchmarks and scale tests
that use it measure the real thing.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from engram_memory import DefaultPolicy, HostBinding, ManualClock, MemoryAdmin, MemoryService
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.ranking.tokenizer import term_frequencies, tokenize
from engram_memory.records import complete_payload
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.corpus import (
    PURPOSE,
    SELECTIVITY_BANDS,
    CorpusSpec,
    SyntheticCorpus,
    admission_key,
    preload_admitted,
)
from engram_memory.wire.args import CaptureArgs
from engram_memory.wire.converter import parse_args, unstructure_args

CORPUS = SyntheticCorpus()
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def binding_for(tenant: int, corpus: SyntheticCorpus = CORPUS) -> HostBinding:
    return corpus.tenants[tenant].binding("corpus")


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_corpus() -> None:
    other = SyntheticCorpus()
    assert other.vocabulary == CORPUS.vocabulary
    assert other.tenants == CORPUS.tenants
    assert [other.capture_arguments(t, i) for t in range(4) for i in range(20)] == [
        CORPUS.capture_arguments(t, i) for t in range(4) for i in range(20)
    ]
    assert other.queries(5, 3, "common") == CORPUS.queries(5, 3, "common")


def test_a_document_does_not_depend_on_what_was_generated_before() -> None:
    alone = SyntheticCorpus().capture_arguments(2, 777)
    after_others = SyntheticCorpus()
    list(after_others.documents(2, 50))
    list(after_others.documents(0, 10, start=770))
    assert after_others.capture_arguments(2, 777) == alone
    assert list(CORPUS.documents(2, 3, start=776))[1] == alone


def test_golden_document() -> None:
    """Pins the generator: a change here changes every benchmark figure's meaning."""
    args = CORPUS.capture_arguments(0, 0)
    assert args["idempotency_key"] == "corpus-20261101-t00-000000000"
    assert CORPUS.vocabulary[:3] == ("lurclaslou", "biograirk", "cyspoum")
    assert args["payload"]["components"][0]["component_id"] == "c-decision"
    assert len(CORPUS.vocabulary) == 20_000


def test_another_seed_another_corpus() -> None:
    other = SyntheticCorpus(CorpusSpec(seed=7))
    assert other.vocabulary != CORPUS.vocabulary
    assert other.capture_arguments(0, 0) != CORPUS.capture_arguments(0, 0)


# --------------------------------------------------------------------------- shape


def test_vocabulary_is_unique_and_survives_the_tokenizer() -> None:
    assert len(set(CORPUS.vocabulary)) == len(CORPUS.vocabulary)
    for word in CORPUS.vocabulary:
        assert 3 <= len(word) <= 14
        assert tokenize(word) == [word]


def test_zipf_probabilities() -> None:
    probabilities = CORPUS.probabilities
    assert math.isclose(math.fsum(probabilities), 1.0)
    assert all(a > b for a, b in itertools.pairwise(probabilities))
    counts = Counter(word for args in CORPUS.documents(1, 400) for word in tokenize(_all_text(args)))
    rank = {word: position for position, word in enumerate(CORPUS.vocabulary, start=1)}
    # the empirical frequency of a head word is within 25 % of the law's prediction
    tokens = sum(counts[word] for word in rank)
    for word in CORPUS.vocabulary[:5]:
        expected = CORPUS.probabilities[rank[word] - 1] * tokens
        assert abs(counts[word] - expected) < 0.25 * expected
    # and rank 1 is about 10x rank 30 with s = 1, q = 2.7: (30 + 2.7) / (1 + 2.7) = 8.8
    ratio = counts[CORPUS.vocabulary[0]] / counts[CORPUS.vocabulary[29]]
    assert 6 < ratio < 13


def _all_text(args: dict[str, object]) -> str:
    payload = args["payload"]
    assert isinstance(payload, dict)
    return " ".join(component["text"] for component in payload["components"])


@pytest.mark.parametrize("tenant", [0, 3])
def test_capture_arguments_are_valid_and_already_in_json_form(tenant: int) -> None:
    for args in CORPUS.documents(tenant, 60):
        parsed = parse_args(CaptureArgs, args)
        assert unstructure_args(parsed) == args  # the form the service digests
        assert parsed.payload.purpose_ref == PURPOSE
        assert parsed.idempotency_key.startswith(f"corpus-{CORPUS.spec.seed}-t{tenant:02d}-")


def test_text_lengths_and_postings_per_document() -> None:
    spec = CORPUS.spec
    distinct: list[int] = []
    kinds: Counter[str] = Counter()
    for args in CORPUS.documents(0, 300):
        payload = args["payload"]
        for component in payload["components"]:
            kinds[component["kind"]] += 1
            words = len(component["text"].split())
            low, high = {
                "decision": spec.decision_words,
                "context": spec.context_words,
                "evidence": spec.evidence_words,
            }[component["kind"]]
            assert low <= words <= high
        assert spec.citations[0] <= len(payload["citations"]) <= spec.citations[1]
        _, terms = term_frequencies(complete_payload(payload, "scope"))
        distinct.append(len(terms))
    assert kinds["decision"] == 300
    assert 100 < kinds["evidence"] < 200  # evidence_probability 0.5
    assert 45 < statistics.mean(distinct) < 90  # index postings per document, like the prototype's ~60


def test_tenants_are_distinct() -> None:
    assert len({t.tenant_id for t in CORPUS.tenants}) == CORPUS.spec.tenants
    assert len({t.principal for t in CORPUS.tenants}) == CORPUS.spec.tenants
    refs = {
        citation["source_ref"].split(":")[1].split("/")[0]
        for t in range(CORPUS.spec.tenants)
        for args in CORPUS.documents(t, 5)
        for citation in args["payload"]["citations"]
    }
    assert len(refs) > CORPUS.spec.tenants  # each tenant cites its own projects


# --------------------------------------------------------------------------- queries


def test_query_terms_come_from_their_band() -> None:
    for selectivity in SELECTIVITY_BANDS:
        band = set(CORPUS.band(selectivity))  # type: ignore[arg-type]
        for terms in CORPUS.queries(4, 3, selectivity):  # type: ignore[arg-type]
            assert len(set(terms)) == 3
            assert set(terms) <= band


def test_selectivity_matches_the_documents() -> None:
    documents = [set(tokenize(_all_text(args))) for args in CORPUS.documents(0, 2000)]

    def fraction(word: str) -> float:
        return sum(word in doc for doc in documents) / len(documents)

    common = [fraction(w) for w in CORPUS.query_terms(20, "common")]
    selective = [fraction(w) for w in CORPUS.query_terms(40, "selective")]
    low, high = SELECTIVITY_BANDS["common"]
    assert low * 0.7 < statistics.mean(common) < high
    assert statistics.mean(selective) < SELECTIVITY_BANDS["selective"][1]


def test_query_terms_refuses_an_impossible_request() -> None:
    with pytest.raises(ValueError, match="band"):
        CORPUS.query_terms(3, (0.9, 1.0))


@pytest.mark.parametrize(
    "spec",
    [
        {"vocabulary_size": 10},
        {"tenants": 0},
        {"context_words": (5, 2)},
        {"citations": (0, 2)},
    ],
)
def test_spec_validation(spec: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must"):
        CorpusSpec(**spec)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the fast path


def _service(store: InMemoryStore, clock: ManualClock) -> MemoryService:
    return MemoryService(store=store, vault=InMemoryKeyVault(), policy=DefaultPolicy(admission="accept"), clock=clock)


DEFAULT_FAMILIES: dict[str, Any] = {"reconciliation": {"family_refs": []}}


def test_preload_writes_what_the_service_writes() -> None:
    clock = ManualClock(NOW)
    binding = binding_for(1)
    documents = list(CORPUS.documents(1, 12))
    for position, spelled_out in ((2, {"retention": {"derivative_rule": "make-ineligible"}}), (4, DEFAULT_FAMILIES)):
        documents[position] = {**documents[position], "payload": {**documents[position]["payload"], **spelled_out}}

    through_service = _service(InMemoryStore(), clock)
    service_ids = []
    for args in documents:
        value = through_service.call_tool("engram_memory_capture", args, binding)["output"]["value"]
        admit = {"candidate_id": value["candidate_id"], "idempotency_key": admission_key(args["idempotency_key"])}
        outcome = through_service.call_tool("engram_memory_request_admission", admit, binding)["output"]["value"]
        service_ids.append(outcome["outcome"]["record_id"])

    preloaded = _service(InMemoryStore(), clock)
    ids = preload_admitted(
        preloaded.store, preloaded.vault, binding, documents, policy=DefaultPolicy(admission="accept"), now=NOW, batch=5
    )
    assert ids == service_ids
    owner = CORPUS.tenants[1]
    digests = [
        MemoryAdmin(service).state_digest(tenant_id=owner.tenant_id, workspace_id=owner.workspace_id)
        for service in (through_service, preloaded)
    ]
    assert digests[0] == digests[1]
    assert MemoryAdmin(preloaded).verify(tenant_id=owner.tenant_id, workspace_id=owner.workspace_id).ok
    with through_service.store.read(binding.scope) as a, preloaded.store.read(binding.scope) as b:
        assert [e.body for e in a.events()] == [e.body for e in b.events()]
        assert a.index_stats() == b.index_stats()
        for args in documents:
            key = args["idempotency_key"]
            for k in (key, admission_key(key)):
                assert a.idempotency(binding.principal, k) == b.idempotency(binding.principal, k)

    # the preloaded scope behaves like one built through the service: replays, search, get
    for position in (2, 3, 4):  # 2 and 4 spell a payload default out, which the intent counts as omitted
        again = preloaded.call_tool("engram_memory_capture", documents[position], binding)["output"]["value"]
        assert again["status"] == "duplicate_exact", position
    query = " ".join(tokenize(documents[5]["payload"]["components"][0]["text"])[:3])
    found = preloaded.call_tool("engram_memory_search", {"query": query, "purpose_ref": PURPOSE}, binding)
    assert ids[5] in [packet["record"]["record_id"] for packet in found["output"]["value"]["records"]]
