"""SQLiteKeyVault: sealing like InMemoryKeyVault, wrapped keys, master-key checks, real destruction."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from engram_memory.errors import (
    ErrorCode,
    KeyUnavailableError,
    SealIntegrityError,
    StoreConflictError,
    StoreCorruptError,
    StoreUnavailableError,
)
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.keyvaults.sqlite import (
    STALE_STAGING_SECONDS,
    VAULT_SCHEMA,
    MasterKeyError,
    SQLiteKeyVault,
    _remove_stale_staging,
    _unwrap,
)
from engram_memory.ports import KeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SchemaVersionError, SQLiteStore
from engram_memory.testing import KeyVaultConformance
from engram_memory.testing.keyvault import KeyMaterial, Reopen
from tests.sqlite_faults import corrupt_table

MASTER = bytes(range(32))
CONTEXT = "scope:candidate-1"


@pytest.fixture
def vault_path(tmp_path: Path) -> Path:
    return tmp_path / "vault.db"


@pytest.fixture
def vault(vault_path: Path) -> Iterator[SQLiteKeyVault]:
    opened = SQLiteKeyVault(vault_path, MASTER)
    yield opened
    opened.close()


def _files(path: Path) -> bytes:
    """The bytes of the vault database and its WAL and shared-memory files, as they are now."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


def _wrapped(path: Path, key_ref: str) -> bytes:
    raw = sqlite3.connect(path)
    try:
        row = raw.execute("SELECT wrapped FROM data_keys WHERE key_ref = ?", (key_ref,)).fetchone()
    finally:
        raw.close()
    assert row is not None
    return bytes(row[0])


def test_it_is_a_key_vault(vault: SQLiteKeyVault) -> None:
    typed: KeyVault = vault  # checked by mypy
    assert typed.destroys_synchronously is True


def test_round_trip(vault: SQLiteKeyVault) -> None:
    envelope = vault.seal(CONTEXT, b"plaintext \x00 bytes")
    assert vault.open(envelope, CONTEXT) == b"plaintext \x00 bytes"
    assert vault.holds(envelope.key_ref)
    assert len(envelope.nonce) == 12


def test_envelopes_interoperate_with_the_in_memory_format(vault: SQLiteKeyVault, vault_path: Path) -> None:
    envelope = vault.seal(CONTEXT, b"same format")
    key = _unwrap(MASTER, envelope.key_ref, _wrapped(vault_path, envelope.key_ref))
    reference = InMemoryKeyVault()
    reference._keys[envelope.key_ref] = key
    assert reference.open(envelope, CONTEXT) == b"same format"


def test_wrong_context_fails_authentication(vault: SQLiteKeyVault) -> None:
    envelope = vault.seal(CONTEXT, b"secret")
    with pytest.raises(SealIntegrityError):
        vault.open(envelope, "scope:candidate-2")


def test_tampered_ciphertext_fails_authentication(vault: SQLiteKeyVault) -> None:
    envelope = vault.seal(CONTEXT, b"secret")
    flipped = bytes([envelope.ciphertext[0] ^ 1]) + envelope.ciphertext[1:]
    with pytest.raises(SealIntegrityError):
        vault.open(attrs.evolve(envelope, ciphertext=flipped), CONTEXT)


def test_a_wrapped_key_only_unwraps_under_its_own_ref(vault: SQLiteKeyVault, vault_path: Path) -> None:
    first, second = vault.seal(CONTEXT, b"one"), vault.seal(CONTEXT, b"two")
    raw = sqlite3.connect(vault_path)
    with raw:  # swap the wrapped keys of two rows
        raw.execute(
            "UPDATE data_keys SET wrapped = ? WHERE key_ref = ?", (_wrapped(vault_path, second.key_ref), first.key_ref)
        )
    raw.close()
    with pytest.raises(SealIntegrityError):
        vault.open(first, CONTEXT)


def test_unknown_and_destroyed_keys_are_unavailable(vault: SQLiteKeyVault) -> None:
    envelope = vault.seal(CONTEXT, b"secret")
    with pytest.raises(KeyUnavailableError):
        vault.open(attrs.evolve(envelope, key_ref="key_unknown"), CONTEXT)
    vault.destroy(envelope.key_ref)
    assert not vault.holds(envelope.key_ref)
    with pytest.raises(KeyUnavailableError):
        vault.open(envelope, CONTEXT)


