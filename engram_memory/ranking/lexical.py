"""The reference lexical ranker, profile ``offline_lexical_v1`` (DESIGN D10).

BM25F over five weighted fields, reciprocal-rank fusion over the single lexical list, and
valid-time recency; the formulas and constants are in :mod:`engram_memory.ranking.bm25f`.

**Corpus statistics are per scope.** ``N``, document frequencies and average field lengths come
from the scope's lexical index (:meth:`~engram_memory.ports.StoreReader.index_stats` and
:meth:`~engram_memory.ports.StoreReader.postings`), i.e. over every ``accepted_current`` record of
the scope, including those that are not valid at the query's ``valid_as_of`` or whose retention
expired but that are still indexed. They are never computed over another scope, so adding records
to one tenant never changes another tenant's scores, and they never require reading the corpus:
the ranker holds only the postings of the query terms. (The reference engine computes them over
its eligible snapshot; with one scope and no ineligible records the two coincide.)

Eligibility is applied per posting (valid at ``valid_as_of``, retention not past at ``now_ms``),
and every hit's record row is checked once more (``accepted_current`` and trust valid), so a stale
index entry can never surface. The ranker never writes.
"""

from __future__ import annotations

from typing import Any, Final

from engram_memory.ports import RankedHit, RankingQuery, StoreReader
from engram_memory.ranking.bm25f import (
    BM25_B,
    BM25_K1,
    CANDIDATE_CAP,
    CHANNEL_CAP,
    FIELD_WEIGHTS,
    HALF_LIFE_MS,
    LEXICAL_WEIGHT,
    MAX_LEXICAL_VARIANTS,
    RECENCY_WEIGHT,
    RRF_K,
    average_lengths,
    combined_score,
    field_score,
    idf,
    recency,
    rrf_normalised,
)
from engram_memory.ranking.eligibility import posting_is_eligible, row_is_eligible
from engram_memory.ranking.tokenizer import TOKENIZER_VERSION, tokenize

__all__ = ["PROFILE", "PROFILE_VERSION", "SCORING_FORMULA_REF", "LexicalRanker"]

PROFILE: Final = "offline_lexical_v1"
PROFILE_VERSION: Final = "1.0.0"
SCORING_FORMULA_REF: Final = "graphify-memory:offline-lexical-recency:v1"
_FIELD_NAMES: Final = ("primary", "decision", "evidence", "context", "citations")


class LexicalRanker:
    """BM25F + reciprocal-rank fusion + recency over one scope's lexical index.

    Order: score desc, then recency desc, then record id asc (code-point order; record ids are
    ASCII). Only documents with a lexical score above 0 are hits; at most 2,000 candidates are
    kept, chosen by BM25F score (score desc, record id asc), never by id order.
    """

    @property
    def profile(self) -> str:
        """``offline_lexical_v1``."""
        return PROFILE

    @property
    def channels(self) -> frozenset[str]:
        """Lexical only: a search that requires a semantic channel is ``RANKING_UNAVAILABLE``."""
        return frozenset({"lexical"})

    def config(self) -> dict[str, Any]:
        """Every constant that determines the order (bound by ``profile_config_digest``)."""
        return {
            "profile": PROFILE,
            "profile_version": PROFILE_VERSION,
            "scoring_formula_ref": SCORING_FORMULA_REF,
            "tokenizer_version": TOKENIZER_VERSION,
            "bm25": {"k1": BM25_K1, "b": BM25_B},
            "field_weights": dict(zip(_FIELD_NAMES, FIELD_WEIGHTS, strict=True)),
            "rrf_k": RRF_K,
            "max_lexical_variants": MAX_LEXICAL_VARIANTS,
            "half_life_ms": HALF_LIFE_MS,
            "weights": {"lexical": LEXICAL_WEIGHT, "recency": RECENCY_WEIGHT},
            "candidate_cap": CANDIDATE_CAP,
            "channel_cap": CHANNEL_CAP,
            "corpus_statistics": "scope_index",
            "order": ["score desc", "recency desc", "record_id asc"],
        }

    def tokenize(self, text: str) -> list[str]:
        """The ``graphify-memory:tokenizer:v1`` tokens of ``text``."""
        return tokenize(text)

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        """Every eligible hit of the reader's scope, best first (at most 2,000)."""
        scores, valid_to = _bm25f(reader, query)
        lexical_list = _lexical_list(reader, scores, query)
        hits: list[RankedHit] = []
        for record_id, lexical in zip(lexical_list, rrf_normalised(len(lexical_list)), strict=True):
            recency_value = recency(valid_to[record_id], query.valid_as_of)
            hits.append(
                RankedHit(
                    record_id=record_id,
                    score=combined_score(lexical, recency_value),
                    recency=recency_value,
                    lexical=lexical,
                )
            )
        hits.sort(key=lambda hit: (-hit.score, -hit.recency, hit.record_id))
        return hits[:CANDIDATE_CAP]


def _bm25f(reader: StoreReader, query: RankingQuery) -> tuple[dict[str, float], dict[str, int | None]]:
    """BM25F scores of the eligible postings of the query terms, and each hit's ``valid_to``.

    Terms are de-duplicated and summed in first-occurrence order (the float sums are then those
    of the reference engine, which loops over documents and then over the distinct terms).
    """
    terms = list(dict.fromkeys(query.terms))
    stats = reader.index_stats()
    documents = stats.documents
    scores: dict[str, float] = {}
    valid_to: dict[str, int | None] = {}
    if not terms or documents <= 0:
        return scores, valid_to
    averages = average_lengths(documents, stats.total_lengths)
    for term in terms:
        postings = reader.postings(term)
        term_idf = idf(documents, len(postings)) if postings else 0.0
        if term_idf <= 0:
            continue
        for posting in postings:
            if not posting_is_eligible(posting, valid_as_of=query.valid_as_of, now_ms=query.now_ms):
                continue
            contribution = field_score(posting.frequencies, posting.lengths, averages)
            if contribution > 0:
                record_id = posting.record_id
                scores[record_id] = scores.get(record_id, 0.0) + term_idf * contribution
                valid_to[record_id] = posting.valid_to
    return scores, valid_to


def _lexical_list(reader: StoreReader, scores: dict[str, float], query: RankingQuery) -> list[str]:
    """The lexical channel: hits by score desc then id asc, each re-checked on its row, capped."""
    lexical_list: list[str] = []
    for record_id, score in sorted(scores.items(), key=lambda item: (-item[1], item[0])):
        if score <= 0:
            continue
        row = reader.record(record_id)
        if row is None or not row_is_eligible(row, valid_as_of=query.valid_as_of, now_ms=query.now_ms):
            continue
        lexical_list.append(record_id)
        if len(lexical_list) >= CHANNEL_CAP:
            break
    return lexical_list
