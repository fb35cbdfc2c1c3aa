"""The reference lexical ranker, profile ``offline_lexical_v1`` (being implemented)."""

from __future__ import annotations

from typing import Any

from engram_memory.ports import RankedHit, RankingQuery, StoreReader
from engram_memory.ranking.tokenizer import tokenize

__all__ = ["LexicalRanker"]


class LexicalRanker:
    """BM25F + reciprocal-rank fusion + recency (see DESIGN D10)."""

    @property
    def profile(self) -> str:
        """The profile name."""
        return "offline_lexical_v1"

    @property
    def channels(self) -> frozenset[str]:
        """Lexical only."""
        return frozenset({"lexical"})

    def config(self) -> dict[str, Any]:
        """The ranking constants."""
        return {}

    def tokenize(self, text: str) -> list[str]:
        """The reference tokenizer."""
        return tokenize(text)

    def rank(self, reader: StoreReader, query: RankingQuery) -> list[RankedHit]:
        """Not yet available."""
        raise NotImplementedError
