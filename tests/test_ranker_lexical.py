"""``LexicalRanker``: the shipped ranker conformance suite, the formulas and the candidate cap."""

from __future__ import annotations

import math

import pytest

from engram_memory.canonical import Domain, digest
from engram_memory.context import scope_key
from engram_memory.ports import IndexedDocument, RankingQuery, RecordRow, SealedEnvelope
from engram_memory.ranking.bm25f import (
    average_lengths,
    combined_score,
    field_score,
    idf,
    recency,
    rrf_normalised,
)
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing.ranker import RankerConformance

NOW = 1_767_225_600_000
DAY = 86_400_000


class TestLexicalRankerConformance(RankerConformance):
    @pytest.fixture
    def ranker(self) -> LexicalRanker:
        return LexicalRanker()


def test_profile_channels_and_config() -> None:
    ranker = LexicalRanker()
    assert ranker.profile == "offline_lexical_v1"
    assert ranker.channels == frozenset({"lexical"})
    config = ranker.config()
    assert config["profile_version"] == "1.0.0"
    assert config["scoring_formula_ref"] == "graphify-memory:offline-lexical-recency:v1"
    assert config["tokenizer_version"] == "graphify-memory:tokenizer:v1"
    assert config["bm25"] == {"k1": 1.2, "b": 0.75}
    assert config["field_weights"] == {
        "primary": 3.0,
        "decision": 2.0,
        "evidence": 1.5,
        "context": 1.0,
        "citations": 0.5,
    }
    assert config["rrf_k"] == 60
    assert config["half_life_ms"] == 2_592_000_000
    assert config["weights"] == {"lexical": 0.85, "recency": 0.15}
    assert config["candidate_cap"] == 2000
    assert config["corpus_statistics"] == "scope_index"
    assert digest(Domain.RECALL_PROFILE_CONFIG, config) == digest(Domain.RECALL_PROFILE_CONFIG, ranker.config())


def test_formulas() -> None:
    assert idf(10, 1) == pytest.approx(math.log(1 + 9.5 / 1.5))
    assert idf(1, 1) == pytest.approx(math.log(1 + 0.5 / 1.5))
    assert idf(3, 3) > 0
    assert average_lengths(4, (8, 0, 2, 0, 4)) == (2.0, 1.0, 0.5, 1.0, 1.0)
    assert average_lengths(0, (0, 0, 0, 0, 0)) == (1.0,) * 5
    # one occurrence in a field of average length: sat = 1·2.2 / (1 + 1.2) = 1
    assert field_score((1, 0, 0, 0, 0), (4, 0, 0, 0, 0), (4.0, 1.0, 1.0, 1.0, 1.0)) == pytest.approx(3.0)
    assert field_score((0, 0, 0, 0, 1), (0, 0, 0, 0, 4), (1.0, 1.0, 1.0, 1.0, 4.0)) == pytest.approx(0.5)
    assert field_score((0, 0, 0, 0, 0), (3, 3, 3, 3, 3), (3.0,) * 5) == 0.0
    # saturation: doubling tf less than doubles the contribution; longer fields count less
    one = field_score((1, 0, 0, 0, 0), (4, 0, 0, 0, 0), (4.0, 1.0, 1.0, 1.0, 1.0))
    two = field_score((2, 0, 0, 0, 0), (4, 0, 0, 0, 0), (4.0, 1.0, 1.0, 1.0, 1.0))
    assert one < two < 2 * one
    assert field_score((1, 0, 0, 0, 0), (8, 0, 0, 0, 0), (4.0, 1.0, 1.0, 1.0, 1.0)) < one
    assert rrf_normalised(0) == []
    assert rrf_normalised(3) == pytest.approx([1.0, 61 / 62, 61 / 63])
    assert recency(None, NOW) == 1.0
    assert recency(NOW + DAY, NOW) == 1.0
    assert recency(NOW, NOW) == 1.0
    assert recency(NOW - 30 * DAY, NOW) == pytest.approx(0.5)
    assert recency(NOW - 60 * DAY, NOW) == pytest.approx(0.25)
    assert combined_score(1.0, 1.0) == 1.0
    assert combined_score(0.5, 0.0) == pytest.approx(0.425)


def _seal() -> SealedEnvelope:
    return SealedEnvelope(key_ref="key_x", nonce=b"\x00" * 12, ciphertext=b"x")


