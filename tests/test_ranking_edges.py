"""Ranking edges pinned by literal values: recency's exact half-life and the eligibility time rule.

Expected values are hand-derived (``2 ** -0.5`` for half a half-life, literal boundaries one below,
at and one above each limit), never the library's own functions.
"""

from __future__ import annotations

import pytest

from engram_memory.ports import IndexEntry
from engram_memory.ranking.bm25f import recency
from engram_memory.ranking.eligibility import row_is_eligible
from engram_memory.ranking.tokenizer import field_texts, term_frequencies, tokenize

NOW = 1_767_225_600_000
DAY = 86_400_000
HALF_LIFE = 2_592_000_000  # 30 days in ms, the documented constant


def test_recency_is_exactly_the_documented_half_life() -> None:
    """``exp(−ln2 · age / 2_592_000_000)``: half a half-life is 2^-½, one half-life is ½, bit-for-bit close."""
    assert recency(NOW - 15 * DAY, NOW) == pytest.approx(0.7071067811865476, rel=1e-14, abs=0.0)
    assert recency(NOW - 30 * DAY, NOW) == pytest.approx(0.5, rel=1e-14, abs=0.0)
    assert recency(NOW - 90 * DAY, NOW) == pytest.approx(0.125, rel=1e-14, abs=0.0)
    for age in (1, 1_000, DAY, 7 * DAY, 45 * DAY, 365 * DAY):
        assert recency(NOW - age, NOW) == pytest.approx(2.0 ** (-age / HALF_LIFE), rel=1e-14, abs=0.0)
    # a closed interval that ends after valid_as_of is still open at it: age 0
    assert recency(NOW + 1, NOW) == 1.0
    assert recency(NOW, NOW) == 1.0


def _entry(valid_from: int, valid_to: int | None, expires_at_ms: int | None) -> IndexEntry:
    """An admitted, trusted record's eligibility inputs with the given times."""
    return IndexEntry(
        record_id="mem_p",
        state="accepted_current",
        trust_valid=True,
        valid_from=valid_from,
        valid_to=valid_to,
        expires_at_ms=expires_at_ms,
    )


@pytest.mark.parametrize(
    ("valid_from", "valid_to", "expires_at_ms", "expected"),
    [
        (999, None, None, True),
        (1_000, None, None, True),  # valid_from == valid_as_of: valid
        (1_001, None, None, False),
        (1_000, 999, None, False),
        (1_000, 1_000, None, True),  # valid_to == valid_as_of: still valid (closed interval)
        (1_000, 1_001, None, True),
        (1_000, None, 4_999, False),
        (1_000, None, 5_000, False),  # expires_at_ms == now: expired
        (1_000, None, 5_001, True),
        (1_000, 1_000, 5_001, True),
    ],
)
def test_the_time_rule_at_each_boundary(
    valid_from: int, valid_to: int | None, expires_at_ms: int | None, expected: bool
) -> None:
    """``valid_from <= valid_as_of``, ``valid_as_of <= valid_to``, ``now_ms < expires_at_ms``.

    At ``valid_as_of`` 1000 and ``now_ms`` 5000.
    """
    assert row_is_eligible(_entry(valid_from, valid_to, expires_at_ms), valid_as_of=1_000, now_ms=5_000) is expected


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Café2 route", ["café2", "route"]),  # a letter run with an ASCII digit, non-ASCII: one token
        ("٣٤ ١", ["٣٤", "١"]),  # Arabic-Indic digits are numbers (\p{N}), and not short ASCII
        ("Ⅻv Ⅻ", ["ⅻv", "ⅻ"]),  # Nl (letter numbers) lower-case and stay whole
        ("東京2026年 déjà_vu", ["東京2026年", "déjà_vu"]),
        ("ab2 a1 é x_", ["ab2", "a1", "é", "x_"]),  # only pure a-z runs of 1-2 chars are dropped
        ("AB Ab ab abc ABC", ["abc", "abc"]),
    ],
)
def test_tokenizer_keeps_letters_numbers_and_underscore_runs_whole(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_the_five_lexical_fields_of_a_record() -> None:
    """primary = the primary component's text wherever it sits; decision/evidence/context = every component of
    that kind in payload order; citations = the ``source_ref`` values. Lengths count every token."""
    record = {
        "primary_component_id": "comp-main",
        "components": [
            {"component_id": "comp-ctx", "kind": "context", "text": "Background orbit notes"},
            {"component_id": "comp-dec", "kind": "decision", "text": "Burn burn approved"},
            {"component_id": "comp-main", "kind": "claim", "text": "Orbit orbit raised by the crew"},
            {"component_id": "comp-ev", "kind": "evidence", "text": "Telemetry shows orbit"},
            {"component_id": "comp-ctx2", "kind": "context", "text": "more background"},
        ],
        "citations": [{"source_ref": "doc:mission/alpha"}, {"source_ref": "doc:log"}],
    }
    assert field_texts(record) == {
        "primary": "Orbit orbit raised by the crew",
        "decision": "Burn burn approved",
        "evidence": "Telemetry shows orbit",
        "context": "Background orbit notes\nmore background",
        "citations": "doc:mission/alpha\ndoc:log",
    }
    lengths, terms = term_frequencies(record)
    # primary: orbit orbit raised the crew (by: dropped); context: background orbit notes more background
    assert lengths == (5, 3, 3, 5, 5)
    assert terms == {
        "alpha": (0, 0, 0, 0, 1),
        "approved": (0, 1, 0, 0, 0),
        "background": (0, 0, 0, 2, 0),
        "burn": (0, 2, 0, 0, 0),
        "crew": (1, 0, 0, 0, 0),
        "doc": (0, 0, 0, 0, 2),
        "log": (0, 0, 0, 0, 1),
        "mission": (0, 0, 0, 0, 1),
        "more": (0, 0, 0, 1, 0),
        "notes": (0, 0, 0, 1, 0),
        "orbit": (2, 0, 1, 1, 0),
        "raised": (1, 0, 0, 0, 0),
        "shows": (0, 0, 1, 0, 0),
        "telemetry": (0, 0, 1, 0, 0),
        "the": (1, 0, 0, 0, 0),
    }
    assert list(terms) == sorted(terms)


def test_a_primary_component_of_a_field_kind_counts_in_primary_and_in_that_field() -> None:
    record = {
        "primary_component_id": "comp-1",
        "components": [
            {"component_id": "comp-0", "kind": "decision", "text": "First decision"},
            {"component_id": "comp-1", "kind": "decision", "text": "Launch window chosen"},
        ],
        "citations": [{"source_ref": "ref:one"}],
    }
    assert field_texts(record) == {
        "primary": "Launch window chosen",
        "decision": "First decision\nLaunch window chosen",
        "evidence": "",
        "context": "",
        "citations": "ref:one",
    }
    lengths, terms = term_frequencies(record)
    assert lengths == (3, 5, 0, 0, 2)
    assert terms["launch"] == (1, 1, 0, 0, 0)
    assert terms["first"] == (0, 1, 0, 0, 0)
