"""The ``engram-memory`` command: a narrated demo and operator commands.

``engram-memory demo [--db PATH]`` walks through the whole governance model on an embedded
SQLite file: a temporary one, deleted at the end, unless ``--db`` names a new file to keep (a demo
that fails removes the files it created). ``pending`` lists one scope's
pending candidates for the host's review (JSON lines, content included) and ``adjudicate``
decides one as the host. ``verify --db PATH`` and
``stats --db PATH`` inspect an existing database through read-only connections and write nothing
to its files: no checkpoint, not even after a crash left a write-ahead log, no ``-wal`` or
``-shm`` file created, and the keys an accept left doomed stay doomed. A store or vault file at
another schema version is refused, not migrated. While the files have a ``-wal`` (the service has
them open, or was killed), SQLite reads through it under its reader locks (a ``-wal`` whose
``-shm`` does not appear within about a second is refused, since reading would create it);
without one, nothing has them open and they are read ``immutable``, and a command whose files
changed meanwhile (a service started and wrote) exits 1 and asks to be run again rather than print
what it read. ``verify`` first runs SQLite's ``integrity_check`` on the store and the vault: a
damaged file gets one line of its own and exit status 1, instead of the scopes' lines.
``verify`` and ``stats`` print one line per scope; on a database with no scope yet (nothing was
ever captured) they print none, say so in one line on standard error, and exit 0. ``pending`` on a
scope with no journal says so on standard error too (a mistyped tenant must not look like "nothing
pending"). ``adjudicate`` exits 0 only when its decision took effect; accepting a candidate whose
content was forgotten in the scope needs ``--readmit-forgotten``; when the store or vault is
unavailable it says why (a lock another process holds, read-only files). A tenant or workspace
that no host binding can use (empty, not in Unicode NFC) is a usage error, as is any id option
that is not valid UTF-8; messages show an id escaped (``repr()``) unless it is plain, and cut short.
``demo --db PATH`` creates ``PATH`` exclusively, so two demos never share a file.

The key vault ``PATH.vault`` opens under the master key in ``PATH.key`` beside the database or,
with ``--key-file KEY`` (``verify``, ``stats``, ``pending``, ``adjudicate``, ``serve-mcp``), in
``KEY``: a key kept apart from the database and its backups. Only ``demo``, and ``serve-mcp``
without ``--key-file`` on a new database, create a key file (``PATH.key``); otherwise a missing
key file is named in one line, and a key that does not open the vault is refused.

Every failure ends in one line on standard error and exit status 1 (argparse's usage errors: 2);
a closed output pipe (``engram-memory demo | head -1``) ends the command quietly with status 1,
and Ctrl-C with ``interrupted`` on standard error and status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs

from engram_memory.adapters import MCP_EXTRA
from engram_memory.admin import MemoryAdmin
from engram_memory.clock import ManualClock, SystemClock
from engram_memory.connect import OPENING_STORE_NOTE, connect
from engram_memory.context import ALL_TOOLS, HostBinding
from engram_memory.errors import (
    EngramError,
    ErrorCode,
    PortError,
    ProtocolError,
    StoreCorruptError,
    StoreUnavailableError,
)
from engram_memory.keyvaults.sqlite import VAULT_SCHEMA, MasterKeyError, SQLiteKeyVault, _read_key_file
from engram_memory.policy import DefaultPolicy
from engram_memory.ports import Policy
from engram_memory.service import MemoryService
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.stores.sqlite._files import FileMark, LogWithoutIndexError, file_mark, read_only_uri
from engram_memory.stores.sqlite._schema import STORE_APPLICATION_ID, STORE_SCHEMA

__all__ = ["main"]

Say = Callable[[str], None]

_URL_UNSAFE = frozenset("?#%")
"""Characters a ``sqlite:///`` URL refuses in its path (see :func:`~engram_memory.connect.connect`)."""
STDIO_TOOLS = ALL_TOOLS - {"engram_memory_withdraw", "engram_memory_forget"}
"""What ``serve-mcp`` grants: the four tools that need no human confirmation (withdraw and forget
would always answer -32603 without one, and a tool that cannot work must not be listed)."""
_DEMO_FILES = ("", "-wal", "-shm", ".vault", ".vault-wal", ".vault-shm", ".key")
"""The suffixes of every file a demo on ``--db PATH`` may create (the database itself first)."""
_AS_OWNER = "run the command as the user that owns the files"
_SHOWN_MAX: Final = 80
"""How many characters of an id a message shows."""
_PLAIN_ID: Final = re.compile(r"[A-Za-z0-9._:@+=/-]+")
"""An id a message may show as is; any other is shown escaped, as ``repr()`` does."""
_SQLITE_HINTS: Final = {
    "SQLITE_BUSY": "another process holds the lock; run the command again",
    "SQLITE_LOCKED": "another process holds the lock; run the command again",
    "SQLITE_READONLY": f"the files are read-only here; {_AS_OWNER}, on a writable file system",
    "SQLITE_CANTOPEN": f"a file cannot be opened; {_AS_OWNER}",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "an I/O error",
    "SQLITE_CORRUPT": "a file is damaged; run verify",
    "SQLITE_NOTADB": "a file is damaged; run verify",
}
"""What an operator can do about a failure, by SQLite's primary error name."""


