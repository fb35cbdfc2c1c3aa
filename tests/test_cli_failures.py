"""Every failure of the ``engram-memory`` command is one line on stderr and a non-zero exit status.

A missing directory, a file that is not a store, a closed output pipe or a full disk never end in
a traceback, and a demo that fails removes the files it created (only those), so a rerun works.
"""

from __future__ import annotations

import errno
import io
import os
import runpy
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engram_memory.admin import MemoryAdmin
from engram_memory.cli import main
from engram_memory.errors import StoreUnavailableError
from engram_memory.journal import VerifyReport

SERVE = ("--tenant", "t", "--workspace", "w", "--principal", "p", "--purpose", "purpose:x")


def _cli(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )


def _exit_of(argv: list[str]) -> SystemExit:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value


class _FailingOutput(io.StringIO):
    """A standard output whose writes fail with ``error`` after ``lines`` lines got through."""

    def __init__(self, error: OSError, lines: int = 0) -> None:
        super().__init__()
        self.error, self.lines = error, lines

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= self.lines:
            raise self.error
        return super().write(text)


# --------------------------------------------------------------------------- missing directories, foreign files


def test_a_demo_in_a_missing_directory_is_a_one_line_failure(tmp_path: Path) -> None:
    db = tmp_path / "no-such-dir" / "x.db"
    assert _exit_of(["demo", "--db", str(db)]).code == f"cannot create {db}: its directory does not exist"
    done = _cli("demo", "--db", "no-such-dir/x.db", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "cannot create no-such-dir/x.db: its directory does not exist\n"
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def mcp_extra() -> None:
    pytest.importorskip("engram_memory.adapters.mcp")


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_in_a_missing_directory_is_a_one_line_failure(tmp_path: Path) -> None:
    done = _cli("serve-mcp", "--db", "no-such-dir/x.db", *SERVE, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "cannot open no-such-dir/x.db: its directory does not exist\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_on_a_file_that_is_not_a_store_is_a_one_line_failure(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_bytes(b"hello\n")
    done = _cli("serve-mcp", "--db", "notes.db", *SERVE, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "cannot open notes.db: sqlite open failed: SQLITE_NOTADB\n"
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {"notes.db": b"hello\n"}


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_on_a_foreign_sqlite_file_names_the_refusal(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "crm.db")
    try:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    finally:
        conn.close()
    exit_ = _exit_of(["serve-mcp", "--db", str(tmp_path / "crm.db"), *SERVE])
    assert exit_.code == f"cannot open {tmp_path / 'crm.db'}: not an engram-memory store database"


@pytest.mark.usefixtures("mcp_extra")
@pytest.mark.parametrize(
    ("flag", "value"),
    [("--principal", ""), ("--tenant", ""), ("--workspace", "Ame\u0301lie"), ("--agent", "")],
)
def test_serve_mcp_refuses_a_binding_no_request_could_pass(tmp_path: Path, flag: str, value: str) -> None:
    """An empty or non-NFC id would fail every request: refused at start (a non-UTF-8 one is a usage error)."""
    argv = ["serve-mcp", "--db", str(tmp_path / "served.db"), *SERVE]
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    exit_ = _exit_of(argv)
    assert exit_.code == (
        "serve-mcp needs a non-empty --tenant, --workspace, --principal, --agent and --purpose, "
        "each valid UTF-8 text in Unicode NFC"
    )


# --------------------------------------------------------------------------- output that cannot be written


def test_a_closed_output_pipe_ends_the_demo_quietly(tmp_path: Path) -> None:
    """``engram-memory demo | head -1``: the reader left; no traceback, no message, status 1."""
    with subprocess.Popen(
        [sys.executable, "-m", "engram_memory", "demo", "--db", "piped.db"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()  # before the demo writes its first line
        stderr = process.stderr.read()
        status = process.wait(timeout=120)
    assert (status, stderr) == (1, "")
    assert list(tmp_path.iterdir()) == []  # the interrupted demo removed its files


def test_a_broken_pipe_in_process_returns_one_and_removes_the_demo_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", _FailingOutput(BrokenPipeError(errno.EPIPE, "Broken pipe"), lines=1))
    assert main(["demo", "--db", str(tmp_path / "demo.db")]) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_a_full_disk_under_the_output_is_a_one_line_failure(tmp_path: Path) -> None:
    with Path("/dev/full").open("w") as full:
        done = _cli("demo", "--db", "full.db", cwd=tmp_path, stdout=full.fileno())
    assert done.returncode == 1
    assert done.stderr == "engram-memory demo: cannot write its output: No space left on device\n"
    assert list(tmp_path.iterdir()) == []
    rerun = _cli("demo", "--db", "full.db", cwd=tmp_path)  # nothing half-made refuses the rerun
    assert (rerun.returncode, rerun.stderr) == (0, "")


def test_a_full_disk_under_verify_output_is_a_one_line_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", _FailingOutput(OSError(errno.ENOSPC, "No space left on device")))
    exit_ = _exit_of(["verify", "--db", str(db)])
    assert exit_.code == "engram-memory verify: cannot write its output: No space left on device"


# --------------------------------------------------------------------------- a demo that fails cleans up after itself


def test_a_failed_demo_removes_only_its_own_files_and_can_be_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "other.db").write_bytes(b"someone else's")
    db = tmp_path / "demo.db"

    def unavailable(self: MemoryAdmin, *, tenant_id: str, workspace_id: str) -> VerifyReport:
        raise StoreUnavailableError("sqlite read failed: SQLITE_IOERR")

    with monkeypatch.context() as patch:
        patch.setattr(MemoryAdmin, "verify", unavailable)
        exit_ = _exit_of(["demo", "--db", str(db)])
    assert exit_.code == f"demo failed on {db}: sqlite read failed: SQLITE_IOERR"
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {"other.db": b"someone else's"}
    capsys.readouterr()
    assert main(["demo", "--db", str(db)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo.db", "demo.db.key", "demo.db.vault", "other.db"]


def test_an_output_error_mid_demo_is_one_line_without_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _FailingOutput(OSError(errno.EIO, "Input/output error"), lines=3))
    exit_ = _exit_of(["demo", "--db", str(tmp_path / "demo.db")])
    assert exit_.code == "engram-memory demo: cannot write its output: Input/output error"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", ["engram_memory", "engram_memory.cli"])
def test_the_module_entry_point_exits_with_the_commands_status(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m engram_memory`` (and ``python -m engram_memory.cli``), run here in process, exits with what
    the command returns: 1 for a reader that left, with the demo's files removed."""
    monkeypatch.setattr(sys, "argv", ["engram-memory", "demo", "--db", str(tmp_path / "demo.db")])
    monkeypatch.setattr(sys, "stdout", _FailingOutput(BrokenPipeError(errno.EPIPE, "Broken pipe"), lines=1))
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(module, run_name="__main__")
    assert exited.value.code == 1
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- hostile paths and closed streams


def _demo_db(tmp_path: Path) -> Path:
    done = _cli("demo", "--db", "good.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "good.db"


def test_a_fifo_as_the_database_or_vault_is_refused_at_once(tmp_path: Path) -> None:
    """Opening a FIFO blocks until a writer comes (and SQLite retries through Ctrl-C): refuse it instead."""
    good = _demo_db(tmp_path)
    os.mkfifo(tmp_path / "fifo.db")
    shutil.copy(f"{good}.vault", tmp_path / "fifo.db.vault")
    shutil.copy(f"{good}.key", tmp_path / "fifo.db.key")
    shutil.copy(good, tmp_path / "vfifo.db")
    os.mkfifo(tmp_path / "vfifo.db.vault")
    shutil.copy(f"{good}.key", tmp_path / "vfifo.db.key")
    for db in ("fifo.db", "vfifo.db"):
        for command in ("verify", "stats"):
            done = _cli(command, "--db", db, cwd=tmp_path)
            refused = db if db == "fifo.db" else f"{db}.vault"
            assert (done.returncode, done.stdout) == (1, ""), (command, db)
            assert done.stderr == f"cannot open {refused}: not a regular file\n", (command, db)


@pytest.mark.parametrize("command", ["verify", "stats", "pending", "reap-keys"])
def test_an_empty_database_path_is_a_usage_error(tmp_path: Path, command: str) -> None:
    argv = [command, "--db", ""] + (["--tenant", "t", "--workspace", "w"] if command == "pending" else [])
    done = _cli(*argv, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.endswith("error: argument --db: an empty path names no file\n")
    assert list(tmp_path.iterdir()) == []


def test_stats_with_standard_output_closed_fails_with_one_line(tmp_path: Path) -> None:
    good = _demo_db(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "engram_memory", "stats", "--db", str(good)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.close(1),  # the child starts with descriptor 1 closed
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("mcp_extra")
@pytest.mark.parametrize("closed", [0, 1], ids=["stdin", "stdout"])
def test_serve_mcp_with_a_protocol_stream_closed_says_so_in_one_line(tmp_path: Path, closed: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engram_memory", "serve-mcp", "--db", "served.db", *SERVE],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL if closed else None,
        stdout=subprocess.DEVNULL if not closed else None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.close(closed),  # the child starts with that descriptor closed
    )
    assert (done.returncode, done.stderr) == (
        1,
        "serve-mcp needs an open standard input and output: they carry the protocol\n",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("mcp_extra")
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_serve_mcp_on_a_full_output_fails_with_one_line(tmp_path: Path) -> None:
    with Path("/dev/full").open("w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "engram_memory", "serve-mcp", "--db", "served.db", *SERVE],
            cwd=tmp_path,
            input='{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert (done.returncode, done.stderr) == (1, "serve-mcp: cannot write its answers: No space left on device\n")


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_refuses_a_bad_binding_before_creating_any_file(tmp_path: Path) -> None:
    argv = ["serve-mcp", "--db", str(tmp_path / "brandnew.db"), *SERVE, "--agent", ""]
    assert _exit_of(argv).code == (
        "serve-mcp needs a non-empty --tenant, --workspace, --principal, --agent and --purpose, "
        "each valid UTF-8 text in Unicode NFC"
    )
    assert list(tmp_path.iterdir()) == []
