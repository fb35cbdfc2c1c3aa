"""The ``engram-memory`` command: demo, verify, stats and the help of every subcommand."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.admin import MemoryAdmin
from engram_memory.cli import main
from engram_memory.cli.files import _UNDECODABLE
from engram_memory.connect import connect
from engram_memory.context import HostBinding, scope_key
from engram_memory.errors import EngramError, ErrorCode, StoreUnavailableError
from engram_memory.journal import VerifyReport
from engram_memory.keyvaults.sqlite import VAULT_SCHEMA, SQLiteKeyVault
from engram_memory.policy_guard import GuardedPolicy
from engram_memory.stores import sqlite as sqlite_store_module
from engram_memory.stores.sqlite import _seed_secret
from engram_memory.stores.sqlite._schema import STORE_APPLICATION_ID, STORE_SCHEMA, migrate
from engram_memory.testing import Harness, capture_args, make_binding, make_key, ok
from engram_memory.testing.fakes import CAPTURE

ACME = scope_key("acme", "platform")
"""The scope the demo writes to (its second tenant, globex, never gets a journal event)."""
SUBCOMMANDS = ("demo", "verify", "stats", "pending", "adjudicate", "reap-keys", "serve-mcp")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = main(argv)
    return status, capsys.readouterr().out.splitlines()


def _exit_of(argv: list[str]) -> SystemExit:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def demo_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A database the demo has written (with its ``.vault`` and ``.key`` beside it)."""
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    return db


# --------------------------------------------------------------------------- demo


def test_demo_exits_zero_and_narrates_every_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = _run(["demo", "--db", str(tmp_path / "demo.db")], capsys)
    assert status == 0
    assert lines[0] == "engram-memory demo on demo.db (two tenants: acme, globex)"
    assert [line.split(".")[0] for line in lines if not line.startswith(" ")][1:] == ["1", "2", "3", "4", "5", "6"]
    assert "  verify acme: ok (journal height 6)" in lines
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo.db", "demo.db.key", "demo.db.vault"]


