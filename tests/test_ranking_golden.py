"""Golden ranking: a fixed corpus, expected orders and scores checked by an independent model.

The model below (``naive_*``) re-implements profile ``offline_lexical_v1`` from its written
definition with plain loops over every document of the scope: its own tokenizer (character
categories, no regular expressions), its own field extraction from the document specs, BM25F with
per-scope statistics (every admitted, not forgotten record counts in N, df and the average field
lengths, eligible or not), RRF normalised by its maximum, recency and the final order. Scores are
compared exactly (same IEEE-754 expression order); a few orders are also pinned literally.
"""

from __future__ import annotations

import math
import string
import unicodedata
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_memory.canonical import epoch_ms, format_instant, parse_instant
from engram_memory.errors import ErrorCode
from engram_memory.ranking.tokenizer import tokenize
from tests.read_fixtures import (
    DAY_MS,
    START,
    T0_MS,
    DocSpec,
    ReadHarness,
    check_search_digests,
    fail,
    make_binding,
    ok,
)

# --------------------------------------------------------------------------- the model

K1 = 1.2
B = 0.75
WEIGHTS = (3.0, 2.0, 1.5, 1.0, 0.5)
RRF_K = 60
HALF_LIFE_MS = 30 * DAY_MS


def naive_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    current = ""
    for char in text.lower() + " ":
        if char == "_" or unicodedata.category(char)[0] in {"L", "N"}:
            current += char
            continue
        if current and not (len(current) <= 2 and all(c in string.ascii_lowercase for c in current)):
            tokens.append(current)
        current = ""
    return tokens


def naive_fields(spec: DocSpec) -> list[list[str]]:
    """primary, decision, evidence, context, citations: the tokens of each field."""
    fields: list[list[str]] = [naive_tokens(spec.primary), [], [], [], []]
    for kind, text in spec.components():
        fields[{"decision": 1, "evidence": 2, "context": 3}[kind]] += naive_tokens(text)
    for source_ref in spec.source_refs:
        fields[4] += naive_tokens(source_ref)
    return fields


def naive_eligible(spec: DocSpec, valid_as_of: int, now_ms: int) -> bool:
    if spec.t > valid_as_of:
        return False
    if spec.t_end is not None and valid_as_of > spec.t_end:
        return False
    return spec.expires_at is None or now_ms < epoch_ms(parse_instant(spec.expires_at))


def naive_bm25f(indexed: Sequence[tuple[str, DocSpec]], query: str, valid_as_of: int, now_ms: int) -> dict[str, float]:
    """BM25F of every eligible document with a positive score; statistics over all of ``indexed``."""
    docs = [(record_id, spec, naive_fields(spec)) for record_id, spec in indexed]
    n = len(docs)
    averages = [sum(len(fields[position]) for _, _, fields in docs) / n or 1 for position in range(5)]
    terms = list(dict.fromkeys(naive_tokens(query)))
    scores: dict[str, float] = {}
    for record_id, spec, fields in docs:
        if not naive_eligible(spec, valid_as_of, now_ms):
            continue
        score = 0.0
        for term in terms:
            df = sum(1 for _, _, other in docs if any(term in field for field in other))
            if df == 0:
                continue
            idf = max(0.0, math.log(1 + (n - df + 0.5) / (df + 0.5)))
            field_total = 0.0
            for position, field in enumerate(fields):
                tf = field.count(term)
                if tf:
                    norm = 1 - B + B * (len(field) / averages[position])
                    field_total += WEIGHTS[position] * ((tf * (K1 + 1)) / (tf + K1 * norm))
            if field_total > 0:
                score += idf * field_total
        if score > 0:
            scores[record_id] = score
    return scores


def naive_rank(
    indexed: Sequence[tuple[str, DocSpec]], query: str, valid_as_of: int, now_ms: int
) -> list[tuple[str, float]]:
    """(record id, score) best first, over ``indexed`` = every indexed record of the scope."""
    bm25 = naive_bm25f(indexed, query, valid_as_of, now_ms)
    lexical_order = sorted(bm25, key=lambda rid: (-bm25[rid], rid))[:2000]
    specs = dict(indexed)
    fused = {rid: 1 / (RRF_K + rank) for rank, rid in enumerate(lexical_order, start=1)}
    top = max(fused.values(), default=0.0)
    rows = []
    for rid, value in fused.items():
        t_end = specs[rid].t_end
        anchor = valid_as_of if t_end is None else min(valid_as_of, t_end)
        recency = math.exp((-math.log(2) * max(0, valid_as_of - anchor)) / HALF_LIFE_MS)
        rows.append((rid, 0.85 * (value / top) + 0.15 * recency, recency))
    rows.sort(key=lambda row: (-row[1], -row[2], row[0]))
    return [(rid, score) for rid, score, _ in rows[:2000]]