def _admit(store: InMemoryStore, scope: str, record_id: str, primary: tuple[str, ...], **times: int | None) -> None:
    valid_from = times.get("valid_from") or NOW - DAY
    counts: dict[str, int] = {}
    for token in primary:
        counts[token] = counts.get(token, 0) + 1
    with store.write(scope) as unit:
        unit.put_record(
            RecordRow(
                record_id=record_id,
                state="accepted_current",
                record_digest="sha256:" + "0" * 64,
                payload_digest="sha256:" + "1" * 64,
                sealed=_seal(),
                recorded_cursor=1,
                accepted_cursor=1,
                valid_from=valid_from,
                valid_to=None,
                expires_at_ms=None,
            )
        )
        unit.index_document(
            IndexedDocument(
                record_id=record_id,
                lengths=(len(primary), 0, 0, 0, 0),
                terms={term: (count, 0, 0, 0, 0) for term, count in counts.items()},
                valid_from=valid_from,
                valid_to=None,
                expires_at_ms=None,
            )
        )


def _rank(store: InMemoryStore, scope: str, *terms: str) -> list[tuple[str, float]]:
    with store.read(scope) as reader:
        hits = LexicalRanker().rank(reader, RankingQuery(terms=terms, valid_as_of=NOW, now_ms=NOW))
    return [(hit.record_id, hit.score) for hit in hits]


def test_the_candidate_cap_keeps_the_best_scores_not_the_first_ids() -> None:
    store = InMemoryStore()
    scope = scope_key("tenant-cap", "w")
    for index in range(2100):
        primary = ("alpha", "filler") if index < 100 else ("alpha", "alpha")
        _admit(store, scope, f"mem_{index:04d}", primary)
    hits = _rank(store, scope, "alpha")
    assert len(hits) == 2000
    assert {record_id for record_id, _ in hits} == {f"mem_{index:04d}" for index in range(100, 2100)}
    assert [record_id for record_id, _ in hits] == sorted(record_id for record_id, _ in hits)


def test_query_terms_are_deduplicated() -> None:
    store = InMemoryStore()
    scope = scope_key("tenant-dedup", "w")
    _admit(store, scope, "mem_a", ("alpha", "beta"))
    _admit(store, scope, "mem_b", ("beta", "beta", "gamma"))
    _admit(store, scope, "mem_c", ("alpha", "alpha", "alpha", "delta"))
    assert _rank(store, scope, "alpha", "beta") == _rank(store, scope, "alpha", "beta", "alpha", "beta", "beta")


def test_statistics_are_per_scope() -> None:
    store = InMemoryStore()
    mine, theirs = scope_key("tenant-mine", "w"), scope_key("tenant-theirs", "w")
    _admit(store, mine, "mem_m1", ("alpha", "rare"))
    _admit(store, mine, "mem_m2", ("alpha", "alpha", "common", "common"))
    _admit(store, mine, "mem_m3", ("common", "words", "only"))
    before = _rank(store, mine, "rare", "common")
    for index in range(50):
        _admit(store, theirs, f"mem_t{index:02d}", ("rare", "rare", "rare", "alpha"))
    assert _rank(store, mine, "rare", "common") == before
    assert {record_id for record_id, _ in _rank(store, theirs, "rare")} == {f"mem_t{i:02d}" for i in range(50)}


def test_not_yet_valid_documents_count_in_the_statistics() -> None:
    """Per-scope statistics: a not-yet-valid indexed document changes df and so the BM25 order."""
    store = InMemoryStore()
    scope = scope_key("tenant-stats", "w")
    # mem_a: one "rare"; mem_b: "common" twice in a longer field. With N=2 "rare" and "common" are
    # equally rare (df 1 each), and mem_b's tf 2 wins; future documents containing "common" make
    # it common (low idf), and mem_a wins.
    _admit(store, scope, "mem_a", ("rare", "pad", "pad"))
    _admit(store, scope, "mem_b", ("common", "common", "pad"))
    assert [record_id for record_id, _ in _rank(store, scope, "rare", "common")] == ["mem_b", "mem_a"]
    for index in range(20):
        _admit(store, scope, f"mem_future{index:02d}", ("common", "pad", "pad"), valid_from=NOW + DAY)
    ranked = [record_id for record_id, _ in _rank(store, scope, "rare", "common")]
    assert ranked == ["mem_a", "mem_b"]
