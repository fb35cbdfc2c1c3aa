"""``connect()`` never pairs a store that holds data with a brand-new key vault, or the reverse,
and says when the master key file is open to others."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
from pathlib import Path

import pytest

from engram_memory.connect import connect
from engram_memory.errors import MissingFileError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import MasterKeyError, SQLiteKeyVault
from engram_memory.stores.sqlite import _seed_secret
from engram_memory.stores.sqlite._schema import STORE_SCHEMA, migrate
from engram_memory.testing.fakes import CAPTURE, capture_args, make_binding, make_key, ok

KEY = bytes(range(32))


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: relative sqlite paths land here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _captured(url: str, **options: object) -> None:
    """Open ``url``, capture once (the store then holds a journal), close."""
    service = connect(url, **options)  # type: ignore[arg-type]
    try:
        ok(service.call_tool(CAPTURE, capture_args(make_key("pair")), make_binding()))
    finally:
        service.close()


def _files(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` by name, with the SHA-256 of its bytes."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("with_key_file", [True, False], ids=["key-file-kept", "key-file-gone-too"])
def test_a_store_with_a_journal_and_no_vault_is_refused_and_nothing_is_created(
    folder: Path, with_key_file: bool
) -> None:
    _captured("sqlite:///memory.db")
    (folder / "memory.db.vault").unlink()
    if not with_key_file:
        (folder / "memory.db.key").unlink()
    before = _files(folder)

    with pytest.raises(MissingFileError, match=re.escape("the key vault 'memory.db.vault' of the existing store")):
        connect("sqlite:///memory.db")

    assert _files(folder) == before  # no new vault, no new key file


def test_the_same_holds_with_a_master_key(folder: Path) -> None:
    _captured("sqlite:///memory.db", master_key=KEY)
    (folder / "memory.db.vault").unlink()
    before = _files(folder)

    with pytest.raises(MissingFileError):
        connect("sqlite:///memory.db", master_key=KEY)

    assert _files(folder) == before


def test_a_vault_without_its_store_is_refused_and_no_store_is_created(folder: Path) -> None:
    _captured("sqlite:///memory.db")
    (folder / "memory.db").unlink()
    before = _files(folder)

    with pytest.raises(MissingFileError, match=re.escape("the store 'memory.db' of the existing key vault")):
        connect("sqlite:///memory.db")

    assert _files(folder) == before
    assert not (folder / "memory.db").exists()


def test_an_empty_store_file_beside_a_vault_counts_as_missing(folder: Path) -> None:
    _captured("sqlite:///memory.db")
    (folder / "memory.db").write_bytes(b"")

    with pytest.raises(MissingFileError):
        connect("sqlite:///memory.db")

    assert (folder / "memory.db").stat().st_size == 0


def test_a_store_that_never_held_a_journal_gets_a_new_vault(folder: Path) -> None:
    """A first open that stopped between the store and the vault left nothing to protect."""
    connect("sqlite:///memory.db").close()
    (folder / "memory.db.vault").unlink()
    (folder / "memory.db.key").unlink()

    _captured("sqlite:///memory.db")

    assert sorted(_files(folder)) == ["memory.db", "memory.db.key", "memory.db.vault"]


def test_a_vault_given_by_the_host_is_not_looked_for(folder: Path) -> None:
    _captured("sqlite:///memory.db", vault=InMemoryKeyVault())
    service = connect("sqlite:///memory.db", vault=InMemoryKeyVault())
    service.close()
    assert sorted(_files(folder)) == ["memory.db"]


def test_an_intact_pair_reopens(folder: Path) -> None:
    _captured("sqlite:///memory.db")
    connect("sqlite:///memory.db").close()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_a_key_file_open_to_others_is_used_with_a_warning(folder: Path, caplog: pytest.LogCaptureFixture) -> None:
    connect("sqlite:///memory.db").close()
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        connect("sqlite:///memory.db").close()
    assert caplog.records == []  # 0600, as created

    (folder / "memory.db.key").chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="engram_memory"):
        connect("sqlite:///memory.db").close()

    [record] = caplog.records
    assert record.name == "engram_memory.keyvaults.sqlite"
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "the master key file memory.db.key is open to its group or others (mode 0644): "
        "anyone who can read it can decrypt the memory; make it 0600"
    )
    assert KEY.hex() not in record.getMessage()


def _outdated_store_with_a_scope(db: Path) -> int:
    """A store one schema version behind, holding one scope (as an older release leaves it)."""
    behind = STORE_SCHEMA.latest - 1
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        assert migrate(conn, STORE_SCHEMA, target=behind, seed=_seed_secret) == behind
        conn.execute("INSERT INTO scopes (scope) VALUES ('sha256:' || hex(zeroblob(32)))")
    finally:
        conn.close()
    return behind


def _user_version(db: Path) -> int:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return version


def test_an_outdated_store_without_its_vault_is_refused_before_it_is_upgraded(folder: Path) -> None:
    behind = _outdated_store_with_a_scope(folder / "memory.db")
    before = _files(folder)

    with pytest.raises(MissingFileError, match=re.escape("the key vault 'memory.db.vault' of the existing store")):
        connect("sqlite:///memory.db")

    assert _files(folder) == before  # not upgraded, no vault, no key file
    assert _user_version(folder / "memory.db") == behind


def test_an_outdated_store_whose_vault_refuses_the_key_is_not_upgraded(folder: Path) -> None:
    behind = _outdated_store_with_a_scope(folder / "memory.db")
    SQLiteKeyVault("memory.db.vault", KEY).close()
    store_before = (folder / "memory.db").read_bytes()

    with pytest.raises(MasterKeyError):
        connect("sqlite:///memory.db", master_key=bytes(32))
    (folder / "memory.db.key").write_bytes(b"short")
    with pytest.raises(MasterKeyError, match="exactly 32 bytes"):
        connect("sqlite:///memory.db")

    assert (folder / "memory.db").read_bytes() == store_before
    assert _user_version(folder / "memory.db") == behind
    service = connect("sqlite:///memory.db", master_key=KEY)  # the right key upgrades and opens it
    service.close()
    assert _user_version(folder / "memory.db") == STORE_SCHEMA.latest


def test_a_store_whose_wal_lost_its_shm_and_has_no_vault_is_refused_after_it_is_opened(folder: Path) -> None:
    """Without its ``-shm`` the ``-wal`` cannot be read without opening the file: it is opened, then refused."""
    _captured("sqlite:///source.db")
    writer = sqlite3.connect("source.db")  # keep a -wal: a second connection holds the log open
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE IF NOT EXISTS probe (n INTEGER)")
    writer.commit()
    (folder / "copy.db").write_bytes((folder / "source.db").read_bytes())
    (folder / "copy.db-wal").write_bytes((folder / "source.db-wal").read_bytes())  # a plain copy: no -shm
    writer.close()
    assert not (folder / "copy.db-shm").exists()

    with pytest.raises(MissingFileError, match=re.escape("the key vault 'copy.db.vault' of the existing store")):
        connect("sqlite:///copy.db")

    assert not (folder / "copy.db.vault").exists()
    assert not (folder / "copy.db.key").exists()