# --------------------------------------------------------------------------- the corpus

FILL_P = "weights probe baseline filler"
FILL_D = "decision filler text"
FILL_E = "evidence filler text"
FILL_C = "context filler text"


def _weights(key: str, **overrides: Any) -> DocSpec:
    fields: dict[str, Any] = {
        "primary": FILL_P,
        "decision": (FILL_D,),
        "evidence": (FILL_E,),
        "context": (FILL_C,),
        "source_refs": ("src:filler",),
    }
    fields.update(overrides)
    return DocSpec(key=key, **fields)


QUASAR = "quasar calibration log"
BEFORE_START = START - timedelta(days=1)

CORPUS: tuple[DocSpec, ...] = (
    # field weights: the same word in one field each, everything else equal
    _weights("w_primary", primary="weights probe zephyr filler"),
    _weights("w_decision", decision=("decision zephyr text",)),
    _weights("w_evidence", evidence=("evidence zephyr text",)),
    _weights("w_context", context=("context zephyr text",)),
    _weights("w_citation", source_refs=("src:zephyr",)),
    # short tokens and digits
    DocSpec(key="s_short", primary="an ox is at v2 of x1 release", primary_kind="decision"),
    DocSpec(key="s_digits", primary="build 42 passed 7 tests", primary_kind="evidence"),
    # Unicode words
    DocSpec(key="u_cafe", primary="Café naïve résumé"),
    DocSpec(key="u_strasse", primary="Die Straße ist gesperrt"),
    DocSpec(key="u_tokyo", primary="東京タワー is tall"),
    DocSpec(key="u_greek", primary="ΣΟΦΙΑ και γνώση"),
    DocSpec(key="u_snake", primary="snake_case_name and CamelCase"),
    # open and closed intervals with identical text: ties broken by record id
    DocSpec(key="r_open", primary=QUASAR, t=T0_MS - 10 * DAY_MS),
    DocSpec(key="r_closed", primary=QUASAR, t=T0_MS - 10 * DAY_MS, t_end=T0_MS + 10 * DAY_MS),
    DocSpec(key="r_edge", primary=QUASAR, t=T0_MS - 20 * DAY_MS, t_end=T0_MS),
    DocSpec(key="r_future", primary=QUASAR, t=T0_MS + DAY_MS),
    DocSpec(key="r_ended", primary=QUASAR, t=T0_MS - 40 * DAY_MS, t_end=T0_MS - 1),
    # retention expiry
    DocSpec(key="e_soon", primary="nebula survey notes", expires_at=format_instant(START + timedelta(hours=2))),
    DocSpec(
        key="e_late", primary="nebula survey notes extended", expires_at=format_instant(START + timedelta(days=30))
    ),
    DocSpec(key="e_none", primary="nebula survey archive notes"),
    DocSpec(key="e_gone", primary="nebula expired notes", expires_at=format_instant(START - timedelta(hours=1))),
    # multi-term queries, idf and length normalisation
    DocSpec(key="m1", primary="orbital mechanics primer for orbital transfers", primary_kind="decision"),
    DocSpec(key="m2", primary="orbital debris tracking", decision=("track debris weekly",)),
    DocSpec(
        key="m3",
        primary="mechanics of debris removal",
        evidence=("a long text with many extra words to lengthen the evidence field well beyond the average",),
    ),
    DocSpec(key="m4", primary="transfer orbit design"),
    DocSpec(key="m5", primary="reference shelf entry", source_refs=("doc:orbital-mechanics/handbook",)),
    # filler that shares common words
    DocSpec(key="f1", primary="team meeting notes about the survey"),
    DocSpec(key="f2", primary="weekly planning notes", context=("notes notes notes",)),
    DocSpec(key="f3", primary="incident review for the relay outage", decision=("rotate the relay keys",)),
    DocSpec(key="f4", primary="deployment checklist", evidence=("checklist verified by survey",)),
    DocSpec(key="f5", primary="glossary of internal terms", source_refs=("wiki:glossary", "wiki:terms")),
    DocSpec(key="f6", primary="onboarding guide for new engineers"),
    DocSpec(key="f7", primary="retrospective notes and survey results", primary_kind="evidence"),
)
FORGOTTEN = DocSpec(key="g_forgotten", primary="zephyr zephyr zephyr forgotten")