class _OutputError(Exception):
    """Writing the command's output failed (a closed pipe, a full disk); ``__cause__`` is the OSError."""


def _say(line: str) -> None:
    """Print ``line`` now, so that a write that fails does so here, not at exit."""
    try:
        print(line, flush=True)
    except OSError as exc:
        raise _OutputError from exc


def _reason(exc: BaseException) -> str:
    """An error's message followed by its notes; never content.

    The message is left out when it is only the constant text of an error code and notes say
    more (their detail). The notes name an action and SQLite's error name, a schema refusal, or
    the file being opened; the note naming the store file is left out, since every message that
    shows a reason names the file itself.
    """
    notes = [note for note in getattr(exc, "__notes__", []) if not note.startswith(OPENING_STORE_NOTE)]
    generic = isinstance(exc, (EngramError, StoreCorruptError)) and bool(notes)
    message = "" if generic else str(exc)
    return "; ".join([message, *notes] if message else notes)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, nearest first."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _cause_hint(exc: BaseException) -> str | None:
    """What the SQLite error behind ``exc`` means for the operator (``None`` without one); never content."""
    for link in _chain(exc):
        if isinstance(link, sqlite3.Error):
            name = getattr(link, "sqlite_errorname", None) or type(link).__name__
            return _SQLITE_HINTS.get("_".join(name.split("_")[:2]), f"sqlite error {name}")
    return None


def _shown(value: str) -> str:
    """``value`` as a message shows an id: as is if plain, else escaped (``repr()``); a long one cut short."""
    cut = value[:_SHOWN_MAX]
    shown = cut if _PLAIN_ID.fullmatch(cut) else repr(cut)
    return shown if len(value) <= _SHOWN_MAX else f"{shown}... ({len(value)} characters)"


