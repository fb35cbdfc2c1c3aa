"""The ``engram-memory`` command on damaged files, busy files, odd ids and Ctrl-C (an operator's audit).

Each failure is one line on standard error with the exit status the module docstring promises
(1, 2 for a usage error, 130 for Ctrl-C), says what the operator can do, and writes nothing where
nothing should be written.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.admin import MemoryAdmin
from engram_memory.cli import _report_stopped, main
from engram_memory.connect import connect
from engram_memory.errors import EngramError, ErrorCode, StoreUnavailableError
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.stores.sqlite._errors import translate
from engram_memory.testing import capture_args, make_binding, make_key
from engram_memory.testing.fakes import CAPTURE
from tests.test_cli_inspection import _crashed
from tests.test_sqlite_integrity import DAMAGES, damage_index, damage_schema_text, flip

SCOPE_ARGS = ("--tenant", "acme", "--workspace", "platform")
READERS = ("verify", "stats", "pending")
SERVE = ("--tenant", "t", "--workspace", "w", "--principal", "p", "--purpose", "purpose:x")


def _digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


def _exit_of(argv: list[str]) -> SystemExit:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value


def _argv(command: str, db: Path, candidate: str = "candidate_00") -> list[str]:
    argv = [command, "--db", str(db)]
    if command in {"pending", "adjudicate"}:
        argv += SCOPE_ARGS
    if command == "adjudicate":
        argv += ["--candidate", candidate, "--decision", "reject"]
    return argv


def _review_db(db: Path) -> str:
    """A database whose scope acme/platform holds one candidate waiting for the host; returns its id."""
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="adjudicate"))
    try:
        value = service.call_tool(CAPTURE, capture_args(make_key("review")), make_binding("acme", "platform", "alice"))
    finally:
        service.close()
    return str(value["output"]["value"]["candidate_id"])


@pytest.fixture
def review(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "review.db"
    return db, _review_db(db)


def _pending(db: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["pending", "--db", str(db), *SCOPE_ARGS]) == 0
    return capsys.readouterr().out.splitlines()


# --------------------------------------------------------------------------- 2: a damaged page under the ledger


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("command", [*READERS, "adjudicate"])
def test_a_store_ledger_that_is_not_utf8_is_one_line(command: str, damage: str, review: tuple[Path, str]) -> None:
    db, candidate = review
    DAMAGES[damage](db, "store")
    before = _digests(db.parent)
    exit_ = _exit_of(_argv(command, db, candidate))
    assert exit_.code == f"cannot open {db}: schema ledger is unreadable: the store file is damaged"
    assert _digests(db.parent) == before


def test_a_vault_ledger_that_is_not_utf8_is_one_line(review: tuple[Path, str]) -> None:
    db, candidate = review
    damage_schema_text(Path(f"{db}.vault"), "vault")
    before = _digests(db.parent)
    assert _exit_of(_argv("verify", db)).code == (
        f"cannot open {db}: schema ledger is unreadable: the key vault file is damaged"
    )
    assert str(_exit_of(_argv("adjudicate", db, candidate)).code).startswith(
        f"cannot open {db}: schema ledger is unreadable: the key vault file is damaged"
    )
    assert _digests(db.parent) == before


def test_a_damaged_ledger_is_one_line_on_stderr_from_the_shell(review: tuple[Path, str]) -> None:
    db, _ = review
    damage_schema_text(db, "store")  # the audit's case: a traceback ending in UnicodeDecodeError
    done = subprocess.run(
        [sys.executable, "-m", "engram_memory", "verify", "--db", db.name],
        cwd=db.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "cannot open review.db: schema ledger is unreadable: the store file is damaged\n"


def test_text_that_is_not_utf8_in_a_read_is_one_line(review: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = review

    def undecodable(self: SQLiteStore) -> list[str]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(SQLiteStore, "scopes", undecodable)
    assert _exit_of(_argv("stats", db)).code == (
        f"cannot read {db}: a text value is not valid UTF-8: the file is damaged"
    )


# --------------------------------------------------------------------------- 3: damage SQLite finds


def test_verify_reports_a_damaged_store_index_instead_of_ok(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = review
    damage_index(db, "sqlite_autoindex_scopes_1")
    before = _digests(db.parent)
    capsys.readouterr()
    assert main(["verify", "--db", str(db)]) == 1
    (line,) = capsys.readouterr().out.splitlines()  # no scope line: a verdict on a damaged file means little
    assert line.startswith(f"{db}: file damaged (SQLite integrity_check: ")
    assert "sqlite_autoindex_scopes_1" in line
    assert _digests(db.parent) == before


def test_verify_reports_a_damaged_vault_index_not_missing_keys(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = review
    damage_index(Path(f"{db}.vault"), "sqlite_autoindex_data_keys_1")
    before = _digests(db.parent)
    capsys.readouterr()
    assert main(["verify", "--db", str(db)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{db}.vault: file damaged (SQLite integrity_check: ")
    assert "BLOB_MISSING" not in line
    assert _digests(db.parent) == before


# --------------------------------------------------------------------------- 4: a -wal without its -shm


def _restore_later(path: Path, data: bytes, delay: float) -> threading.Timer:
    timer = threading.Timer(delay, path.write_bytes, (data,))
    timer.start()
    return timer


@pytest.mark.parametrize("command", ["verify", "stats"])
def test_a_shm_that_appears_meanwhile_is_waited_for(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process opening the files creates the ``-wal`` just before the ``-shm``: not a failure."""
    db = tmp_path / "memory.db"
    _crashed(db)
    shm = Path(f"{db}-shm")
    data = shm.read_bytes()
    shm.unlink()
    timer = _restore_later(shm, data, 0.3)
    try:
        assert main([command, "--db", str(db)]) == 0
    finally:
        timer.join()
    assert capsys.readouterr().out.startswith("sha256:")


