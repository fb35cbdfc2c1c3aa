#!/usr/bin/env python3
"""What an inverted index's writes cost in SQLite as it grows: three ways to add postings, and the purge.

Usage::

    python benchmarks/index_writes.py                      # 1k and 100k documents, about 2 minutes
    python benchmarks/index_writes.py --sizes 1000,20000 --docs 300

A document's postings (``--terms`` distinct terms, drawn from a Zipf vocabulary, as 16-byte keys)
go into a table shaped like the store's ``postings``: ``(scope, term key, document, occurrence)``,
clustered by term. For each size the script loads the same documents into each design, then
times, in the same process and file, interleaved:

* **direct**: one durable transaction (WAL, ``synchronous=FULL``, ``secure_delete``) that inserts
  a new document's postings into the big table, as an admission does;
* **pending segment**: the same transaction into a small ``pending`` table, plus, every
  ``--merge-every`` documents, one transaction that moves the pending rows into the big table.
  Its p50 is the small transaction; its mean includes the merges;
* **leveled runs**: the same small transaction into ``run_pending``; every ``--merge-every``
  documents the pending rows are sealed into an immutable *run* (one row per term: the
  documents packed, the occurrence keys joined), written at the end of the ``runs`` table
  because run numbers only grow; eight runs of a level are merged into one run of the next level
  (sequential writes again), the LSM design of FTS5 and Lucene. Its mean adds the seals as timed
  and, for each level a store of this size has merged, the cost of one merge of that level
  (timed once) divided by the documents it covers. A real index would merge incrementally and
  read one row per live run per term at search time; this models only the write cost;
* **purge**: one durable transaction that deletes the postings of a document loaded at the start,
  drawn at random, as a forget must (the index is purged, not masked). This is the whole index work
  of an erasure, with nothing else around it, and it is the same in every design: the document's
  postings sit in as many places as it has terms.

It prints p50 and mean per document and the ratio of the largest size to the smallest. Standard
library only.
"""

from __future__ import annotations

import argparse
import array
import bisect
import hashlib
import itertools
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

SCHEMA = """
CREATE TABLE postings (
    scope_id INTEGER NOT NULL, term BLOB NOT NULL, doc INTEGER NOT NULL, occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;
CREATE TABLE pending (
    scope_id INTEGER NOT NULL, term BLOB NOT NULL, doc INTEGER NOT NULL, occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;
CREATE TABLE run_pending (
    scope_id INTEGER NOT NULL, term BLOB NOT NULL, doc INTEGER NOT NULL, occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;
CREATE TABLE runs (
    scope_id INTEGER NOT NULL, run INTEGER NOT NULL, term BLOB NOT NULL, docs BLOB NOT NULL, occurrences TEXT NOT NULL,
    PRIMARY KEY (scope_id, run, term)
) STRICT, WITHOUT ROWID;
"""
FAN_IN = 8
"""Runs of one level merged into one run of the next."""
Posting = tuple[bytes, int, str]
"""(term key, document, occurrence key)."""
RunRow = tuple[bytes, bytes, str]
"""(term key, packed documents, joined occurrence keys): a term's postings in one run."""
_Row = TypeVar("_Row", bound=tuple[Any, ...])


class Vocabulary:
    """Term keys with Zipf-distributed frequencies (exponent 1.1); a document's terms depend on its number only."""

    def __init__(self, size: int) -> None:
        self.keys = [hashlib.blake2b(f"term-{rank}".encode(), digest_size=16).digest() for rank in range(size)]
        weights = [1 / (rank + 1) ** 1.1 for rank in range(size)]
        self.cumulative = list(itertools.accumulate(weights))

    def document(self, doc: int, terms: int) -> list[bytes]:
        """The ``terms`` distinct term keys of document ``doc``, sorted (the same on every call)."""
        rng = random.Random(doc)
        chosen: set[int] = set()
        total = self.cumulative[-1]
        while len(chosen) < terms:
            chosen.add(bisect.bisect_left(self.cumulative, rng.random() * total))
        return sorted(self.keys[index] for index in chosen)

    def rows(self, doc: int, terms: int) -> list[tuple[int, bytes, int, str]]:
        """The posting rows ``(scope, term key, document, occurrence)`` of document ``doc``."""
        keys = self.document(doc, terms)
        return [(1, key, doc, f"0:{1 + position % 3}:{terms}") for position, key in enumerate(keys)]


