"""The operator commands on an existing database: ``verify``, ``stats``, ``pending``, ``adjudicate`` and the others.

``verify``, ``stats`` and ``pending`` read through :func:`~engram_memory.cli.files._inspection`
and write nothing; ``adjudicate`` decides one candidate as the host; ``reap-keys`` destroys
every scope's doomed keys; ``serve-mcp`` serves the tools that need no confirmation over MCP
stdio for one fixed scope.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import NoReturn

import attrs

from engram_memory.adapters import MCP_EXTRA
from engram_memory.admin import MemoryAdmin
from engram_memory.cli.files import (
    _UNDECODABLE,
    _connected,
    _exists,
    _inspection,
    _key_file_of,
    _require_existing,
    _sqlite_url,
)
from engram_memory.cli.messages import _cause_hint, _reason, _say, _shown, _Terminated
from engram_memory.connect import connect
from engram_memory.context import ALL_TOOLS, FORGET, WITHDRAW, HostBinding
from engram_memory.errors import EngramError, ErrorCode, PortError, ProtocolError
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.policy import DefaultPolicy
from engram_memory.service import MemoryService
from engram_memory.stores.sqlite import SQLiteStore

STDIO_TOOLS = ALL_TOOLS - {WITHDRAW, FORGET}
"""What ``serve-mcp`` grants: the four tools that need no human confirmation (withdraw and forget
would always answer -32603 without one, and a tool that cannot work must not be listed)."""


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
                if doomed := len(reader.doomed_keys()):
                    counts["keys:doomed"] = doomed
                summary = ", ".join(f"{key}={value}" for key, value in sorted(counts.items()))
                lines.append(f"{scope}: journal height {reader.high_water()}; {summary}")
    _no_scope(options.db, lines)
    for line in lines:
        _say(line)
    return 0


def _cmd_reap_keys(options: argparse.Namespace) -> int:
    _require_existing(options.db, _key_file_of(options), writer=True)
    service = _connected(options)
    try:
        with _library_logs_muted():  # the failure is this command's one line, not the library's tracebacks
            destroyed, left = _reap(service, options.db)
    finally:
        service.close(destroy_doomed_keys=False)  # reaped above; a failure is not repeated on the way out
    if left:
        raise SystemExit(
            f"reap-keys: {destroyed} doomed key(s) destroyed, but {left} still listed as doomed: the store "
            "could not clear their rows (read-only or locked); run it again once it is writable"
        )
    _say(f"{destroyed} doomed key(s) destroyed")
    return 0


def _reap(service: MemoryService, db: str) -> tuple[int, int]:
    """``MemoryAdmin.reap_keys()``; how many it destroyed, and how many of the keys doomed before it still are.

    Keys doomed meanwhile (a running service's accepts) are not counted as left. Exits 1 with one
    line on failure.
    """
    failed = "reap-keys"
    try:
        before = {scope: set(_doomed(service, scope)) for scope in service.store.scopes()}
        try:
            destroyed = MemoryAdmin(service).reap_keys()
        except EngramError as exc:
            if exc.code is not ErrorCode.STORE_UNAVAILABLE:
                raise
            if isinstance(exc.__cause__, PortError):  # the store could not be read: the vault was not asked
                raise SystemExit(f"{failed}: {_reason(exc.__cause__)}") from None
            hint = _cause_hint(exc)
            raise SystemExit(
                f"{failed}: the key vault {db}.vault did not destroy every doomed key (they stay doomed): "
                + (hint or "run the command again")
            ) from None
        left = sum(len(doomed & set(_doomed(service, scope))) for scope, doomed in before.items())
    except EngramError as exc:
        hint = _cause_hint(exc)
        detail = exc.public_message + (f": {hint}" if hint else "")
        raise SystemExit(f"{failed}: {exc.code.value} ({detail})") from None
    except UnicodeDecodeError:  # a text column of a damaged page: the store's reads pass it through
        raise SystemExit(f"{failed}: {_UNDECODABLE}") from None
    except PortError as exc:
        raise SystemExit(f"{failed}: {_reason(exc)}") from None
    return destroyed, left


def _doomed(service: MemoryService, scope: str) -> list[str]:
    with service.store.read(scope) as reader:
        return reader.doomed_keys()


@contextlib.contextmanager
def _library_logs_muted() -> Iterator[None]:
    """The ``engram_memory`` logger's records dropped meanwhile (the CLI configures no logging)."""
    logger = logging.getLogger("engram_memory")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


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
    line: str | None = None
    with _library_logs_muted():  # a failure is this command's one line (and a note), not the library's tracebacks
        try:
            line = _adjudicate(service, scope, options)
        except UnicodeDecodeError:  # a text column of a damaged page: the store's reads pass it through
            raise SystemExit(f"adjudicate {_shown(options.candidate)}: {_UNDECODABLE}") from None
        finally:
            reaped = _reaped(service)
            service.close(destroy_doomed_keys=False)
            if not reaped and line is None:  # failing: the note comes before the command's last line
                _keys_left_note(options.db)
    _say(line)
    if not reaped:  # a note only: the decision stands; its keys stay doomed for reap-keys
        _keys_left_note(options.db)
    return 0


def _keys_left_note(db: str) -> None:
    with contextlib.suppress(OSError):
        print(
            f"adjudicate: doomed keys could not be destroyed yet (they stay doomed): run engram-memory reap-keys "
            f"--db {db}",
            file=sys.stderr,
            flush=True,
        )


def _reaped(service: MemoryService) -> bool:
    """Whether every doomed key could be destroyed (what ``close`` would do, but told, not logged)."""
    try:
        MemoryAdmin(service).reap_keys()
    except Exception:  # noqa: BLE001 - as close() does: releasing the files comes first, whatever failed
        return False
    return True


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


def _cmd_serve_mcp(options: argparse.Namespace) -> int:
    try:
        import anyio  # noqa: PLC0415 - optional extra

        from engram_memory.adapters.mcp import serve_stdio  # noqa: PLC0415 - optional extra
    except ImportError:
        raise SystemExit(f"serve-mcp needs {MCP_EXTRA}") from None
    if sys.stdin is None or sys.stdout is None:
        raise SystemExit("serve-mcp needs an open standard input and output: they carry the protocol")
    policy = DefaultPolicy(admission=options.admission)
    binding = HostBinding(
        tenant_id=options.tenant,
        workspace_id=options.workspace,
        principal=options.principal,
        agent_id=options.agent,
        session="stdio",
        purpose_ref=options.purpose,
        tools=STDIO_TOOLS,  # withdraw and forget need a confirmation a fixed binding cannot carry
    )
    try:  # the binding's own check, before any file is created: every request would fail it
        with connect("memory:") as probe:
            probe.list_tools(binding)
    except ProtocolError:
        raise SystemExit(
            "serve-mcp needs a non-empty --tenant, --workspace, --principal, --agent and --purpose, "
            "each valid UTF-8 text in Unicode NFC"
        ) from None
    _sqlite_url(options.db)
    if not _exists(Path(options.db).parent):
        raise SystemExit(f"cannot open {options.db}: its directory does not exist")
    service = _connected(options, policy=policy, page_cursor_lifetime=options.page_cursor_lifetime)
    try:
        stopped_by = _run_server(anyio.run, serve_stdio, service, binding)
    finally:
        service.close()  # a SIGTERM too: the accepts' doomed keys are destroyed, the files closed
    if stopped_by == signal.SIGINT:
        raise KeyboardInterrupt  # main() reports it: "interrupted", exit status 130
    if stopped_by == signal.SIGTERM:
        raise _Terminated  # main() reports it: "terminated", exit status 143
    return 0


def _run_server(
    run: Callable[..., signal.Signals | None],
    serve: Callable[[MemoryService, HostBinding], Awaitable[None]],
    service: MemoryService,
    binding: HostBinding,
) -> signal.Signals | None:
    """Serve on the event loop ``run`` starts; what stopped it (``None``: the end of standard input).

    A second Ctrl-C raised inside the server's task group counts as SIGINT; a write the output
    refused (other than a closed pipe, which the adapter takes as the client leaving) is one line.
    """
    try:
        return run(_serve_until_interrupted, serve, service, binding)
    except BaseExceptionGroup as group:
        interrupts, rest = group.split(KeyboardInterrupt)
        if interrupts is None and rest is not None:
            unwritable, others = rest.split(OSError)
            if unwritable is not None and others is None:
                raise SystemExit(f"serve-mcp: cannot write its answers: {_first_strerror(unwritable)}") from None
        if interrupts is None or rest is not None:
            raise
        return signal.SIGINT


async def _serve_until_interrupted(
    serve: Callable[[MemoryService, HostBinding], Awaitable[None]], service: MemoryService, binding: HostBinding
) -> signal.Signals | None:
    """Run ``serve`` until standard input ends (``None``) or SIGINT or SIGTERM stops it (that signal)."""
    import anyio  # noqa: PLC0415 - optional extra

    stopped_by: signal.Signals | None = None
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal stopped_by
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for received in signals:
                    stopped_by = stopped_by or signal.Signals(received)
                    group.cancel_scope.cancel()

        group.start_soon(watch)
        await serve(service, binding)
        group.cancel_scope.cancel()  # standard input ended: stop watching
    return stopped_by


def _first_strerror(group: BaseExceptionGroup[OSError]) -> str:
    """The reason the first ``OSError`` of ``group`` gives (its ``strerror``, else its message)."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return getattr(first, "strerror", None) or str(first)
