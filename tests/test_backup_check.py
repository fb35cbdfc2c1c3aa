"""docs/operations.md's backup check: a read-only copy is closed without reaping the source's doomed keys.

An admission dooms the candidate's key and leaves it for a batch (or ``close``) to destroy, so a
backup taken meanwhile holds doomed keys. Closing the read-only copy as usual tries to destroy
them in its read-only vault, which refuses and logs the errors an operator is told to alert on.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from engram_memory import DefaultPolicy, MemoryAdmin, MemoryService, connect
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing.fakes import ADMISSION, CAPTURE, capture_args, make_binding, make_key, ok

KEY = b"k" * 32


def _backup(source: Path, target: Path) -> None:
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _copy(folder: Path) -> MemoryService:
    return MemoryService(
        store=SQLiteStore(folder / "copy.db", read_only=True),
        vault=SQLiteKeyVault(folder / "copy.db.vault", master_key=KEY, read_only=True),
        policy=DefaultPolicy(),
    )


@pytest.fixture
def backed_up(tmp_path: Path) -> Path:
    """A store and vault with a doomed key, copied with the online backup API while the service runs."""
    live = connect(f"sqlite:///{tmp_path / 'memory.db'}", policy=DefaultPolicy(admission="accept"), master_key=KEY)
    binding = make_binding()
    captured = ok(live.call_tool(CAPTURE, capture_args(make_key("backup-doomed")), binding))
    admission = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key("backup-doomed-admit")}
    ok(live.call_tool(ADMISSION, admission, binding))
    with live.store.read(binding.scope) as reader:
        assert reader.doomed_keys(), "the admission left its key doomed for a batch"
    _backup(tmp_path / "memory.db", tmp_path / "copy.db")
    _backup(tmp_path / "memory.db.vault", tmp_path / "copy.db.vault")
    live.close()
    return tmp_path


def test_the_documented_close_logs_nothing(backed_up: Path, caplog: pytest.LogCaptureFixture) -> None:
    copy = _copy(backed_up)
    try:
        assert all(MemoryAdmin(copy).verify_scope(scope).ok for scope in copy.store.scopes())
    finally:
        with caplog.at_level(logging.WARNING, logger="engram_memory"):
            copy.close(destroy_doomed_keys=False)
    assert caplog.records == []


def test_a_plain_close_of_the_copy_logs_the_errors_an_operator_alerts_on(
    backed_up: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="engram_memory"), _copy(backed_up):
        pass
    assert any(
        record.levelno == logging.ERROR and "key destruction deferred" in record.getMessage()
        for record in caplog.records
    ), [record.getMessage() for record in caplog.records]