def by_term(rows: Iterable[_Row]) -> Iterator[tuple[bytes, list[_Row]]]:
    """``(term, rows)`` for each run of rows with the same first member (the term key)."""
    for term, group in itertools.groupby(rows, key=itemgetter(0)):
        yield term, list(group)


def run_rows(postings: Iterable[Posting]) -> list[RunRow]:
    """One run row per term of ``postings``, which are sorted by term, then document."""
    return [
        (term, array.array("q", [doc for _, doc, _ in group]).tobytes(), ";".join(key for _, _, key in group))
        for term, group in by_term(postings)
    ]


class LeveledRuns:
    """Immutable runs of ``base · FAN_IN**level`` documents; run numbers only grow (writes append)."""

    def __init__(self, conn: sqlite3.Connection, base: int) -> None:
        self.conn = conn
        self.base = base
        self.levels: dict[int, list[int]] = {}
        self.next_run = 0

    def write(self, level: int, rows: list[RunRow]) -> None:
        run = self.next_run
        self.next_run += 1
        self.conn.executemany("INSERT INTO runs VALUES (1, ?, ?, ?, ?)", [(run, *row) for row in rows])
        self.levels.setdefault(level, []).append(run)

    def seal(self) -> None:
        """Move the pending postings into a new level-0 run."""
        postings = self.conn.execute(
            "SELECT term, doc, occurrence FROM run_pending WHERE scope_id = 1 ORDER BY term, doc"
        ).fetchall()
        self.write(0, run_rows(postings))
        self.conn.execute("DELETE FROM run_pending WHERE scope_id = 1")

    def merge(self, level: int) -> None:
        """Merge the runs of ``level`` into one run of the next level (older runs hold lower documents)."""
        runs = self.levels.pop(level)
        marks = ", ".join("?" * len(runs))
        rows = self.conn.execute(
            f"SELECT term, run, docs, occurrences FROM runs WHERE scope_id = 1 AND run IN ({marks})",  # noqa: S608
            runs,
        ).fetchall()
        rows.sort(key=lambda row: (row[0], row[1]))
        merged = [
            (term, b"".join(row[2] for row in group), ";".join(row[3] for row in group))
            for term, group in by_term(rows)
        ]
        self.write(level + 1, merged)
        self.conn.execute(f"DELETE FROM runs WHERE scope_id = 1 AND run IN ({marks})", runs)  # noqa: S608

    def merged_levels(self, size: int) -> list[int]:
        """The levels a store of ``size`` documents has merged at least once."""
        levels: list[int] = []
        while self.base * FAN_IN ** (len(levels) + 1) <= size:
            levels.append(len(levels))
        return levels

    def load(self, vocabulary: Vocabulary, size: int, terms: int) -> None:
        """Lay out documents ``0 … size − 1`` as a store that grew one document at a time would hold them."""
        first = 0
        for level in reversed([*self.merged_levels(size), len(self.merged_levels(size))]):
            span = self.base * FAN_IN**level
            while size - first >= span and len(self.levels.get(level, [])) < FAN_IN - 1:
                self.write(level, run_rows(sorted(postings_of(vocabulary, range(first, first + span), terms))))
                first += span
        self.conn.executemany(
            "INSERT INTO run_pending VALUES (?, ?, ?, ?)",
            [row for doc in range(first, size) for row in vocabulary.rows(doc, terms)],
        )

    def pending_documents(self) -> int:
        row = self.conn.execute("SELECT count(DISTINCT doc) FROM run_pending WHERE scope_id = 1").fetchone()
        return int(row[0])


def postings_of(vocabulary: Vocabulary, docs: Iterable[int], terms: int) -> list[Posting]:
    return [(key, doc, occurrence) for doc in docs for _, key, _, occurrence in vocabulary.rows(doc, terms)]


