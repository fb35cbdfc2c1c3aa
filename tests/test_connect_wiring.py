"""``connect()`` honours what it documents: the default policy holds every candidate for the host,
``synchronous`` reaches the SQLite store, and a vault that refuses to open leaves no store open behind it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram_memory import DefaultPolicy
from engram_memory.connect import connect
from engram_memory.errors import StoreUnavailableError
from engram_memory.keyvaults.sqlite import MasterKeyError, SQLiteKeyVault
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


def test_a_vault_that_refuses_its_master_key_is_refused_before_the_store_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The existing vault opens first: a wrong key leaves the store unopened (and not upgraded)."""
    url = f"sqlite:///{tmp_path / 'refused.db'}"
    connect(url, master_key=KEY).close()
    before = (tmp_path / "refused.db").read_bytes()
    opened: list[str] = []
    real_init = SQLiteStore.__init__

    def spy(self: SQLiteStore, path: str, **options: Any) -> None:
        opened.append(path)
        real_init(self, path, **options)

    monkeypatch.setattr(SQLiteStore, "__init__", spy)
    with pytest.raises(MasterKeyError):
        connect(url, master_key=bytes(32))
    assert opened == []
    assert (tmp_path / "refused.db").read_bytes() == before


def test_a_store_that_cannot_be_opened_closes_the_vault_opened_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'pair.db'}"
    connect(url, master_key=KEY).close()
    closed: list[str] = []
    real_close = SQLiteKeyVault.close

    def spy(self: SQLiteKeyVault) -> None:
        closed.append(self._path)  # which vault was closed
        real_close(self)

    def refuse(self: SQLiteStore, path: str, **options: Any) -> None:
        raise StoreUnavailableError("store refused")

    monkeypatch.setattr(SQLiteKeyVault, "close", spy)
    monkeypatch.setattr(SQLiteStore, "__init__", refuse)
    with pytest.raises(StoreUnavailableError) as caught:
        connect(url, master_key=KEY)
    assert closed == [str(tmp_path / "pair.db.vault")]
    assert caught.value.__notes__ == [f"opening the SQLite store {str(tmp_path / 'pair.db')!r}"]
