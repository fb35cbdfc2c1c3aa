"""The reference lexical ranker, profile ``offline_lexical_v1`` (DESIGN D10).

BM25F over five weighted fields, reciprocal-rank fusion over the single lexical list, and
valid-time recency; the formulas and constants are in :mod:`engram_memory.ranking.bm25f`.

**Corpus statistics are per scope.** ``N``, document frequencies and average field lengths come
from the scope's lexical index (:meth:`~engram_memory.ports.StoreReader.index_stats` and
:meth:`~engram_memory.ports.StoreReader.term_postings`), i.e. over every ``accepted_current`` record of
the scope, including those that are not valid at the query's ``valid_as_of`` or whose retention
expired but that are still indexed. They are never computed over another scope, so adding records
to one tenant never changes another tenant's scores, and they never require reading the corpus:
the ranker holds only the postings of the query terms. (The reference engine computes them over
its eligible snapshot; with one scope and no ineligible records the two coincide.)

Eligibility is judged per hit on its record row, which
:meth:`~engram_memory.ports.StoreReader.eligible_documents` resolves with the document and judges
(``accepted_current``, trust valid, valid at ``valid_as_of``, retention not past at ``now_ms``), so
a stale index entry can never surface. Hits are resolved in score order, in batches, until the
lexical list is full. The ranker never writes.

**Exact and fast.** Each term's postings are parallel document keys and occurrence keys; the BM25F
contribution of a key is computed once per term, from per-field terms computed once per query with
:func:`~engram_memory.ranking.bm25f.field_term` and added in the order ``field_score`` adds them
(equal keys are equal inputs, so every float is the one the per-posting formula gives), and per
document the term values are summed in term order as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from operator import itemgetter
from typing import Any, Final, cast

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
    field_term,
    idf,
    recency,
    rrf_normalised,
)
from engram_memory.ranking.tokenizer import TOKENIZER_VERSION, tokenize

__all__ = ["PROFILE", "PROFILE_VERSION", "SCORING_FORMULA_REF", "LexicalRanker"]

PROFILE: Final = "offline_lexical_v1"
PROFILE_VERSION: Final = "1.0.0"
SCORING_FORMULA_REF: Final = "graphify-memory:offline-lexical-recency:v1"
_FIELD_NAMES: Final = ("primary", "decision", "evidence", "context", "citations")
_BATCH: Final = 500
"""Hits resolved per batch (one ``eligible_documents`` call) while the lexical list fills."""
_RECORD_ID: Final = itemgetter(0)
_SCORE_THEN_RECENCY: Final = itemgetter(1, 2)
_SCORE_THEN_ID: Final = itemgetter(0, 1)
_new_hit: Final = cast("Callable[[tuple[str, float, float, float]], RankedHit]", partial(tuple.__new__, RankedHit))
"""``RankedHit._make`` without its Python-level length check (one call per candidate)."""


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

    @property
    def uses_network(self) -> bool:
        """Never: the index is local."""
        return False

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
        lexical_list = _lexical_list(reader, _bm25f(reader, query), query)
        recencies: dict[int | None, float] = {}  # by valid_to: most hits share an open interval
        hits: list[RankedHit] = []
        append, make = hits.append, _new_hit
        for (record_id, valid_to), lexical in zip(lexical_list, rrf_normalised(len(lexical_list)), strict=True):
            recency_value = recencies.get(valid_to)
            if recency_value is None:
                recency_value = recencies[valid_to] = recency(valid_to, query.valid_as_of)
            append(make((record_id, combined_score(lexical, recency_value), recency_value, lexical)))
        hits.sort(key=_RECORD_ID)  # then a stable sort: equal (score, recency) stay in record id order
        hits.sort(key=_SCORE_THEN_RECENCY, reverse=True)
        return hits[:CANDIDATE_CAP]


def _bm25f(reader: StoreReader, query: RankingQuery) -> dict[str, float]:
    """BM25F scores by document key of every indexed document holding a query term.

    Terms are de-duplicated and summed in first-occurrence order (the float sums are then those
    of the reference engine, which loops over documents and then over the distinct terms).
    Eligibility is not applied here: it is all-or-nothing per document, see :func:`_lexical_list`.
    """
    terms = list(dict.fromkeys(query.terms))
    stats = reader.index_stats()
    documents = stats.documents
    scores: dict[str, float] = {}
    if not terms or documents <= 0:
        return scores
    averages = average_lengths(documents, stats.total_lengths)
    fields: dict[str, float] = {}
    for term in terms:
        keys, occurrences = reader.term_postings(term)
        term_idf = idf(documents, len(keys)) if keys else 0.0
        if term_idf > 0:
            _accumulate(scores, keys, map(_TermValues(term_idf, averages, fields).__getitem__, occurrences))
    return scores


class _TermValues(dict[str, float]):
    """``idf · field_score`` by occurrence key for one term, each computed on first use.

    ``field_score`` adds ``w_f · sat_f`` (:func:`~engram_memory.ranking.bm25f.field_term`) over the
    key's fields in order, starting from ``0.0``; here each ``field:tf:length`` part's term is
    memoised in ``fields`` for the whole query and the terms are added in the same order from
    ``0.0``, so the sum is the same float.
    """

    def __init__(self, term_idf: float, averages: Sequence[float], fields: dict[str, float]) -> None:
        super().__init__()
        self._idf = term_idf
        self._averages = averages
        self._fields = fields

    def __missing__(self, key: str) -> float:
        fields = self._fields
        contribution = 0.0
        for part in key.split(",") if key else ():  # "": the term is in no field, it adds nothing
            value = fields.get(part)
            if value is None:
                position, tf, length = map(int, part.split(":"))
                value = fields[part] = field_term(position, tf, length, self._averages)
            contribution += value
        value = self[key] = self._idf * contribution
        return value


def _accumulate(scores: dict[str, float], keys: Sequence[str], values: Iterator[float]) -> None:
    """Add one term's value to each document's score (``0.0 + v == v``, so a new entry starts at ``v``)."""
    if not scores:
        scores.update(zip(keys, values, strict=True))
        return
    get = scores.get
    for key, value in zip(keys, values, strict=True):
        scores[key] = get(key, 0.0) + value


def _lexical_list(reader: StoreReader, scores: dict[str, float], query: RankingQuery) -> list[tuple[str, int | None]]:
    """The lexical channel: eligible hits by score desc then record id asc, capped; with each ``valid_to``.

    Documents are resolved in score order, in batches that never split a group of equal scores, so
    sorting each batch by (score desc, record id asc) yields the global order. Only scores above 0
    count (a key whose terms are absent from every field contributes 0).
    """
    ranked = sorted(scores, key=scores.__getitem__, reverse=True)
    while ranked and scores[ranked[-1]] <= 0:
        ranked.pop()
    lexical: list[tuple[str, int | None]] = []
    start = 0
    while start < len(ranked) and len(lexical) < CHANNEL_CAP:
        end = _batch_end(ranked, scores, start)
        lexical += _eligible(reader, ranked[start:end], scores, query)
        start = end
    return lexical[:CHANNEL_CAP]


def _batch_end(ranked: list[str], scores: dict[str, float], start: int) -> int:
    """The end of the batch starting at ``start``: ``_BATCH`` documents, extended over equal scores."""
    end = min(start + _BATCH, len(ranked))
    while end < len(ranked) and scores[ranked[end]] == scores[ranked[end - 1]]:
        end += 1
    return end


def _eligible(
    reader: StoreReader, batch: list[str], scores: dict[str, float], query: RankingQuery
) -> list[tuple[str, int | None]]:
    """The eligible documents of one batch as (record id, valid_to), by score desc then record id asc."""
    eligible = reader.eligible_documents(batch, valid_as_of=query.valid_as_of, now_ms=query.now_ms)
    chosen = [(-scores[doc], record_id, valid_to) for doc, record_id, valid_to in eligible]
    chosen.sort(key=_SCORE_THEN_ID)  # (-score, record id): ids are unique, so valid_to never decides
    return [(record_id, valid_to) for _, record_id, valid_to in chosen]