def build(path: Path, size: int, vocabulary: Vocabulary, terms: int, base: int) -> LeveledRuns:
    """A file holding the same ``size`` documents in ``postings`` and as leveled runs; their layout.

    The file is closed: each design then works on its own copy (:func:`open_copy`).
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA cache_size = -1000000")  # the bulk load only
    conn.execute("BEGIN")
    for start in range(0, size, 1000):
        batch = [row for doc in range(start, min(size, start + 1000)) for row in vocabulary.rows(doc, terms)]
        conn.executemany("INSERT INTO postings VALUES (?, ?, ?, ?)", batch)
    runs = LeveledRuns(conn, base)
    runs.load(vocabulary, size, terms)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return runs


def open_copy(base: Path, copy: Path) -> sqlite3.Connection:
    """A store's connection (WAL, ``synchronous=FULL``, ``secure_delete``, default cache) to a copy of ``base``.

    One file per design, so that each design's WAL checkpoints are paid by its own transactions. The
    copy is flushed to disk first, or the first checkpoint's ``fsync`` would write the whole file.
    """
    shutil.copyfile(base, copy)
    with copy.open("rb+") as written:
        os.fsync(written.fileno())
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA secure_delete = ON")
    return conn


def timed(conn: sqlite3.Connection, work: Callable[[], object]) -> float:
    """Seconds for one durable transaction doing ``work``."""
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    work()
    conn.execute("COMMIT")
    return time.perf_counter() - started


def timed_insert(conn: sqlite3.Connection, table: str, rows: list[tuple[int, bytes, int, str]]) -> float:
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", rows)  # noqa: S608 - two constant names
    conn.execute("COMMIT")
    return time.perf_counter() - started


def timed_purge(conn: sqlite3.Connection, doc: int, keys: list[bytes]) -> float:
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("DELETE FROM postings WHERE scope_id = 1 AND term = ? AND doc = ?", [(key, doc) for key in keys])
    conn.execute("COMMIT")
    return time.perf_counter() - started


def timed_merge(conn: sqlite3.Connection) -> float:
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO postings SELECT * FROM pending ORDER BY scope_id, term, doc")
    conn.execute("DELETE FROM pending")
    conn.execute("COMMIT")
    return time.perf_counter() - started


def measure(size: int, docs: int, terms: int, merge_every: int, workdir: Path) -> dict[str, float]:
    vocabulary = Vocabulary(60_000)
    base = workdir / f"index-{size}.db"
    runs = build(base, size, vocabulary, terms, merge_every)
    conns = {
        name: open_copy(base, workdir / f"index-{size}-{name}.db") for name in ("direct", "pending", "runs", "purge")
    }
    runs.conn = conns["runs"]
    doomed = random.Random(f"purge/{size}").sample(range(size), min(docs, size))
    try:
        direct: list[float] = []
        pending: list[float] = []
        pending_merges: list[float] = []
        run_inserts: list[float] = []
        seals: list[float] = []
        purges: list[float] = []
        next_doc = size
        waiting = runs.pending_documents()
        for index in range(docs):  # interleaved, so all designs see the same disk and neighbours
            direct.append(timed_insert(conns["direct"], "postings", vocabulary.rows(next_doc, terms)))
            pending.append(timed_insert(conns["pending"], "pending", vocabulary.rows(next_doc + 1, terms)))
            run_inserts.append(timed_insert(runs.conn, "run_pending", vocabulary.rows(next_doc + 2, terms)))
            if index < len(doomed):
                purges.append(timed_purge(conns["purge"], doomed[index], vocabulary.document(doomed[index], terms)))
            next_doc += 3
            if (index + 1) % merge_every == 0:
                pending_merges.append(timed_merge(conns["pending"]))
            waiting += 1
            if waiting == merge_every:
                seals.append(timed(runs.conn, runs.seal))
                waiting = 0
                level = 0
                while len(runs.levels.get(level, [])) >= FAN_IN:  # kept in shape; the amortised cost is below
                    timed(runs.conn, partial(runs.merge, level))
                    level += 1
        run_merges = amortised_merges(runs, vocabulary, size, terms, next_doc)
    finally:
        for conn in conns.values():
            conn.close()
    return {
        "direct_p50": statistics.median(direct),
        "direct_mean": statistics.mean(direct),
        "pending_p50": statistics.median(pending),
        "pending_mean": (sum(pending) + sum(pending_merges)) / len(pending),
        "runs_p50": statistics.median(run_inserts),
        "runs_mean": statistics.mean(run_inserts) + sum(seals) / (len(seals) * merge_every) + run_merges,
        "runs_insert_mean": statistics.mean(run_inserts),
        "runs_seal_per_doc": sum(seals) / (len(seals) * merge_every),
        "runs_merge_per_doc": run_merges,
        "purge_p50": statistics.median(purges),
        "purge_mean": statistics.mean(purges),
    }


def amortised_merges(runs: LeveledRuns, vocabulary: Vocabulary, size: int, terms: int, next_doc: int) -> float:
    """Seconds per document of the merges a store of ``size`` documents has run, one timed per level.

    A level-``k`` merge covers ``base · FAN_IN**(k + 1)`` documents and every document goes through
    each level once, so the per-document cost is the sum over the levels of one merge / its documents.
    The runs it merges are written first, untimed.
    """
    total = 0.0
    for level in runs.merged_levels(size):
        span = runs.base * FAN_IN**level
        runs.conn.execute("BEGIN")
        while len(runs.levels.get(level, [])) < FAN_IN:
            runs.write(level, run_rows(sorted(postings_of(vocabulary, range(next_doc, next_doc + span), terms))))
            next_doc += span
        runs.conn.execute("COMMIT")
        total += timed(runs.conn, partial(runs.merge, level)) / (span * FAN_IN)
    return total


def print_table(
    sizes: list[int], results: dict[int, dict[str, float]], columns: Sequence[str], labels: Sequence[str]
) -> None:
    """One Markdown row per size, in ms, then the ratio of the largest size to the smallest."""
    print("| documents | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(columns))
    for size in sizes:
        print(f"| {size:,} | " + " | ".join(f"{results[size][c] * 1e3:.2f}" for c in columns) + " |")
    if len(sizes) > 1:
        low, high = results[sizes[0]], results[sizes[-1]]
        ratios = " | ".join(f"{high[c] / low[c]:.2f}×" if low[c] else "–" for c in columns)
        print(f"| {sizes[-1]:,} / {sizes[0]:,} | {ratios} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000", help="documents already indexed (comma-separated)")
    parser.add_argument("--docs", type=int, default=320, help="documents added per size and design")
    parser.add_argument("--terms", type=int, default=67, help="distinct terms per document")
    parser.add_argument("--merge-every", type=int, default=64, help="pending documents per merge, or per level-0 run")
    args = parser.parse_args(argv)
    sizes = [int(value) for value in args.sizes.split(",")]
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="engram-index-writes-") as folder:
        for size in sizes:
            started = time.perf_counter()
            results[size] = measure(size, args.docs, args.terms, args.merge_every, Path(folder))
            print(f"[{size:,} documents measured in {time.perf_counter() - started:.0f} s]", flush=True)
    columns = (
        "direct_p50",
        "direct_mean",
        "pending_p50",
        "pending_mean",
        "runs_p50",
        "runs_mean",
        "purge_p50",
        "purge_mean",
    )
    labels = (
        "direct p50",
        "direct mean",
        "pending p50",
        "pending mean (with merges)",
        "runs p50",
        "runs mean (with seals and merges)",
        "purge p50",
        "purge mean",
    )
    print(
        f"\n{args.terms} postings per document, durable transactions, merge every {args.merge_every}; ms per document\n"
    )
    print_table(sizes, results, columns, labels)
    print("\nLeveled runs: where the mean goes, ms per document\n")
    print_table(
        sizes,
        results,
        ("runs_insert_mean", "runs_seal_per_doc", "runs_merge_per_doc"),
        ("pending insert, mean", "seals", "merges (amortised over the levels merged)"),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
