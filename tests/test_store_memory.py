"""The store conformance suite bound to the in-memory reference store."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from engram_memory.errors import StoreUnavailableError
from engram_memory.ports import JournalEvent, UnitOfWork
from engram_memory.stores.memory import InMemoryStore
from engram_memory.testing import StoreConformance, TermTraces
from engram_memory.testing.fakes import inmemory_term_traces


class TestInMemoryStore(StoreConformance):
    @pytest.fixture
    def store(self) -> InMemoryStore:
        return InMemoryStore()

    @pytest.fixture
    def term_traces(self) -> TermTraces | None:
        return inmemory_term_traces


def test_a_given_secret_is_kept() -> None:
    assert InMemoryStore(secret=b"k" * 32).secret() == b"k" * 32


def _event(cursor: int, tag: str) -> JournalEvent:
    return JournalEvent(cursor=cursor, event_digest=f"sha256:{tag}", body=tag.encode())


def _roll_back(store: InMemoryStore, scope: str, body: Callable[[UnitOfWork], object]) -> None:
    """Run ``body`` in a unit of work on ``scope`` that then raises (so it rolls back)."""

    def run() -> None:
        with store.write(scope) as unit:
            body(unit)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        run()


def test_a_unit_of_work_inside_another_on_one_thread_is_refused() -> None:
    """Refused at once, as SQLite does (in memory a nested unit would not be isolated from the open one)."""
    store = InMemoryStore()
    refused: list[str] = []

    def nest(outer: UnitOfWork) -> None:
        outer.append_event(_event(1, "outer"))
        for scope in ("scope-a", "scope-b"):
            with pytest.raises(StoreUnavailableError):
                store.write(scope).__enter__()
            refused.append(scope)

    _roll_back(store, "scope-a", nest)
    assert refused == ["scope-a", "scope-b"]
    assert store.scopes() == []
    with store.read("scope-a") as reader:
        assert list(reader.events()) == []


def test_a_read_inside_a_unit_of_work_is_refused_and_a_write_inside_a_read_is_not() -> None:
    """A read inside a unit would see its uncommitted writes (SQLite shows the committed snapshot)."""
    store = InMemoryStore()
    with store.write("scope-a") as unit:
        unit.append_event(_event(1, "first"))
        with pytest.raises(StoreUnavailableError):
            store.read("scope-a").__enter__()
    with store.read("scope-a") as reader, store.write("scope-a") as unit:
        unit.append_event(_event(2, "second"))
        assert reader.high_water() == 2
    with store.read("scope-a") as reader:
        assert [event.cursor for event in reader.events()] == [1, 2]


def test_a_rolled_back_first_unit_leaves_no_partition() -> None:
    store = InMemoryStore()
    _roll_back(store, "scope-a", lambda unit: unit.append_event(_event(1, "gone")))
    assert store._partitions == {}


def test_a_writer_waiting_for_the_lock_when_the_store_closes_is_refused() -> None:
    """``close`` is checked under the lock: a unit still waiting for it is refused, the open one commits."""
    store = InMemoryStore()
    asking = threading.Event()
    refused: list[BaseException] = []

    def second_writer() -> None:
        asking.set()
        try:
            with store.write("scope-a") as unit:
                unit.append_event(_event(2, "second"))
        except StoreUnavailableError as exc:
            refused.append(exc)

    thread = threading.Thread(target=second_writer)
    with store.write("scope-a") as unit:
        unit.append_event(_event(1, "first"))
        thread.start()
        asking.wait()
        store.close()
    thread.join()
    assert [str(exc) for exc in refused] == ["the store is closed"]
    assert [event.cursor for event in store.raw_partition("scope-a").events] == [1]