class Golden:
    """The admitted corpus of one scope, with the model's view of the index."""

    def __init__(self) -> None:
        self.harness = ReadHarness(start=BEFORE_START)
        self.binding = make_binding("tenant-golden")
        self.ids: dict[str, str] = {}
        for spec in (*CORPUS, FORGOTTEN):
            self.ids[spec.key] = self.harness.admit(self.binding, spec)
        self.harness.forget(self.binding, self.ids[FORGOTTEN.key])
        self.harness.clock.set(START)
        self.keys = {record_id: key for key, record_id in self.ids.items()}

    @property
    def indexed(self) -> list[tuple[str, DocSpec]]:
        return [(self.ids[spec.key], spec) for spec in CORPUS]

    def expected(self, query: str, *, valid_as_of: int = T0_MS, now_ms: int | None = None) -> list[tuple[str, float]]:
        return naive_rank(self.indexed, query, valid_as_of, valid_as_of if now_ms is None else now_ms)

    def search(self, query: str, **options: Any) -> dict[str, Any]:
        options.setdefault("limit", 50)
        return ok(self.harness.search(self.binding, query, **options))

    def order(self, query: str) -> list[str]:
        return [self.keys[packet["record"]["record_id"]] for packet in self.search(query)["records"]]


@pytest.fixture(scope="module")
def golden() -> Golden:
    return Golden()


QUERIES = (
    "zephyr",
    "ox v2",
    "x1 release",
    "7",
    "42 tests",
    "an is at",
    "CAFÉ",
    "cafe\u0301 NAÏVE",
    "strasse",
    "straße",
    "東京タワー",
    "東京",
    "Σοφια γνώση",
    "snake_case_name",
    "camelcase",
    "quasar",
    "quasar calibration",
    "nebula",
    "nebula survey notes",
    "orbital mechanics",
    "orbital orbital mechanics",
    "Orbital, MECHANICS!",
    "debris",
    "orbit transfer",
    "notes",
    "survey notes checklist",
    "relay",
    "filler",
    "src",
    "handbook",
    "nothingmatchesthis",
)


def test_the_corpus_is_large_enough_and_the_model_tokenizer_agrees() -> None:
    assert len(CORPUS) >= 30
    assert len(QUERIES) >= 10
    for spec in CORPUS:
        for _, text in spec.components():
            assert tokenize(text) == naive_tokens(text), text
        for source_ref in spec.source_refs:
            assert tokenize(source_ref) == naive_tokens(source_ref)
    for query in QUERIES:
        assert tokenize(unicodedata.normalize("NFC", query)) == naive_tokens(unicodedata.normalize("NFC", query))


@pytest.mark.parametrize("query", QUERIES)
def test_order_and_scores_match_the_model(golden: Golden, query: str) -> None:
    value = golden.search(query)
    got = [(packet["record"]["record_id"], packet["score"]) for packet in value["records"]]
    assert got == golden.expected(unicodedata.normalize("NFC", query))
    assert [packet["rank"] for packet in value["records"]] == list(range(1, len(got) + 1))
    assert value["rank_receipt"]["candidate_count"] == len(got)
    assert "next_page_cursor" not in value
    check_search_digests(value)


def test_field_weights_order(golden: Golden) -> None:
    assert golden.order("zephyr") == ["w_primary", "w_decision", "w_evidence", "w_context", "w_citation"]
    scores = [packet["score"] for packet in golden.search("zephyr")["records"]]
    assert scores == pytest.approx([0.85 * 61 / (60 + rank) + 0.15 for rank in range(1, 6)], abs=1e-12)
    assert scores[0] == 1.0


def test_short_ascii_tokens_are_dropped(golden: Golden) -> None:
    assert golden.order("ox v2") == ["s_short"]
    assert golden.order("x1") == ["s_short"]
    assert golden.order("7") == ["s_digits"]
    empty = golden.search("an is at")
    assert empty["records"] == []
    assert empty["rank_receipt"]["candidate_count"] == 0
    assert "next_page_cursor" not in empty


def test_unicode_words(golden: Golden) -> None:
    assert golden.order("CAFÉ") == ["u_cafe"]
    assert golden.order("cafe\u0301") == ["u_cafe"]  # the query is NFC-normalised
    assert golden.order("strasse") == []  # lower-casing, no case folding
    assert golden.order("STRAẞE") == ["u_strasse"]  # capital sharp s lower-cases to ß
    assert golden.order("straße") == ["u_strasse"]
    assert golden.order("東京タワー") == ["u_tokyo"]
    assert golden.order("東京") == []
    assert golden.order("Σοφια") == ["u_greek"]
    assert golden.order("snake_case_name") == ["u_snake"]


def test_equal_relevance_is_ordered_by_record_id_across_open_and_closed_intervals(golden: Golden) -> None:
    eligible = sorted(golden.ids[key] for key in ("r_open", "r_closed", "r_edge"))
    value = golden.search("quasar")
    assert [packet["record"]["record_id"] for packet in value["records"]] == eligible
    # every eligible interval is still current at valid_as_of: recency 1, so only the rank decides
    scores = [packet["score"] for packet in value["records"]]
    assert scores == pytest.approx([0.85 * 61 / (60 + rank) + 0.15 for rank in range(1, 4)], abs=1e-12)
    assert scores == sorted(scores, reverse=True)


