#!/usr/bin/env python3
"""What an inverted index's writes cost in SQLite as it grows: direct inserts versus a pending segment.

Usage::

    python benchmarks/index_writes.py                      # 1k and 100k documents, about 2 minutes
    python benchmarks/index_writes.py --sizes 1000,20000 --docs 300

A document's postings (``--terms`` distinct terms, drawn from a Zipf vocabulary, as 16-byte keys)
go into a table shaped like the store's ``postings``: ``(scope, term key, document, occurrence)``,
clustered by term. For each size the script times, in the same process and file:

* **direct**: one durable transaction (WAL, ``synchronous=FULL``, ``secure_delete``) that inserts
  a new document's postings into the big table, as an admission does;
* **pending segment**: the same transaction into a small ``pending`` table, plus, every
  ``--merge-every`` documents, one transaction that moves the pending rows into the big table (the
  LSM / FTS5 "automerge" design). Its p50 is the small transaction; its mean includes the merges.

It prints p50 and mean per document and the ratio of the largest size to the smallest. Standard
library only.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

SCHEMA = """
CREATE TABLE postings (
    scope_id INTEGER NOT NULL, term BLOB NOT NULL, doc INTEGER NOT NULL, occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;
CREATE TABLE pending (
    scope_id INTEGER NOT NULL, term BLOB NOT NULL, doc INTEGER NOT NULL, occurrence TEXT NOT NULL,
    PRIMARY KEY (scope_id, term, doc)
) STRICT, WITHOUT ROWID;
"""


class Vocabulary:
    """Term keys with Zipf-distributed frequencies (exponent 1.1), reproducible from ``seed``."""

    def __init__(self, size: int, seed: int) -> None:
        self.keys = [hashlib.blake2b(f"term-{rank}".encode(), digest_size=16).digest() for rank in range(size)]
        weights = [1 / (rank + 1) ** 1.1 for rank in range(size)]
        self.cumulative = list(itertools.accumulate(weights))
        self.rng = random.Random(seed)

    def document(self, terms: int) -> list[bytes]:
        """``terms`` distinct term keys, sorted."""
        chosen: set[int] = set()
        total = self.cumulative[-1]
        while len(chosen) < terms:
            chosen.add(bisect.bisect_left(self.cumulative, self.rng.random() * total))
        return sorted(self.keys[index] for index in chosen)


def rows_of(doc: int, keys: Sequence[bytes]) -> list[tuple[int, bytes, int, str]]:
    return [(1, key, doc, f"0:{1 + position % 3}:{len(keys)}") for position, key in enumerate(keys)]


def build(path: Path, size: int, vocabulary: Vocabulary, terms: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA cache_size = -1000000")  # the bulk load only
    conn.execute("BEGIN")
    for start in range(0, size, 1000):
        batch = [
            row for doc in range(start, min(size, start + 1000)) for row in rows_of(doc, vocabulary.document(terms))
        ]
        conn.executemany("INSERT INTO postings VALUES (?, ?, ?, ?)", batch)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    conn = sqlite3.connect(path, isolation_level=None)  # a store's connection: default cache
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA secure_delete = ON")
    return conn


def timed_insert(conn: sqlite3.Connection, table: str, rows: list[tuple[int, bytes, int, str]]) -> float:
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", rows)  # noqa: S608 - two constant names
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
    vocabulary = Vocabulary(60_000, seed=size)
    conn = build(workdir / f"index-{size}.db", size, vocabulary, terms)
    try:
        direct: list[float] = []
        pending: list[float] = []
        merges: list[float] = []
        next_doc = size
        for index in range(docs):  # interleaved, so both see the same disk and neighbours
            direct.append(timed_insert(conn, "postings", rows_of(next_doc, vocabulary.document(terms))))
            pending.append(timed_insert(conn, "pending", rows_of(next_doc + 1, vocabulary.document(terms))))
            next_doc += 2
            if (index + 1) % merge_every == 0:
                merges.append(timed_merge(conn))
    finally:
        conn.close()
    return {
        "direct_p50": statistics.median(direct),
        "direct_mean": statistics.mean(direct),
        "pending_p50": statistics.median(pending),
        "pending_mean": (sum(pending) + sum(merges)) / len(pending),
        "merge_per_doc": sum(merges) / (len(merges) * merge_every) if merges else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000", help="documents already indexed (comma-separated)")
    parser.add_argument("--docs", type=int, default=320, help="documents added per size and design")
    parser.add_argument("--terms", type=int, default=67, help="distinct terms per document")
    parser.add_argument("--merge-every", type=int, default=64, help="pending documents per merge")
    args = parser.parse_args(argv)
    sizes = [int(value) for value in args.sizes.split(",")]
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="engram-index-writes-") as folder:
        for size in sizes:
            started = time.perf_counter()
            results[size] = measure(size, args.docs, args.terms, args.merge_every, Path(folder))
            print(f"[{size:,} documents measured in {time.perf_counter() - started:.0f} s]", flush=True)
    columns = ("direct_p50", "direct_mean", "pending_p50", "pending_mean", "merge_per_doc")
    labels = ("direct p50", "direct mean", "pending p50", "pending mean (with merges)", "merge, per document")
    print(
        f"\n{args.terms} postings per document, durable transactions, merge every {args.merge_every}; ms per document\n"
    )
    print("| documents | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(columns))
    for size in sizes:
        print(f"| {size:,} | " + " | ".join(f"{results[size][c] * 1e3:.2f}" for c in columns) + " |")
    if len(sizes) > 1:
        low, high = results[sizes[0]], results[sizes[-1]]
        ratios = " | ".join(f"{high[c] / low[c]:.2f}×" if low[c] else "–" for c in columns)
        print(f"| {sizes[-1]:,} / {sizes[0]:,} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