def test_demo_without_db_leaves_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first line says the file is temporary: it names no file that a newcomer would look for."""
    monkeypatch.chdir(tmp_path)
    status, lines = _run(["demo"], capsys)
    assert status == 0
    assert lines[0] == "engram-memory demo on a temporary database, deleted at the end (two tenants: acme, globex)"
    assert list(tmp_path.iterdir()) == []


def test_the_console_module_runs_the_demo(tmp_path: Path) -> None:
    done = _cli("demo", "--db", "demo.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("engram-memory demo on demo.db")
    assert done.stderr == ""


# --------------------------------------------------------------------------- verify and stats


def test_verify_reports_ok_for_every_scope(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = _run(["verify", "--db", str(demo_db)], capsys)
    assert status == 0
    assert lines == [f"{ACME}: ok (6)"]


def test_stats_prints_journal_heights_and_counts(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = _run(["stats", "--db", str(demo_db)], capsys)
    assert status == 0
    counts = "candidate:admitted=1, candidate:pending=1, candidate:withdrawn=1, record:tombstoned=1"
    assert lines == [f"{ACME}: journal height 6; {counts}"]


def _leave_a_doomed_key(db: Path) -> str:
    """Accept one capture in a new scope and close without reaping, as a killed process leaves it; its scope."""
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="accept"))
    binding = make_binding("reap-tenant", "reap-workspace")
    try:
        captured = ok(service.call_tool(CAPTURE, capture_args(make_key("reap-capture")), binding))
        admission = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key("reap-admit")}
        outcome = ok(service.call_tool("engram_memory_request_admission", admission, binding))["outcome"]
        assert outcome["status"] == "accepted"  # its candidate key waits, doomed, for a batch of 16
    finally:
        service.close(destroy_doomed_keys=False)
    return binding.scope


ADMITTED_ONCE = "journal height 2; candidate:admitted=1, record:accepted_current=1"
DOOMED_ONCE = "journal height 2; candidate:admitted=1, keys:doomed=1, record:accepted_current=1"


def test_reap_keys_destroys_the_doomed_keys_stats_shows(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scope = _leave_a_doomed_key(demo_db)
    assert f"{scope}: {DOOMED_ONCE}" in _run(["stats", "--db", str(demo_db)], capsys)[1]
    assert _run(["reap-keys", "--db", str(demo_db)], capsys) == (0, ["1 doomed key(s) destroyed"])
    assert f"{scope}: {ADMITTED_ONCE}" in _run(["stats", "--db", str(demo_db)], capsys)[1]
    assert _run(["reap-keys", "--db", str(demo_db)], capsys) == (0, ["0 doomed key(s) destroyed"])
    assert _run(["verify", "--db", str(demo_db)], capsys)[0] == 0


def test_reap_keys_says_in_one_line_when_the_vault_fails_and_the_keys_stay_doomed(
    demo_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = _leave_a_doomed_key(demo_db)

    def vault_locked(_vault: SQLiteKeyVault, *_key_refs: str) -> None:
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorname = "SQLITE_BUSY"  # as the sqlite3 module sets it
        raise busy

    with monkeypatch.context() as patch:
        patch.setattr(SQLiteKeyVault, "destroy", vault_locked)
        failed = _exit_of(["reap-keys", "--db", str(demo_db)])
    assert failed.code == (
        f"reap-keys: the key vault {demo_db}.vault did not destroy every doomed key (they stay doomed): "
        "another process holds the lock; run the command again"
    )
    assert capsys.readouterr().err == ""  # no log record, no traceback: the line above is the answer
    assert f"{scope}: {DOOMED_ONCE}" in _run(["stats", "--db", str(demo_db)], capsys)[1]


def test_reap_keys_fails_when_the_store_cannot_clear_the_rows_of_the_keys_it_destroyed(
    demo_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = _leave_a_doomed_key(demo_db)

    def locked(*_args: object) -> None:
        raise StoreUnavailableError("database is locked")

    with monkeypatch.context() as patch:
        patch.setattr(sqlite_store_module._Unit, "clear_doomed_key", locked)
        failed = _exit_of(["reap-keys", "--db", str(demo_db)])
    assert failed.code == (
        "reap-keys: 1 doomed key(s) destroyed, but 1 still listed as doomed: the store could not clear their rows "
        "(read-only or locked); run it again once it is writable"
    )
    assert capsys.readouterr().err == ""
    assert f"{scope}: {DOOMED_ONCE}" in _run(["stats", "--db", str(demo_db)], capsys)[1]
    assert _run(["reap-keys", "--db", str(demo_db)], capsys) == (
        0,
        ["1 doomed key(s) destroyed"],
    )  # a no-op in the vault
    assert f"{scope}: {ADMITTED_ONCE}" in _run(["stats", "--db", str(demo_db)], capsys)[1]


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        (EngramError(ErrorCode.JOURNAL_CORRUPT), "reap-keys: JOURNAL_CORRUPT (the journal failed verification)"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"), "reap-keys: " + _UNDECODABLE),
        (StoreUnavailableError("the store file is gone"), "reap-keys: the store file is gone"),
    ],
    ids=["engram-error", "undecodable", "port-error"],
)
def test_reap_keys_answers_a_damaged_or_missing_store_in_one_line(
    demo_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, failure: Exception, line: str
) -> None:
    def failing(_admin: MemoryAdmin) -> int:
        raise failure

    monkeypatch.setattr(MemoryAdmin, "reap_keys", failing)
    assert _exit_of(["reap-keys", "--db", str(demo_db)]).code == line
    assert capsys.readouterr().err == ""


def test_reap_keys_does_not_count_keys_doomed_while_it_ran(
    demo_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running service's accept dooms a key meanwhile: not a row reap-keys failed to clear."""
    _leave_a_doomed_key(demo_db)
    reap = MemoryAdmin.reap_keys

    def reap_then_an_accept_commits(admin: MemoryAdmin) -> int:
        destroyed = reap(admin)
        service = connect(f"sqlite:///{demo_db}", policy=DefaultPolicy(admission="accept"))
        binding = make_binding("reap-tenant", "reap-workspace")
        try:
            captured = ok(service.call_tool(CAPTURE, capture_args(make_key("reap-meanwhile")), binding))
            admission = {"candidate_id": captured["candidate_id"], "idempotency_key": make_key("reap-meanwhile-a")}
            ok(service.call_tool("engram_memory_request_admission", admission, binding))
        finally:
            service.close(destroy_doomed_keys=False)
        return destroyed

    monkeypatch.setattr(MemoryAdmin, "reap_keys", reap_then_an_accept_commits)
    assert _run(["reap-keys", "--db", str(demo_db)], capsys) == (0, ["1 doomed key(s) destroyed"])


