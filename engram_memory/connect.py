"""``connect(url, ...)``: wire a store, a key vault, a policy and a clock into a MemoryService."""

from __future__ import annotations

import stat
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, NoReturn

from engram_memory.clock import SystemClock
from engram_memory.errors import MissingFileError
from engram_memory.keyvaults.memory import InMemoryKeyVault
from engram_memory.page_cursor import lifetime_ms
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import Clock, KeyVault, Policy, Ranker, Store
from engram_memory.service import MemoryService
from engram_memory.stores._locking import check_busy_timeout
from engram_memory.stores.memory import InMemoryStore

if TYPE_CHECKING:
    from engram_memory.keyvaults.sqlite import SQLiteKeyVault

__all__ = ["connect"]

_SQLITE: Final = "sqlite:///"
_SYNCHRONOUS: Final = frozenset({"FULL", "NORMAL"})
OPENING_STORE_NOTE: Final = "opening the SQLite store "
"""How the note naming the store file that failed to open begins (the CLI, which names the file
itself, leaves it out)."""


def connect(
    url: str,
    *,
    policy: Policy | None = None,
    clock: Clock | None = None,
    vault: KeyVault | None = None,
    ranker: Ranker | None = None,
    audit_ids: Callable[[], str] | None = None,
    master_key: bytes | None = None,
    synchronous: Literal["FULL", "NORMAL"] = "FULL",
    busy_timeout_ms: int = 5000,
    page_cursor_lifetime: timedelta | None = None,
) -> MemoryService:
    """Open a memory service.

    * ``"memory:"`` — an in-memory store and key vault, gone when the process ends. For tests and
      small scopes: every record lives as Python objects (about 12 that the garbage collector
      tracks, per record), so at 100k records the process holds ~2.4 GB and one full garbage
      collection pauses it for about a second. Use SQLite for anything large.
    * ``"sqlite:///relative/path.db"`` or ``"sqlite:////absolute/path.db"`` — the embedded default:
      a :class:`~engram_memory.stores.sqlite.SQLiteStore` at that path and, unless ``vault`` is
      given, a :class:`~engram_memory.keyvaults.sqlite.SQLiteKeyVault` beside it (``<path>.vault``)
      whose data keys are wrapped under ``master_key`` or, when none is given, under a key file
      ``<path>.key`` created with owner-only permissions. ``synchronous`` is ``"FULL"`` (durable at
      every commit, the default) or ``"NORMAL"`` (faster; the last commits may be lost on power
      failure, never corrupted). ``busy_timeout_ms`` is how long the store, and the vault opened
      beside it, wait for a lock another connection holds (5 s by default) before a retriable
      ``STORE_UNAVAILABLE``; both options are ignored with ``"memory:"``. ``sqlite:///:memory:``
      is refused: use ``"memory:"``. The path is taken literally: a query string (``?``), a
      fragment (``#``) or a percent-escape (``%``) is refused, never ignored; options are
      keyword arguments.

    The policy defaults to :class:`~engram_memory.DefaultPolicy` (every candidate waits for host
    adjudication), the clock to the system clock. ``page_cursor_lifetime`` is passed to
    :class:`~engram_memory.MemoryService` (``None``: page cursors do not expire).

    Raises:
        TypeError: ``url`` is not a ``str``, ``audit_ids`` is neither callable nor ``None``, or
            ``page_cursor_lifetime`` is neither a ``timedelta`` nor ``None``.
        ValueError: an unsupported or malformed URL, ``synchronous`` other than ``"FULL"`` or
            ``"NORMAL"``, a ``busy_timeout_ms`` that is not an ``int`` from 0 to 2**31 - 1, a
            ``page_cursor_lifetime`` under 1 ms, or ``master_key`` where no SQLite key vault is
            opened (with ``"memory:"`` or together with ``vault``). Raised, like the
            ``TypeError``, before any file is created.

    Opening a SQLite URL raises what its store or key vault raises (``StoreUnavailableError`` for
    a missing directory, ``MasterKeyError`` for a key that does not open the vault, ...), with an
    exception note naming the file it was opening: the driver's message names none. It raises
    :class:`~engram_memory.errors.MissingFileError`, creating nothing, when ``<path>.vault`` is
    missing beside a store that holds a journal, or ``<path>`` beside an existing vault (without
    ``vault=``): a brand-new vault or store there would hide the loss, not repair it. An existing
    vault is opened before the store, so these refusals and a missing or wrong master key leave
    a store of an older schema version as it was (not upgraded), except a store whose ``-wal``
    lost its ``-shm``, which is opened to be read.
    """
    given: object = url  # typed str, but a host may pass anything
    if not isinstance(given, str):
        error = TypeError("url must be a str such as 'memory:' or 'sqlite:///path'")
        error.add_note(f"got {type(given).__name__}")
        raise error
    if audit_ids is not None and not callable(audit_ids):
        raise TypeError("audit_ids must be a callable answering a str")
    lifetime_ms(page_cursor_lifetime)  # refused before any file is created
    if synchronous not in _SYNCHRONOUS:
        raise ValueError("synchronous must be 'FULL' or 'NORMAL'")
    check_busy_timeout(busy_timeout_ms)
    if master_key is not None and (url == "memory:" or vault is not None):
        raise ValueError("master_key applies only to a sqlite URL without vault=: it opens the SQLite key vault")
    if master_key is not None and (type(master_key) is not bytes or len(master_key) != 32):  # noqa: PLR2004
        raise ValueError("master_key must be 32 bytes")  # before any file is created
    policy = policy if policy is not None else DefaultPolicy()
    clock = clock if clock is not None else SystemClock()
    store: Store
    if url == "memory:":
        store = InMemoryStore()
        vault = vault if vault is not None else InMemoryKeyVault()
    elif url.startswith(_SQLITE):
        store, vault = _open_sqlite(_sqlite_path(url), _Locking(synchronous, busy_timeout_ms), vault, master_key)
    else:
        raise ValueError("unsupported memory URL; use 'memory:' or 'sqlite:///path'")
    extra = {"audit_ids": audit_ids} if audit_ids is not None else {}
    return MemoryService(
        store=store,
        vault=vault,
        policy=policy,
        clock=clock,
        ranker=ranker,
        page_cursor_lifetime=page_cursor_lifetime,
        **extra,
    )


