"""``SQLiteKeyVault``: a durable KeyVault in its own SQLite file, data keys wrapped by a master key.

Sealing is exactly :class:`~engram_memory.keyvaults.memory.InMemoryKeyVault`'s: a fresh AES-256 key
per :meth:`~SQLiteKeyVault.seal`, a random 96-bit nonce, AES-256-GCM with the UTF-8 context as
associated data. What differs is where the data key lives: in the vault file, **wrapped** with AES
key wrap (RFC 3394) under a key-encryption key derived from the host's master key and the key's
``key_ref`` (HKDF-Expand-SHA256), so a wrapped key only unwraps under its own ref. The master key
never touches the file; a verifier (an HMAC of a constant under a derived key) detects a wrong
master key at open.

Keys are made ahead of use: the vault writes a *reserve* of fresh wrapped keys (32 by default) in
one durable transaction and hands them out one per :meth:`~SQLiteKeyVault.seal`, so a key is on
disk before anything is sealed under it while a seal usually costs no commit. Reserved keys never
leave the process that made them (a forked child makes its own); :meth:`~SQLiteKeyVault.close`
deletes the unused ones, and a crash leaves at most one reserve of keys that sealed nothing.

Destruction is real: :meth:`~SQLiteKeyVault.destroy` deletes the rows with ``secure_delete=ON``
(SQLite zeroes the freed cells) in one transaction and then runs ``PRAGMA wal_checkpoint(TRUNCATE)``,
which copies the scrubbed pages into the database file, syncs it and truncates the write-ahead log
to zero bytes, so neither the database file nor the WAL still holds a wrapped key when ``destroy``
returns. (The deleting commit itself runs at ``synchronous=NORMAL``: the checkpoint's sync is what
makes it durable, and a checkpoint that cannot complete makes ``destroy`` raise.) Wrapped keys
live in an ordinary rowid table: its interior B-tree pages hold only integer row ids, never copies
of a row (an index or ``WITHOUT ROWID`` table would keep key copies in interior pages).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from engram_memory.errors import KeyUnavailableError, PortError, SealIntegrityError, StoreUnavailableError
from engram_memory.keyvaults._aead import new_key, open_sealed, seal_with
from engram_memory.ports import SealedEnvelope
from engram_memory.stores._locking import check_busy_timeout
from engram_memory.stores.sqlite._errors import translate
from engram_memory.stores.sqlite._files import (
    check_current_schema,
    connect_read_only,
    create_private,
    integrity_problems,
    read_only_uri,
    truncate_left_over_wal,
)
from engram_memory.stores.sqlite._schema import Migration, SchemaSpec, enter_wal, migrate

__all__ = ["VAULT_SCHEMA", "MasterKeyError", "SQLiteKeyVault"]

_log = logging.getLogger(__name__)
_KEY_BYTES: Final = 32
_DEFAULT_RESERVE: Final = 32
_DELETE_CHUNK: Final = 500
_WRAP_INFO: Final = b"engram-memory/vault/key-wrap/v1\0"
_VERIFIER_INFO: Final = b"engram-memory/vault/verifier/v1\0"
_VERIFIER_MESSAGE: Final = b"engram-memory sqlite key vault master key verifier"
_VERIFIER_NAME: Final = "master_key_verifier"

VAULT_SCHEMA: Final = SchemaSpec(
    kind="key vault",
    application_id=0x456E_4756,  # "EnGV"
    migrations=(
        Migration(
            1,
            "data-keys",
            """
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;

-- a rowid table on purpose: wrapped keys sit in leaf cells only, which secure_delete zeroes
CREATE TABLE data_keys (
    id INTEGER PRIMARY KEY,
    key_ref TEXT NOT NULL UNIQUE,
    wrapped BLOB NOT NULL
) STRICT;
""",
        ),
    ),
)
"""The vault file's migrations."""


class MasterKeyError(PortError):
    """The master key does not open this vault (wrong key, unreadable or malformed key file).

    Raised when the vault is opened, never later; the message never contains key material.
    """


def _derive(master: bytes, info: bytes) -> bytes:
    return HKDFExpand(algorithm=hashes.SHA256(), length=_KEY_BYTES, info=info).derive(master)