def test_ineligible_records_count_in_the_scope_statistics_but_never_match(golden: Golden) -> None:
    returned = set(golden.order("quasar nebula"))
    assert {"r_future", "r_ended", "e_gone", "g_forgotten"}.isdisjoint(returned)
    assert {"r_open", "r_closed", "r_edge", "e_soon", "e_late", "e_none"} <= returned
    # the model with N over eligible records only would give other BM25 magnitudes; ours counts the index
    assert len(golden.indexed) == len(CORPUS)


def test_query_term_repetition_and_case_do_not_matter(golden: Golden) -> None:
    plain = golden.order("orbital mechanics")
    assert plain == golden.order("orbital orbital mechanics") == golden.order("Orbital, MECHANICS!")
    assert plain[0] == "m1"


def test_later_valid_as_of_changes_eligibility_as_the_model_says() -> None:
    corpus = Golden()
    corpus.harness.clock.advance(timedelta(days=2))
    now = T0_MS + 2 * DAY_MS
    value = corpus.search("quasar")
    got = [(packet["record"]["record_id"], packet["score"]) for packet in value["records"]]
    assert got == corpus.expected("quasar", valid_as_of=now)
    keys = {corpus.keys[rid] for rid, _ in got}
    assert keys == {"r_open", "r_closed", "r_future"}  # r_edge ended at T0; r_future began at T0 + 1 day


def test_a_record_expiring_between_two_pages() -> None:
    corpus = Golden()
    first = corpus.search("nebula", limit=1)
    assert len(first["records"]) == 1
    cursor = first["next_page_cursor"]
    assert {corpus.keys[rid] for rid, _ in corpus.expected("nebula")} == {"e_soon", "e_late", "e_none"}
    corpus.harness.clock.advance(timedelta(hours=3))  # e_soon expires at START + 2 h
    fail(corpus.harness.search(corpus.binding, "nebula", limit=1, cursor=cursor), ErrorCode.STALE_PAGE)
    fresh = corpus.search("nebula")
    got = [(packet["record"]["record_id"], packet["score"]) for packet in fresh["records"]]
    now = T0_MS + 3 * 3_600_000
    assert got == corpus.expected("nebula", valid_as_of=now, now_ms=now)
    assert {corpus.keys[rid] for rid, _ in got} == {"e_late", "e_none"}


# --------------------------------------------------------------------------- random corpora

_WORDS = ("alpha", "beta", "gamma", "delta", "ab", "x1", "é", "東京", "naïve", "notes")
_texts = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join)


@st.composite
def _doc_specs(draw: st.DrawFn, index: int) -> DocSpec:
    t = T0_MS + draw(st.integers(-3, 1)) * DAY_MS
    t_end = draw(st.none() | st.integers(0, 4).map(lambda days: t + days * DAY_MS))
    expires = draw(st.none() | st.integers(-20, 20).map(lambda hours: START + timedelta(hours=hours)))
    return DocSpec(
        key=f"random-{index}",
        primary=draw(_texts),
        primary_kind=draw(st.sampled_from(("decision", "evidence", "context"))),
        decision=tuple(draw(st.lists(_texts, max_size=2))),
        evidence=tuple(draw(st.lists(_texts, max_size=2))),
        context=tuple(draw(st.lists(_texts, max_size=2))),
        source_refs=tuple(draw(st.lists(_texts.map(lambda text: "src:" + text), min_size=1, max_size=2, unique=True))),
        t=t,
        t_end=t_end,
        expires_at=format_instant(expires) if expires is not None else None,
    )


@st.composite
def _corpora(draw: st.DrawFn) -> list[DocSpec]:
    size = draw(st.integers(1, 8))
    return [draw(_doc_specs(index)) for index in range(size)]


@settings(max_examples=30, deadline=None)
@given(corpus=_corpora(), query=_texts)
def test_random_corpora_match_the_model(corpus: list[DocSpec], query: str) -> None:
    harness = ReadHarness(start=BEFORE_START)
    binding = make_binding("tenant-random")
    indexed = [(harness.admit(binding, spec), spec) for spec in corpus]
    harness.clock.set(START)
    value = ok(harness.search(binding, query, limit=50, max_packet_bytes=1_048_576))
    got = [(packet["record"]["record_id"], packet["score"]) for packet in value["records"]]
    assert got == naive_rank(indexed, query, T0_MS, T0_MS)
    check_search_digests(value)
