"""``LexicalRanker``: the shipped ranker conformance suite, the formulas and the candidate cap."""

from __future__ import annotations

import math
from pathlib import Path
from typing import get_args

import pytest

from engram_memory.canonical import Domain, digest
from engram_memory.context import scope_key
from engram_memory.ports import (
    IndexedDocument,
    IndexEntry,
    RankedHit,
    RankingQuery,
    RecordRow,
    RecordState,
    SealedEnvelope,
    Store,
    StoreReader,
    occurrence_fields,
    occurrence_key,
    occurrence_keys,
)
from engram_memory.ranking.bm25f import (
    average_lengths,
    combined_score,
    field_score,
    idf,
    recency,
    rrf_normalised,
)
from engram_memory.ranking.eligibility import eligible_entries, row_is_eligible
from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore
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


@pytest.mark.parametrize(
    ("frequencies", "lengths", "averages"),
    [
        ((1,) * 4, (1,) * 5, (1.0,) * 5),
        ((1,) * 5, (1,) * 6, (1.0,) * 5),
        ((1,) * 5, (1,) * 5, (1.0,) * 4),
        ((), (), ()),
    ],
)
def test_field_score_takes_one_frequency_length_and_average_per_field(
    frequencies: tuple[int, ...], lengths: tuple[int, ...], averages: tuple[float, ...]
) -> None:
    with pytest.raises(ValueError, match=r"^one frequency, length and average per field$"):
        field_score(frequencies, lengths, averages)


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


# --------------------------------------------------------------------------- the fast path is the plain algorithm


def test_occurrence_keys_round_trip() -> None:
    assert occurrence_key((2, 0, 0, 1, 0), (13, 4, 0, 40, 0)) == "0:2:13,3:1:40"
    assert occurrence_fields("0:2:13,3:1:40") == ((2, 0, 0, 1, 0), (13, 0, 0, 40, 0))
    assert occurrence_key((0,) * 5, (3,) * 5) == ""
    assert occurrence_fields("") == ((0,) * 5, (0,) * 5)
    assert occurrence_key((0, 0, 0, 0, 120), (0, 0, 0, 0, 70_000)) == "4:120:70000"


def test_a_documents_occurrence_keys_are_each_terms_key() -> None:
    lengths = (1, 9, 0, 30, 2)
    terms: dict[str, tuple[int, ...]] = {"alpha": (1, 0, 0, 0, 0), "beta": (0, 2, 0, 1, 0), "gamma": (1, 0, 0, 0, 0)}
    terms["nil"] = (0,) * 5
    document = IndexedDocument(
        record_id="mem_x", lengths=lengths, terms=terms, valid_from=0, valid_to=None, expires_at_ms=None
    )
    keys = occurrence_keys(document)
    assert keys == {term: occurrence_key(frequencies, lengths) for term, frequencies in terms.items()}
    assert keys == {"alpha": "0:1:1", "beta": "1:2:9,3:1:30", "gamma": "0:1:1", "nil": ""}
    assert list(keys) == list(terms)  # in the document's term order
    short = IndexedDocument(
        record_id="mem_y", lengths=lengths, terms={"a": (1, 0)}, valid_from=0, valid_to=None, expires_at_ms=None
    )
    with pytest.raises(ValueError, match="zip"):
        occurrence_keys(short)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_term_in_no_field_scores_nothing_and_alone_is_no_hit(backend: str, tmp_path: Path) -> None:
    """An indexed term whose frequencies are all 0 has the occurrence key ``""`` (:func:`occurrence_key`):
    it contributes 0, so a document holding only that query term is no hit (only scores above 0 count),
    and one holding another query term scores exactly as without it."""
    store: Store = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "rank.db")
    scope = scope_key("tenant-empty-key", "w")
    documents: dict[str, dict[str, tuple[int, ...]]] = {
        "mem_a": {"ghost": (0, 0, 0, 0, 0), "real": (1, 0, 0, 0, 0)},
        "mem_b": {"real": (1, 0, 0, 0, 0)},
        "mem_c": {"ghost": (0, 0, 0, 0, 0), "other": (1, 0, 0, 0, 0)},
    }
    try:
        with store.write(scope) as unit:
            for record_id, terms in documents.items():
                unit.put_record(_row(record_id, state="accepted_current", trusted=True))
                unit.index_document(
                    IndexedDocument(
                        record_id=record_id,
                        lengths=(1, 0, 0, 0, 0),
                        terms=terms,
                        valid_from=NOW - 3 * DAY,
                        valid_to=None,
                        expires_at_ms=None,
                    )
                )
        ranker = LexicalRanker()

        def ranked(*terms: str) -> list[tuple[str, float]]:
            with store.read(scope) as reader:
                hits = ranker.rank(reader, RankingQuery(terms=terms, valid_as_of=NOW, now_ms=NOW))
            return [(hit.record_id, hit.score) for hit in hits]

        with store.read(scope) as reader:
            assert list(reader.term_postings("ghost")[1]) == ["", ""]
        assert ranked("ghost") == []
        assert [record_id for record_id, _ in ranked("real")] == ["mem_a", "mem_b"]
        assert ranked("ghost", "real") == ranked("real") == ranked("real", "ghost")
    finally:
        store.close()