_CRASHED_REVIEW = """
import os, sys
from tests.test_cli_operator_audit import _review_db
from pathlib import Path
from engram_memory import DefaultPolicy, connect
from engram_memory.testing import capture_args, make_binding, make_key

print(_review_db(Path(sys.argv[1])))
service = connect(f"sqlite:///{sys.argv[1]}", policy=DefaultPolicy(admission="adjudicate"))
service.call_tool("engram_memory_capture", capture_args(make_key("more")), make_binding("acme", "platform", "alice"))
sys.stdout.flush()
os._exit(0)  # killed: both write-ahead logs stay behind
"""


def test_adjudicate_is_not_refused_for_a_wal_without_its_shm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``adjudicate`` opens the files read-write: the read-only pre-check must not refuse it."""
    db = tmp_path / "memory.db"
    done = subprocess.run(
        [sys.executable, "-c", _CRASHED_REVIEW, str(db)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    candidate = done.stdout.strip()
    Path(f"{db}-shm").unlink()
    Path(f"{db}.vault-shm").unlink()
    capsys.readouterr()
    assert main(_argv("adjudicate", db, candidate)) == 0
    assert capsys.readouterr().out == f"{candidate}: rejected\n"


# --------------------------------------------------------------------------- 8: the cause of an open failure


def test_adjudicate_says_why_the_vault_does_not_open(review: tuple[Path, str]) -> None:
    db, candidate = review
    Path(f"{db}.key").write_bytes(b"w" * 32)
    before = _digests(db.parent)
    exit_ = _exit_of(_argv("adjudicate", db, candidate))
    assert str(exit_.code).startswith(f"cannot open {db}: the master key does not open this key vault")
    assert _digests(db.parent) == before


# --------------------------------------------------------------------------- 9: why the store is unavailable


def test_adjudicate_on_a_locked_store_says_another_process_holds_it(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, candidate = review
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        exit_ = _exit_of(_argv("adjudicate", db, candidate))  # after the 5 s busy timeout
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert exit_.code == (
        f"adjudicate {candidate}: STORE_UNAVAILABLE (the memory store is unavailable: another process holds "
        "the lock; run the command again)"
    )
    assert candidate in _pending(db, capsys)[0]


def test_adjudicate_on_read_only_files_says_so(review: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    db, candidate = review

    def read_only(self: MemoryAdmin, **_: object) -> None:
        """Fail as a write on a read-only file does: SQLITE_READONLY, translated, then wrapped by the service."""
        conn = sqlite3.connect(":memory:")
        conn.execute("PRAGMA query_only = ON")
        try:
            try:
                conn.execute("CREATE TABLE t (x)")
            except sqlite3.Error as exc:
                raise translate(exc, "begin write") from exc
        except StoreUnavailableError as exc:
            raise EngramError(ErrorCode.STORE_UNAVAILABLE, detail=str(exc)) from exc
        finally:
            conn.close()

    monkeypatch.setattr(MemoryAdmin, "adjudicate", read_only)
    assert _exit_of(_argv("adjudicate", db, candidate)).code == (
        f"adjudicate {candidate}: STORE_UNAVAILABLE (the memory store is unavailable: the files are read-only "
        "here; run the command as the user that owns the files, on a writable file system)"
    )


# --------------------------------------------------------------------------- 10: ids in messages and argv


@pytest.mark.parametrize(
    ("candidate", "shown"),
    [
        pytest.param("x\x1b[31mRED", "'x\\x1b[31mRED'", id="terminal-escape"),
        pytest.param("a b\u202e", "'a b\\u202e'", id="space-and-bidi-override"),
        pytest.param("c" * 100_000, "c" * 80 + "... (100000 characters)", id="long"),
        pytest.param("candidate_00", "candidate_00", id="plain"),
    ],
)
def test_adjudicate_shows_a_candidate_id_escaped_and_cut_short(
    candidate: str, shown: str, review: tuple[Path, str]
) -> None:
    db, _ = review
    assert _exit_of(_argv("adjudicate", db, candidate)).code == (
        f"adjudicate {shown}: NOT_FOUND (memory target not found)"
    )


_ID_OPTIONS = [
    *(("pending", flag) for flag in ("--tenant", "--workspace")),
    *(("adjudicate", flag) for flag in ("--tenant", "--workspace", "--candidate")),
    *(("serve-mcp", flag) for flag in ("--tenant", "--workspace", "--principal", "--purpose", "--agent")),
]


@pytest.mark.parametrize(("command", "flag"), _ID_OPTIONS)
def test_an_id_that_is_not_utf8_is_a_usage_error(
    command: str, flag: str, review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db, candidate = review
    argv = _argv(command, db, candidate) if command != "serve-mcp" else [command, "--db", str(db), *SERVE]
    if flag in argv:
        argv[argv.index(flag) + 1] = "c\udcff"  # the byte 0xff of argv, as Python decodes it
    else:
        argv += [flag, "c\udcff"]
    before = _digests(db.parent)
    capsys.readouterr()
    assert _exit_of(argv).code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.endswith(f"engram-memory {command}: error: argument {flag}: not valid UTF-8 text\n")
    assert _digests(db.parent) == before


# --------------------------------------------------------------------------- 11: Ctrl-C


_INTERRUPTED_VERIFY = """
import os, signal, sys
from engram_memory.admin import MemoryAdmin
from engram_memory.cli import _report_stopped, main