def _id_argument(value: str) -> str:
    """An id option's value; one that is not valid UTF-8 (``surrogateescape``d bytes of argv) is a usage error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not valid UTF-8 text") from None
    return value


def _exists(path: str | Path) -> bool:
    """Whether something is at ``path``; exits with a message if it cannot be looked at."""
    try:
        Path(path).stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SystemExit(f"cannot look at {path}: {exc.strerror}") from None
    return True


def _digest_of(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _capture_args(key: str, purpose: str, decision: str, source: str) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "payload": {
            "schema_version": 2,
            "purpose_ref": purpose,
            "valid_time": {"t": 1_767_225_600_000},
            "components": [
                {"component_id": "decision", "kind": "decision", "text": decision, "citation_ids": ["src"]},
            ],
            "primary_component_id": "decision",
            "primary_event": {"at": 1_767_225_600_000, "type_ref": "decision-recorded", "citation_id": "src"},
            "citations": [
                {
                    "citation_id": "src",
                    "source_ref": source,
                    "locator": {"scheme": "line", "value": "1"},
                    "content_digest": _digest_of(decision),
                }
            ],
        },
        "evidence": {"evidence_ref": "review-notes", "evidence_digest": _digest_of(source), "citation_ids": ["src"]},
    }


def _show(say: Say, label: str, envelope: dict[str, Any]) -> None:
    if envelope["ok"]:
        value = envelope["output"]["value"]
        brief = (
            value.get("status") or value.get("outcome", {}).get("status") or value.get("receipt", {}).get("to_state")
        )
        if "records" in value:
            brief = f"{len(value['records'])} record(s)"
        say(f"  {label}: ok ({brief})")
    else:
        error = envelope["error"]
        say(f"  {label}: {error['code']} (retriable={str(error['retriable']).lower()})")


def _confirmed(
    *, service: MemoryService, clock: ManualClock, binding: HostBinding, tool: str, args: dict[str, Any]
) -> HostBinding:
    now = clock.now()
    confirmation = service.confirmation(
        tool,
        args,
        binding,
        confirmation_id=f"approval-{args['idempotency_key']}",
        requested_at=now - timedelta(seconds=20),
        approved_at=now - timedelta(seconds=5),
    )
    return attrs.evolve(binding, confirmation=confirmation)


_TEMPORARY = "a temporary database, deleted at the end"
"""Where ``demo`` without ``--db`` says it runs: it names no file, since none is left to inspect."""


def run_demo(db: Path, say: Say, *, where: str | None = None) -> int:
    """Run the narrated end-to-end scenario on ``db``; return 0, or 1 if a journal does not verify.

    The first line says the demo runs on ``where`` (by default the file's name).
    """
    clock = ManualClock()
    service = connect(_sqlite_url(db), policy=DefaultPolicy(admission="accept"), clock=clock)
    try:
        return _narrate(service, clock, where if where is not None else db.name, say)
    finally:
        service.close()


def _narrate(service: MemoryService, clock: ManualClock, where: str, say: Say) -> int:
    admin = MemoryAdmin(service)
    acme = HostBinding(
        tenant_id="acme",
        workspace_id="platform",
        principal="alice",
        agent_id="agent-1",
        session="s1",
        purpose_ref="engineering-decisions",
        tools=ALL_TOOLS,
    )
    globex = attrs.evolve(acme, tenant_id="globex", principal="bob")
    say(f"engram-memory demo on {where} (two tenants: acme, globex)")
    say("1. capture cited material: it becomes an encrypted pending candidate")
    capture = _capture_args(
        "demo-capture-0001",
        "engineering-decisions",
        "Use blue-green deployments for the billing service.",
        "adr/0042-deployments.md",
    )
    first = service.call_tool("engram_memory_capture", capture, acme)
    _show(say, "capture", first)
    candidate_id = first["output"]["value"]["candidate_id"]
    search = {"query": "blue-green billing deployments", "purpose_ref": "engineering-decisions"}
    _show(say, "search before admission", service.call_tool("engram_memory_search", search, acme))
    say("2. a retry with the same key replays; the same key with other content conflicts")
    _show(say, "capture retry", service.call_tool("engram_memory_capture", capture, acme))
    other = _capture_args("demo-capture-0001", "engineering-decisions", "Something else entirely.", "adr/0001.md")
    _show(say, "capture, same key, other content", service.call_tool("engram_memory_capture", other, acme))
    say("3. the host's policy admits the candidate; only now is it searchable")
    admission = {"candidate_id": candidate_id, "idempotency_key": "demo-admission-0001"}
    admitted = service.call_tool("engram_memory_request_admission", admission, acme)
    _show(say, "request_admission", admitted)
    record_id = admitted["output"]["value"]["outcome"]["record_id"]
    found = service.call_tool("engram_memory_search", search, acme)
    _show(say, "search (acme)", found)
    _show(say, "search (globex, another tenant)", service.call_tool("engram_memory_search", search, globex))
    get = {"record_id": record_id, "purpose_ref": "engineering-decisions"}
    _show(say, "get (globex asks for acme's record)", service.call_tool("engram_memory_get", get, globex))
    say("4. withdraw and forget need a human confirmation bound to the exact operation")
    draft = _capture_args("demo-capture-0002", "engineering-decisions", "Draft: freeze Fridays.", "chat/2026-01-01")
    pending = service.call_tool("engram_memory_capture", draft, acme)["output"]["value"]["candidate_id"]
    withdraw = {"candidate_id": pending, "idempotency_key": "demo-withdraw-0001", "reason_ref": "superseded"}
    try:
        service.call_tool("engram_memory_withdraw", withdraw, acme)
    except ProtocolError as exc:
        say(f"  withdraw without confirmation: JSON-RPC {int(exc.code)} ({exc.message})")
    confirmed = _confirmed(service=service, clock=clock, binding=acme, tool="engram_memory_withdraw", args=withdraw)
    _show(say, "withdraw (confirmed)", service.call_tool("engram_memory_withdraw", withdraw, confirmed))
    forget = {"record_id": record_id, "idempotency_key": "demo-forget-0001", "reason_ref": "owner-request"}
    confirmed = _confirmed(service=service, clock=clock, binding=acme, tool="engram_memory_forget", args=forget)
    _show(say, "forget (confirmed)", service.call_tool("engram_memory_forget", forget, confirmed))
    _show(say, "search after forget", service.call_tool("engram_memory_search", search, acme))
    say("5. forgotten content re-captured is held for a human (forgotten-content guard)")
    again = _capture_args(
        "demo-capture-0003",
        "engineering-decisions",
        "Use blue-green deployments for the billing service.",
        "adr/0042-deployments.md",
    )
    recaptured = service.call_tool("engram_memory_capture", again, acme)["output"]["value"]["candidate_id"]
    guard = {"candidate_id": recaptured, "idempotency_key": "demo-admission-0003"}
    _show(say, "request_admission", service.call_tool("engram_memory_request_admission", guard, acme))
    say("6. the journal verifies")
    status = 0
    for tenant in ("acme", "globex"):
        report = admin.verify(tenant_id=tenant, workspace_id="platform")
        say(f"  verify {tenant}: {'ok' if report.ok else report.code} (journal height {report.high_water})")
        status = status if report.ok else 1
    return status


def _cmd_demo(options: argparse.Namespace) -> int:
    if options.db is None:
        try:
            folder = tempfile.TemporaryDirectory()
        except OSError as exc:
            raise SystemExit(f"demo cannot create a temporary directory: {exc.strerror}") from None
        with folder:
            return _demo_on(Path(folder.name) / "demo.db", where=_TEMPORARY)
    db = Path(options.db)
    _sqlite_url(db)
    if any(_exists(f"{db}{suffix}") for suffix in ("", ".vault", ".key")):
        raise SystemExit(_NOT_NEW.format(db=db))
    if not _exists(db.parent):
        raise SystemExit(f"cannot create {db}: its directory does not exist")
    created = _claim(db)
    try:
        return _demo_on(db)
    except BaseException:
        for path in created:  # the run's own files only: a rerun must not find a half-made database
            with contextlib.suppress(OSError):
                path.unlink()
        raise


_NOT_NEW: Final = "demo needs a new database file; {db} (or its vault or key) already exists"


def _claim(db: Path) -> list[Path]:
    """Create ``db`` empty (mode 0600) if nothing is there; return the files this run may create.

    The creation is exclusive (``O_EXCL``), so of two demos started on one new path only one
    runs; the other exits with the refusal of an existing file. A symbolic link is followed, as
    SQLite follows it. The files listed are the database and those of its companions that do not
    exist yet: a failed demo removes them, and only them.
    """
    real = Path(os.path.realpath(db))
    try:
        os.close(os.open(real, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        raise SystemExit(_NOT_NEW.format(db=db)) from None
    except OSError as exc:
        raise SystemExit(f"cannot create {db}: {exc.strerror}") from None
    return [real, *(Path(f"{db}{suffix}") for suffix in _DEMO_FILES[1:] if not _exists(f"{db}{suffix}"))]


def _demo_on(db: Path, *, where: str | None = None) -> int:
    try:
        return run_demo(db, _say, where=where)
    except (EngramError, PortError) as exc:
        raise SystemExit(f"demo failed on {db}: {_reason(exc)}") from None


def _sqlite_url(db: str | Path) -> str:
    """The ``sqlite:///`` URL of the file ``db``; exits if the path cannot be written as one."""
    if _URL_UNSAFE.intersection(str(db)):
        raise SystemExit(f"cannot use {db}: a database path must not contain '?', '#' or '%'")
    return f"sqlite:///{db}"


def _require_current_schema(path: str, what: str, application_id: int, current: int, *, writer: bool) -> None:
    """Exit unless ``path`` is an engram-memory ``what`` file at schema ``current``; read its marks only.

    The connection is the one the store and the vault open read-only (see ``read_only_uri``): it
    creates no ``-wal`` or ``-shm`` file and writes nothing. A ``writer`` (a command that opens
    the files read-write next) is not refused for a ``-wal`` without its ``-shm``: it reads the
    marks through a read-write connection, as its own open will.
    """
    try:
        found_id, version = _marks_of(path, writer=writer)
    except sqlite3.OperationalError as exc:  # cannot open: permissions, a -shm it cannot read, a lock
        hint = _cause_hint(exc)
        if writer or hint == _SQLITE_HINTS["SQLITE_BUSY"]:
            raise SystemExit(f"cannot open {path}: {exc}; {hint}") from None
        raise SystemExit(f"cannot open {path} read-only: {exc}; {_AS_OWNER}") from None
    except sqlite3.Error as exc:
        raise SystemExit(f"cannot open {path}: {exc}") from None
    except PortError as exc:
        raise SystemExit(f"cannot open {path} read-only: {exc}") from None
    if version < 0:  # no library writes one: a damaged header
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is impossible: the file is damaged "
            f"or not an engram-memory {what}"
        )
    if found_id != application_id or version == 0:
        raise SystemExit(f"cannot open {path}: not an engram-memory {what}")
    if version < current:
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is outdated (current: {current}); "
            "this command never modifies the file, and opening it with the library (connect()) migrates it"
        )
    if version > current:
        raise SystemExit(
            f"cannot open {path}: {what} schema version {version} is newer than this engram-memory "
            f"supports ({current}); upgrade engram-memory"
        )