def test_verify_and_stats_leave_the_database_unchanged(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _run(["stats", "--db", str(demo_db)], capsys)
    assert _run(["verify", "--db", str(demo_db)], capsys)[0] == 0
    assert _run(["stats", "--db", str(demo_db)], capsys) == before


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_database_without_a_scope_is_said_so_on_stderr_with_status_0(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database nothing was captured into (``serve-mcp`` creates one) is not silently "nothing"."""
    db = tmp_path / "memory.db"
    connect(f"sqlite:///{db}").close()
    assert main([command, "--db", str(db)]) == 0  # nothing is corrupt
    captured = capsys.readouterr()
    assert captured.out == ""  # still one line per scope: none
    assert captured.err == f"{db}: no scope has a journal yet\n"


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_database_with_scopes_has_no_note(command: str, demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--db", str(demo_db)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(ACME)
    assert captured.err == ""


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_missing_database_is_a_clear_failure(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    exit_ = _exit_of([command, "--db", str(missing)])
    assert exit_.code == f"no database at {missing}"
    assert list(tmp_path.iterdir()) == []  # nothing was created


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_missing_database_exits_non_zero_from_the_shell(command: str, tmp_path: Path) -> None:
    done = _cli(command, "--db", "missing.db", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == "no database at missing.db"


def test_verify_reports_a_flipped_byte_of_an_event_body(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = sqlite3.connect(demo_db)
    try:
        with raw:
            (body,) = raw.execute("SELECT body FROM events WHERE cursor = 3").fetchone()
            tampered = bytearray(body)
            tampered[len(tampered) // 2] ^= 0x01
            changed = raw.execute("UPDATE events SET body = ? WHERE cursor = 3", (bytes(tampered),)).rowcount
    finally:
        raw.close()
    assert changed == 1
    status, lines = _run(["verify", "--db", str(demo_db)], capsys)
    assert status == 1
    assert lines == [f"{ACME}: JOURNAL_CORRUPT at cursor 3 (6)"]


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_read_only_commands_never_create_key_material(
    command: str, demo_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "demo.db").write_bytes(demo_db.read_bytes())
    try:
        status: object = main([command, "--db", str(alone / "demo.db")])
    except SystemExit as exit_:
        status = exit_.code
    assert status not in {0, None}  # refused, and nothing created:
    assert sorted(path.name for path in alone.iterdir()) == ["demo.db"]


def test_a_foreign_file_is_a_clear_failure(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_text("not a database\n")
    done = _cli("verify", "--db", "notes.db", cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- pending and adjudicate


@pytest.fixture
def waiting_db(tmp_path: Path) -> tuple[Path, list[str]]:
    """A database whose scope acme/platform holds two candidates waiting for the host (and one decided)."""
    db = tmp_path / "review.db"
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="adjudicate"))
    binding = make_binding("acme", "platform", "alice")
    try:
        ids = [
            service.call_tool(CAPTURE, capture_args(make_key(f"review-{n}")), binding)["output"]["value"][
                "candidate_id"
            ]
            for n in range(3)
        ]
        MemoryAdmin(service).adjudicate(
            tenant_id="acme", workspace_id="platform", candidate_id=ids[2], decision="reject"
        )
    finally:
        service.close()
    return db, ids


def test_pending_prints_each_waiting_candidate_as_json_and_writes_nothing(
    waiting_db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = waiting_db
    before = {path.name: path.read_bytes() for path in db.parent.iterdir()}
    status, lines = _run(["pending", "--db", str(db), "--tenant", "acme", "--workspace", "platform"], capsys)
    assert status == 0
    listed = [json.loads(line) for line in lines]
    assert [item["candidate_id"] for item in listed] == ids[:2]
    assert listed[0]["payload"]["components"] == capture_args(make_key("review-0"))["payload"]["components"]
    assert listed[0]["evidence"] == capture_args(make_key("review-0"))["evidence"]
    assert {path.name: path.read_bytes() for path in db.parent.iterdir()} == before
    status, lines = _run(["pending", "--db", str(db), "--tenant", "acme", "--workspace", "other"], capsys)
    assert (status, lines) == (0, [])


def test_adjudicate_decides_as_the_host_and_refuses_what_it_cannot_decide(
    waiting_db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = waiting_db
    scope = ["--db", str(db), "--tenant", "acme", "--workspace", "platform"]
    status, lines = _run(["adjudicate", *scope, "--candidate", ids[0], "--decision", "accept"], capsys)
    assert status == 0
    assert len(lines) == 1
    assert lines[0].startswith(f"{ids[0]}: accepted as mem_")
    status, lines = _run(["adjudicate", *scope, "--candidate", ids[1], "--decision", "reject"], capsys)
    assert (status, lines) == (0, [f"{ids[1]}: rejected"])
    assert _run(["pending", *scope], capsys) == (0, [])
    refused = _exit_of(["adjudicate", *scope, "--candidate", ids[2], "--decision", "accept"])
    assert refused.code == (
        f"adjudicate {ids[2]}: ALREADY_TERMINAL (already rejected; its content was destroyed: to have it admitted, "
        "it must be captured again)"
    )
    unknown = _exit_of(["adjudicate", *scope, "--candidate", "candidate_nope", "--decision", "accept"])
    assert unknown.code == "adjudicate candidate_nope: NOT_FOUND (memory target not found)"
    missing = _exit_of(
        [
            "adjudicate",
            "--db",
            str(db.parent / "none.db"),
            "--tenant",
            "acme",
            "--workspace",
            "w",
            "--candidate",
            ids[0],
            "--decision",
            "accept",
        ]
    )
    assert missing.code == f"no database at {db.parent / 'none.db'}"
    assert not (db.parent / "none.db").exists()


@pytest.fixture
def forgotten_db(tmp_path: Path) -> tuple[Path, str, str]:
    """A database whose scope acme/platform holds a candidate whose content was forgotten, and an ordinary one.

    Returns the file, the id of the candidate re-capturing forgotten content, and the ordinary candidate's id.
    """
    db = tmp_path / "forgotten.db"
    clock = ManualClock()
    harness = Harness(connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="adjudicate"), clock=clock), clock)
    binding = make_binding("acme", "platform", "alice")
    words = ("zqerasedwordone", "zqerasedwordtwo")
    try:
        first = harness.pending(binding, make_key("erased-first"), words=words)
        accepted = harness.admin.adjudicate(
            tenant_id="acme", workspace_id="platform", candidate_id=first, decision="accept"
        )
        assert accepted.outcome.record_id is not None
        ok(harness.forget(binding, accepted.outcome.record_id, make_key("erased-forget")))
        again = harness.pending(binding, make_key("erased-again"), words=words)
        other = harness.pending(binding, make_key("erased-other"))
    finally:
        harness.service.close()
    return db, again, other


def _pending_ids(db: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, bool]:
    """``candidate_id`` → ``forgotten`` of every candidate ``pending`` lists in acme/platform."""
    status, lines = _run(["pending", "--db", str(db), "--tenant", "acme", "--workspace", "platform"], capsys)
    assert status == 0
    return {item["candidate_id"]: item["forgotten"] for item in map(json.loads, lines)}


def test_accepting_forgotten_content_is_refused_without_readmit_forgotten(
    forgotten_db: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, again, other = forgotten_db
    scope = ["--db", str(db), "--tenant", "acme", "--workspace", "platform"]
    assert _pending_ids(db, capsys) == {again: True, other: False}
    stats = _run(["stats", "--db", str(db)], capsys)
    refused = _exit_of(["adjudicate", *scope, "--candidate", again, "--decision", "accept"])
    assert refused.code == (
        f"adjudicate {again}: its content was forgotten in this scope, and accepting it re-admits erased content: "
        "pass --readmit-forgotten to do so (nothing was decided)"
    )
    assert capsys.readouterr().out == ""
    assert _run(["stats", "--db", str(db)], capsys) == stats  # nothing was written
    assert _pending_ids(db, capsys) == {again: True, other: False}
    status, lines = _run(["adjudicate", *scope, "--candidate", other, "--decision", "accept"], capsys)
    assert status == 0  # content never forgotten needs no flag
    assert lines[0].startswith(f"{other}: accepted as mem_")
    assert not lines[0].endswith(")")
    status, lines = _run(
        ["adjudicate", *scope, "--candidate", again, "--decision", "accept", "--readmit-forgotten"], capsys
    )
    assert status == 0
    assert len(lines) == 1
    assert lines[0].startswith(f"{again}: accepted as mem_")
    assert lines[0].endswith(" (re-admitted content that was forgotten in this scope)")
    assert _pending_ids(db, capsys) == {}


def test_readmit_forgotten_goes_only_with_accept(
    forgotten_db: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, again, _ = forgotten_db
    argv = ["adjudicate", "--db", str(db), "--tenant", "acme", "--workspace", "platform", "--candidate", again]
    assert _exit_of([*argv, "--decision", "reject", "--readmit-forgotten"]).code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: engram-memory adjudicate")
    assert err.endswith("engram-memory adjudicate: error: argument --readmit-forgotten: only with --decision accept\n")
    assert again in _pending_ids(db, capsys)


def test_a_decision_that_takes_no_effect_exits_one_and_says_what_to_do(
    waiting_db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A reject of an admitted candidate, or any decision on one already decided, is not a success."""
    db, ids = waiting_db
    scope = ["--db", str(db), "--tenant", "acme", "--workspace", "platform"]
    status, lines = _run(["adjudicate", *scope, "--candidate", ids[0], "--decision", "accept"], capsys)
    assert status == 0
    record_id = lines[0].rsplit(" ", 1)[1]
    assert record_id.startswith("mem_")
    stats = _run(["stats", "--db", str(db)], capsys)
    refused = _exit_of(["adjudicate", *scope, "--candidate", ids[0], "--decision", "reject"])
    assert refused.code == (
        f"adjudicate {ids[0]}: already admitted as {record_id}; a reject does not undo an admission: forget the "
        "record instead (engram_memory_forget, with a host confirmation)"
    )
    again = _exit_of(["adjudicate", *scope, "--candidate", ids[0], "--decision", "accept"])
    assert again.code == f"adjudicate {ids[0]}: already admitted as {record_id}; nothing to accept"
    rejected = _exit_of(["adjudicate", *scope, "--candidate", ids[2], "--decision", "reject"])
    assert rejected.code == f"adjudicate {ids[2]}: ALREADY_TERMINAL (already rejected; nothing to reject)"
    assert capsys.readouterr().out == ""
    assert _run(["stats", "--db", str(db)], capsys) == stats


def test_pending_on_a_scope_without_a_journal_says_so_on_stderr(
    waiting_db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped tenant must not look like a scope with nothing pending."""
    db, ids = waiting_db
    assert main(["pending", "--db", str(db), "--tenant", "acmee", "--workspace", "platform"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"{db}: no journal for tenant 'acmee', workspace 'platform' (nothing was ever captured there)\n"
    )
    scope = ["--db", str(db), "--tenant", "acme", "--workspace", "platform"]
    for candidate_id in ids[:2]:
        assert _run(["adjudicate", *scope, "--candidate", candidate_id, "--decision", "reject"], capsys)[0] == 0
    assert main(["pending", *scope]) == 0  # a journal with nothing pending: nothing to say
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("command", ["pending", "adjudicate"])
@pytest.mark.parametrize(
    ("tenant", "workspace"),
    [
        pytest.param("", "", id="both-empty"),
        pytest.param("acme", "", id="empty-workspace"),
        pytest.param("e\u0301", "platform", id="nfd-tenant"),
    ],
)
def test_ids_no_binding_could_use_are_a_usage_error(
    command: str, tenant: str, workspace: str, waiting_db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, ids = waiting_db
    argv = [command, "--db", str(db), "--tenant", tenant, "--workspace", workspace]
    if command == "adjudicate":
        argv += ["--candidate", ids[0], "--decision", "accept"]
    stats = _run(["stats", "--db", str(db)], capsys)
    assert _exit_of(argv).code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"usage: engram-memory {command}")
    assert f"engram-memory {command}: error: argument --tenant/--workspace: " in captured.err
    assert captured.err.endswith(" must be non-empty, valid Unicode text in NFC\n")
    assert _run(["stats", "--db", str(db)], capsys) == stats


# --------------------------------------------------------------------------- help


def test_the_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_of(["--help"]).code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: engram-memory")
    for command in SUBCOMMANDS:
        assert command in out
    assert "re-derive every scope's journal chain and state" in out
    assert "counts per scope and state, and journal height" in out


def _description(help_text: str) -> str:
    """The paragraph between argparse's usage block and its option list."""
    paragraphs = help_text.split("\n\n")
    assert paragraphs[0].startswith("usage: engram-memory ")
    return "\n\n".join(p for p in paragraphs[1:] if not p.startswith(("options:", "positional arguments:"))).strip()


@pytest.mark.parametrize(
    ("command", "options"),
    [
        pytest.param("demo", ["--db"]),
        pytest.param("verify", ["--db"]),
        pytest.param("stats", ["--db"]),
        pytest.param("pending", ["--db", "--tenant", "--workspace"]),
        pytest.param(
            "adjudicate", ["--db", "--tenant", "--workspace", "--candidate", "--decision", "--readmit-forgotten"]
        ),
        pytest.param("serve-mcp", ["--db", "--tenant", "--workspace", "--principal", "--purpose", "--admission"]),
    ],
)
def test_the_help_of_each_subcommand_explains_it(
    command: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_of([command, "--help"]).code == 0
    out = capsys.readouterr().out
    for option in options:
        assert option in out
    assert _description(out), f"`engram-memory {command} --help` does not say what the command does"


def test_demo_refuses_an_existing_database(demo_db: Path) -> None:
    before = demo_db.read_bytes()
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--db", str(demo_db)])
    assert "already exists" in str(exit_.value.code)
    assert demo_db.read_bytes() == before


# --------------------------------------------------------------------------- exit status and read-only inspection


def test_demo_exits_one_when_its_verification_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(self: MemoryAdmin, *, tenant_id: str, workspace_id: str) -> VerifyReport:
        return VerifyReport(ok=False, high_water=6, code=ErrorCode.JOURNAL_CORRUPT, cursor=3)

    monkeypatch.setattr(MemoryAdmin, "verify", failing)
    status, lines = _run(["demo", "--db", str(tmp_path / "demo.db")], capsys)
    assert status == 1
    assert lines[-2:] == [
        "  verify acme: JOURNAL_CORRUPT (journal height 6)",
        "  verify globex: JOURNAL_CORRUPT (journal height 6)",
    ]


@pytest.mark.parametrize("name", ["a?b.db", "a#b.db", "50%.db"])
def test_demo_refuses_a_path_a_sqlite_url_cannot_carry(name: str, tmp_path: Path) -> None:
    db = tmp_path / name
    exit_ = _exit_of(["demo", "--db", str(db)])
    assert exit_.code == f"cannot use {db}: a database path must not contain '?', '#' or '%'"
    assert list(tmp_path.iterdir()) == []


def _marks(path: Path) -> tuple[int, int]:
    """``(application_id, user_version)``, read through a read-only connection."""
    conn = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA application_id").fetchone()[0], conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def write_schema_1_store(db: Path) -> None:
    """Write a store at schema version 1 (an older release) at ``db``, in WAL mode."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        migrate(conn, STORE_SCHEMA, target=1, seed=_seed_secret)
    finally:
        conn.close()


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    """A store written at schema version 1 (an older release), with a current vault and key file."""
    db = tmp_path / "old.db"
    write_schema_1_store(db)
    SQLiteKeyVault(f"{db}.vault", master_key_file=f"{db}.key").close()
    return db


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_an_outdated_store_is_refused_and_left_unmigrated(command: str, old_db: Path) -> None:
    before = _files(old_db.parent)
    exit_ = _exit_of([command, "--db", str(old_db)])
    assert exit_.code == (
        f"cannot open {old_db}: store schema version 1 is outdated (current: {STORE_SCHEMA.latest}); "
        "this command never modifies the file, and opening it with the library (connect()) migrates it"
    )
    assert _files(old_db.parent) == before
    assert _marks(old_db) == (STORE_APPLICATION_ID, 1)


def test_an_outdated_store_exits_non_zero_from_the_shell(old_db: Path) -> None:
    before = _files(old_db.parent)
    done = _cli("stats", "--db", old_db.name, cwd=old_db.parent)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "store schema version 1 is outdated" in done.stderr
    assert "Traceback" not in done.stderr
    assert _files(old_db.parent) == before


def _set_user_version(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()


@pytest.mark.parametrize("command", ["verify", "stats"])
@pytest.mark.parametrize(
    ("suffix", "what", "latest"), [("", "store", STORE_SCHEMA.latest), (".vault", "key vault", VAULT_SCHEMA.latest)]
)
def test_a_newer_store_or_vault_is_refused_untouched(
    command: str, suffix: str, what: str, latest: int, demo_db: Path
) -> None:
    newer = Path(f"{demo_db}{suffix}")
    _set_user_version(newer, 99)
    before = _files(demo_db.parent)
    exit_ = _exit_of([command, "--db", str(demo_db)])
    assert exit_.code == (
        f"cannot open {newer}: {what} schema version 99 is newer than this engram-memory supports "
        f"({latest}); upgrade engram-memory"
    )
    assert _files(demo_db.parent) == before
    assert _marks(newer)[1] == 99


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_an_empty_vault_file_is_refused_not_initialised(command: str, demo_db: Path) -> None:
    vault = Path(f"{demo_db}.vault")
    vault.write_bytes(b"")
    before = _files(demo_db.parent)
    exit_ = _exit_of([command, "--db", str(demo_db)])
    assert exit_.code == f"cannot open {vault}: not an engram-memory key vault"
    assert _files(demo_db.parent) == before


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_current_database_is_inspected_without_a_byte_changed(
    command: str, demo_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(demo_db.parent)
    assert main([command, "--db", str(demo_db)]) == 0
    capsys.readouterr()
    assert _files(demo_db.parent) == before
    assert _marks(demo_db) == (STORE_APPLICATION_ID, STORE_SCHEMA.latest)


def _doomed_keys(db: Path) -> int:
    """Doomed keys listed in a closed store (``immutable``: no ``-wal`` or ``-shm`` file is created)."""
    conn = sqlite3.connect(db.absolute().as_uri() + "?mode=ro&immutable=1", uri=True)
    try:
        count: int = conn.execute("SELECT count(*) FROM doomed_keys").fetchone()[0]
    finally:
        conn.close()
    return count


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_keys_an_accept_left_doomed_are_left_to_the_library(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An accept dooms the candidate's key and destroys it later (in a batch, or when the service
    closes); inspecting a database a service left that way writes nothing, not even that destruction."""
    db = tmp_path / "live.db"
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="accept"))
    binding = make_binding()
    candidate_id = service.call_tool(CAPTURE, capture_args(make_key("doomed")), binding)["output"]["value"]
    admission = {"candidate_id": candidate_id["candidate_id"], "idempotency_key": make_key("doomed-admit")}
    outcome = service.call_tool("engram_memory_request_admission", admission, binding)["output"]["value"]
    assert outcome["outcome"]["status"] == "accepted"
    service.close(destroy_doomed_keys=False)  # as a process that stopped before its close
    assert _doomed_keys(db) == 1
    before = _files(tmp_path)
    assert main([command, "--db", str(db)]) == 0
    capsys.readouterr()
    assert _files(tmp_path) == before
    assert _doomed_keys(db) == 1
    connect(f"sqlite:///{db}").close()  # the library's own close destroys it
    assert _doomed_keys(db) == 0


def test_an_outdated_store_in_use_is_refused_and_left_unmigrated(old_db: Path) -> None:
    other = sqlite3.connect(old_db)  # another process has it open: its -wal and -shm exist
    try:
        assert other.execute("PRAGMA user_version").fetchone()[0] == 1
        before = old_db.read_bytes()
        exit_ = _exit_of(["stats", "--db", str(old_db)])
        assert "store schema version 1 is outdated" in str(exit_.code)
        assert old_db.read_bytes() == before
        assert other.execute("PRAGMA user_version").fetchone()[0] == 1
    finally:
        other.close()
    assert _marks(old_db) == (STORE_APPLICATION_ID, 1)


# --------------------------------------------------------------------------- every scope, every version, every file


def _two_scope_db(folder: Path) -> tuple[Path, list[str]]:
    """A database with two scopes holding one capture each; returns it and its scope keys, sorted."""
    db = folder / "two.db"
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="adjudicate"), clock=ManualClock())
    try:
        for workspace in ("one", "two"):
            binding = make_binding("tenant-cli", workspace)
            value = service.call_tool(CAPTURE, capture_args(make_key(f"cli-{workspace}")), binding)
            assert value["ok"] is True, value
        scopes = service.store.scopes()
    finally:
        service.close()
    assert scopes == sorted([scope_key("tenant-cli", "one"), scope_key("tenant-cli", "two")])
    return db, scopes


