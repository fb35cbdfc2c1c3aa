"""The ``engram-memory`` command: a narrated demo and operator commands.

``engram-memory demo [--db PATH]`` walks through the whole governance model on an embedded
SQLite file; ``verify --db PATH`` and ``stats --db PATH`` inspect an existing database and write
nothing to it (they close without destroying the keys an accept left doomed): a store or vault
file at another schema version is refused, not migrated.
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from engram_memory.admin import MemoryAdmin
from engram_memory.clock import ManualClock
from engram_memory.connect import connect
from engram_memory.context import ALL_TOOLS, Confirmation, HostBinding
from engram_memory.errors import EngramError, PortError, ProtocolError
from engram_memory.keyvaults.sqlite import VAULT_SCHEMA
from engram_memory.policy import DefaultPolicy
from engram_memory.service import MemoryService
from engram_memory.stores.sqlite._schema import STORE_APPLICATION_ID, STORE_SCHEMA

__all__ = ["main"]

Say = Callable[[str], None]

_URL_UNSAFE = frozenset("?#%")
STDIO_TOOLS = ALL_TOOLS - {"engram_memory_withdraw", "engram_memory_forget"}
"""What ``serve-mcp`` grants: the four tools that need no human confirmation (withdraw and forget
would always answer -32603 without one, and a tool that cannot work must not be listed)."""
"""Characters a ``sqlite:///`` URL refuses in its path (see :func:`~engram_memory.connect.connect`)."""


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
    *, service: MemoryService, clock: ManualClock, binding: HostBinding, tool: str, args: dict[str, Any], target: str
) -> HostBinding:
    now = clock.now()
    confirmation = Confirmation(
        id=f"approval-{tool}-{target[:16]}",
        tool=tool,
        target=target,
        operation_digest=service.operation_digest(tool, args, binding),
        requested_at=now - timedelta(seconds=20),
        approved_at=now - timedelta(seconds=5),
    )
    return attrs.evolve(binding, confirmation=confirmation)


def run_demo(db: Path, say: Say) -> int:  # noqa: PLR0915 - a linear narrated script
    """Run the narrated end-to-end scenario on ``db``; return 0, or 1 if a journal does not verify."""
    clock = ManualClock()
    service = connect(_sqlite_url(db), policy=DefaultPolicy(admission="accept"), clock=clock)
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
    say(f"engram-memory demo on {db.name} (two tenants: acme, globex)")
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
    confirmed = _confirmed(
        service=service, clock=clock, binding=acme, tool="engram_memory_withdraw", args=withdraw, target=pending
    )
    _show(say, "withdraw (confirmed)", service.call_tool("engram_memory_withdraw", withdraw, confirmed))
    forget = {"record_id": record_id, "idempotency_key": "demo-forget-0001", "reason_ref": "owner-request"}
    confirmed = _confirmed(
        service=service, clock=clock, binding=acme, tool="engram_memory_forget", args=forget, target=record_id
    )
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
    service.close()
    return status


def _cmd_demo(options: argparse.Namespace) -> int:
    if options.db is not None:
        db = Path(options.db)
        if any(Path(f"{db}{suffix}").exists() for suffix in ("", ".vault", ".key")):
            raise SystemExit(f"demo needs a new database file; {db} (or its vault or key) already exists")
        return run_demo(db, print)
    with tempfile.TemporaryDirectory() as folder:
        return run_demo(Path(folder) / "demo.db", print)


def _sqlite_url(db: str | Path) -> str:
    """The ``sqlite:///`` URL of the file ``db``; exits if the path cannot be written as one."""
    if _URL_UNSAFE.intersection(str(db)):
        raise SystemExit(f"cannot use {db}: a database path must not contain '?', '#' or '%'")
    return f"sqlite:///{db}"


def _require_current_schema(path: str, what: str, application_id: int, current: int) -> None:
    """Exit unless ``path`` is an engram-memory ``what`` file at schema ``current``; read it read-only.

    Without a ``-wal`` file the database file holds every commit, and ``immutable`` reads it without
    leaving the empty ``-wal`` and ``-shm`` files a read-only WAL connection creates.
    """
    query = "?mode=ro" if Path(f"{path}-wal").exists() else "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(Path(path).absolute().as_uri() + query, uri=True)
        try:
            found_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
            version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise SystemExit(f"cannot open {path}: {exc}") from None
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