def _marks_of(path: str, *, writer: bool) -> tuple[int, int]:
    """``path``'s application id and schema version (``sqlite3.Error`` or ``PortError`` if unreadable)."""
    try:
        conn = sqlite3.connect(read_only_uri(path, settle_seconds=0) if writer else read_only_uri(path), uri=True)
    except LogWithoutIndexError:
        if not writer:
            raise
        conn = sqlite3.connect(path, timeout=5.0)  # creates the -shm, as the command's own open will
    try:
        found_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    return found_id, version


def _mark(path: str) -> tuple[bool, FileMark]:
    """Whether ``path`` has a write-ahead log, and what identifies its content (see ``file_mark``)."""
    try:
        return _exists(f"{path}-wal"), file_mark(path)
    except OSError as exc:
        raise SystemExit(f"cannot look at {path}: {exc.strerror}") from None


def _changed(path: str, before: tuple[bool, FileMark]) -> bool:
    """Whether a read of ``path`` may have raced a writer.

    A file that had a ``-wal`` before and after was read through it under SQLite's reader locks,
    which keep a writer's checkpoint from changing what a reader sees. Otherwise it was (or may
    have been) read ``immutable``, without locks: correct only if nothing changed the file.
    """
    had_wal, mark = before
    try:
        has_wal, now = _mark(path)
    except SystemExit:
        return True
    return not (had_wal and has_wal) and now != mark


def _key_file_of(options: argparse.Namespace) -> str:
    """The master key file a command reads: ``--key-file``, by default ``<db>.key`` beside the database."""
    key_file: str | None = options.key_file
    return key_file if key_file is not None else f"{options.db}.key"


def _require_existing(db: str, key_file: str, *, writer: bool = False) -> tuple[str, str]:
    """Exit unless ``db``, its vault and ``key_file`` exist and both databases are at the current schema.

    Reads only; returns the paths of the store and the vault. A command that works on an existing
    database must never create or migrate one. ``writer``: the command opens the files read-write
    next (see ``_require_current_schema``).
    """
    for path, what in ((db, "database"), (f"{db}.vault", "key vault"), (key_file, "master key file")):
        if not _exists(path):
            raise SystemExit(f"no {what} at {path}")
    _sqlite_url(db)
    _require_current_schema(db, "store", STORE_APPLICATION_ID, STORE_SCHEMA.latest, writer=writer)
    vault = f"{db}.vault"
    _require_current_schema(vault, VAULT_SCHEMA.kind, VAULT_SCHEMA.application_id, VAULT_SCHEMA.latest, writer=writer)
    return db, vault


