"""``benchmarks/index_writes.py`` models what it says: the same documents in every layout (no timing).

The leveled-run model is checked by content: after the load, after seals and after merges, the
runs and the pending table hold every posting of every document exactly once, in document order
within a term, and the run levels have the sizes the docstrings state.
"""

from __future__ import annotations

import array
import importlib.util
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "index_writes.py"
TERMS = 12
BASE = 4  # documents per level-0 run, so that a few hundred documents reach level 3


@pytest.fixture(scope="module")
def model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("index_writes_model", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected(model: ModuleType, vocabulary: Any, docs: range) -> Counter[tuple[bytes, int, str]]:
    return Counter(model.postings_of(vocabulary, docs, TERMS))


def _held(conn: sqlite3.Connection) -> Counter[tuple[bytes, int, str]]:
    """Every posting the runs and the run pending table hold, with multiplicity."""
    held: Counter[tuple[bytes, int, str]] = Counter()
    for term, packed, occurrences in conn.execute("SELECT term, docs, occurrences FROM runs ORDER BY run, term"):
        docs = array.array("q")
        docs.frombytes(packed)
        keys = occurrences.split(";")
        assert len(keys) == len(docs)
        assert list(docs) == sorted(docs), "a run keeps a term's documents in order"
        held.update((term, doc, key) for doc, key in zip(docs, keys, strict=True))
    held.update(conn.execute("SELECT term, doc, occurrence FROM run_pending"))
    return held


def _run_sizes(conn: sqlite3.Connection, runs: Any) -> dict[int, list[int]]:
    """Documents per run, by level."""
    sizes: dict[int, list[int]] = {}
    for level, run_ids in runs.levels.items():
        for run in run_ids:
            docs: set[int] = set()
            for (packed,) in conn.execute("SELECT docs FROM runs WHERE run = ?", (run,)):
                values = array.array("q")
                values.frombytes(packed)
                docs.update(values)
            sizes.setdefault(level, []).append(len(docs))
    return sizes


def test_documents_are_reproducible_and_distinct(model: ModuleType) -> None:
    vocabulary = model.Vocabulary(500)
    first = vocabulary.document(7, TERMS)
    assert first == vocabulary.document(7, TERMS)
    assert len(set(first)) == TERMS
    assert first == sorted(first)
    assert first != vocabulary.document(8, TERMS)
    assert [row[2] for row in vocabulary.rows(7, TERMS)] == [7] * TERMS


def test_load_lays_out_levels_and_holds_every_posting_once(model: ModuleType, tmp_path: Path) -> None:
    vocabulary = model.Vocabulary(500)
    size = 302  # one run of 256 documents (level 2), one of 32 (level 1), three of 4 (level 0), 2 pending
    runs = model.build(tmp_path / "base.db", size, vocabulary, TERMS, BASE)
    conn = sqlite3.connect(tmp_path / "base.db")
    try:
        assert conn.execute("SELECT count(*) FROM postings").fetchone()[0] == size * TERMS
        assert _held(conn) == _expected(model, vocabulary, range(size))
        sizes = _run_sizes(conn, runs)
        for level, run_sizes in sizes.items():
            assert run_sizes == [BASE * model.FAN_IN**level] * len(run_sizes)
            assert len(run_sizes) < model.FAN_IN
        assert sum(sum(run_sizes) for run_sizes in sizes.values()) + runs_pending(conn) == size
        assert runs_pending(conn) == 2
        assert runs.merged_levels(size) == [0, 1]  # 4 · 8 = 32 and 4 · 64 = 256 documents ≤ 302
        assert sizes == {2: [256], 1: [32], 0: [4, 4, 4]}
    finally:
        conn.close()


def runs_pending(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(DISTINCT doc) FROM run_pending").fetchone()[0])


@contextmanager
def _working_runs(model: ModuleType, size: int, folder: Path) -> Iterator[tuple[Any, Any]]:
    """Leveled runs of ``size`` documents on a store's connection to a copy of the loaded file; the vocabulary."""
    vocabulary = model.Vocabulary(500)
    runs = model.build(folder / "base.db", size, vocabulary, TERMS, BASE)
    runs.conn = model.open_copy(folder / "base.db", folder / "copy.db")
    try:
        yield runs, vocabulary
    finally:
        runs.conn.close()


def test_seal_and_merge_keep_every_posting_once(model: ModuleType, tmp_path: Path) -> None:
    size = 20
    with _working_runs(model, size, tmp_path) as (runs, vocabulary):
        conn = runs.conn
        waiting = runs.pending_documents()
        next_doc = size
        for _ in range(7 * BASE * model.FAN_IN - size):  # up to 224 documents: seven level-1 runs
            model.timed_insert(conn, "run_pending", vocabulary.rows(next_doc, TERMS))
            next_doc += 1
            waiting += 1
            if waiting == BASE:
                model.timed(conn, runs.seal)
                waiting = 0
                level = 0
                while len(runs.levels.get(level, [])) >= model.FAN_IN:
                    model.timed(conn, partial(runs.merge, level))
                    level += 1
            assert _held(conn) == _expected(model, vocabulary, range(next_doc))
        sizes = _run_sizes(conn, runs)
        assert sizes[1] == [BASE * model.FAN_IN] * (model.FAN_IN - 1)
        assert not runs.levels.get(0)
        assert conn.execute("SELECT max(run) FROM runs").fetchone()[0] == runs.next_run - 1


def test_amortised_merges_time_one_merge_per_merged_level(model: ModuleType, tmp_path: Path) -> None:
    size = 300
    with _working_runs(model, size, tmp_path) as (runs, vocabulary):
        conn = runs.conn
        assert _run_sizes(conn, runs) == {2: [256], 1: [32], 0: [4, 4, 4]}
        seconds = model.amortised_merges(runs, vocabulary, size, TERMS, size)
        assert seconds > 0
        # level 0 was filled with documents 300-319 and merged into a second level-1 run; level 1
        # was then filled with documents 320-511 and merged into a second level-2 run
        assert _run_sizes(conn, runs) == {2: [256, 256]}
        assert _held(conn) == _expected(model, vocabulary, range(512))


def test_the_script_prints_both_tables(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "60,200", "--docs", "24", "--terms", "10", "--merge-every", "8"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for size in ("60", "200"):
        rows = [line for line in lines if line.startswith(f"| {size} |")]
        assert len(rows) == 2  # the designs table and the leveled-runs breakdown
        assert all(re.fullmatch(r"\| \d+ \|( \d+\.\d\d \|)+", row) for row in rows)
    ratios = [line for line in lines if line.startswith("| 200 / 60 |")]
    assert len(ratios) == 2
    assert [len(row.split("|")) - 3 for row in ratios] == [8, 3]