def test_destroy_is_idempotent(vault: SQLiteKeyVault) -> None:
    """A second destroy, and one of an unknown key, leave the key gone and the others held."""
    envelope = vault.seal(CONTEXT, b"secret")
    kept = vault.seal(CONTEXT, b"kept")
    vault.destroy(envelope.key_ref)
    vault.destroy(envelope.key_ref)
    vault.destroy("key_never_existed")
    assert not vault.holds(envelope.key_ref)
    assert not vault.holds("key_never_existed")
    with pytest.raises(KeyUnavailableError):
        vault.open(envelope, CONTEXT)
    assert vault.holds(kept.key_ref)
    assert vault.open(kept, CONTEXT) == b"kept"


def test_two_seals_differ(vault: SQLiteKeyVault) -> None:
    a, b = vault.seal(CONTEXT, b"same"), vault.seal(CONTEXT, b"same")
    assert a.key_ref != b.key_ref
    assert a.nonce != b.nonce
    assert a.ciphertext != b.ciphertext


def test_keys_survive_a_reopen(vault_path: Path) -> None:
    first = SQLiteKeyVault(vault_path, MASTER)
    envelope = first.seal(CONTEXT, b"durable")
    first.close()
    second = SQLiteKeyVault(vault_path, MASTER)
    try:
        assert second.open(envelope, CONTEXT) == b"durable"
    finally:
        second.close()


def test_a_wrong_master_key_is_refused_at_open(vault_path: Path) -> None:
    SQLiteKeyVault(vault_path, MASTER).close()
    wrong = bytes(32)
    with pytest.raises(MasterKeyError) as caught:
        SQLiteKeyVault(vault_path, wrong)
    text = str(caught.value) + repr(caught.value) + " ".join(getattr(caught.value, "__notes__", []))
    assert MASTER.hex() not in text
    assert wrong.hex() not in text
    assert repr(MASTER)[2:-1] not in text


@pytest.mark.parametrize(
    "arguments",
    [{}, {"master_key": MASTER, "master_key_file": "k"}, {"master_key": b"short"}],
)
def test_key_arguments_are_checked(vault_path: Path, arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="master_key"):
        SQLiteKeyVault(vault_path, **arguments)  # type: ignore[arg-type]


def test_a_key_file_is_created_private_and_reused(tmp_path: Path, vault_path: Path) -> None:
    key_file = tmp_path / "master.key"
    first = SQLiteKeyVault(vault_path, master_key_file=key_file)
    envelope = first.seal(CONTEXT, b"with a key file")
    first.close()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key_file.read_bytes()) == 32
    second = SQLiteKeyVault(vault_path, master_key_file=key_file)
    try:
        assert second.open(envelope, CONTEXT) == b"with a key file"
    finally:
        second.close()
    with pytest.raises(MasterKeyError):  # the file's key, not another one
        SQLiteKeyVault(vault_path, MASTER)


def test_a_missing_key_file_for_an_existing_vault_is_refused(tmp_path: Path, vault_path: Path) -> None:
    SQLiteKeyVault(vault_path, MASTER).close()
    key_file = tmp_path / "absent.key"
    with pytest.raises(MasterKeyError):
        SQLiteKeyVault(vault_path, master_key_file=key_file)
    assert not key_file.exists()


def test_a_malformed_key_file_is_refused(tmp_path: Path, vault_path: Path) -> None:
    key_file = tmp_path / "short.key"
    key_file.write_bytes(b"too short")
    with pytest.raises(MasterKeyError):
        SQLiteKeyVault(vault_path, master_key_file=key_file)


def test_repr_shows_no_key_material(vault: SQLiteKeyVault) -> None:
    envelope = vault.seal(CONTEXT, b"secret")
    assert MASTER.hex() not in repr(vault)
    assert "ciphertext" not in repr(envelope)
    vault.close()
    vault.close()
    assert "closed" in repr(vault)
    with pytest.raises(StoreUnavailableError):
        vault.seal(CONTEXT, b"after close")