@contextlib.contextmanager
def _inspection(db: str, key_file: str) -> Iterator[MemoryService]:
    """An existing database opened read-only with its vault and ``key_file``; never created, migrated or written.

    Exits with a message if a file is missing, cannot be read without writing, is at another
    schema version, or changed while it was read (then whatever was read is not trusted).
    """
    marks = {path: _mark(path) for path in _require_existing(db, key_file)}
    failure: str | None = None
    try:
        store = SQLiteStore(db, read_only=True)
    except (EngramError, PortError) as exc:
        raise SystemExit(_cannot_open(db, exc)) from None
    try:
        vault = SQLiteKeyVault(f"{db}.vault", master_key_file=key_file, read_only=True)
    except (EngramError, PortError) as exc:
        store.close()
        raise SystemExit(_cannot_open(db, exc)) from None
    # each file was opened as its -wal was then; a -wal both before and after means it was read through it
    marks = {path: (had_wal and _exists(f"{path}-wal"), mark) for path, (had_wal, mark) in marks.items()}
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=SystemClock())
    try:
        yield service
    except (EngramError, PortError) as exc:
        failure = _reason(exc)
    except UnicodeDecodeError:  # a text column of a damaged page: the store's reads pass it through
        failure = _UNDECODABLE
    finally:
        service.close(destroy_doomed_keys=False)  # closes the read-only connections: writes nothing
    if any(_changed(path, mark) for path, mark in marks.items()):
        raise SystemExit(f"{db} changed while it was read (a process wrote it); run the command again")
    if failure is not None:
        raise SystemExit(f"cannot read {db}: {failure}")


_UNDECODABLE: Final = "a text value is not valid UTF-8: the file is damaged"


def _cannot_open(db: str, exc: EngramError | PortError) -> str:
    if isinstance(exc, LogWithoutIndexError):  # the message says what to do
        return f"cannot open {db} read-only: {_reason(exc)}"
    if isinstance(exc, StoreUnavailableError):  # cannot open, or cannot read without writing
        return f"cannot open {db} read-only: {_reason(exc)}; {_AS_OWNER}"
    return f"cannot open {db}: {_reason(exc)}"


def _no_scope(db: str, lines: list[str]) -> None:
    """Say on standard error that ``db`` has no scope, when ``lines`` (one per scope) is empty.

    Standard output keeps one line per scope (none here); the note tells a person that the command
    ran and found nothing to report, which an empty output alone does not.
    """
    if not lines:
        with contextlib.suppress(OSError):  # a note only: the command's answer is its output and status
            print(f"{db}: no scope has a journal yet", file=sys.stderr, flush=True)


def _file_damage(db: str, service: MemoryService) -> list[str]:
    """One line per file (store, then vault) in which SQLite's ``integrity_check`` finds damage; reads both whole."""
    lines: list[str] = []
    for path, opened in ((db, service.store), (f"{db}.vault", service.vault)):
        if isinstance(opened, (SQLiteStore, SQLiteKeyVault)) and (problems := opened.check_integrity()):
            more = f"; {len(problems) - 1} more problem(s)" if len(problems) > 1 else ""
            lines.append(f"{path}: file damaged (SQLite integrity_check: {problems[0]}{more})")
    return lines


def _cmd_verify(options: argparse.Namespace) -> int:
    lines: list[str] = []
    status = 0
    with _inspection(options.db, _key_file_of(options)) as service:
        damage = _file_damage(options.db, service)  # a damaged file makes any journal verdict meaningless
        admin = MemoryAdmin(service)
        for scope in [] if damage else service.store.scopes():
            report = admin.verify_scope(scope)
            verdict = "ok" if report.ok else f"{report.code} at cursor {report.cursor}"
            lines.append(f"{scope}: {verdict} ({report.high_water})")
            status = status if report.ok else 1
    if damage:
        lines, status = damage, 1
    _no_scope(options.db, lines)
    for line in lines:  # only once the files are known not to have changed meanwhile
        _say(line)
    return status


def _cmd_stats(options: argparse.Namespace) -> int:
    lines: list[str] = []
    with _inspection(options.db, _key_file_of(options)) as service:
        for scope in service.store.scopes():
            with service.store.read(scope) as reader:
                counts: dict[str, int] = {}
                for row in reader.candidates():
                    counts[f"candidate:{row.state}"] = counts.get(f"candidate:{row.state}", 0) + 1
                for record in reader.records():
                    counts[f"record:{record.state}"] = counts.get(f"record:{record.state}", 0) + 1
                summary = ", ".join(f"{key}={value}" for key, value in sorted(counts.items()))
                lines.append(f"{scope}: journal height {reader.high_water()}; {summary}")
    _no_scope(options.db, lines)
    for line in lines:
        _say(line)
    return 0


