"""``engram-memory demo``: the narrated end-to-end scenario, on a temporary or a new database file."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import attrs

from engram_memory.admin import MemoryAdmin
from engram_memory.cli.files import _exists, _sqlite_url
from engram_memory.cli.messages import _reason, _say
from engram_memory.clock import ManualClock
from engram_memory.connect import connect
from engram_memory.context import ALL_TOOLS, HostBinding
from engram_memory.errors import EngramError, PortError, ProtocolError
from engram_memory.policy import DefaultPolicy
from engram_memory.service import MemoryService

Say = Callable[[str], None]

_DEMO_FILES = ("", "-wal", "-shm", ".vault", ".vault-wal", ".vault-shm", ".key")
"""The suffixes of every file a demo on ``--db PATH`` may create (the database itself first)."""


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
