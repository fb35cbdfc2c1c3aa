"""Faults written into SQLite files the way failing hardware would, for the adapters' error tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def corrupt_table(path: Path, table: str) -> None:
    """Overwrite every page of ``table`` and of its indexes with ``0xFF``, as a failing disk would."""
    raw = sqlite3.connect(path)
    try:
        page_size = raw.execute("PRAGMA page_size").fetchone()[0]
        pages = [row[0] for row in raw.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name = ?", (table,))]
    finally:
        raw.close()
    assert pages
    data = bytearray(path.read_bytes())
    for page in pages:
        data[(page - 1) * page_size : page * page_size] = b"\xff" * page_size
    path.write_bytes(bytes(data))