def _scope_of(options: argparse.Namespace) -> str:
    """The scope key of ``--tenant`` and ``--workspace``; a usage error (status 2) for ids no binding can use."""
    usage_error: Callable[[str], NoReturn] = options.usage_error
    try:
        return MemoryAdmin.scope(tenant_id=options.tenant, workspace_id=options.workspace)
    except ValueError as exc:
        usage_error(f"argument --tenant/--workspace: {exc}")


def _cmd_pending(options: argparse.Namespace) -> int:
    scope = _scope_of(options)
    with _inspection(options.db, _key_file_of(options)) as service:
        listed = MemoryAdmin(service).pending_candidates(tenant_id=options.tenant, workspace_id=options.workspace)
        lines = [json.dumps(attrs.asdict(item), ensure_ascii=False, sort_keys=True) for item in listed]
        journal = scope in service.store.scopes()
    if not journal:  # a note only, as for verify and stats: a typo must not look like "nothing pending"
        with contextlib.suppress(OSError):
            print(
                f"{options.db}: no journal for tenant {options.tenant!r}, workspace {options.workspace!r} "
                "(nothing was ever captured there)",
                file=sys.stderr,
                flush=True,
            )
    for line in lines:  # only once the files are known not to have changed meanwhile
        _say(line)
    return 0


def _cmd_adjudicate(options: argparse.Namespace) -> int:
    scope = _scope_of(options)
    if options.readmit_forgotten and options.decision != "accept":
        usage_error: Callable[[str], NoReturn] = options.usage_error
        usage_error("argument --readmit-forgotten: only with --decision accept")
    _require_existing(options.db, _key_file_of(options), writer=True)
    service = _connected(options)
    try:
        line = _adjudicate(service, scope, options)
    except UnicodeDecodeError:  # a text column of a damaged page: the store's reads pass it through
        raise SystemExit(f"adjudicate {_shown(options.candidate)}: {_UNDECODABLE}") from None
    finally:
        service.close()
    _say(line)
    return 0


def _adjudicate(service: MemoryService, scope: str, options: argparse.Namespace) -> str:
    """The line ``adjudicate`` prints once its decision took effect; exits 1 with the reason otherwise."""
    admin = MemoryAdmin(service)
    where = {"tenant_id": options.tenant, "workspace_id": options.workspace}
    failed = f"adjudicate {_shown(options.candidate)}"
    try:
        # only for the closing line: the library itself refuses forgotten content without the flag
        waiting = (
            admin.pending_candidate(**where, candidate_id=options.candidate) if options.readmit_forgotten else None
        )
        result = admin.adjudicate(
            **where,
            candidate_id=options.candidate,
            decision=options.decision,
            readmit_forgotten=options.readmit_forgotten,
        )
    except EngramError as exc:
        if exc.code is ErrorCode.ALREADY_TERMINAL:
            raise SystemExit(f"{failed}: {_terminal(service, scope, options)}") from None
        if exc.code is ErrorCode.GATE_FAILED:
            raise SystemExit(
                f"{failed}: its content was forgotten in this scope, and accepting it re-admits erased "
                "content: pass --readmit-forgotten to do so (nothing was decided)"
            ) from None
        hint = _cause_hint(exc)
        detail = exc.public_message + (f": {hint}" if hint else "")
        raise SystemExit(f"{failed}: {exc.code.value} ({detail})") from None
    except (PortError, ValueError) as exc:
        raise SystemExit(f"{failed}: {_reason(exc)}") from None
    outcome = result.outcome
    if outcome.status == "duplicate_exact":  # admitted before: this decision changed nothing
        instead = (
            "nothing to accept"
            if options.decision == "accept"
            else "a reject does not undo an admission: forget the record instead "
            "(engram_memory_forget, with a host confirmation)"
        )
        raise SystemExit(f"{failed}: already admitted as {outcome.record_id}; {instead}")
    line = f"{outcome.candidate_id}: {outcome.status}" + (f" as {outcome.record_id}" if outcome.record_id else "")
    readmits = waiting is not None and waiting.forgotten
    return line + (" (re-admitted content that was forgotten in this scope)" if readmits else "")


def _terminal(service: MemoryService, scope: str, options: argparse.Namespace) -> str:
    """Why an ``ALREADY_TERMINAL`` candidate cannot be decided, and what to do instead."""
    try:
        with service.store.read(scope) as reader:
            row = reader.candidate(options.candidate)
    except PortError:
        row = None
    state = "rejected or withdrawn" if row is None else row.state
    instead = (
        "its content was destroyed: to have it admitted, it must be captured again"
        if options.decision == "accept"
        else "nothing to reject"
    )
    return f"ALREADY_TERMINAL (already {state}; {instead})"


def _master_key(db: str, key_file: str | None) -> bytes | None:
    """The 32 bytes of ``--key-file`` for ``connect(master_key=...)``; ``None`` without it (``<db>.key`` is used).

    Read as the key vault reads its own key file (length checked, a warning for loose modes);
    exits with one line if the file is missing, unreadable or not 32 bytes. Creates nothing.
    """
    if key_file is None:
        return None
    try:
        key = _read_key_file(Path(key_file))
    except MasterKeyError as exc:
        raise SystemExit(f"cannot open {db}: {exc}; reading the key file {key_file!r}") from None
    if key is None:
        raise SystemExit(f"no master key file at {key_file}")
    return key


