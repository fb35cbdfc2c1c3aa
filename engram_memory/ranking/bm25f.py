"""The pure scoring formulas of profile ``offline_lexical_v1`` (reference constants, DESIGN D10).

Each function evaluates its expression in the same order as the reference engine, so the floats
are bit-for-bit those of any other faithful implementation on IEEE-754 doubles:

* ``idf = max(0, ln(1 + (N − df + 0.5) / (df + 0.5)))``;
* per field ``f``: ``norm_f = 1 − b + b · len_f / avg_f`` and
  ``sat_f = tf · (k1 + 1) / (tf + k1 · norm_f)``; a term contributes ``idf · Σ_f w_f · sat_f``
  (a weighted sum of per-field saturations, summed over the fields in :data:`~engram_memory.ports.FIELDS`
  order, skipping fields where the term is absent);
* reciprocal-rank fusion ``1 / (k + rank)`` (rank 1-based), normalised by its maximum;
* ``recency = exp(−ln 2 · age / half_life)`` with ``anchor = valid_as_of`` for an open interval,
  else ``min(valid_as_of, t_end)``, and ``age = max(0, valid_as_of − anchor)``;
* ``score = 0.85 · lexical + 0.15 · recency``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

__all__ = [
    "BM25_B",
    "BM25_K1",
    "CANDIDATE_CAP",
    "CHANNEL_CAP",
    "FIELD_WEIGHTS",
    "HALF_LIFE_MS",
    "LEXICAL_WEIGHT",
    "MAX_LEXICAL_VARIANTS",
    "RECENCY_WEIGHT",
    "RRF_K",
    "average_lengths",
    "combined_score",
    "field_score",
    "field_term",
    "idf",
    "recency",
    "rrf_normalised",
]

BM25_K1: Final = 1.2
BM25_B: Final = 0.75
FIELD_WEIGHTS: Final[tuple[float, ...]] = (3.0, 2.0, 1.5, 1.0, 0.5)
"""Weights of ``primary, decision, evidence, context, citations`` (the order of ``FIELDS``)."""
RRF_K: Final = 60
HALF_LIFE_MS: Final = 2_592_000_000
"""30 days in milliseconds."""
LEXICAL_WEIGHT: Final = 0.85
RECENCY_WEIGHT: Final = 0.15
CANDIDATE_CAP: Final = 2000
"""At most this many candidates per search, chosen by score (never by id order)."""
CHANNEL_CAP: Final = 2000
"""At most this many entries in the lexical list before fusion."""
MAX_LEXICAL_VARIANTS: Final = 8
"""Declared by the reference profile (one lexical variant is used); bound in the config digest."""
_LN2: Final = math.log(2)


def idf(documents: int, document_frequency: int) -> float:
    """``max(0, ln(1 + (N − df + 0.5) / (df + 0.5)))``."""
    return max(0.0, math.log(1 + (documents - document_frequency + 0.5) / (document_frequency + 0.5)))


def average_lengths(documents: int, total_lengths: Sequence[int]) -> tuple[float, ...]:
    """Mean token count per field over ``documents``; ``1`` where the mean is 0 (or no documents)."""
    if documents <= 0:
        return tuple(1.0 for _ in total_lengths)
    return tuple((total / documents) or 1.0 for total in total_lengths)


def field_term(position: int, tf: int, length: int, averages: Sequence[float]) -> float:
    """``w_f · sat_f`` of a term occurring ``tf > 0`` times in field ``position`` (an index into ``FIELDS``)."""
    norm = 1 - BM25_B + BM25_B * (length / averages[position])
    saturation = (tf * (BM25_K1 + 1)) / (tf + BM25_K1 * norm)
    return FIELD_WEIGHTS[position] * saturation


def field_score(frequencies: Sequence[int], lengths: Sequence[int], averages: Sequence[float]) -> float:
    """``Σ_f w_f · sat_f`` of one term in one document (fields in ``FIELDS`` order, absent ones skipped)."""
    if not len(frequencies) == len(lengths) == len(averages) == len(FIELD_WEIGHTS):
        raise ValueError("one frequency, length and average per field")
    total = 0.0
    for position, (tf, length) in enumerate(zip(frequencies, lengths, strict=True)):
        if tf != 0:
            total += field_term(position, tf, length, averages)
    return total


def rrf_normalised(count: int) -> list[float]:
    """Fused RRF scores of a single ranked list of ``count`` entries, divided by their maximum."""
    fused = [1 / (RRF_K + (index + 1)) for index in range(count)]
    if not fused:
        return []
    top = max(fused)
    return [value / top if top > 0 else 0.0 for value in fused]


def recency(valid_to: int | None, valid_as_of: int) -> float:
    """Valid-time recency: 1 for an interval still open at ``valid_as_of``, halving every 30 days after."""
    anchor = valid_as_of if valid_to is None else min(valid_as_of, valid_to)
    age = max(0, valid_as_of - anchor)
    return math.exp((-_LN2 * age) / HALF_LIFE_MS)


def combined_score(lexical: float, recency_value: float) -> float:
    """``0.85 · lexical + 0.15 · recency``."""
    return LEXICAL_WEIGHT * lexical + RECENCY_WEIGHT * recency_value
