"""``RankerConformance``: the behaviour every :class:`~engram_memory.ports.Ranker` must show.

Bind it with one fixture::

    class TestMyRanker(RankerConformance):
        @pytest.fixture
        def ranker(self) -> MyRanker:
            return MyRanker()

The suite writes a small corpus straight into a store (by default an
:class:`~engram_memory.stores.memory.InMemoryStore`; override ``ranker_store`` to rank over another
backend) and checks, through read views only: determinism, eligibility (state, trust, closed
valid-time interval, retention expiry), that no id outside the scope's index is ever returned,
the documented order (score desc, recency desc, record id asc) with ties broken by record id,
answers that are lists of hits with ``str`` ids and finite ``int`` or ``float`` scores, and that
ranking never writes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Final

import attrs
import pytest

from engram_memory.canonical import canonical_bytes
from engram_memory.context import scope_key
from engram_memory.ports import (
    FIELDS,
    IndexedDocument,
    RankedHit,
    Ranker,
    RankingQuery,
    RecordRow,
    RecordState,
    SealedEnvelope,
    Store,
)
from engram_memory.ranking.tokenizer import TOKENIZER_VERSION, tokenize
from engram_memory.stores.memory import InMemoryStore

__all__ = ["CONFORMANCE_SCOPE", "NOW_MS", "OTHER_SCOPE", "RankerConformance"]

CONFORMANCE_SCOPE: Final = scope_key("tenant-ranker", "workspace-1")
OTHER_SCOPE: Final = scope_key("tenant-other", "workspace-1")
NOW_MS: Final = 1_767_225_600_000
"""2026-01-01T00:00:00.000Z: both the pinned ``valid_as_of`` and the clock of the suite."""
_DAY: Final = 86_400_000
TERM: Final = "heliograph"
_TOKENIZER_SAMPLES: Final = (
    "Relay-7 ON the GRID_bus, at 3.5 kV; a ok go",  # case, digits, underscore, dropped short ASCII words
    "Café déjà vu: naïve Ærø ÉTÉ",  # accented letters, upper case beyond ASCII
    "Straße ß ﬁle Ⅻ ½ ²",  # case folding is lower(), not casefold(); compatibility forms kept
    "東京 タワー 서울 Москва",  # scripts without ASCII letters; short non-ASCII tokens are kept
    "e\u0301 x\u200by tab\tnew\nline",  # a combining mark, a zero-width space, control characters
)
"""Texts on which a ranker's query tokens must equal the index's (the built-in tokenizer's)."""


@attrs.frozen(kw_only=True)
class _Doc:
    record_id: str
    texts: tuple[str, ...]
    valid_from: int = NOW_MS - 10 * _DAY
    valid_to: int | None = None
    expires_at_ms: int | None = None
    state: RecordState = "accepted_current"
    trust_valid: bool = True
    indexed: bool = True


def _texts(
    primary: str = "", decision: str = "", evidence: str = "", context: str = "", citations: str = ""
) -> tuple[str, ...]:
    return (primary, decision, evidence, context, citations)


_FILLER: Final = "calibrated relay station notes"
_CORPUS: Final[tuple[_Doc, ...]] = (
    _Doc(record_id="mem_aopen", texts=_texts(f"{TERM} {_FILLER}", "relay decision")),
    _Doc(
        record_id="mem_bclosed",
        texts=_texts(_FILLER, f"{TERM} {TERM} decision"),
        valid_to=NOW_MS + 5 * _DAY,
    ),
    _Doc(record_id="mem_cfromnow", texts=_texts(_FILLER, evidence=f"{TERM} evidence"), valid_from=NOW_MS),
    _Doc(record_id="mem_dtonow", texts=_texts(_FILLER, context=f"{TERM} context"), valid_to=NOW_MS),
    _Doc(record_id="mem_efuture", texts=_texts(f"{TERM} {_FILLER}"), valid_from=NOW_MS + 1),
    _Doc(record_id="mem_fended", texts=_texts(f"{TERM} {_FILLER}"), valid_to=NOW_MS - 1),
    _Doc(record_id="mem_gexpired", texts=_texts(f"{TERM} {_FILLER}"), expires_at_ms=NOW_MS),
    _Doc(record_id="mem_hexpiring", texts=_texts(_FILLER, citations=f"doc:{TERM}"), expires_at_ms=NOW_MS + 1),
    _Doc(record_id="mem_iuntrusted", texts=_texts(f"{TERM} {_FILLER}"), trust_valid=False),
    _Doc(record_id="mem_jdisputed", texts=_texts(f"{TERM} {_FILLER}"), state="accepted_disputed"),
    _Doc(record_id="mem_kunindexed", texts=_texts(f"{TERM} {_FILLER}"), indexed=False),
    _Doc(record_id="mem_ltwin", texts=_texts(f"twin {TERM} {_FILLER}")),
    _Doc(record_id="mem_mtwin", texts=_texts(f"twin {TERM} {_FILLER}")),
    _Doc(record_id="mem_nplain", texts=_texts(_FILLER, "unrelated decision text")),
)
ELIGIBLE_WITH_TERM: Final = frozenset(
    {"mem_aopen", "mem_bclosed", "mem_cfromnow", "mem_dtonow", "mem_hexpiring", "mem_ltwin", "mem_mtwin"}
)
"""The documents containing :data:`TERM` that are eligible at :data:`NOW_MS`."""


def _sealed(record_id: str) -> SealedEnvelope:
    return SealedEnvelope(key_ref="key_" + record_id, nonce=b"\x00" * 12, ciphertext=b"opaque")


def _digest(record_id: str) -> str:
    return "sha256:" + (record_id.encode().hex() * 64)[:64]


def _row(doc: _Doc) -> RecordRow:
    return RecordRow(
        record_id=doc.record_id,
        state=doc.state,
        record_digest=_digest(doc.record_id),
        payload_digest=_digest("payload" + doc.record_id),
        sealed=_sealed(doc.record_id),
        recorded_cursor=1,
        accepted_cursor=1,
        valid_from=doc.valid_from,
        valid_to=doc.valid_to,
        expires_at_ms=doc.expires_at_ms,
        trust_valid=doc.trust_valid,
    )


def _document(doc: _Doc) -> IndexedDocument:
    """``doc`` as the service indexes it: the built-in tokenizer's tokens, whatever the ranker."""
    counts = [Counter(tokenize(text)) for text in doc.texts]
    terms = {term: tuple(c.get(term, 0) for c in counts) for term in sorted(set().union(*counts))}
    return IndexedDocument(
        record_id=doc.record_id,
        lengths=tuple(sum(c.values()) for c in counts),
        terms=terms,
        valid_from=doc.valid_from,
        valid_to=doc.valid_to,
        expires_at_ms=doc.expires_at_ms,
    )


def _query(ranker: Ranker, text: str, *, valid_as_of: int = NOW_MS, now_ms: int = NOW_MS) -> RankingQuery:
    return RankingQuery(terms=tuple(ranker.tokenize(text)), valid_as_of=valid_as_of, now_ms=now_ms)


class RankerConformance:
    """Pytest mixin: bind ``ranker`` (and optionally ``ranker_store``) in a ``Test...`` subclass."""

    @pytest.fixture
    def ranker(self) -> Ranker:
        """The ranker under test (override in the binding class)."""
        raise NotImplementedError("bind RankerConformance with a `ranker` fixture")

    @pytest.fixture
    def ranker_store(self) -> Iterator[Store]:
        """A fresh, empty store the corpus is written into (override to rank over another backend)."""
        store = InMemoryStore()
        yield store
        store.close()

    @pytest.fixture
    def corpus(self, ranker_store: Store) -> Store:
        """``ranker_store`` holding the conformance corpus in one scope and a decoy in another."""
        assert len(FIELDS) == 5
        with ranker_store.write(CONFORMANCE_SCOPE) as unit:
            for doc in _CORPUS:
                unit.put_record(_row(doc))
                if doc.indexed:
                    unit.index_document(_document(doc))
        decoy = _Doc(record_id="mem_zdecoy", texts=_texts(f"{TERM} {TERM} {TERM}"))
        with ranker_store.write(OTHER_SCOPE) as unit:
            unit.put_record(_row(decoy))
            unit.index_document(_document(decoy))
        return ranker_store

    @staticmethod
    def rank(ranker: Ranker, store: Store, text: str, **pins: int) -> list[RankedHit]:
        """Rank ``text`` over the conformance scope in a fresh read view."""
        with store.read(CONFORMANCE_SCOPE) as reader:
            return ranker.rank(reader, _query(ranker, text, **pins))

    # ------------------------------------------------------------------ the contract

    def test_profile_channels_and_config(self, ranker: Ranker) -> None:
        assert ranker.profile
        assert "lexical" in ranker.channels
        assert type(ranker.uses_network) is bool  # the read path gates network rankers on it
        config = ranker.config()
        assert canonical_bytes(config) == canonical_bytes(ranker.config())

    def test_tokenize_is_deterministic(self, ranker: Ranker) -> None:
        text = f"The {TERM.upper()} relay, calibrated: {TERM}!"
        assert ranker.tokenize(text) == ranker.tokenize(text)
        assert TERM in ranker.tokenize(text)

    @pytest.mark.parametrize("text", _TOKENIZER_SAMPLES)
    def test_tokenize_matches_the_index(self, ranker: Ranker, text: str) -> None:
        """Queries are tokenized as the index is (``Ranker.tokenize``).

        The service indexes records with ``graphify-memory:tokenizer:v1``: a query tokenized any
        other way misses the terms the index holds.
        """
        assert ranker.tokenize(text) == tokenize(text), (
            f"ranker.tokenize({text!r}) differs from the index's tokenizer ({TOKENIZER_VERSION})"
        )

    def test_deterministic(self, ranker: Ranker, corpus: Store) -> None:
        first = self.rank(ranker, corpus, f"{TERM} relay decision")
        assert first
        for _ in range(3):
            assert self.rank(ranker, corpus, f"{TERM} relay decision") == first

    def test_respects_eligibility(self, ranker: Ranker, corpus: Store) -> None:
        ids = {hit.record_id for hit in self.rank(ranker, corpus, TERM)}
        assert ids == ELIGIBLE_WITH_TERM

    def test_eligibility_follows_the_pins(self, ranker: Ranker, corpus: Store) -> None:
        later = {hit.record_id for hit in self.rank(ranker, corpus, TERM, valid_as_of=NOW_MS + 1, now_ms=NOW_MS + 1)}
        assert "mem_efuture" in later
        assert "mem_dtonow" not in later
        assert "mem_hexpiring" not in later
        earlier = {hit.record_id for hit in self.rank(ranker, corpus, TERM, valid_as_of=NOW_MS - 1)}
        assert "mem_fended" in earlier
        assert "mem_cfromnow" not in earlier
        expired_later = {hit.record_id for hit in self.rank(ranker, corpus, TERM, now_ms=NOW_MS - 1)}
        assert "mem_gexpired" in expired_later

    def test_never_returns_ids_outside_the_index(self, ranker: Ranker, corpus: Store) -> None:
        with corpus.read(CONFORMANCE_SCOPE) as reader:
            indexed = set(reader.indexed_ids())
        for text in (TERM, f"{TERM} twin", "relay", "calibrated station decision"):
            ids = [hit.record_id for hit in self.rank(ranker, corpus, text)]
            assert len(ids) == len(set(ids))
            assert set(ids) <= indexed
            assert "mem_kunindexed" not in ids
            assert "mem_zdecoy" not in ids

    def test_forgotten_documents_disappear(self, ranker: Ranker, corpus: Store) -> None:
        """Ranked before and after the unindex: a ranker must read the view it is given, never a cache."""
        assert "mem_aopen" in {hit.record_id for hit in self.rank(ranker, corpus, TERM)}, "an open record is missing"
        with corpus.write(CONFORMANCE_SCOPE) as unit:
            unit.unindex("mem_aopen")
        assert "mem_aopen" not in {hit.record_id for hit in self.rank(ranker, corpus, TERM)}, (
            "a forgotten record is still ranked (an answer cached across index changes?)"
        )

    def test_each_scope_is_ranked_from_its_own_view(self, ranker: Ranker, corpus: Store) -> None:
        """The same query in two scopes, one after the other: each answer holds only its own scope's records."""
        ours = {hit.record_id for hit in self.rank(ranker, corpus, TERM)}
        with corpus.read(OTHER_SCOPE) as reader:
            theirs = {hit.record_id for hit in ranker.rank(reader, _query(ranker, TERM))}
        assert ours, "the conformance scope has no hit"
        assert "mem_zdecoy" not in ours
        assert theirs == {"mem_zdecoy"}, f"the other scope's answer holds {sorted(theirs)} (an answer cached by query?)"

    def test_documented_order_and_record_id_tie_break(self, ranker: Ranker, corpus: Store) -> None:
        hits = self.rank(ranker, corpus, TERM)
        keys = [(-hit.score, -hit.recency, hit.record_id) for hit in hits]
        assert keys == sorted(keys)
        twins = [hit.record_id for hit in self.rank(ranker, corpus, "twin")]
        assert twins == ["mem_ltwin", "mem_mtwin"]

    def test_answers_are_lists_of_finite_numbers(self, ranker: Ranker, corpus: Store) -> None:
        # what the search accepts (else RANKING_UNAVAILABLE): a list; str ids; int or float scores, finite
        for text in (TERM, f"{TERM} relay decision twin", "doc"):
            hits = self.rank(ranker, corpus, text)
            assert isinstance(hits, list)
            for hit in hits:
                assert type(hit.record_id) is str
                for value in (hit.score, hit.recency, hit.lexical):
                    assert type(value) in (float, int), f"{hit.record_id}: {value!r} is not a number"
                    assert math.isfinite(value), f"{hit.record_id}: {value!r} is not finite"

    def test_no_terms_or_no_match_is_empty(self, ranker: Ranker, corpus: Store) -> None:
        assert self.rank(ranker, corpus, "an of to") == []
        assert self.rank(ranker, corpus, "nonexistentterm") == []

    def test_an_empty_scope_has_no_hits(self, ranker: Ranker, corpus: Store) -> None:
        with corpus.read(scope_key("tenant-empty", "workspace-1")) as reader:
            assert ranker.rank(reader, _query(ranker, TERM)) == []

    def test_ranking_never_writes(self, ranker: Ranker, corpus: Store) -> None:
        def observe() -> tuple[object, ...]:
            with corpus.read(CONFORMANCE_SCOPE) as reader:
                return (
                    reader.high_water(),
                    reader.index_stats(),
                    list(reader.indexed_ids()),
                    list(reader.records()),
                    list(reader.postings(TERM)),
                )

        before = observe()
        self.rank(ranker, corpus, f"{TERM} relay twin")
        assert observe() == before