def interrupted(self, scope):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the work
    signal.pause()

MemoryAdmin.verify_scope = interrupted
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_is_one_line_and_status_130(review: tuple[Path, str]) -> None:
    db, _ = review
    before = _digests(db.parent)
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_VERIFY, "verify", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "interrupted\n")
    assert _digests(db.parent) == before


def test_an_interrupted_demo_removes_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: MemoryAdmin, **_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryAdmin, "verify", interrupted)
    try:
        status = main(["demo", "--db", str(tmp_path / "demo.db")])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C left main() as a KeyboardInterrupt (a traceback)")
    assert status == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_without_stderr_writes_nothing_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started with descriptor 2 closed (``sys.stderr`` is None), ``print`` would have written to stdout."""

    def interrupted(self: MemoryAdmin, **_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryAdmin, "verify", interrupted)
    monkeypatch.setattr(sys, "stderr", None)
    assert main(["demo", "--db", str(tmp_path / "demo.db")]) == 130
    assert "interrupted" not in capsys.readouterr().out  # the demo's own lines only


def test_ctrl_c_with_a_full_stderr_pipe_drops_the_line_rather_than_wait() -> None:
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        while True:  # fill the pipe
            try:
                os.write(write, b"x" * 4096)
            except BlockingIOError:
                break
        os.set_blocking(write, True)
        script = "import sys\nfrom engram_memory.cli import _report_stopped\n_report_stopped('interrupted')\n"
        done = subprocess.run([sys.executable, "-c", script], stderr=write, timeout=60, check=False)
        assert done.returncode == 0
    finally:
        os.close(write)
        os.close(read)


# --------------------------------------------------------------------------- 12: two demos on one new path


def test_a_demo_whose_file_appears_after_the_check_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another demo created the file between this one's check and its creation: O_EXCL refuses it."""
    db = tmp_path / "demo.db"
    other = tmp_path / "other.db"
    _review_db(other)
    for suffix in ("", ".vault", ".key"):
        os.link(f"{other}{suffix}", f"{db}{suffix}")  # the other run's files, at this run's path
    before = _digests(tmp_path)
    monkeypatch.setattr("engram_memory.cli.demo._exists", lambda path: Path(path) == tmp_path)  # checked too early
    exit_ = _exit_of(["demo", "--db", str(db)])
    assert exit_.code == f"demo needs a new database file; {db} (or its vault or key) already exists"
    assert _digests(tmp_path) == before