def test_destroy_erases_the_key_from_the_database_and_its_wal(vault: SQLiteKeyVault, vault_path: Path) -> None:
    keep = [vault.seal(CONTEXT, b"keep %d" % i) for i in range(40)]
    target = vault.seal(CONTEXT, b"to be destroyed")
    keep += [vault.seal(CONTEXT, b"keep more %d" % i) for i in range(40)]
    wrapped = _wrapped(vault_path, target.key_ref)
    raw_key = _unwrap(MASTER, target.key_ref, wrapped)
    before = _files(vault_path)
    assert wrapped in before  # the check below can fail: the wrapped key is on disk now
    assert raw_key not in before  # data keys are only ever stored wrapped
    vault.destroy(target.key_ref)
    after = _files(vault_path)
    assert Path(f"{vault_path}-wal").stat().st_size == 0  # the WAL was truncated
    assert wrapped not in after
    assert raw_key not in after
    assert target.key_ref.encode() not in after
    for envelope in keep:
        assert vault.open(envelope, CONTEXT).startswith(b"keep")


def test_destroy_of_many_keys_leaves_none_behind(vault: SQLiteKeyVault, vault_path: Path) -> None:
    envelopes = [vault.seal(CONTEXT, b"%d" % i) for i in range(300)]
    wrapped = {e.key_ref: _wrapped(vault_path, e.key_ref) for e in envelopes}
    doomed = envelopes[::3]
    for envelope in doomed:
        vault.destroy(envelope.key_ref)
    data = _files(vault_path)
    assert not [e.key_ref for e in doomed if wrapped[e.key_ref] in data]
    assert all(wrapped[e.key_ref] in data for e in envelopes if e not in doomed)


def test_one_destroy_call_erases_several_keys_in_one_scrub(vault: SQLiteKeyVault, vault_path: Path) -> None:
    envelopes = [vault.seal(CONTEXT, b"%d" % i) for i in range(10)]
    wrapped = {e.key_ref: _wrapped(vault_path, e.key_ref) for e in envelopes}
    doomed, kept = envelopes[:7], envelopes[7:]
    vault.destroy(*(e.key_ref for e in doomed), "key_that_never_existed")
    data = _files(vault_path)
    assert Path(f"{vault_path}-wal").stat().st_size == 0
    assert [e.key_ref for e in doomed if vault.holds(e.key_ref) or wrapped[e.key_ref] in data] == []
    assert all(vault.open(e, CONTEXT) == b"%d" % i for i, e in enumerate(kept, start=7))
    vault.destroy()  # nothing to destroy: a no-op


def _committed_keys(path: Path) -> set[str]:
    """Key refs a second connection sees committed in the vault file."""
    raw = sqlite3.connect(path)
    try:
        return {row[0] for row in raw.execute("SELECT key_ref FROM data_keys")}
    finally:
        raw.close()


def test_a_key_is_durable_before_anything_is_sealed_under_it(vault_path: Path) -> None:
    vault = SQLiteKeyVault(vault_path, MASTER, reserve=4)
    commits: list[str] = []
    vault._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    try:
        envelopes = [vault.seal(CONTEXT, b"%d" % i) for i in range(9)]
        assert len(commits) == 3  # one durable transaction per reserve of 4 keys
        committed = _committed_keys(vault_path)
        assert {e.key_ref for e in envelopes} <= committed
        assert len(committed) == 12  # 9 used, 3 reserved
    finally:
        vault.close()
    assert _committed_keys(vault_path) == {e.key_ref for e in envelopes}  # close deleted the unused ones
    with SQLiteKeyVault(vault_path, MASTER) as reopened:
        assert all(reopened.open(e, CONTEXT) == b"%d" % i for i, e in enumerate(envelopes))