def test_verify_exits_one_when_an_earlier_scope_fails_and_a_later_one_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, (first, second) = _two_scope_db(tmp_path)
    raw = sqlite3.connect(db)
    try:
        with raw:
            changed = raw.execute(
                "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), '\"capture\"', '\"kapture\"') AS BLOB)"
                " WHERE cursor = 1 AND scope_id = (SELECT scope_id FROM scopes WHERE scope = ?)",
                (first,),
            ).rowcount
    finally:
        raw.close()
    assert changed == 1
    status, lines = _run(["verify", "--db", str(db)], capsys)
    assert lines == [f"{first}: JOURNAL_CORRUPT at cursor 1 (1)", f"{second}: ok (1)"]
    assert status == 1


@pytest.mark.parametrize("suffix", ["", ".vault", ".key"])
def test_demo_refuses_when_any_of_its_three_files_exists(suffix: str, tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    existing = Path(f"{db}{suffix}")
    existing.write_bytes(b"someone else's file")
    exit_ = _exit_of(["demo", "--db", str(db)])
    assert exit_.code == f"demo needs a new database file; {db} (or its vault or key) already exists"
    assert _files(tmp_path) == {existing.name: b"someone else's file"}


def test_a_store_one_version_behind_is_refused_and_left_unmigrated(tmp_path: Path) -> None:
    db = tmp_path / "behind.db"
    behind = STORE_SCHEMA.latest - 1
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        assert migrate(conn, STORE_SCHEMA, target=behind, seed=_seed_secret) == behind
    finally:
        conn.close()
    SQLiteKeyVault(f"{db}.vault", master_key_file=f"{db}.key").close()
    before = _files(tmp_path)
    exit_ = _exit_of(["verify", "--db", str(db)])
    assert exit_.code == (
        f"cannot open {db}: store schema version {behind} is outdated (current: {STORE_SCHEMA.latest}); "
        "this command never modifies the file, and opening it with the library (connect()) migrates it"
    )
    assert _files(tmp_path) == before
    assert _marks(db) == (STORE_APPLICATION_ID, behind)


def test_a_store_marked_as_ours_without_a_schema_version_is_not_an_engram_memory_store(demo_db: Path) -> None:
    demo_db.unlink()
    conn = sqlite3.connect(demo_db)
    try:
        conn.execute(f"PRAGMA application_id = {STORE_APPLICATION_ID}")
    finally:
        conn.close()
    before = _files(demo_db.parent)
    exit_ = _exit_of(["stats", "--db", str(demo_db)])
    assert exit_.code == f"cannot open {demo_db}: not an engram-memory store"
    assert _files(demo_db.parent) == before


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_missing_master_key_file_is_named_and_not_created(command: str, demo_db: Path) -> None:
    key = Path(f"{demo_db}.key")
    key.unlink()
    before = _files(demo_db.parent)
    exit_ = _exit_of([command, "--db", str(demo_db)])
    assert exit_.code == f"no master key file at {key}"
    assert _files(demo_db.parent) == before
    assert not key.exists()


def test_serve_mcp_binds_the_four_confirmation_free_tools_and_waits_for_the_host_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mcp_adapter = pytest.importorskip("engram_memory.adapters.mcp")
    served: list[tuple[MemoryService, HostBinding]] = []

    async def fake_serve(service: MemoryService, binding: HostBinding) -> None:
        served.append((service, binding))

    monkeypatch.setattr(mcp_adapter, "serve_stdio", fake_serve)
    argv = ["serve-mcp", "--db", str(tmp_path / "served.db"), "--tenant", "t", "--workspace", "w"]
    assert main([*argv, "--principal", "p", "--purpose", "purpose:x"]) == 0
    ((service, binding),) = served
    assert isinstance(service.policy, GuardedPolicy)
    assert service.policy.inner == DefaultPolicy(admission="adjudicate")
    assert binding == HostBinding(
        tenant_id="t",
        workspace_id="w",
        principal="p",
        agent_id="mcp-agent",
        session="stdio",
        purpose_ref="purpose:x",
        tools=frozenset(
            {
                "engram_memory_search",
                "engram_memory_get",
                "engram_memory_capture",
                "engram_memory_request_admission",
            }
        ),
    )


def _two_page_walk(service: MemoryService, binding: HostBinding, pause: float) -> dict[str, Any]:
    """Admit two records, rank page 1 (limit 1), wait ``pause`` seconds, ask for page 2; its envelope."""
    for n in (1, 2):
        words = ("zqlifetime", f"zqpage{n}")
        args = capture_args(f"idempotency-key:lifetime-{n}", words=words, purpose_ref=binding.purpose_ref)
        captured = service.call_tool("engram_memory_capture", args, binding)["output"]["value"]
        admission = {"candidate_id": captured["candidate_id"], "idempotency_key": f"idempotency-key:lifetime-a{n}"}
        assert service.call_tool("engram_memory_request_admission", admission, binding)["ok"]
    query = {"query": "zqlifetime", "purpose_ref": binding.purpose_ref, "limit": 1}
    first = service.call_tool("engram_memory_search", query, binding)["output"]["value"]
    time.sleep(pause)
    return service.call_tool("engram_memory_search", {**query, "page_cursor": first["next_page_cursor"]}, binding)


@pytest.mark.parametrize(("lifetime", "stale"), [(None, False), ("3600", False), ("0.001", True)])
def test_serve_mcp_page_cursor_lifetime_bounds_how_long_a_cursor_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lifetime: str | None, stale: bool
) -> None:
    mcp_adapter = pytest.importorskip("engram_memory.adapters.mcp")
    pages: list[dict[str, Any]] = []

    async def fake_serve(service: MemoryService, binding: HostBinding) -> None:
        pages.append(_two_page_walk(service, binding, pause=0.01))

    monkeypatch.setattr(mcp_adapter, "serve_stdio", fake_serve)
    argv = ["serve-mcp", "--db", str(tmp_path / "served.db"), "--tenant", "t", "--workspace", "w"]
    argv += ["--principal", "p", "--purpose", "purpose:x", "--admission", "accept"]
    if lifetime is not None:
        argv += ["--page-cursor-lifetime", lifetime]
    assert main(argv) == 0
    (second,) = pages
    if stale:
        assert second["error"]["code"] == "STALE_PAGE"
    else:
        assert [packet["rank"] for packet in second["output"]["value"]["records"]] == [2]


@pytest.mark.parametrize("value", ["0", "0.0009", "-1", "nan", "inf", "soon", "", "1e14", "1e300"])
def test_serve_mcp_refuses_a_page_cursor_lifetime_that_is_not_a_positive_number_of_seconds(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve-mcp", "--db", str(tmp_path / "served.db"), "--tenant", "t", "--workspace", "w"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--principal", "p", "--purpose", "purpose:x", "--page-cursor-lifetime", value])
    assert exit_.value.code == 2
    assert "a number of seconds, at least 0.001" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