def _row(record_id: str, *, state: str, trusted: bool, **times: int) -> RecordRow:
    return RecordRow(
        record_id=record_id,
        state=state,  # type: ignore[arg-type]
        record_digest="sha256:" + "0" * 64,
        payload_digest="sha256:" + "1" * 64,
        sealed=_seal(),
        recorded_cursor=1,
        accepted_cursor=1,
        valid_from=NOW - 3 * DAY,
        valid_to=times.get("valid_to"),
        expires_at_ms=times.get("expires_at_ms"),
        trust_valid=trusted,
    )


def _indexed(record_id: str, words: tuple[str, ...], **times: int) -> IndexedDocument:
    counts = {word: words.count(word) for word in words}
    return IndexedDocument(
        record_id=record_id,
        lengths=(len(words), 0, 0, 1, 0),
        terms={word: (count, 0, 0, count % 2, 0) for word, count in counts.items()},
        valid_from=NOW - 3 * DAY,
        valid_to=times.get("valid_to"),
        expires_at_ms=times.get("expires_at_ms"),
    )


def _plain_rank(store: Store, scope: str, query: RankingQuery) -> list[tuple[str, float, float, float]]:
    """The ranking as first written: per posting (``postings``), a full sort, one ``record`` per hit.

    Eligibility and recency come from each hit's record row, never from the index's copy.
    """
    with store.read(scope) as reader:
        stats = reader.index_stats()
        averages = average_lengths(stats.documents, stats.total_lengths)
        scores: dict[str, float] = {}
        valid_to: dict[str, int | None] = {}
        for term in dict.fromkeys(query.terms):
            postings = reader.postings(term)
            term_idf = idf(stats.documents, len(postings)) if postings else 0.0
            for posting in postings if term_idf > 0 else ():
                contribution = field_score(posting.frequencies, posting.lengths, averages)
                scores[posting.record_id] = scores.get(posting.record_id, 0.0) + term_idf * contribution
        listed = []
        for record_id, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0])):
            row = reader.record(record_id)
            if row is not None and row_is_eligible(row, valid_as_of=query.valid_as_of, now_ms=query.now_ms):
                listed.append(record_id)
                valid_to[record_id] = row.valid_to
    hits = []
    for record_id, lexical in zip(listed[:2000], rrf_normalised(len(listed[:2000])), strict=True):
        value = recency(valid_to[record_id], query.valid_as_of)
        hits.append((record_id, combined_score(lexical, value), value, lexical))
    return sorted(hits, key=lambda hit: (-hit[1], -hit[2], hit[0]))[:2000]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_batched_ranking_equals_the_plain_algorithm(backend: str, tmp_path: Path) -> None:
    """Thousands of hits, long runs of equal scores across batch borders, ineligible rows mixed in."""
    store: Store = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "rank.db")
    scope = scope_key("tenant-batch", "workspace-1")
    try:
        with store.write(scope) as unit:
            for index in range(2_600):
                record_id = f"mem_{(index * 7919) % 2_600:05d}"
                words = ("common", "rare") if index % 5 == 0 else ("common", "filler", "filler")[: 2 + index % 3 // 2]
                times = {"valid_to": NOW - DAY} if index % 13 == 0 else {}
                if index % 11 == 0:
                    times["expires_at_ms"] = NOW - 1
                state = "historical" if index % 19 == 0 else "accepted_current"  # a stale index entry
                row_times = dict(times)  # stale times: the row moved on, the index kept its copy
                if index % 29 == 0:
                    row_times["valid_to"] = NOW - 3 * DAY  # ended since it was indexed: never a hit
                if index % 31 == 0:
                    times["expires_at_ms"] = NOW - 1  # the index's copy says expired, the row does not
                if index % 37 != 0:  # and some indexed documents have no row at all
                    unit.put_record(_row(record_id, state=state, trusted=index % 17 != 0, **row_times))
                unit.index_document(_indexed(record_id, words, **times))
        ranker = LexicalRanker()
        for terms in (("common",), ("rare", "common"), ("filler", "rare"), ("absent",)):
            query = RankingQuery(terms=terms, valid_as_of=NOW, now_ms=NOW)
            with store.read(scope) as reader:
                fast = [(h.record_id, h.score, h.recency, h.lexical) for h in ranker.rank(reader, query)]
            assert fast == _plain_rank(store, scope, query)
            assert len(fast) <= 2000
            if terms == ("rare", "common"):  # the row, not the index's copy, decides
                surfaced = {hit[0] for hit in fast}
                gone = {f"mem_{(i * 7919) % 2_600:05d}" for i in range(2_600) if i % 29 == 0 or i % 37 == 0}
                assert gone.isdisjoint(surfaced)  # the row ended, or there is no row
                assert f"mem_{(31 * 5 * 7919) % 2_600:05d}" in surfaced  # index copy expired, row current
    finally:
        store.close()


def test_the_eligibility_rule_at_its_boundaries() -> None:
    """Readable iff current, trusted, ``valid_from <= at``, ``at <= valid_to`` and ``now < expires_at_ms``.

    Every state and each boundary (one below, at, one above), for a batch and one row at a time.
    """
    at, now = 1_000, 5_000
    entries = [
        (index, IndexEntry(f"mem_{index}", state, trust, valid_from, valid_to, expires))
        for index, (state, trust, valid_from, valid_to, expires) in enumerate(
            (state, trust, valid_from, valid_to, expires)
            for state in get_args(RecordState)
            for trust in (True, False)
            for valid_from in (at - 1, at, at + 1)
            for valid_to in (None, at - 1, at, at + 1)
            for expires in (None, now - 1, now, now + 1)
        )
    ]
    expected = [
        (key, entry)
        for key, entry in entries
        if entry.state == "accepted_current"
        and entry.trust_valid
        and entry.valid_from in (at - 1, at)
        and entry.valid_to in (None, at, at + 1)
        and entry.expires_at_ms in (None, now + 1)
    ]
    assert len(expected) == 2 * 3 * 2
    assert eligible_entries(entries, valid_as_of=at, now_ms=now) == expected
    assert [(key, entry) for key, entry in entries if row_is_eligible(entry, valid_as_of=at, now_ms=now)] == expected


_SHAPED_RANKERS = """
import pytest

from engram_memory.ranking.lexical import LexicalRanker
from engram_memory.testing import RankerConformance


class _Shaped(LexicalRanker):
    def __init__(self, score):
        self.score_of = score

    def rank(self, reader, query):
        return [hit._replace(score=self.score_of(hit.score)) for hit in super().rank(reader, query)]


class TestTextScores(RankerConformance):
    @pytest.fixture
    def ranker(self):
        return _Shaped(str)


class TestNegatedDistances(RankerConformance):
    @pytest.fixture
    def ranker(self):
        return _Shaped(lambda score: -(1.0 - score))  # the best hit scores -0.0, which the search answers as 0.0
"""


def test_the_kit_refuses_scores_the_search_refuses_and_passes_negative_zero(pytester: pytest.Pytester) -> None:
    """A ranker answering ``str`` scores fails the kit, as its searches fail; negated distances pass, as they work."""
    pytester.makepyfile(test_shaped=_SHAPED_RANKERS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "lists_of_finite_numbers")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        ["FAILED *TestTextScores::test_answers_are_lists_of_finite_numbers*", "E *: '1.0' is not a number"]
    )


class _CachingRanker(LexicalRanker):
    """Answers a query it has seen from its cache, whatever the scope or the index says now."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, ...], list[RankedHit]] = {}

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        if query.terms not in self.cache:
            self.cache[query.terms] = super().rank(reader, query)
        return list(self.cache[query.terms])


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ("test_forgotten_documents_disappear", "a forgotten record is still ranked"),
        ("test_each_scope_is_ranked_from_its_own_view", "the other scope's answer holds"),
    ],
)
def test_a_ranker_that_caches_answers_fails_the_kit(test: str, message: str) -> None:
    kit = RankerConformance()
    store = InMemoryStore()
    corpus = RankerConformance.corpus.__wrapped__(kit, store)  # type: ignore[attr-defined]
    getattr(kit, test)(LexicalRanker(), corpus)  # the reference ranker passes
    corpus = RankerConformance.corpus.__wrapped__(kit, InMemoryStore())  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match=message):
        getattr(kit, test)(_CachingRanker(), corpus)
