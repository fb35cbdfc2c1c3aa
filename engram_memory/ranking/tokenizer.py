r"""The ``graphify-memory:tokenizer:v1`` tokenizer and the lexical fields of a record.

Lower-case, then maximal runs of letters, numbers and ``_`` (``[\p{L}\p{N}_]+``); a token made
only of ASCII ``a``–``z`` and at most two characters long is dropped. No stemming, no stop words.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from engram_memory.ports import FIELDS

__all__ = ["TOKENIZER_VERSION", "field_texts", "term_frequencies", "tokenize"]

TOKENIZER_VERSION: Final = "graphify-memory:tokenizer:v1"
_WORD: Final = re.compile(r"\w+")
r"""Python's ``\w`` on ``str`` is exactly ``[\p{L}\p{N}_]`` (``tests/test_tokenizer.py`` checks every code point)."""
_SHORT_ASCII: Final = re.compile(r"[a-z]{1,2}")


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` in order, duplicates kept."""
    return [token for token in _WORD.findall(text.lower()) if _SHORT_ASCII.fullmatch(token) is None]


def field_texts(record: Mapping[str, Any]) -> dict[str, str]:
    r"""The five lexical fields of a record (or completed payload).

    ``primary`` is the primary component's text; ``decision``, ``evidence`` and ``context`` join
    the texts of the components of that kind with ``"\n"`` in payload order; ``citations``
    joins the citations' ``source_ref`` values.
    """
    components: Sequence[Mapping[str, Any]] = record["components"]
    primary = next(c["text"] for c in components if c["component_id"] == record["primary_component_id"])
    texts = {"primary": primary, "citations": "\n".join(c["source_ref"] for c in record["citations"])}
    for kind in ("decision", "evidence", "context"):
        texts[kind] = "\n".join(c["text"] for c in components if c["kind"] == kind)
    return {name: texts[name] for name in FIELDS}


def term_frequencies(record: Mapping[str, Any]) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """Field lengths (tokens) and per-term frequencies per field, both ordered as ``FIELDS``."""
    counts = [Counter(tokenize(text)) for text in field_texts(record).values()]
    lengths = tuple(sum(c.values()) for c in counts)
    terms: dict[str, tuple[int, ...]] = {}
    for term in sorted(set().union(*counts)):
        terms[term] = tuple(c.get(term, 0) for c in counts)
    return lengths, terms
