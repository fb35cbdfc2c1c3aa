"""``--key-file``: the CLI's commands on a database whose master key is kept elsewhere.

Production keeps the master key apart from the database and its backups (a secret manager). With
the key moved away, ``verify``, ``stats``, ``pending``, ``adjudicate`` and ``serve-mcp`` work with
``--key-file`` and fail without it; a missing, short or wrong key file is one line on standard
error and exit status 1; nothing is written to the key file, and nothing is created.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.admin import MemoryAdmin
from engram_memory.cli import main
from engram_memory.connect import connect
from engram_memory.context import HostBinding, scope_key
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.testing import capture_args, make_binding, make_key
from engram_memory.testing.fakes import CAPTURE, PURPOSE

SCOPE_ARGS = ("--tenant", "acme", "--workspace", "platform")
SERVE = (*SCOPE_ARGS, "--principal", "alice", "--purpose", PURPOSE)
READERS = ("verify", "stats", "pending")
COMMANDS = (*READERS, "adjudicate", "serve-mcp")
SCOPE = scope_key("acme", "platform")


class Moved:
    """A database in ``data/`` with one pending candidate, its master key moved to ``secrets/``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "data" / "review.db"
        self.key = root / "secrets" / "master.key"
        self.db.parent.mkdir()
        self.key.parent.mkdir(mode=0o700)
        service = connect(f"sqlite:///{self.db}", policy=DefaultPolicy(admission="adjudicate"))
        try:
            value = service.call_tool(CAPTURE, capture_args(make_key("review")), make_binding("acme", "platform"))
        finally:
            service.close()
        self.candidate: str = value["output"]["value"]["candidate_id"]
        self.default_key = Path(f"{self.db}.key")
        self.default_key.rename(self.key)  # keeps its mode, 0600

    def argv(self, command: str, *extra: str, decision: str = "reject") -> list[str]:
        """``command``'s arguments on this database, ``extra`` (e.g. ``--key-file``) after ``--db``."""
        argv = [command, "--db", str(self.db), *extra]
        if command in {"pending", "adjudicate"}:
            argv += SCOPE_ARGS
        if command == "adjudicate":
            argv += ["--candidate", self.candidate, "--decision", decision]
        if command == "serve-mcp":
            argv += SERVE
        return argv

    def files(self) -> dict[str, str]:
        """Every file under the root (the data and the secrets folder) and its SHA-256."""
        return {
            str(path.relative_to(self.root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }


@pytest.fixture
def moved(tmp_path: Path) -> Moved:
    return Moved(tmp_path)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[MemoryService, HostBinding]]:
    """``serve-mcp`` without its stdio loop: what it would serve is recorded, then it returns."""
    mcp_adapter = pytest.importorskip("engram_memory.adapters.mcp")
    calls: list[tuple[MemoryService, HostBinding]] = []

    async def fake_serve(service: MemoryService, binding: HostBinding) -> None:
        calls.append((service, binding))
        MemoryAdmin(service).pending_candidates(tenant_id="acme", workspace_id="platform")  # opens sealed content

    monkeypatch.setattr(mcp_adapter, "serve_stdio", fake_serve)
    return calls


def _key_file(path: Path, data: bytes) -> Path:
    """``path`` holding ``data``, mode 0600 (a looser one would add the vault's warning to stderr)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def _needs_mcp_for(command: str) -> None:
    """Skip a ``serve-mcp`` case where the optional MCP extra is not installed."""
    if command == "serve-mcp":
        pytest.importorskip("mcp")


def _exit_of(argv: list[str]) -> SystemExit:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value


def _cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engram_memory", *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _wrong_key_message(moved: Moved, command: str, key_file: Path) -> str:
    """What a key that does not open the vault says: the readers as ever, the others naming the key file."""
    message = f"cannot open {moved.db}: the master key does not open this key vault"
    if command in READERS:
        return message
    return f"{message}; opening the SQLite key vault '{moved.db}.vault' with the key file '{key_file}'"


# --------------------------------------------------------------------------- the key moved away


@pytest.mark.parametrize("command", READERS)
def test_a_reader_works_with_the_moved_key_and_writes_nothing(
    command: str, moved: Moved, capsys: pytest.CaptureFixture[str]
) -> None:
    before = moved.files()
    capsys.readouterr()
    assert main(moved.argv(command, "--key-file", str(moved.key))) == 0
    out = capsys.readouterr().out.splitlines()
    if command == "verify":
        assert out == [f"{SCOPE}: ok (1)"]
    elif command == "stats":
        assert out == [f"{SCOPE}: journal height 1; candidate:pending=1"]
    else:
        assert [json.loads(line)["candidate_id"] for line in out] == [moved.candidate]
    assert moved.files() == before
    assert not moved.default_key.exists()


@pytest.mark.parametrize("command", READERS)
def test_the_moved_key_gives_what_the_key_beside_the_database_gave(
    command: str, moved: Moved, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(moved.argv(command, "--key-file", str(moved.key))) == 0
    elsewhere = capsys.readouterr().out
    moved.key.rename(moved.default_key)
    assert main(moved.argv(command)) == 0
    assert capsys.readouterr().out == elsewhere


@pytest.mark.parametrize("command", COMMANDS)
def test_without_key_file_the_moved_key_is_missing(command: str, moved: Moved) -> None:
    """One line naming the key file it looked for, exit status 1, and nothing written or created."""
    _needs_mcp_for(command)
    before = moved.files()
    done = _cli(moved.argv(command), cwd=moved.root)
    expected = f"no master key file at {moved.db}.key"
    if command == "serve-mcp":  # connect() names the missing file of the existing vault
        expected = (
            f"cannot open {moved.db}: the master key file of an existing vault is missing; "
            f"opening the SQLite key vault '{moved.db}.vault' with the key file '{moved.db}.key'"
        )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", expected + "\n")
    assert moved.files() == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_key_file_is_named_and_not_created(command: str, moved: Moved) -> None:
    _needs_mcp_for(command)
    missing = moved.key.parent / "no-such.key"
    before = moved.files()
    done = _cli(moved.argv(command, "--key-file", str(missing)), cwd=moved.root)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"no master key file at {missing}\n")
    assert moved.files() == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_wrong_key_is_refused_as_on_the_default_path(command: str, moved: Moved) -> None:
    _needs_mcp_for(command)
    wrong = _key_file(moved.key.parent / "wrong.key", os.urandom(32))
    before = moved.files()
    done = _cli(moved.argv(command, "--key-file", str(wrong)), cwd=moved.root)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", _wrong_key_message(moved, command, wrong) + "\n")
    assert moved.files() == before
    # the same wrong key beside the database: the same line, naming that file
    _key_file(moved.default_key, wrong.read_bytes())
    default = _cli(moved.argv(command), cwd=moved.root)
    assert (default.returncode, default.stderr) == (1, _wrong_key_message(moved, command, moved.default_key) + "\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_key_file_of_31_bytes_is_refused(command: str, moved: Moved) -> None:
    _needs_mcp_for(command)
    short = _key_file(moved.key.parent / "short.key", moved.key.read_bytes()[:31])
    before = moved.files()
    exit_ = _exit_of(moved.argv(command, "--key-file", str(short)))
    reason = f"cannot open {moved.db}: the master key file does not hold exactly 32 bytes"
    assert exit_.code == (reason if command in READERS else f"{reason}; reading the key file '{short}'")
    assert moved.files() == before


@pytest.mark.parametrize("command", [*READERS, "adjudicate"])
def test_a_key_file_open_to_others_is_used_with_the_vaults_warning(command: str, moved: Moved) -> None:
    """Read as the vault reads its own key file: once, with its warning on standard error."""
    moved.key.chmod(0o644)
    done = _cli(moved.argv(command, "--key-file", str(moved.key)), cwd=moved.root)
    warning = (
        f"the master key file {moved.key} is open to its group or others (mode 0644): "
        "anyone who can read it can decrypt the memory; make it 0600\n"
    )
    assert (done.returncode, done.stderr) == (0, warning)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_key_file_path_is_a_usage_error(
    command: str, moved: Moved, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_of(moved.argv(command, "--key-file", "")).code == 2
    assert "argument --key-file: an empty path names no file" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_names_the_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_of([command, "--help"]).code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--key-file PATH" in out
    assert "32-byte master key" in out


# --------------------------------------------------------------------------- adjudicate


@pytest.mark.parametrize("decision", ["accept", "reject"])
def test_adjudicate_decides_with_the_moved_key(decision: str, moved: Moved, capsys: pytest.CaptureFixture[str]) -> None:
    key = moved.key.read_bytes()
    capsys.readouterr()
    assert main(moved.argv("adjudicate", "--key-file", str(moved.key), decision=decision)) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{moved.candidate}: {decision}ed")
    assert not moved.default_key.exists()
    assert moved.key.read_bytes() == key
    assert main(moved.argv("stats", "--key-file", str(moved.key))) == 0
    counts = "candidate:admitted=1, record:accepted_current=1" if decision == "accept" else "candidate:rejected=1"
    assert capsys.readouterr().out == f"{SCOPE}: journal height 2; {counts}\n"
    assert main(moved.argv("verify", "--key-file", str(moved.key))) == 0
    assert capsys.readouterr().out == f"{SCOPE}: ok (2)\n"


# --------------------------------------------------------------------------- serve-mcp


def test_serve_mcp_serves_the_existing_database_under_the_moved_key(
    moved: Moved, served: list[tuple[MemoryService, HostBinding]]
) -> None:
    assert main(moved.argv("serve-mcp", "--key-file", str(moved.key))) == 0
    ((_, binding),) = served
    assert (binding.tenant_id, binding.workspace_id) == ("acme", "platform")
    assert not moved.default_key.exists()


def test_serve_mcp_creates_a_new_database_under_the_given_key_and_no_key_file(
    tmp_path: Path, served: list[tuple[MemoryService, HostBinding]], capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key = _key_file(tmp_path / "master.key", os.urandom(32))
    db = data / "new.db"
    assert main(["serve-mcp", "--db", str(db), "--key-file", str(key), *SERVE]) == 0
    assert len(served) == 1
    assert sorted(path.name for path in data.iterdir()) == ["new.db", "new.db.vault"]
    SQLiteKeyVault(f"{db}.vault", key.read_bytes(), read_only=True).close()  # the vault is under that key
    capsys.readouterr()
    assert main(["verify", "--db", str(db), "--key-file", str(key)]) == 0
    assert capsys.readouterr().err == f"{db}: no scope has a journal yet\n"


def test_serve_mcp_without_key_file_still_creates_the_key_beside_a_new_database(
    tmp_path: Path, served: list[tuple[MemoryService, HostBinding]]
) -> None:
    assert main(["serve-mcp", "--db", str(tmp_path / "new.db"), *SERVE]) == 0
    assert len(served) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new.db", "new.db.key", "new.db.vault"]


@pytest.mark.parametrize("length", [0, 31, 33])
def test_serve_mcp_creates_nothing_for_a_new_database_when_the_key_file_is_bad(
    length: int, tmp_path: Path, served: list[tuple[MemoryService, HostBinding]]
) -> None:
    key = _key_file(tmp_path / "master.key", os.urandom(length))
    data = tmp_path / "data"
    data.mkdir()
    exit_ = _exit_of(["serve-mcp", "--db", str(data / "new.db"), "--key-file", str(key), *SERVE])
    assert exit_.code == (
        f"cannot open {data / 'new.db'}: the master key file does not hold exactly 32 bytes; "
        f"reading the key file '{key}'"
    )
    assert list(data.iterdir()) == []
    assert served == []


def test_serve_mcp_over_stdio_with_a_key_file(tmp_path: Path) -> None:
    """The real server: a new database made under ``--key-file``, a capture served, no ``<db>.key``."""
    pytest.importorskip("mcp")
    import anyio  # noqa: PLC0415 - the optional extra

    key = _key_file(tmp_path / "master.key", os.urandom(32))
    db = tmp_path / "data" / "memory.db"
    db.parent.mkdir()
    captured = anyio.run(_capture_over_stdio, db, key)
    assert captured["ok"] is True, captured
    assert sorted(path.name for path in db.parent.iterdir()) == ["memory.db", "memory.db.vault"]
    done = _cli(["pending", "--db", str(db), "--key-file", str(key), *SCOPE_ARGS], cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert [json.loads(line)["candidate_id"] for line in done.stdout.splitlines()] == [
        captured["output"]["value"]["candidate_id"]
    ]


async def _capture_over_stdio(db: Path, key: Path) -> dict[str, Any]:
    """Start ``serve-mcp --key-file`` on ``db``, capture once through it, and stop it."""
    async with _stdio_session(db, key) as session:
        result = await session.call_tool(CAPTURE, capture_args(make_key("stdio")))
    envelope: dict[str, Any] = result.structured_content or {}
    return envelope


@asynccontextmanager
async def _stdio_session(db: Path, key: Path) -> AsyncIterator[Any]:
    import anyio  # noqa: PLC0415 - the optional extra
    from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: PLC0415 - the optional extra

    argv = ["-m", "engram_memory", "serve-mcp", "--db", str(db), "--key-file", str(key), *SERVE]
    params = StdioServerParameters(command=sys.executable, args=argv)
    with (db.parent.parent / "server.stderr").open("w", encoding="utf-8") as errlog, anyio.fail_after(60):
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
