"""The ``engram-memory`` command: a narrated demo and operator commands.

``engram-memory demo [--db PATH]`` walks through the whole governance model on an embedded
SQLite file: a temporary one, deleted at the end, unless ``--db`` names a new file to keep (a demo
that fails removes the files it created). ``pending`` lists one scope's
pending candidates for the host's review (JSON lines, content included), ``adjudicate``
decides one as the host, and ``reap-keys`` destroys the keys the scopes hold doomed (what a
withdraw or forget killed before its key destruction leaves). ``verify --db PATH`` and
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
with ``--key-file KEY`` (``verify``, ``stats``, ``pending``, ``adjudicate``, ``reap-keys``,
``serve-mcp``), in ``KEY``: a key kept apart from the database and its backups. Only ``demo``, and ``serve-mcp``
without ``--key-file`` on a new database, create a key file (``PATH.key``); otherwise a missing
key file is named in one line, and a key that does not open the vault is refused.

Every failure ends in one line on standard error and exit status 1 (argparse's usage errors: 2);
a closed output pipe (``engram-memory demo | head -1``) ends the command quietly with status 1
(``serve-mcp``: status 0, its client has ended the session), and Ctrl-C with ``interrupted`` on
standard error and status 130.

This module holds the argument parser and :func:`main`; the commands live in
:mod:`~engram_memory.cli.demo` (``demo``) and :mod:`~engram_memory.cli.commands` (the others),
how they open a database's files in :mod:`~engram_memory.cli.files`, and what they write and how
failures and ids are shown in :mod:`~engram_memory.cli.messages`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Final, TypeAlias

from engram_memory.adapters._nonblocking import write_now
from engram_memory.cli.commands import STDIO_TOOLS as STDIO_TOOLS
from engram_memory.cli.commands import (
    _cmd_adjudicate,
    _cmd_pending,
    _cmd_reap_keys,
    _cmd_serve_mcp,
    _cmd_stats,
    _cmd_verify,
)
from engram_memory.cli.demo import _cmd_demo
from engram_memory.cli.demo import run_demo as run_demo
from engram_memory.cli.messages import _OutputError, _Terminated

__all__ = ["main"]

_MIN_LIFETIME_SECONDS: Final = 0.001
"""The shortest ``--page-cursor-lifetime`` (the service counts whole milliseconds)."""


def _id_argument(value: str) -> str:
    """An id option's value; one that is not valid UTF-8 (``surrogateescape``d bytes of argv) is a usage error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("not valid UTF-8 text") from None
    return value


def _lifetime_argument(value: str) -> timedelta:
    """A ``--page-cursor-lifetime``: a finite number of seconds, from a millisecond to ``timedelta.max``."""
    try:
        seconds = float(value)
        if math.isfinite(seconds) and seconds >= _MIN_LIFETIME_SECONDS:
            return timedelta(seconds=seconds)
    except (ValueError, OverflowError):  # not a number; beyond timedelta.max
        pass
    raise argparse.ArgumentTypeError("a number of seconds, at least 0.001 and at most timedelta.max")


def _scope_arguments(command: argparse.ArgumentParser, *, db: str) -> None:
    """``--db`` (described by ``db``), ``--tenant`` and ``--workspace``: the file and the scope a command works on."""
    command.add_argument("--db", required=True, type=_file_argument, help=db)
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


_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # noqa: SLF001 - argparse names no public type
"""The subcommands of the parser."""


def _database_command(
    commands: _Commands,
    name: str,
    *,
    summary: str,
    description: str,
    run: Callable[[argparse.Namespace], int],
) -> None:
    """A command on an existing database: ``--db`` and ``--key-file``, its description ending on how the vault opens."""
    command = commands.add_parser(name, help=summary, description=description + _KEY_FILE)
    command.add_argument("--db", required=True, type=_file_argument, help="the SQLite database file")
    _key_file_argument(command)
    command.set_defaults(run=run)


