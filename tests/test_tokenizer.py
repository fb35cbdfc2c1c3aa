"""The tokenizer's word characters are exactly ``[\\p{L}\\p{N}_]``, as the ranking profile names them."""

from __future__ import annotations

import re
import sys
import unicodedata

from engram_memory.ranking.tokenizer import tokenize


def test_python_word_characters_are_exactly_letters_numbers_and_underscore() -> None:
    """The tokenizer relies on ``\\w`` being ``[\\p{L}\\p{N}_]``; a Python whose Unicode data differs fails here."""
    everything = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)
    by_regex = set(re.findall(r"\w", everything))
    by_category = {char for char in everything if char == "_" or unicodedata.category(char)[0] in "LN"}
    assert by_regex == by_category


def test_tokens_are_maximal_runs_lowered_with_short_ascii_words_dropped() -> None:
    text = "Ab_c, ÉTÉ x2 — no Ⅻ ① ٣٤ 東京タワー a-b ok OK ok1 ß"
    assert tokenize(text) == ["ab_c", "été", "x2", "ⅻ", "①", "٣٤", "東京タワー", "ok1", "ß"]