def _connected(options: argparse.Namespace, policy: Policy | None = None) -> MemoryService:
    """``connect()`` on ``--db`` under the master key of ``--key-file`` (default ``<db>.key``); exits on failure.

    A failure is one line naming the database, and the key file as ``connect()`` names its default one.
    """
    key_file: str | None = options.key_file
    master_key = _master_key(options.db, key_file)
    try:
        return connect(_sqlite_url(options.db), policy=policy, master_key=master_key)
    except (EngramError, PortError) as exc:
        reason = _reason(exc)
        if key_file is not None:  # connect() names the vault only, since it was given bytes
            note = f"opening the SQLite key vault {f'{options.db}.vault'!r}"
            reason = reason.replace(note, f"{note} with the key file {key_file!r}")
        raise SystemExit(f"cannot open {options.db}: {reason}") from None


def _cmd_serve_mcp(options: argparse.Namespace) -> int:
    try:
        import anyio  # noqa: PLC0415 - optional extra

        from engram_memory.adapters.mcp import serve_stdio  # noqa: PLC0415 - optional extra
    except ImportError:
        raise SystemExit(f"serve-mcp needs {MCP_EXTRA}") from None
    policy = DefaultPolicy(admission=options.admission)
    _sqlite_url(options.db)
    if not _exists(Path(options.db).parent):
        raise SystemExit(f"cannot open {options.db}: its directory does not exist")
    service = _connected(options, policy=policy)
    binding = HostBinding(
        tenant_id=options.tenant,
        workspace_id=options.workspace,
        principal=options.principal,
        agent_id=options.agent,
        session="stdio",
        purpose_ref=options.purpose,
        tools=STDIO_TOOLS,  # withdraw and forget need a confirmation a fixed binding cannot carry
    )
    try:
        service.list_tools(binding)  # the binding's own check: every request would fail it
    except ProtocolError:
        service.close()
        raise SystemExit(
            "serve-mcp needs a non-empty --tenant, --workspace, --principal, --agent and --purpose, "
            "each valid UTF-8 text in Unicode NFC"
        ) from None
    try:
        anyio.run(serve_stdio, service, binding)
    finally:
        service.close()
    return 0


def _scope_arguments(command: argparse.ArgumentParser, *, db: str) -> None:
    """``--db`` (described by ``db``), ``--tenant`` and ``--workspace``: the file and the scope a command works on."""
    command.add_argument("--db", required=True, help=db)
    command.add_argument("--tenant", required=True, type=_id_argument, help="tenant id of the scope")
    command.add_argument("--workspace", required=True, type=_id_argument, help="workspace id of the scope")
    command.set_defaults(usage_error=command.error)


def _file_argument(value: str) -> str:
    """A file path option's value; an empty one names no file (a usage error)."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path names no file")
    return value


def _key_file_argument(command: argparse.ArgumentParser, *, default: str = "DB.key beside the database") -> None:
    """``--key-file``: the file holding the master key of the database's key vault (read, never written)."""
    command.add_argument(
        "--key-file",
        metavar="PATH",
        type=_file_argument,
        help="the file holding the key vault's 32-byte master key; it must exist and is only read "
        f"(default: {default})",
    )