_KEY_FILE: Final = (
    " The key vault DB.vault opens under the master key in DB.key beside the database, or in --key-file PATH "
    "for a key kept elsewhere; the key file is never written, and a missing one or a wrong key exits 1."
)
"""What a command on an existing database says about its master key."""


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per task, each with its own options and description."""
    parser = argparse.ArgumentParser(prog="engram-memory", description="Governed long-term memory for AI agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_demo(commands)
    _add_verify_and_stats(commands)
    _add_pending(commands)
    _add_adjudicate(commands)
    _add_reap_keys(commands)
    _add_serve_mcp(commands)
    return parser


def _add_demo(commands: _Commands) -> None:
    """``demo``: the narrated scenario."""
    demo = commands.add_parser(
        "demo",
        help="run a narrated end-to-end scenario on an embedded SQLite file",
        description=(
            "Run a narrated end-to-end scenario on a new embedded SQLite file: two tenants, a capture with "
            "citations, admission, search with receipts, a replayed retry, a DIGEST_CONFLICT, withdraw and "
            "forget behind the confirmation gate, the forgotten-content guard, and journal verification."
        ),
    )
    demo.add_argument(
        "--db", type=_file_argument, help="a new database file to run on and keep (default: a temporary file, deleted)"
    )
    demo.set_defaults(run=_cmd_demo)


def _add_verify_and_stats(commands: _Commands) -> None:
    """``verify`` and ``stats``: read-only checks of every scope."""
    _database_command(
        commands,
        "verify",
        summary="re-derive every scope's journal chain and state",
        description=(
            "Re-derive every scope's journal hash chain and folded state and compare them with the stored "
            "state and sealed bodies, after SQLite's integrity_check of the database and key vault files (a "
            "damaged file gets one line and exit status 1 instead; the check reads both files whole). Prints "
            "one line per scope; exits 1 if any scope fails, naming "
            "the code (JOURNAL_CORRUPT, CURSOR_GAP, BLOB_MISSING) and the first bad cursor. On a database "
            "with no scope yet it says so on standard error and exits 0. Never modifies the "
            "files: a database or key vault at another schema version is refused, not migrated."
        ),
        run=_cmd_verify,
    )
    _database_command(
        commands,
        "stats",
        summary="counts per scope and state, and journal height",
        description=(
            "Print, for every scope of an existing database, its journal height, how many candidates and "
            "records are in each lifecycle state, and how many keys wait to be destroyed (keys:doomed, when any: "
            "reap-keys destroys them); on a database with no scope yet, it says so on standard error. "
            "Reads only; never prints content. A database or key vault at "
            "another schema version is refused, not migrated."
        ),
        run=_cmd_stats,
    )


def _add_pending(commands: _Commands) -> None:
    """``pending``: one scope's pending candidates, opened for the host's review."""
    pending = commands.add_parser(
        "pending",
        help="list one scope's pending candidates, opened for review (JSON lines)",
        description=(
            "Print each pending candidate of one scope as a JSON object on its own line, oldest first: its id, "
            "the payload as it would be admitted, the evidence as captured, the trust and policy it was captured "
            "under, the record digest it would carry, who captured it (captured_by: principal, agent id and session; "
            "null for a candidate sealed by a pre-release), and whether content of the same payload was forgotten in "
            "the scope (forgotten: accepting it re-admits erased content). This is the host's review, and it prints "
            "content: run it where the content may be shown. Reads only, like verify. A scope with no journal "
            "(nothing was ever captured there: a mistyped tenant or workspace?) prints nothing and says so on "
            "standard error; an empty tenant or workspace, or one not in Unicode NFC, is a usage error." + _KEY_FILE
        ),
    )
    _scope_arguments(pending, db="the SQLite database file")
    _key_file_argument(pending)
    pending.set_defaults(run=_cmd_pending)


def _add_adjudicate(commands: _Commands) -> None:
    """``adjudicate``: the host's decision on one pending candidate."""
    adjudicate = commands.add_parser(
        "adjudicate",
        help="accept or reject one pending candidate, as the host",
        description=(
            "Decide one pending candidate as the host (MemoryAdmin.adjudicate): accept admits it as a "
            "searchable record, reject discards it and destroys its key. Works across policy versions, and is "
            "the only way to admit content forgotten in the scope: accepting a candidate whose content was "
            "forgotten (pending shows forgotten: true) is refused unless --readmit-forgotten is given. Prints "
            "the outcome and exits 0 only when the decision took effect; an unknown candidate (NOT_FOUND), one "
            "already rejected or withdrawn (ALREADY_TERMINAL) or already admitted exits 1 and says so. A decision "
            "whose doomed keys cannot be destroyed before it ends (a busy or read-only store or vault) still "
            "exits 0, with a note on standard error to run reap-keys." + _KEY_FILE
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


def _add_reap_keys(commands: _Commands) -> None:
    """``reap-keys``: destroy the keys left doomed."""
    _database_command(
        commands,
        "reap-keys",
        summary="destroy every scope's doomed keys (after a crash or a vault outage)",
        description=(
            "Destroy the data keys every scope holds doomed (MemoryAdmin.reap_keys): a withdraw or forget "
            "killed between its commit and its key destruction leaves its key doomed, as does a vault outage, "
            "and accepts destroy theirs in batches. stats shows them as keys:doomed. Opens the files "
            "read-write. Prints how many keys it asked the vault to destroy; exits 1 with one line if the vault "
            "failed for some scope (the keys stay doomed), the store could not be read (the keys of the scopes it "
            "could not read stay doomed), or the store could not clear the rows of the keys it destroyed "
            "(read-only or locked): run it again."
        ),
        run=_cmd_reap_keys,
    )


def _add_serve_mcp(commands: _Commands) -> None:
    """``serve-mcp``: the MCP stdio server for one fixed local scope."""
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
    serve.add_argument(
        "--page-cursor-lifetime",
        metavar="SECONDS",
        type=_lifetime_argument,
        help="how long after its first page a search's next_page_cursor may be used; an older one is "
        "STALE_PAGE (default: cursors do not expire)",
    )
    serve.set_defaults(run=_cmd_serve_mcp)


_TERMINATED: Final = 143
"""The exit status of ``serve-mcp`` stopped by SIGTERM (as a service manager stops it): 128 + 15."""
_INTERRUPTED: Final = 130
"""The exit status of a command stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engram-memory`` console script: the command's exit status.

    A usage error exits 2 (argparse), a failure 1 with one line on standard error, Ctrl-C 130
    with ``interrupted`` on standard error, and a ``serve-mcp`` stopped by SIGTERM 143 with
    ``terminated``.
    """
    options = _parser().parse_args(argv)
    try:
        status: int = options.run(options)
    except KeyboardInterrupt:  # Ctrl-C: each command has cleaned up on the way out (a demo removed its files)
        _report_stopped("interrupted")
        return _INTERRUPTED
    except _Terminated:  # SIGTERM to serve-mcp, which closed its service first
        _report_stopped("terminated")
        return _TERMINATED
    except _OutputError as exc:
        cause = exc.__cause__
        if isinstance(cause, BrokenPipeError):  # the reader left (`| head`): stop quietly, as Python's docs advise
            _discard_stdout()
            return 1
        reason = cause.strerror if isinstance(cause, OSError) else None
        raise SystemExit(f"engram-memory {options.command}: cannot write its output: {reason}") from None
    return status


def _report_stopped(word: str) -> None:
    """Write ``word`` on standard error, unless that would block: a stop must not wait on it.

    A full pipe (``serve-mcp 2>&1`` whose client stopped reading) would hold the process in the
    write, and so would a socket from a Node.js client; the line is dropped instead. Standard
    error that is no descriptor (captured in process) is written as usual.
    """
    if sys.stderr is None:  # started with descriptor 2 closed: print would write to stdout
        return
    with contextlib.suppress(OSError, ValueError):
        try:
            fd = sys.stderr.fileno()
        except (OSError, ValueError, AttributeError):  # no descriptor: captured in process
            print(word, file=sys.stderr, flush=True)
            return
        sys.stderr.flush()
        write_now(fd, word.encode() + b"\n")


def _discard_stdout() -> None:
    """Point the standard output at ``os.devnull``, so that the flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):  # not a real file (captured, redirected in process)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