def _open_existing(db: str) -> MemoryService:
    """Open an existing database with its vault and key file; never create or migrate either."""
    for path, what in ((db, "database"), (f"{db}.vault", "key vault"), (f"{db}.key", "master key file")):
        if not Path(path).exists():
            raise SystemExit(f"no {what} at {path}")
    url = _sqlite_url(db)
    _require_current_schema(db, "store", STORE_APPLICATION_ID, STORE_SCHEMA.latest)
    _require_current_schema(f"{db}.vault", VAULT_SCHEMA.kind, VAULT_SCHEMA.application_id, VAULT_SCHEMA.latest)
    try:
        return connect(url)
    except (EngramError, PortError) as exc:
        raise SystemExit(f"cannot open {db}: {exc}") from None


def _cmd_verify(options: argparse.Namespace) -> int:
    service = _open_existing(options.db)
    admin = MemoryAdmin(service)
    status = 0
    for scope in service.store.scopes():
        report = admin.verify_scope(scope)
        print(f"{scope}: {'ok' if report.ok else f'{report.code} at cursor {report.cursor}'} ({report.high_water})")
        status = status if report.ok else 1
    service.close(destroy_doomed_keys=False)  # inspection writes nothing
    return status


def _cmd_stats(options: argparse.Namespace) -> int:
    service = _open_existing(options.db)
    for scope in service.store.scopes():
        with service.store.read(scope) as reader:
            counts: dict[str, int] = {}
            for row in reader.candidates():
                counts[f"candidate:{row.state}"] = counts.get(f"candidate:{row.state}", 0) + 1
            for record in reader.records():
                counts[f"record:{record.state}"] = counts.get(f"record:{record.state}", 0) + 1
            summary = ", ".join(f"{key}={value}" for key, value in sorted(counts.items()))
            print(f"{scope}: journal height {reader.high_water()}; {summary}")
    service.close(destroy_doomed_keys=False)
    return 0


def _cmd_serve_mcp(options: argparse.Namespace) -> int:
    try:
        import anyio  # noqa: PLC0415 - optional extra

        from engram_memory.adapters.mcp import serve_stdio  # noqa: PLC0415 - optional extra
    except ImportError:
        raise SystemExit("serve-mcp needs the MCP extra: pip install 'engram-memory-core[mcp]'") from None
    policy = DefaultPolicy(admission=options.admission)
    service = connect(_sqlite_url(options.db), policy=policy)
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
        anyio.run(serve_stdio, service, binding)
    finally:
        service.close()
    return 0


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
    demo.add_argument("--db", help="database file to use (default: a temporary file)")
    demo.set_defaults(run=_cmd_demo)
    verify = commands.add_parser(
        "verify",
        help="re-derive every scope's journal chain and state",
        description=(
            "Re-derive every scope's journal hash chain and folded state and compare them with the stored "
            "state and sealed bodies. Prints one line per scope; exits 1 if any scope fails, naming "
            "the code (JOURNAL_CORRUPT, CURSOR_GAP, BLOB_MISSING) and the first bad cursor. Never modifies the "
            "files: a database or key vault at another schema version is refused, not migrated."
        ),
    )
    verify.add_argument("--db", required=True, help="the SQLite database file")
    verify.set_defaults(run=_cmd_verify)
    stats = commands.add_parser(
        "stats",
        help="counts per scope and state, and journal height",
        description=(
            "Print, for every scope of an existing database, its journal height and how many candidates and "
            "records are in each lifecycle state. Reads only; never prints content. A database or key vault at "
            "another schema version is refused, not migrated."
        ),
    )
    stats.add_argument("--db", required=True, help="the SQLite database file")
    stats.set_defaults(run=_cmd_stats)
    serve = commands.add_parser(
        "serve-mcp",
        help="serve search, get, capture and request_admission over MCP stdio for one fixed local scope",
        description=(
            "Serve the memory tools over MCP stdio, bound to one tenant, workspace, principal and purpose "
            "(local single-tenant use). withdraw and forget need a host confirmation, which a fixed stdio "
            "binding cannot carry, so they are not served (-32602, like any ungranted tool)."
        ),
    )
    serve.add_argument("--db", required=True, help="the SQLite database file (created if missing)")
    serve.add_argument("--tenant", required=True, help="tenant id of the bound scope")
    serve.add_argument("--workspace", required=True, help="workspace id of the bound scope")
    serve.add_argument("--principal", required=True, help="the principal every call runs as")
    serve.add_argument("--purpose", required=True, help="the bound purpose_ref")
    serve.add_argument("--agent", default="mcp-agent", help="agent id recorded in receipts")
    serve.add_argument(
        "--admission",
        choices=("adjudicate", "accept", "reject"),
        default="adjudicate",
        help="the DefaultPolicy admission decision (default: adjudicate)",
    )
    serve.set_defaults(run=_cmd_serve_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engram-memory`` console script."""
    options = _parser().parse_args(argv)
    status: int = options.run(options)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