def test_a_forked_process_never_reuses_its_parents_reserved_keys(
    vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteKeyVault(vault_path, MASTER, reserve=8) as vault:
        parent = vault.seal(CONTEXT, b"parent")
        reserved = {key_ref for key_ref, _ in vault._reserved}
        assert len(reserved) == 7
        monkeypatch.setattr(os, "getpid", lambda: -1)  # what a forked child sees
        child = vault.seal(CONTEXT, b"child")
        assert child.key_ref not in reserved
        assert child.key_ref != parent.key_ref
        assert vault.open(child, CONTEXT) == b"child"
        inherited = list(vault._inherited)
    assert len(inherited) == 1  # the "parent's" connection, kept and never used by the child
    for connection in inherited:  # one process plays both here: the parent closes its own
        connection.close()


def test_the_reserve_size_is_checked(vault_path: Path) -> None:
    with pytest.raises(ValueError, match="reserve"):
        SQLiteKeyVault(vault_path, MASTER, reserve=0)


def test_destroy_reports_a_wal_it_cannot_truncate(vault_path: Path) -> None:
    vault = SQLiteKeyVault(vault_path, MASTER, busy_timeout_ms=50)
    envelope = vault.seal(CONTEXT, b"secret")
    reader = sqlite3.connect(vault_path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM data_keys").fetchone()  # holds a snapshot on the WAL
        with pytest.raises(StoreUnavailableError, match="retry destroy"):
            vault.destroy(envelope.key_ref)
        assert not vault.holds(envelope.key_ref)  # deleted; only the scrub is pending
        reader.execute("ROLLBACK")
        vault.destroy(envelope.key_ref)  # the retry completes the destruction
        assert Path(f"{vault_path}-wal").stat().st_size == 0
    finally:
        reader.close()
        vault.close()


def test_threads_share_one_vault(vault: SQLiteKeyVault) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(15):
                envelope = vault.seal(CONTEXT, b"%d" % i)
                assert vault.open(envelope, CONTEXT) == b"%d" % i
                vault.destroy(envelope.key_ref)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_vault_settings(vault: SQLiteKeyVault, vault_path: Path) -> None:
    conn = vault._conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    raw = sqlite3.connect(vault_path)
    try:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == VAULT_SCHEMA.application_id
    finally:
        raw.close()


def test_a_newer_vault_is_refused(vault_path: Path) -> None:
    SQLiteKeyVault(vault_path, MASTER).close()
    raw = sqlite3.connect(vault_path)
    raw.execute("PRAGMA user_version = 9")
    raw.close()
    with pytest.raises(SchemaVersionError):
        SQLiteKeyVault(vault_path, MASTER)


def test_store_and_vault_files_are_not_interchangeable(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "store.db").close()
    SQLiteKeyVault(tmp_path / "vault.db", MASTER).close()
    with pytest.raises(MigrationLedgerError):
        SQLiteKeyVault(tmp_path / "store.db", MASTER)
    with pytest.raises(MigrationLedgerError):
        SQLiteStore(tmp_path / "vault.db")


def test_key_file_permissions_are_not_widened_by_umask(tmp_path: Path, vault_path: Path) -> None:
    old = os.umask(0)
    try:
        SQLiteKeyVault(vault_path, master_key_file=tmp_path / "k").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600


def _reveal(vault: KeyVault, key_ref: str) -> bytes:
    """Test-only access to a raw data key: unwrap its row with the master key (``LookupError`` without one)."""
    assert isinstance(vault, SQLiteKeyVault)
    raw = sqlite3.connect(Path(vault._path))
    try:
        row = raw.execute("SELECT wrapped FROM data_keys WHERE key_ref = ?", (key_ref,)).fetchone()
    finally:
        raw.close()
    if row is None:
        raise LookupError(key_ref)
    return _unwrap(MASTER, key_ref, bytes(row[0]))


class TestSQLiteKeyVault(KeyVaultConformance):
    @pytest.fixture
    def vault(self, tmp_path: Path) -> Iterator[SQLiteKeyVault]:
        opened = SQLiteKeyVault(tmp_path / "conformance-vault.db", MASTER)
        yield opened
        opened.close()

    @pytest.fixture
    def key_material(self) -> KeyMaterial | None:
        return _reveal

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Reopen | None:
        return lambda: SQLiteKeyVault(tmp_path / "conformance-vault.db", MASTER)


def test_the_master_key_file_never_exists_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is written to a private staging file and linked into place: a concurrent opener or a
    crash sees no file or the whole key, never an empty one."""
    key_path = tmp_path / "vault.key"
    existed_while_writing: list[bool] = []
    real_write = os.write

    def spying_write(fd: int, data: bytes) -> int:
        existed_while_writing.append(key_path.exists())
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spying_write)
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    monkeypatch.undo()
    assert existed_while_writing == [False]
    assert len(key_path.read_bytes()) == 32
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_what_a_killed_key_creation_left_is_removed_at_the_next_open(tmp_path: Path) -> None:
    """A staging link to the key is a hidden copy of the master key; an old unlinked one protects nothing."""
    key_path = tmp_path / "vault.key"
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    key = key_path.read_bytes()
    linked = tmp_path / ".vault.key.0123456789abcdef.tmp"  # killed between the link and the unlink
    os.link(key_path, linked)
    old = tmp_path / ".vault.key.fedcba9876543210.tmp"  # killed before the link, long ago
    old.write_bytes(os.urandom(32))
    long_ago = time.time() - STALE_STAGING_SECONDS - 5
    os.utime(old, (long_ago, long_ago))
    young = tmp_path / ".vault.key.00000000000000aa.tmp"  # maybe a concurrent creation's, still in use
    young.write_bytes(os.urandom(32))
    kept = [tmp_path / ".other.key.0123456789abcdef.tmp", tmp_path / ".vault.key.not-a-staging.tmp"]
    for path in kept:
        os.link(key_path, path)  # links to the key, but not named as its staging files are
    symlinked = tmp_path / ".vault.key.1111111111111111.tmp"
    symlinked.symlink_to(key_path)
    os.utime(symlinked, (long_ago, long_ago), follow_symlinks=False)

    read_only = SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path, read_only=True)
    read_only.close()
    assert linked.exists()  # a read-only open writes nothing
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()

    assert not linked.exists()
    assert not old.exists()
    assert young.exists()
    assert all(path.exists() for path in kept)
    assert symlinked.is_symlink()
    assert key_path.read_bytes() == key
    assert key_path.stat().st_nlink == 1 + len(kept)


def test_the_clean_up_never_removes_the_key_that_opens_the_vault(tmp_path: Path) -> None:
    """Only after the key file's key has opened the vault, and never the file the key path resolves to."""
    key_path = tmp_path / "vault.key"
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    key = key_path.read_bytes()
    hidden = tmp_path / ".vault.key.0123456789abcdef.tmp"
    os.link(key_path, hidden)
    long_ago = time.time() - STALE_STAGING_SECONDS - 5
    os.utime(hidden, (long_ago, long_ago))
    key_path.unlink()
    key_path.write_bytes(os.urandom(32))  # a wrong key put in place: the hidden link is the only right one
    with pytest.raises(MasterKeyError):
        SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path)
    assert hidden.read_bytes() == key
    key_path.unlink()
    key_path.symlink_to(hidden.name)  # an operator recovering the key through the hidden name
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    assert hidden.read_bytes() == key  # the file the key path resolves to, however named and old
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()


def test_the_clean_up_leaves_everything_when_the_key_file_vanished_meanwhile(tmp_path: Path) -> None:
    staging = tmp_path / ".vault.key.0123456789abcdef.tmp"
    staging.write_bytes(os.urandom(32))
    long_ago = time.time() - STALE_STAGING_SECONDS - 5
    os.utime(staging, (long_ago, long_ago))
    _remove_stale_staging(tmp_path / "vault.key")  # removed by another process after the open read it
    assert staging.exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_the_clean_up_leaves_another_users_staging_files(tmp_path: Path) -> None:
    key_path = tmp_path / "vault.key"
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    theirs = tmp_path / ".vault.key.00000000000000bb.tmp"
    theirs.write_bytes(os.urandom(32))
    try:
        os.chown(theirs, 4242, 4242)
    except OSError:  # root without the capability, or a user namespace that does not map 4242
        pytest.skip("cannot give a file to another user here")
    long_ago = time.time() - STALE_STAGING_SECONDS - 5
    os.utime(theirs, (long_ago, long_ago))
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    assert theirs.exists()  # old and unlinked, but not this user's to remove
    os.chown(theirs, os.getuid(), os.getgid())
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=key_path).close()
    assert not theirs.exists()