def _verifier(master: bytes) -> bytes:
    return hmac.new(_derive(master, _VERIFIER_INFO), _VERIFIER_MESSAGE, hashlib.sha256).digest()


def _verified(master: bytes, stored: bytes | None) -> bytes:
    """``master`` if it matches the vault's stored verifier, else ``MasterKeyError``."""
    if stored is None or not hmac.compare_digest(stored, _verifier(master)):
        raise MasterKeyError("the master key does not open this key vault")
    return master


def _wrap(master: bytes, key_ref: str, key: bytes) -> bytes:
    return aes_key_wrap(_derive(master, _WRAP_INFO + key_ref.encode("utf-8")), key)


def _unwrap(master: bytes, key_ref: str, wrapped: bytes) -> bytes:
    """The data key of ``key_ref`` (``InvalidUnwrap`` if it does not authenticate)."""
    return aes_key_unwrap(_derive(master, _WRAP_INFO + key_ref.encode("utf-8")), wrapped)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls back and propagates."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def _read_key_file(path: Path) -> bytes | None:
    """The 32-byte master key stored at ``path``, ``None`` if the file does not exist.

    A key file that its group or others may read or write is used, with a warning on the
    ``engram_memory`` logger (a restore or a configuration tool that ignores modes leaves such
    files; a secret volume may mount them so on purpose).
    """
    try:
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            data = file.read(_KEY_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MasterKeyError("the master key file cannot be read") from exc
    if len(data) != _KEY_BYTES:
        raise MasterKeyError("the master key file does not hold exactly 32 bytes")
    if os.name == "posix" and stat.S_IMODE(mode) & 0o077:
        _log.warning(
            "the master key file %s is open to its group or others (mode %04o): "
            "anyone who can read it can decrypt the memory; make it 0600",
            path,
            stat.S_IMODE(mode),
        )
    return data


def _create_key_file(path: Path) -> bytes:
    """Create ``path`` with a fresh random master key, mode 0600 (or read it if a peer won the race).

    The key is written and synced in a private staging file that is then hard-linked into place,
    so ``path`` never exists half-written: a concurrent opener, or a crash, sees either no file or
    the whole key. On a file system without hard links the key is written in place (``O_EXCL``).
    """
    key = secrets.token_bytes(_KEY_BYTES)
    staging = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        _write_new(staging, key)
        try:
            os.link(staging, path)
        except FileExistsError:
            return _peer_key(path)
        except OSError:  # no hard links here
            try:
                _write_new(path, key)
            except FileExistsError:
                return _peer_key(path)
    except OSError as exc:
        raise MasterKeyError("the master key file cannot be created") from exc
    finally:
        with suppress(OSError):
            staging.unlink()
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return key


_STAGING_NAME: Final = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{16}\.tmp")
"""The name :func:`_create_key_file` gives its staging file beside the key file ``name``."""
STALE_STAGING_SECONDS: Final = 60.0
"""A staging file that is no link to the key file is left alone until it is this old (a creation may be using it)."""


def _remove_stale_staging(path: Path) -> None:
    """Remove what a key creation killed before its clean-up left beside ``path`` (best effort).

    Called once the key at ``path`` has opened the vault. A staging file that is another link to
    the key file (killed between the link and the unlink) is a copy of the live master key under
    a hidden name, which would outlive the key file if an operator removed it: it is removed at
    once. One that is not (killed before the link) holds a key that never sealed anything: it is
    removed once it is :data:`STALE_STAGING_SECONDS` old. Only regular files of this process's
    user are removed, never the file ``path`` itself resolves to, and never a file's last link to
    the key; a symbolic link is never followed.
    """
    try:
        key = path.stat()
        resolved = path.resolve()
        entries = list(path.parent.iterdir())
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop
        return
    for staging in entries:
        match = _STAGING_NAME.fullmatch(staging.name)
        if match is None or match["name"] != path.name:
            continue
        with suppress(OSError, RuntimeError):
            found = staging.lstat()
            if not stat.S_ISREG(found.st_mode) or staging.resolve() == resolved:
                continue
            if hasattr(os, "getuid") and found.st_uid != os.getuid():
                continue
            linked = (found.st_dev, found.st_ino) == (key.st_dev, key.st_ino) and found.st_nlink > 1
            if linked or time.time() - found.st_mtime > STALE_STAGING_SECONDS:
                staging.unlink()


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (mode 0600; ``FileExistsError`` if it exists), write ``data`` and sync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _peer_key(path: Path) -> bytes:
    """The key a concurrent opener created first."""
    existing = _read_key_file(path)
    if existing is None:  # pragma: no cover - created then removed by someone else
        raise MasterKeyError("the master key file vanished while it was being created")
    return existing


class SQLiteKeyVault:
    """A durable :class:`~engram_memory.ports.KeyVault` for SQLite deployments.

    Args:
        path: the vault's own SQLite file (never the store's file).
        master_key: 32 bytes the host keeps elsewhere (a secret manager, an HSM-unwrapped key).
        master_key_file: alternatively, a file holding the 32-byte master key; created with mode
            0600 and a random key if it does not exist yet (and the vault is new).
        reserve: how many keys to write ahead in one durable transaction (1 = one commit per seal).
        read_only: open an existing vault at the current schema, and an existing key file, for
            reading only: nothing is created, migrated, checkpointed or written (a seal or destroy
            raises ``StoreUnavailableError``), as for
            :class:`~engram_memory.stores.sqlite.SQLiteStore` ``(read_only=True)``, whose caveat
            about a file without a ``-wal`` applies here too.

    Exactly one of ``master_key`` and ``master_key_file`` must be given. Losing the master key
    loses every sealed item, which is the point of crypto-shredding; back it up separately from
    the database files. Thread-safe (one connection behind a lock); several processes may open
    the same vault (WAL, busy timeout). :attr:`destroys_synchronously` is ``True``.

    Raises:
        MasterKeyError: the master key does not match the vault's verifier, or the key file is
            unreadable, malformed, or missing for an existing vault.
        ValueError: neither or both key sources, a master key that is not 32 bytes, or a reserve
            below 1.
        StoreUnavailableError: the file cannot be opened (or is locked past the busy timeout).
        MigrationLedgerError: not a vault file, or a vault written by a newer library.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        master_key: bytes | None = None,
        *,
        master_key_file: str | os.PathLike[str] | None = None,
        busy_timeout_ms: int = 5000,
        reserve: int = _DEFAULT_RESERVE,
        read_only: bool = False,
    ) -> None:
        if (master_key is None) == (master_key_file is None):
            raise ValueError("give exactly one of master_key and master_key_file")
        if master_key is not None and len(master_key) != _KEY_BYTES:
            raise ValueError("master_key must be 32 bytes")
        if reserve < 1:
            raise ValueError("reserve must be at least 1")
        check_busy_timeout(busy_timeout_ms)
        self._reserve_size = reserve
        self._reserved: list[tuple[str, bytes]] = []  # durable, never used: (key_ref, key)
        self._reserved_by = os.getpid()
        self._path = os.fspath(path)
        if self._path in {"", ":memory:"}:
            raise ValueError("SQLiteKeyVault needs a file path (use InMemoryKeyVault for a transient vault)")
        self._lock = threading.Lock()
        self._closed = False
        self._read_only_uri: str | None = None  # how the connection opens in read-only mode
        if read_only:
            self._read_only_uri = read_only_uri(self._path)
        else:
            create_private(self._path)
        self._busy_timeout_ms = busy_timeout_ms
        self._inherited: list[sqlite3.Connection] = []  # a parent's, in a forked child: kept, never used
        self._conn = self._connect(busy_timeout_ms)
        self._conn_pid = os.getpid()
        try:
            if read_only:
                self._master = self._open_master_read_only(master_key, master_key_file)
            else:
                self._master = self._open_master(master_key, master_key_file)
                # a crash between a destruction's commit and its truncation left the keys in the log
                truncate_left_over_wal(self._conn, busy_timeout_ms=busy_timeout_ms)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        if self._read_only_uri is not None:
            try:
                return connect_read_only(self._read_only_uri, busy_timeout_ms=busy_timeout_ms)
            except sqlite3.Error as exc:
                raise translate(exc, "open vault") from exc
        try:
            conn = sqlite3.connect(
                self._path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise translate(exc, "open vault") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            enter_wal(conn, VAULT_SCHEMA, busy_timeout_ms=busy_timeout_ms)  # nothing written to a foreign file
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA trusted_schema = OFF")
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, "open vault") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_master(self, master_key: bytes | None, master_key_file: str | os.PathLike[str] | None) -> bytes:
        """Resolve the master key, create or migrate the schema, and check the verifier."""
        conn = self._conn
        try:
            stored = self._stored_verifier()
            if master_key is None:
                assert master_key_file is not None  # noqa: S101 - checked by __init__
                key_path = Path(master_key_file)
                master_key = _read_key_file(key_path)
                if master_key is None:
                    if stored is not None:
                        raise MasterKeyError("the master key file of an existing vault is missing")
                    master_key = _create_key_file(key_path)
            key = master_key

            def seed(c: sqlite3.Connection) -> None:
                c.execute("INSERT INTO meta (name, value) VALUES (?, ?)", (_VERIFIER_NAME, _verifier(key)))

            migrate(conn, VAULT_SCHEMA, seed=seed)
            stored = self._stored_verifier()
        except sqlite3.Error as exc:
            raise translate(exc, "open vault") from exc
        verified = _verified(key, stored)
        if master_key_file is not None:  # only once the file's key has opened the vault
            _remove_stale_staging(Path(master_key_file))
        return verified

    def _open_master_read_only(self, master_key: bytes | None, master_key_file: str | os.PathLike[str] | None) -> bytes:
        """Read the master key (never creating a key file), check the schema and the verifier."""
        if master_key is None:
            assert master_key_file is not None  # noqa: S101 - checked by __init__
            master_key = _read_key_file(Path(master_key_file))
            if master_key is None:
                raise MasterKeyError("the master key file of an existing vault is missing")
        try:
            check_current_schema(self._conn, VAULT_SCHEMA)
            stored = self._stored_verifier()
        except sqlite3.Error as exc:
            raise translate(exc, "open vault") from exc
        return _verified(master_key, stored)

    def _stored_verifier(self) -> bytes | None:
        """The verifier row, ``None`` for a vault without a schema yet (``sqlite3.Error`` propagates)."""
        conn = self._conn
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
            return None
        row = conn.execute("SELECT value FROM meta WHERE name = ?", (_VERIFIER_NAME,)).fetchone()
        return None if row is None else bytes(row[0])

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"SQLiteKeyVault({Path(self._path).name!r}, {state})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _live(self) -> sqlite3.Connection:
        """The vault's connection; a forked child opens its own (SQLite forbids sharing one across ``fork``)."""
        if self._closed:
            raise StoreUnavailableError("the key vault is closed")
        if self._conn_pid != os.getpid():
            self._inherited.append(self._conn)
            self._conn = self._connect(self._busy_timeout_ms)
            self._conn_pid = os.getpid()
        return self._conn

    # ------------------------------------------------------------------ KeyVault

    @property
    def destroys_synchronously(self) -> bool:
        """Destruction is complete (row scrubbed, WAL truncated) when :meth:`destroy` returns."""
        return True

    def seal(self, context: str, plaintext: bytes) -> SealedEnvelope:
        """Encrypt under a fresh key bound to ``context``; the wrapped key is durable on return."""
        with self._lock:
            key_ref, key = self._take_key()
        return seal_with(key_ref, key, context, plaintext)

    def _take_key(self) -> tuple[str, bytes]:
        """An unused durable key from the reserve, writing a new reserve first if it is empty."""
        if self._reserved_by != os.getpid():  # a forked child must never reuse its parent's keys
            self._reserved, self._reserved_by = [], os.getpid()
        if not self._reserved:
            fresh = [new_key() for _ in range(self._reserve_size)]
            rows = [(key_ref, _wrap(self._master, key_ref, key)) for key_ref, key in fresh]
            conn = self._live()
            try:
                with _transaction(conn):
                    conn.executemany("INSERT INTO data_keys (key_ref, wrapped) VALUES (?, ?)", rows)
            except sqlite3.Error as exc:
                raise translate(exc, "seal") from exc
            fresh.reverse()
            self._reserved = fresh
        return self._reserved.pop()

    def open(self, envelope: SealedEnvelope, context: str) -> bytes:
        """Decrypt; a missing key or a failed tag is a typed error."""
        with self._lock:
            try:
                row = (
                    self._live()
                    .execute("SELECT wrapped FROM data_keys WHERE key_ref = ?", (envelope.key_ref,))
                    .fetchone()
                )
            except sqlite3.Error as exc:
                raise translate(exc, "open") from exc
        if row is None:
            raise KeyUnavailableError("data key is unknown or destroyed")
        try:
            key = _unwrap(self._master, envelope.key_ref, row[0])
        except InvalidUnwrap as exc:
            raise SealIntegrityError("wrapped data key failed authentication") from exc
        return open_sealed(key, envelope, context)

    def destroy(self, *key_refs: str) -> None:
        """Delete the wrapped keys in one transaction and scrub them from the WAL.

        Unknown keys are no-ops. The checkpoint runs even when the rows are already gone, so a
        retry completes a destruction whose checkpoint was blocked earlier.

        Raises:
            StoreUnavailableError: the write-ahead log could not be truncated (another connection
                kept reading past the busy timeout); the keys are deleted but may survive in the
                WAL, and the deletion may not be durable, until a retry succeeds.
        """
        if not key_refs:
            return
        with self._lock:
            conn = self._live()
            try:
                self._delete_keys(conn, key_refs)
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as exc:
                raise translate(exc, "destroy") from exc
        if busy:
            raise StoreUnavailableError("keys deleted but the vault's write-ahead log is still in use; retry destroy")

    @staticmethod
    def _delete_keys(conn: sqlite3.Connection, key_refs: tuple[str, ...]) -> None:
        """Delete rows in one transaction at ``synchronous=NORMAL`` (the checkpoint syncs them)."""
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            with _transaction(conn):
                for start in range(0, len(key_refs), _DELETE_CHUNK):
                    chunk = key_refs[start : start + _DELETE_CHUNK]
                    marks = ", ".join("?" * len(chunk))
                    conn.execute(f"DELETE FROM data_keys WHERE key_ref IN ({marks})", chunk)  # noqa: S608
        finally:
            conn.execute("PRAGMA synchronous = FULL")

    # ------------------------------------------------------------------ extras

    def check_integrity(self) -> list[str]:
        """The damage SQLite's ``PRAGMA integrity_check`` finds in the vault file: one text per problem, ``[]`` if none.

        Costly: it reads every page of the file. It writes nothing (a read-only vault runs it too).
        A damaged index can make a key that is still in the file look missing (``open`` then raises
        ``KeyUnavailableError``): check this before concluding that keys are gone. The texts are
        SQLite's (table and index names, row numbers), never key material.

        Raises:
            StoreUnavailableError: the vault is closed, the file is locked past the busy timeout or
                cannot be read.
        """
        with self._lock:
            try:
                return integrity_problems(self._live())
            except sqlite3.Error as exc:
                raise translate(exc, "check integrity") from exc

    def holds(self, key_ref: str) -> bool:
        """Whether the key still exists (for tests and audits)."""
        with self._lock:
            try:
                row = self._live().execute("SELECT 1 FROM data_keys WHERE key_ref = ?", (key_ref,)).fetchone()
            except sqlite3.Error as exc:
                raise translate(exc, "holds") from exc
        return row is not None

    def close(self) -> None:
        """Delete the unused reserved keys and close the vault file; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            unused = tuple(key_ref for key_ref, _ in self._reserved) if self._reserved_by == os.getpid() else ()
            self._reserved = []
            if self._conn_pid != os.getpid():
                return  # a forked child never touches its parent's connection
            if unused:
                with suppress(sqlite3.Error):  # best effort: they sealed nothing
                    self._delete_keys(self._conn, unused)
            with suppress(sqlite3.Error):
                self._conn.close()