def test_a_demo_creates_its_file_owner_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    assert db.stat().st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------- 13: an impossible schema version


@pytest.mark.parametrize("command", [*READERS, "adjudicate"])
def test_a_negative_schema_version_is_a_damaged_file_not_an_outdated_one(
    command: str, review: tuple[Path, str]
) -> None:
    db, candidate = review
    vault = Path(f"{db}.vault")
    flip(vault, 60)  # user_version 1 becomes -2
    before = _digests(db.parent)
    assert _exit_of(_argv(command, db, candidate)).code == (
        f"cannot open {vault}: key vault schema version -2 is impossible: the file is damaged or not an "
        "engram-memory key vault"
    )
    assert _digests(db.parent) == before


def test_ctrl_c_writes_its_line_to_a_stderr_descriptor_that_has_room(capfd: pytest.CaptureFixture[str]) -> None:
    _report_stopped("interrupted")
    assert capfd.readouterr().err == "interrupted\n"


def test_a_ctrl_c_raised_inside_the_servers_task_group_is_status_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C can land inside the server's task group, which wraps it in a group."""
    pytest.importorskip("mcp")
    import engram_memory.adapters.mcp as adapter  # noqa: PLC0415 - optional extra

    async def interrupted_twice(*_: object) -> None:
        raise BaseExceptionGroup("serving", [KeyboardInterrupt()])

    monkeypatch.setattr(adapter, "serve_stdio", interrupted_twice)
    db = tmp_path / "memory.db"
    scope = ["--tenant", "acme", "--workspace", "w", "--principal", "p", "--purpose", "eng"]
    assert main(["serve-mcp", "--db", str(db), *scope]) == 130
    assert capsys.readouterr().err == "interrupted\n"

    async def failed(*_: object) -> None:
        raise BaseExceptionGroup("serving", [KeyboardInterrupt(), OSError(5, "Input/output error")])

    monkeypatch.setattr(adapter, "serve_stdio", failed)
    with pytest.raises(BaseExceptionGroup) as raised:
        main(["serve-mcp", "--db", str(db), *scope])
    assert raised.value.subgroup(OSError) is not None  # a real failure is not taken for Ctrl-C


def test_sigterm_closes_the_server_and_is_status_143(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service manager's SIGTERM stops serving, closes the service (its files sound), then says ``terminated``."""
    pytest.importorskip("mcp")
    import anyio  # noqa: PLC0415 - optional extra

    import engram_memory.adapters.mcp as adapter  # noqa: PLC0415 - optional extra

    closed: list[str] = []
    real_close = MemoryService.close

    def close(self: MemoryService, **options: bool) -> None:
        closed.append(type(self.store).__name__)
        real_close(self, **options)

    async def terminated(*_: object) -> None:
        await anyio.sleep(0.2)  # the watcher's receiver is installed
        os.kill(os.getpid(), signal.SIGTERM)  # as systemd stops the server
        await anyio.sleep(30)  # cancelled by the watcher

    monkeypatch.setattr(adapter, "serve_stdio", terminated)
    monkeypatch.setattr(MemoryService, "close", close)
    db = tmp_path / "memory.db"
    scope = ["--tenant", "acme", "--workspace", "w", "--principal", "p", "--purpose", "eng"]
    assert main(["serve-mcp", "--db", str(db), *scope]) == 143
    assert capsys.readouterr().err == "terminated\n"
    assert closed == ["InMemoryStore", "SQLiteStore"]  # the binding's probe, then the served store