def test_without_hard_links_the_master_key_file_is_written_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError("no hard links here")

    monkeypatch.setattr(os, "link", refuse)
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=tmp_path / "vault.key").close()
    monkeypatch.undo()
    key = (tmp_path / "vault.key").read_bytes()
    assert len(key) == 32
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    SQLiteKeyVault(tmp_path / "vault.db", master_key_file=tmp_path / "vault.key").close()  # the same key opens it


@pytest.mark.parametrize("size", [31, 33, 64])
def test_a_key_file_of_any_other_length_is_refused(tmp_path: Path, vault_path: Path, size: int) -> None:
    key_file = tmp_path / "odd.key"
    key_file.write_bytes(bytes(range(size)))
    with pytest.raises(MasterKeyError, match="exactly 32 bytes"):
        SQLiteKeyVault(vault_path, master_key_file=key_file)
    assert key_file.read_bytes() == bytes(range(size))


def test_destroy_restores_full_synchronous_commits(vault: SQLiteKeyVault) -> None:
    """The deleting commit runs at NORMAL (the checkpoint syncs it); every later seal commits at FULL again."""
    envelope = vault.seal(CONTEXT, b"secret")
    vault.destroy(envelope.key_ref)
    assert vault._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    vault.destroy()  # a no-op leaves it as it is
    assert vault._conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_one_destroy_call_of_more_keys_than_one_statement_binds_erases_them_all(vault_path: Path) -> None:
    with SQLiteKeyVault(vault_path, MASTER, reserve=256) as vault:
        envelopes = [vault.seal(CONTEXT, b"%d" % i) for i in range(1201)]
        kept = vault.seal(CONTEXT, b"kept")
        vault.destroy(*(e.key_ref for e in envelopes))
        assert [e.key_ref for e in envelopes if vault.holds(e.key_ref)] == []
        assert vault.open(kept, CONTEXT) == b"kept"
    assert _committed_keys(vault_path) == {kept.key_ref}


