"""``connect()`` honours what it documents: the default policy holds every candidate for the host,
``synchronous`` reaches the SQLite store, and a vault that refuses to open leaves no store open behind it."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_memory import DefaultPolicy
from engram_memory.connect import connect
from engram_memory.keyvaults.sqlite import MasterKeyError
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing.fakes import ADMISSION, CAPTURE, capture_args, make_binding, make_key, ok

KEY = bytes(range(32))


@pytest.mark.parametrize("url", ["memory:", "sqlite:///default.db"])
def test_the_default_policy_waits_for_the_host(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    service = connect(url)
    try:
        assert isinstance(service.policy, GuardedPolicy)
        assert service.policy.inner == DefaultPolicy(admission="adjudicate")
        binding = make_binding()
        candidate_id = ok(service.call_tool(CAPTURE, capture_args(make_key("connect-default")), binding))[
            "candidate_id"
        ]
        arguments = {"candidate_id": candidate_id, "idempotency_key": make_key("connect-default-admit")}
        outcome = ok(service.call_tool(ADMISSION, arguments, binding))["outcome"]
        assert outcome["status"] == "pending_adjudication"
        assert outcome.get("record_id") is None
    finally:
        service.close()


@pytest.mark.parametrize(("synchronous", "level"), [("FULL", 2), ("NORMAL", 1)])
def test_synchronous_reaches_the_sqlite_store(synchronous: str, level: int, tmp_path: Path) -> None:
    service = connect(f"sqlite:///{tmp_path / 'sync.db'}", master_key=KEY, synchronous=synchronous)  # type: ignore[arg-type]
    try:
        assert isinstance(service.store, SQLiteStore)
        assert service.store.pragmas()["synchronous"] == level
    finally:
        service.close()


def test_a_vault_that_refuses_its_master_key_closes_the_store_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'refused.db'}"
    connect(url, master_key=KEY).close()
    closed: list[str] = []
    real_close = SQLiteStore.close

    def spy(self: SQLiteStore) -> None:
        closed.append(self.path)
        real_close(self)

    monkeypatch.setattr(SQLiteStore, "close", spy)
    with pytest.raises(MasterKeyError):
        connect(url, master_key=bytes(32))
    assert closed == [str(tmp_path / "refused.db")]
