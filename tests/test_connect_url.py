"""``connect()`` refuses what it cannot honour: URL options, malformed paths, misplaced keyword options.

Every refusal is a ``ValueError`` raised before any file is created; every documented URL form still opens.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engram_memory.connect import connect
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.memory import InMemoryStore
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing.fakes import CAPTURE, capture_args, make_binding, make_key, ok

KEY = bytes(range(32))
QUERY = "sqlite URL must not carry a query string; pass options as keyword arguments"
FRAGMENT = "sqlite URL must not carry a fragment"
PERCENT = "sqlite URL must not contain percent-escapes; the path is taken literally"
NO_PATH = "sqlite URL needs a file path; use 'memory:' for an in-memory service"
MASTER_KEY = "master_key applies only to a sqlite URL without vault=: it opens the SQLite key vault"
SYNCHRONOUS = "synchronous must be 'FULL' or 'NORMAL'"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: relative sqlite paths land here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused(message: str, url: str, **options: object) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        connect(url, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("sqlite:///a.db?mode=ro", QUERY, id="query"),
        pytest.param("sqlite:///b.db?synchronous=OFF", QUERY, id="query-option"),
        pytest.param("sqlite:///a.db?", QUERY, id="empty-query"),
        pytest.param("sqlite:///c.db#frag", FRAGMENT, id="fragment"),
        pytest.param("sqlite:///my%20db.db", PERCENT, id="percent-escape"),
        pytest.param("sqlite:///100%.db", PERCENT, id="bare-percent"),
        pytest.param("sqlite:///", NO_PATH, id="no-path"),
        pytest.param("sqlite:///:memory:", NO_PATH, id="sqlite-memory"),
        pytest.param("sqlite:///file:a.db", NO_PATH, id="file-uri"),
    ],
)
def test_a_malformed_sqlite_url_is_refused_and_creates_nothing(url: str, message: str, folder: Path) -> None:
    _refused(message, url)
    assert list(folder.iterdir()) == []


def test_an_absolute_url_with_a_query_is_refused(folder: Path) -> None:
    _refused(QUERY, f"sqlite:///{folder / 'a.db'}?mode=ro")
    assert list(folder.iterdir()) == []


def test_an_unsupported_url_is_refused() -> None:
    _refused("unsupported memory URL; use 'memory:' or 'sqlite:///path'", "postgres://localhost/db")


@pytest.mark.parametrize("key", [KEY, b"short"], ids=["valid-key", "short-key"])
def test_master_key_with_memory_is_refused(key: bytes) -> None:
    _refused(MASTER_KEY, "memory:", master_key=key)


def test_master_key_together_with_a_vault_is_refused(folder: Path) -> None:
    _refused(MASTER_KEY, "sqlite:///e.db", vault=InMemoryKeyVault(), master_key=KEY)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("key", [b"short", b"k" * 33, "k" * 32], ids=["short", "long", "str"])
def test_a_master_key_of_the_wrong_form_is_refused_before_any_file_is_created(key: bytes, folder: Path) -> None:
    _refused("master_key must be 32 bytes", "sqlite:///w.db", master_key=key)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("url", ["memory:", "sqlite:///s.db"])
@pytest.mark.parametrize("value", ["OFF", "full", "EXTRA", ""])
def test_an_undocumented_synchronous_value_is_refused(url: str, value: str, folder: Path) -> None:
    _refused(SYNCHRONOUS, url, synchronous=value)
    assert list(folder.iterdir()) == []


# --------------------------------------------------------------------------- documented forms keep working


def test_memory_opens_with_either_synchronous_value() -> None:
    """``memory:`` ignores ``synchronous`` (nothing is durable) and gives a working in-memory service."""
    for synchronous in ("FULL", "NORMAL"):
        service = connect("memory:", synchronous=synchronous)
        try:
            assert isinstance(service.store, InMemoryStore)
            assert isinstance(service.vault, InMemoryKeyVault)
            answer = ok(service.call_tool(CAPTURE, capture_args(make_key("connect")), make_binding()))
            assert answer["status"] == "committed_pending"
        finally:
            service.close()


def test_a_relative_path_opens_with_its_vault_and_key_file(folder: Path) -> None:
    connect("sqlite:///memory.db").close()
    assert sorted(path.name for path in folder.iterdir()) == ["memory.db", "memory.db.key", "memory.db.vault"]


def test_an_absolute_path_opens_with_a_master_key(folder: Path) -> None:
    connect(f"sqlite:///{folder / 'memory.db'}", master_key=KEY, synchronous="NORMAL").close()
    connect(f"sqlite:////{folder.relative_to('/') / 'memory.db'}", master_key=KEY).close()  # four slashes
    assert sorted(path.name for path in folder.iterdir()) == ["memory.db", "memory.db.vault"]


def test_a_given_vault_replaces_the_sqlite_vault(folder: Path) -> None:
    connect("sqlite:///memory.db", vault=InMemoryKeyVault()).close()
    assert sorted(path.name for path in folder.iterdir()) == ["memory.db"]


@pytest.mark.parametrize("url", ["memory:", "sqlite:///t.db"])
@pytest.mark.parametrize("value", [-1, True, 1.5, "10000", None, 2**31, 2**63])
def test_a_busy_timeout_that_is_not_a_non_negative_int_is_refused(url: str, value: object, folder: Path) -> None:
    _refused("busy_timeout_ms must be an int from 0 to 2147483647", url, busy_timeout_ms=value)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("master_key", [None, KEY], ids=["key-file", "master-key"])
def test_the_busy_timeout_reaches_the_store_and_the_vault(master_key: bytes | None, folder: Path) -> None:
    service = connect("sqlite:///memory.db", busy_timeout_ms=12_345, master_key=master_key)
    try:
        assert service.store._busy_timeout_ms == 12_345  # type: ignore[attr-defined]
        assert service.vault._busy_timeout_ms == 12_345  # type: ignore[attr-defined]
        connection = service.store._acquire()  # type: ignore[attr-defined]
        try:
            assert connection.execute("PRAGMA busy_timeout").fetchone() == (12_345,)
        finally:
            service.store._release(connection, True)  # type: ignore[attr-defined]  # noqa: FBT003
    finally:
        service.close()


@pytest.mark.parametrize("value", [-1, 2**31, 2**63, True])
def test_the_store_and_the_vault_refuse_a_busy_timeout_sqlite_cannot_hold(value: int, folder: Path) -> None:
    """``PRAGMA busy_timeout`` is a C int: 2**31 read back as 0 (no wait), 2**63 broke every write."""
    message = "^busy_timeout_ms must be an int from 0 to 2147483647$"
    with pytest.raises(ValueError, match=message):
        SQLiteStore(folder / "s.db", busy_timeout_ms=value)
    with pytest.raises(ValueError, match=message):
        SQLiteKeyVault(folder / "v.vault", master_key=KEY, busy_timeout_ms=value)
    assert list(folder.iterdir()) == []


def test_the_longest_busy_timeout_sqlite_holds_is_kept(folder: Path) -> None:
    service = connect("sqlite:///memory.db", busy_timeout_ms=2**31 - 1, master_key=KEY)
    try:
        connection = service.store._acquire()  # type: ignore[attr-defined]
        try:
            assert connection.execute("PRAGMA busy_timeout").fetchone() == (2**31 - 1,)
        finally:
            service.store._release(connection, True)  # type: ignore[attr-defined]  # noqa: FBT003
        assert ok(service.call_tool(CAPTURE, capture_args(make_key("longest-wait")), make_binding()))
    finally:
        service.close()
