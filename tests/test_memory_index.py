"""The in-memory store's lexical index: exact postings, statistics and rollback, with literal expectations."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from engram_memory.ports import IndexedDocument, IndexEntry, RecordRow, SealedEnvelope, TermPostings, UnitOfWork
from engram_memory.stores.memory import InMemoryStore

SCOPE = "scope-index"


def _document(record_id: str, lengths: tuple[int, ...], terms: dict[str, tuple[int, ...]]) -> IndexedDocument:
    return IndexedDocument(
        record_id=record_id, lengths=lengths, terms=terms, valid_from=10, valid_to=None, expires_at_ms=None
    )


def _row(record_id: str) -> RecordRow:
    return RecordRow(
        record_id=record_id,
        state="accepted_current",
        record_digest="sha256:" + "0" * 64,
        payload_digest="sha256:" + "1" * 64,
        sealed=SealedEnvelope(key_ref="key_x", nonce=b"\x00" * 12, ciphertext=b"x"),
        recorded_cursor=1,
        accepted_cursor=1,
        valid_from=10,
        valid_to=None,
        expires_at_ms=None,
    )


A = _document("mem_a", (3, 1, 0, 0, 0), {"alpha": (2, 0, 0, 0, 0), "shared": (1, 1, 0, 0, 0)})
B = _document("mem_b", (2, 0, 4, 0, 1), {"shared": (1, 0, 2, 0, 0), "beta": (1, 0, 2, 0, 1)})


def _seeded() -> InMemoryStore:
    store = InMemoryStore()
    with store.write(SCOPE) as unit:
        unit.put_record(_row("mem_a"))
        unit.put_record(_row("mem_b"))
        unit.index_document(A)
        unit.index_document(B)
    return store


def _pairs(postings: TermPostings) -> list[tuple[str, str]]:
    """(document key, occurrence key) pairs by key: the order of the parallel sequences is not part of the port."""
    keys, occurrences = postings
    assert len(keys) == len(occurrences)
    return sorted(zip(keys, occurrences, strict=True))


def _state(store: InMemoryStore) -> dict[str, object]:
    with store.read(SCOPE) as reader:
        stats = reader.index_stats()
        return {
            "documents": stats.documents,
            "total_lengths": tuple(stats.total_lengths),
            "alpha": _pairs(reader.term_postings("alpha")),
            "shared": _pairs(reader.term_postings("shared")),
            "beta": _pairs(reader.term_postings("beta")),
            "terms": sorted(store.raw_partition(SCOPE).occurrences),
            "ids": list(reader.indexed_ids()),
        }


SEEDED = {
    "documents": 2,
    "total_lengths": (5, 1, 4, 0, 1),
    "alpha": [("mem_a", "0:2:3")],
    "shared": [("mem_a", "0:1:3,1:1:1"), ("mem_b", "0:1:2,2:2:4")],
    "beta": [("mem_b", "0:1:2,2:2:4,4:1:1")],
    "terms": ["alpha", "beta", "shared"],
    "ids": ["mem_a", "mem_b"],
}


def _roll_back(store: InMemoryStore, body: Callable[[UnitOfWork], object]) -> None:
    def run() -> None:
        with store.write(SCOPE) as unit:
            body(unit)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        run()


def test_the_index_holds_exactly_the_documents_terms_and_lengths() -> None:
    assert _state(_seeded()) == SEEDED


def test_unindex_removes_the_document_its_lengths_and_every_emptied_term_bucket() -> None:
    store = _seeded()
    with store.write(SCOPE) as unit:
        unit.unindex("mem_a")
    assert _state(store) == {
        "documents": 1,
        "total_lengths": (2, 0, 4, 0, 1),
        "alpha": [],
        "shared": [("mem_b", "0:1:2,2:2:4")],
        "beta": [("mem_b", "0:1:2,2:2:4,4:1:1")],
        "terms": ["beta", "shared"],  # no empty bucket is left behind for "alpha"
        "ids": ["mem_b"],
    }
    assert store.raw_partition(SCOPE).buckets.keys() == {"mem_b"}
    with store.write(SCOPE) as unit:
        unit.unindex("mem_b")
        unit.unindex("mem_b")  # unindexing what is not indexed changes nothing
    assert _state(store) == {
        "documents": 0,
        "total_lengths": (0, 0, 0, 0, 0),
        "alpha": [],
        "shared": [],
        "beta": [],
        "terms": [],
        "ids": [],
    }


def test_reindexing_replaces_the_old_terms_and_lengths() -> None:
    store = _seeded()
    with store.write(SCOPE) as unit:
        unit.index_document(_document("mem_a", (1, 0, 0, 2, 0), {"beta": (1, 0, 0, 0, 0), "gamma": (0, 0, 0, 2, 0)}))
    state = _state(store)
    assert state["documents"] == 2
    assert state["total_lengths"] == (3, 0, 4, 2, 1)
    assert state["alpha"] == []
    assert state["shared"] == [("mem_b", "0:1:2,2:2:4")]
    assert state["beta"] == [("mem_a", "0:1:1"), ("mem_b", "0:1:2,2:2:4,4:1:1")]
    assert state["terms"] == ["beta", "gamma", "shared"]


@pytest.mark.parametrize(
    "body",
    [
        lambda unit: unit.unindex("mem_a"),
        lambda unit: (unit.unindex("mem_a"), unit.unindex("mem_b")),
        lambda unit: unit.index_document(_document("mem_c", (7, 0, 0, 0, 0), {"alpha": (7, 0, 0, 0, 0)})),
        lambda unit: unit.index_document(_document("mem_a", (1, 0, 0, 0, 0), {"gamma": (1, 0, 0, 0, 0)})),
        lambda unit: (
            unit.unindex("mem_b"),
            unit.index_document(_document("mem_b", (9, 0, 0, 0, 0), {"alpha": (9, 0, 0, 0, 0)})),
            unit.unindex("mem_b"),
            unit.index_document(_document("mem_b", (1, 1, 1, 1, 1), {"delta": (1, 1, 1, 1, 1)})),
        ),
    ],
    ids=["unindex", "unindex-all", "index-new", "reindex", "churn"],
)
def test_a_rolled_back_unit_restores_every_posting_and_statistic(body: Callable[[UnitOfWork], object]) -> None:
    store = _seeded()
    _roll_back(store, body)
    assert _state(store) == SEEDED
    assert store.raw_partition(SCOPE).buckets.keys() == {"mem_a", "mem_b"}


def test_a_rolled_back_new_row_is_gone_not_none() -> None:
    store = _seeded()
    _roll_back(store, lambda unit: unit.put_record(_row("mem_new")))
    with store.read(SCOPE) as reader:
        assert reader.record("mem_new") is None
        assert [row.record_id for row in reader.records()] == ["mem_a", "mem_b"]


def test_index_entries_resolve_only_indexed_documents_with_a_row() -> None:
    store = _seeded()
    with store.write(SCOPE) as unit:
        unit.put_record(_row("mem_rowonly"))  # a row that was never indexed
        unit.index_document(_document("mem_doconly", (1, 0, 0, 0, 0), {"alpha": (1, 0, 0, 0, 0)}))  # no row
        unit.unindex("mem_b")  # a row whose document was unindexed
    with store.read(SCOPE) as reader:
        entries = reader.index_entries(["mem_a", "mem_b", "mem_rowonly", "mem_doconly", "mem_unknown"])
    assert entries == {
        "mem_a": IndexEntry(
            "mem_a", "accepted_current", trust_valid=True, valid_from=10, valid_to=None, expires_at_ms=None
        )
    }


@pytest.mark.parametrize(
    ("lengths", "terms"),
    [
        ((1, 2, 3, 4), {"alpha": (1, 0, 0, 0)}),  # four fields, consistently
        ((1, 0, 0, 0, 0, 0), {"alpha": (1, 0, 0, 0, 0, 0)}),  # six fields, consistently
        ((1, 0, 0, 0, 0), {"alpha": (1, 0, 0, 0)}),
        ((1, 0, 0, 0, 0), {"alpha": (1, 0, 0, 0, 0), "beta": (1, 0, 0, 0, 0, 0)}),
    ],
)
def test_a_document_without_one_entry_per_field_is_refused_and_changes_nothing(
    lengths: tuple[int, ...], terms: dict[str, tuple[int, ...]]
) -> None:
    store = _seeded()
    with store.write(SCOPE) as unit:
        with pytest.raises(ValueError, match="one entry per field"):
            unit.index_document(_document("mem_a", lengths, terms))
        with pytest.raises(ValueError, match="one entry per field"):
            unit.index_document(_document("mem_new", lengths, terms))
    assert _state(store) == SEEDED


def test_an_indexed_record_costs_the_garbage_collector_a_fixed_number_of_objects_whatever_its_terms() -> None:
    """A record's index bucket is its terms and their posting maps, two containers, not one pair per term.

    Pairs holding a dict stay tracked by the garbage collector, so a bucket of pairs made every
    full collection scan ~67 more objects a record (3.8 s at 100k records, 1.25 s without).
    """
    store = InMemoryStore()
    with store.write(SCOPE) as unit:
        for index in range(20):
            frequencies: dict[str, tuple[int, ...]] = {
                f"term{index}x{position}": (1, 0, 0, 0, 0) for position in range(60)
            }
            unit.index_document(_document(f"mem_{index:02d}", (60, 0, 0, 0, 0), frequencies))
    gc.collect()  # untracks the tuples that hold only strings
    buckets = store.raw_partition(SCOPE).buckets
    assert len(buckets) == 20
    for terms, maps in buckets.values():
        assert len(terms) == len(maps) == 60
        tracked = [part for part in (terms, maps) if gc.is_tracked(part)]
        assert tracked == [maps]  # the terms tuple holds only strings: untracked
        assert all(not gc.is_tracked(term) for term in terms)