# --------------------------------------------------------------------------- faults: key file, vault file, peer


def test_a_reserve_refused_halfway_is_rolled_back_whole_and_the_vault_stays_usable(vault_path: Path) -> None:
    """A reserve is one transaction: a row refused after two were inserted leaves none of the three, and
    the connection is not left inside the failed transaction (the next seal writes a reserve again)."""
    with SQLiteKeyVault(vault_path, MASTER, reserve=4) as vault:
        raw = sqlite3.connect(vault_path, isolation_level=None)
        try:  # another process's trigger refuses a third key (as a full disk would refuse a page)
            raw.execute(
                "CREATE TRIGGER refuse_a_third_key BEFORE INSERT ON data_keys"
                " WHEN (SELECT count(*) FROM data_keys) >= 2 BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
            with pytest.raises(StoreConflictError, match=r"^sqlite seal failed: SQLITE_CONSTRAINT_TRIGGER$"):
                vault.seal(CONTEXT, b"refused")
            assert _committed_keys(vault_path) == set()
            raw.execute("DROP TRIGGER refuse_a_third_key")
        finally:
            raw.close()
        envelope = vault.seal(CONTEXT, b"after the refusal")
        assert vault.open(envelope, CONTEXT) == b"after the refusal"
        assert len(_committed_keys(vault_path)) == 4


def test_a_key_file_that_cannot_be_read_is_refused(tmp_path: Path, vault_path: Path) -> None:
    key_file = tmp_path / "vault.key"
    key_file.mkdir()  # a directory where the key file should be: reading it fails (even as root)
    with pytest.raises(MasterKeyError, match=r"^the master key file cannot be read$"):
        SQLiteKeyVault(vault_path, master_key_file=key_file)
    assert list(key_file.iterdir()) == []


def test_a_key_file_that_cannot_be_created_is_refused_and_a_retry_works(tmp_path: Path, vault_path: Path) -> None:
    key_file = tmp_path / "no-such-dir" / "vault.key"
    with pytest.raises(MasterKeyError, match=r"^the master key file cannot be created$"):
        SQLiteKeyVault(vault_path, master_key_file=key_file)
    assert sorted(path.name for path in tmp_path.iterdir()) == [vault_path.name]  # no directory, no staging file
    with SQLiteKeyVault(vault_path, master_key_file=tmp_path / "vault.key") as vault:  # nothing half-made refuses it
        envelope = vault.seal(CONTEXT, b"after the retry")
        assert vault.open(envelope, CONTEXT) == b"after the retry"


PEER_KEY = bytes(range(100, 132))


@pytest.mark.parametrize("hard_links", [True, False], ids=["linked", "written-in-place"])
def test_a_peer_that_creates_the_key_file_first_wins_and_its_key_is_used(
    tmp_path: Path, vault_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    """Two openers of a new vault race to create the key file: the loser reads the winner's key."""
    key_file = tmp_path / "vault.key"
    real_link = os.link

    def peer_wins(source: Path, target: Path) -> None:
        Path(target).write_bytes(PEER_KEY)  # the peer's file appears between our read and our link
        if not hard_links:
            raise PermissionError("no hard links here")
        real_link(source, target)

    monkeypatch.setattr(os, "link", peer_wins)
    with SQLiteKeyVault(vault_path, master_key_file=key_file) as vault:
        envelope = vault.seal(CONTEXT, b"under the peer's key")
    monkeypatch.undo()
    assert key_file.read_bytes() == PEER_KEY
    assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")] == []
    with SQLiteKeyVault(vault_path, PEER_KEY) as peer:
        assert peer.open(envelope, CONTEXT) == b"under the peer's key"


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_memory_paths_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="needs a file path"):
        SQLiteKeyVault(path, MASTER)


def test_an_unopenable_vault_path_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match=r"^sqlite open vault failed: SQLITE_CANTOPEN$"):
        SQLiteKeyVault(tmp_path / "no-such-dir" / "vault.db", MASTER)
    assert list(tmp_path.iterdir()) == []