_KEY_FILE: Final = (
    " The key vault DB.vault opens under the master key in DB.key beside the database, or in --key-file PATH "
    "for a key kept elsewhere; the key file is never written, and a missing one or a wrong key exits 1."
)
"""What a command on an existing database says about its master key."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram-memory", description="Governed long-term memory for AI agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a narrated end-to-end scenario on an embedded SQLite file",
        description=(
            "Run a narrated end-to-end scenario on a new embedded SQLite file: two tenants, a capture with "
            "citations, admission, search with receipts, a replayed retry, a DIGEST_CONFLICT, withdraw and "
            "forget behind the confirmation gate, the forgotten-content guard, and journal verification."
        ),
    )
    demo.add_argument("--db", help="a new database file to run on and keep (default: a temporary file, deleted)")
    demo.set_defaults(run=_cmd_demo)
    verify = commands.add_parser(
        "verify",
        help="re-derive every scope's journal chain and state",
        description=(
            "Re-derive every scope's journal hash chain and folded state and compare them with the stored "
            "state and sealed bodies, after SQLite's integrity_check of the database and key vault files (a "
            "damaged file gets one line and exit status 1 instead; the check reads both files whole). Prints "
            "one line per scope; exits 1 if any scope fails, naming "
            "the code (JOURNAL_CORRUPT, CURSOR_GAP, BLOB_MISSING) and the first bad cursor. On a database "
            "with no scope yet it says so on standard error and exits 0. Never modifies the "
            "files: a database or key vault at another schema version is refused, not migrated." + _KEY_FILE
        ),
    )
    verify.add_argument("--db", required=True, help="the SQLite database file")
    _key_file_argument(verify)
    verify.set_defaults(run=_cmd_verify)
    stats = commands.add_parser(
        "stats",
        help="counts per scope and state, and journal height",
        description=(
            "Print, for every scope of an existing database, its journal height and how many candidates and "
            "records are in each lifecycle state (on a database with no scope yet, it says so on standard error). "
            "Reads only; never prints content. A database or key vault at "
            "another schema version is refused, not migrated." + _KEY_FILE
        ),
    )
    stats.add_argument("--db", required=True, help="the SQLite database file")
    _key_file_argument(stats)
    stats.set_defaults(run=_cmd_stats)
    pending = commands.add_parser(
        "pending",
        help="list one scope's pending candidates, opened for review (JSON lines)",
        description=(
            "Print each pending candidate of one scope as a JSON object on its own line, oldest first: its id, "
            "the payload as it would be admitted, the evidence as captured, the trust and policy it was captured "
            "under, the record digest it would carry, and whether content of the same payload was forgotten in the "
            "scope (forgotten: accepting it re-admits erased content). This is the host's review, and it prints "
            "content: run it where the content may be shown. Reads only, like verify. A scope with no journal "
            "(nothing was ever captured there: a mistyped tenant or workspace?) prints nothing and says so on "
            "standard error; an empty tenant or workspace, or one not in Unicode NFC, is a usage error." + _KEY_FILE
        ),
    )
    _scope_arguments(pending, db="the SQLite database file")
    _key_file_argument(pending)
    pending.set_defaults(run=_cmd_pending)
    adjudicate = commands.add_parser(
        "adjudicate",
        help="accept or reject one pending candidate, as the host",
        description=(
            "Decide one pending candidate as the host (MemoryAdmin.adjudicate): accept admits it as a "
            "searchable record, reject discards it and destroys its key. Works across policy versions, and is "
            "the only way to admit content forgotten in the scope: accepting a candidate whose content was "
            "forgotten (pending shows forgotten: true) is refused unless --readmit-forgotten is given. Prints "
            "the outcome and exits 0 only when the decision took effect; an unknown candidate (NOT_FOUND), one "
            "already rejected or withdrawn (ALREADY_TERMINAL) or already admitted exits 1 and says so." + _KEY_FILE
        ),
    )
    _scope_arguments(adjudicate, db="the SQLite database file")
    _key_file_argument(adjudicate)
    adjudicate.add_argument("--candidate", required=True, type=_id_argument, help="the candidate id (from `pending`)")
    adjudicate.add_argument("--decision", required=True, choices=("accept", "reject"), help="the host's decision")
    adjudicate.add_argument(
        "--readmit-forgotten",
        action="store_true",
        help="with --decision accept: accept even though the content was forgotten in the scope (re-admits it)",
    )
    adjudicate.set_defaults(run=_cmd_adjudicate)
    serve = commands.add_parser(
        "serve-mcp",
        help="serve search, get, capture and request_admission over MCP stdio for one fixed local scope",
        description=(
            "Serve the memory tools over MCP stdio, bound to one tenant, workspace, principal and purpose "
            "(local single-tenant use). withdraw and forget need a host confirmation, which a fixed stdio "
            "binding cannot carry, so they are not served (-32602, like any ungranted tool). The key vault "
            "DB.vault opens under the master key in DB.key, created with a new database, or in --key-file PATH, "
            "which must exist and is never written: a new database's vault is made under that key."
        ),
    )
    _scope_arguments(serve, db="the SQLite database file (created if missing)")
    _key_file_argument(serve, default="DB.key beside the database, created with a new database")
    serve.add_argument("--principal", required=True, type=_id_argument, help="the principal every call runs as")
    serve.add_argument("--purpose", required=True, type=_id_argument, help="the bound purpose_ref")
    serve.add_argument("--agent", default="mcp-agent", type=_id_argument, help="agent id recorded in receipts")
    serve.add_argument(
        "--admission",
        choices=("adjudicate", "accept", "reject"),
        default="adjudicate",
        help="the DefaultPolicy admission decision (default: adjudicate)",
    )
    serve.set_defaults(run=_cmd_serve_mcp)
    return parser


_INTERRUPTED: Final = 130
"""The exit status of a command stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engram-memory`` console script: the command's exit status.

    A usage error exits 2 (argparse), a failure 1 with one line on standard error, and Ctrl-C
    130 with ``interrupted`` on standard error.
    """
    options = _parser().parse_args(argv)
    try:
        status: int = options.run(options)
    except KeyboardInterrupt:  # Ctrl-C: each command has cleaned up on the way out (a demo removed its files)
        with contextlib.suppress(OSError, ValueError):
            print("interrupted", file=sys.stderr, flush=True)
        return _INTERRUPTED
    except _OutputError as exc:
        cause = exc.__cause__
        if isinstance(cause, BrokenPipeError):  # the reader left (`| head`): stop quietly, as Python's docs advise
            _discard_stdout()
            return 1
        reason = cause.strerror if isinstance(cause, OSError) else None
        raise SystemExit(f"engram-memory {options.command}: cannot write its output: {reason}") from None
    return status


def _discard_stdout() -> None:
    """Point the standard output at ``os.devnull``, so that the flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):  # not a real file (captured, redirected in process)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