class _Locking(NamedTuple):
    """How the SQLite files are opened: the store's durability and both files' lock wait."""

    synchronous: Literal["FULL", "NORMAL"]
    busy_timeout_ms: int


def _open_sqlite(
    path: str, locking: _Locking, vault: KeyVault | None, master_key: bytes | None
) -> tuple[Store, KeyVault]:
    """The SQLite store at ``path`` and, unless ``vault`` is given, the SQLite key vault beside it.

    An existing vault is opened first, so a missing or wrong master key refuses the pair before
    the store is opened (and perhaps upgraded); a missing vault beside a store that holds a scope
    is refused before either is opened, unless the store cannot be read without being opened (a
    ``-wal`` without its ``-shm``): it is then opened, and perhaps upgraded, before the refusal.
    A failure to open either carries a note naming the file (the driver's message names none);
    the one opened first is closed again.

    Raises:
        MissingFileError: the vault file is missing beside a store that holds a journal, or the
            store file beside a vault that exists (without ``vault``); nothing is created.
    """
    if vault is not None:
        return _open_store(path, locking), vault
    from engram_memory.stores.sqlite._files import holds_scopes  # noqa: PLC0415 - the core never imports sqlite3

    vault_path = path + ".vault"
    if _holds_bytes(vault_path):
        if not _holds_bytes(path):
            raise MissingFileError(
                f"the store {path!r} of the existing key vault {vault_path!r} is missing: restore it beside "
                "the vault, or move the vault and its key file away to start a new memory"
            )
        own_vault = _open_vault(path, master_key, locking)
        try:
            return _open_store(path, locking), own_vault
        except BaseException:
            own_vault.close()
            raise
    if _holds_bytes(path) and holds_scopes(path):
        _missing_vault(path, vault_path)
    store = _open_store(path, locking)
    try:
        if store.scopes():  # a file the read-only look could not tell about
            _missing_vault(path, vault_path)
        return store, _open_vault(path, master_key, locking)
    except BaseException:
        store.close()
        raise


def _open_store(path: str, locking: _Locking) -> Store:
    """The SQLite store at ``path`` (created or upgraded), with a note naming it on failure."""
    from engram_memory.stores.sqlite import SQLiteStore  # noqa: PLC0415 - the core never imports sqlite3

    try:
        return SQLiteStore(path, synchronous=locking.synchronous, busy_timeout_ms=locking.busy_timeout_ms)
    except Exception as exc:
        exc.add_note(f"{OPENING_STORE_NOTE}{path!r}")
        raise


def _open_vault(path: str, master_key: bytes | None, locking: _Locking) -> SQLiteKeyVault:
    """The SQLite key vault beside ``path`` (created if missing), with a note naming it on failure."""
    from engram_memory.keyvaults.sqlite import SQLiteKeyVault  # noqa: PLC0415 - the core never imports sqlite3

    vault_path = path + ".vault"
    try:
        if master_key is not None:
            return SQLiteKeyVault(vault_path, master_key, busy_timeout_ms=locking.busy_timeout_ms)
        return SQLiteKeyVault(vault_path, master_key_file=path + ".key", busy_timeout_ms=locking.busy_timeout_ms)
    except Exception as exc:
        key_file = "" if master_key is not None else f" with the key file {path + '.key'!r}"
        exc.add_note(f"opening the SQLite key vault {vault_path!r}{key_file}")
        raise


def _missing_vault(path: str, vault_path: str) -> NoReturn:
    raise MissingFileError(
        f"the key vault {vault_path!r} of the existing store {path!r} is missing: restore it beside "
        "the store (nothing the store holds can be read without it)"
    )


def _holds_bytes(path: str) -> bool:
    """Whether ``path`` is a file with content (an empty file is what a failed first open may leave)."""
    try:
        status = Path(path).stat()
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and status.st_size > 0


def _sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:///`` URL, taken literally.

    Raises:
        ValueError: no file path, ``:memory:`` or ``file:``, or a query string, fragment or percent-escape.
    """
    path = url.removeprefix(_SQLITE)
    if "?" in path:
        raise ValueError("sqlite URL must not carry a query string; pass options as keyword arguments")
    if "#" in path:
        raise ValueError("sqlite URL must not carry a fragment")
    if "%" in path:
        raise ValueError("sqlite URL must not contain percent-escapes; the path is taken literally")
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ValueError("sqlite URL needs a file path; use 'memory:' for an in-memory service")
    return path