def test_a_vault_another_process_is_creating_is_locked_until_it_commits(vault_path: Path) -> None:
    """The second opener of a new vault waits for the first one's schema, then says so: retry."""
    creator = sqlite3.connect(vault_path, isolation_level=None)
    try:
        creator.execute("PRAGMA journal_mode = WAL")
        creator.execute("BEGIN IMMEDIATE")  # holds the write lock, as a peer creating the schema does
        with pytest.raises(StoreUnavailableError, match=r"\(database is locked; retry\)$"):
            SQLiteKeyVault(vault_path, MASTER, busy_timeout_ms=50)
        creator.execute("ROLLBACK")
    finally:
        creator.close()
    with SQLiteKeyVault(vault_path, MASTER, busy_timeout_ms=50) as vault:
        envelope = vault.seal(CONTEXT, b"once the lock is gone")
        assert vault.open(envelope, CONTEXT) == b"once the lock is gone"


def test_a_corrupted_key_table_is_journal_corrupt_to_open_and_holds(vault_path: Path) -> None:
    """Corruption is not retriable, and the error names the action, never the key."""
    with SQLiteKeyVault(vault_path, MASTER) as vault:
        envelope = vault.seal(CONTEXT, b"secret")
    assert not Path(f"{vault_path}-wal").exists()  # everything is in the database file
    corrupt_table(vault_path, "data_keys")
    with SQLiteKeyVault(vault_path, MASTER) as vault:
        for action, call in (
            ("open", lambda: vault.open(envelope, CONTEXT)),
            ("holds", lambda: vault.holds(envelope.key_ref)),
        ):
            with pytest.raises(StoreCorruptError) as caught:
                call()
            assert caught.value.code is ErrorCode.JOURNAL_CORRUPT
            assert caught.value.__notes__ == [f"sqlite {action} failed: SQLITE_CORRUPT"]
            assert envelope.key_ref not in str(caught.value) + repr(caught.value)


def test_a_forked_child_closing_the_vault_leaves_its_parents_connection_and_reserve(
    vault_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that closes the vault it inherited (at exit) neither closes the parent's connection nor
    deletes the parent's reserved keys: the parent goes on using both."""
    vault = SQLiteKeyVault(vault_path, MASTER, reserve=4)
    parent = vault.seal(CONTEXT, b"parent")
    parents_connection = vault._conn
    monkeypatch.setattr(os, "getpid", lambda: -1)  # what a forked child sees
    vault.close()
    monkeypatch.undo()
    try:
        committed = _committed_keys(vault_path)
        assert parent.key_ref in committed
        assert len(committed) == 4  # the three unused reserved keys are still the parent's
        assert parents_connection.execute("SELECT count(*) FROM data_keys").fetchone() == (4,)  # still open
    finally:
        parents_connection.close()  # one process plays both here: the parent closes its own
