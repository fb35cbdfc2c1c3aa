"""``verify`` and ``stats`` write nothing: read-only connections, never a checkpoint, never a new file.

After a crash left write-ahead logs, in a read-only directory, as a user who cannot write the
files, and while a service writes: the database, vault and key files keep their bytes and
modification times, no ``-wal`` or ``-shm`` file appears, and the owner's service keeps working.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engram_memory import DefaultPolicy, MemoryService, SystemClock
from engram_memory.admin import MemoryAdmin
from engram_memory.cli import main
from engram_memory.connect import connect
from engram_memory.context import scope_key
from engram_memory.errors import ErrorCode, StoreUnavailableError
from engram_memory.journal import VerifyReport
from engram_memory.keyvaults.sqlite import MasterKeyError, SQLiteKeyVault
from engram_memory.stores.sqlite import MigrationLedgerError, SQLiteStore
from engram_memory.stores.sqlite._schema import STORE_SCHEMA
from engram_memory.testing import capture_args, make_binding, make_key
from tests.test_cli import write_schema_1_store

COMMANDS = ("verify", "stats")
SCOPE = scope_key("tenant-a", "workspace-1")
"""The scope of ``make_binding()``, where the crashed writer left its events."""
_CRASHED_WRITER = """
import os, sys
from engram_memory import DefaultPolicy, connect
from engram_memory.testing import capture_args, make_binding, make_key
from tests.test_cli import write_schema_1_store

service = connect(f"sqlite:///{sys.argv[1]}", policy=DefaultPolicy(admission="accept"))
binding = make_binding()
for n in range(3):
    value = service.call_tool("engram_memory_capture", capture_args(make_key(f"crash-{n}")), binding)
    admission = {"candidate_id": value["output"]["value"]["candidate_id"], "idempotency_key": make_key(f"admit-{n}")}
    assert service.call_tool("engram_memory_request_admission", admission, binding)["ok"]
os._exit(0)  # killed: no close(), so no checkpoint; both write-ahead logs stay behind
"""


def _crashed(db: Path) -> None:
    """A store and vault that a process wrote and was killed on (their ``-wal`` and ``-shm`` remain)."""
    done = subprocess.run(
        [sys.executable, "-c", _CRASHED_WRITER, str(db)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    for suffix in ("-wal", "-shm", ".vault-wal", ".vault-shm"):
        assert Path(f"{db}{suffix}").exists(), suffix


def _state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file's SHA-256 and modification time, but the ``-shm`` indexes' content.

    A reader takes its locks in the ``-shm`` (SQLite's shared-memory index, no data), so only
    that a ``-shm`` exists is compared.
    """
    return {
        path.name: ("shm", 0)
        if path.name.endswith("-shm")
        else (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(folder.iterdir())
    }


def _demo(db: Path) -> None:
    with (
        open(os.devnull, "w") as quiet,  # noqa: PTH123 - a null stream for the demo's narration
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(sys, "stdout", quiet)
        assert main(["demo", "--db", str(db)]) == 0


# --------------------------------------------------------------------------- after a crash


@pytest.mark.parametrize("command", COMMANDS)
def test_inspecting_after_a_crash_checkpoints_nothing(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    _crashed(db)
    before = _state(tmp_path)
    assert main([command, "--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == (
        [f"{SCOPE}: ok (6)"]
        if command == "verify"
        # the killed writer's three accepts left their candidate keys doomed, waiting for a batch
        else [f"{SCOPE}: journal height 6; candidate:admitted=3, keys:doomed=3, record:accepted_current=3"]
    )
    assert _state(tmp_path) == before  # same bytes, same mtimes; the logs are still there, unmerged


def test_the_crashed_writers_commits_are_still_there_for_the_library(tmp_path: Path) -> None:
    """What verify read through the log is what the library then finds (and checkpoints itself)."""
    db = tmp_path / "memory.db"
    _crashed(db)
    assert main(["verify", "--db", str(db)]) == 0
    with connect(f"sqlite:///{db}") as service:
        assert MemoryAdmin(service).verify_scope(SCOPE) == VerifyReport(ok=True, high_water=6)
    assert not Path(f"{db}-wal").exists()  # the library's close checkpointed and removed it


@pytest.mark.parametrize("command", COMMANDS)
def test_a_log_without_its_shm_is_refused_rather_than_given_one(command: str, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _crashed(db)
    Path(f"{db}-shm").unlink()
    before = _state(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([command, "--db", str(db)])
    assert exit_.value.code == (
        f"cannot open {db} read-only: the file has a write-ahead log without its -shm index, and reading it "
        "would create one: another process may be opening or closing it, or hold it in exclusive locking mode, "
        "or one was killed; run the command again, and if this persists while no process has the file open, "
        "open it read-write once (as the user that owns it) to recover it"
    )
    assert _state(tmp_path) == before


# --------------------------------------------------------------------------- while a service writes


def test_verify_while_a_service_writes_reads_through_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    binding = make_binding()
    service = connect(f"sqlite:///{db}", policy=DefaultPolicy(admission="accept"))
    stop = threading.Event()
    failures: list[str] = []

    def write() -> None:
        n = 0
        while not stop.is_set():
            value = service.call_tool("engram_memory_capture", capture_args(make_key(f"live-{n}")), binding)
            admission = {"candidate_id": value["output"]["value"]["candidate_id"], "idempotency_key": make_key(f"a{n}")}
            if not service.call_tool("engram_memory_request_admission", admission, binding)["ok"]:
                failures.append(f"admission {n}")
            n += 1

    assert service.call_tool("engram_memory_capture", capture_args(make_key("first")), binding)["ok"]
    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(5):
            assert main(["verify", "--db", str(db)]) == 0
            (line,) = capsys.readouterr().out.splitlines()
            assert line.startswith(f"{SCOPE}: ok (")
    finally:
        stop.set()
        writer.join()
        service.close()
    assert failures == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["memory.db", "memory.db.key", "memory.db.vault"]


def test_a_file_that_changes_while_it_is_read_without_a_log_is_not_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a ``-wal`` the files are read ``immutable`` (no lock): a writer that started and
    changed one meanwhile may have torn the read, so nothing read is printed."""
    db = tmp_path / "memory.db"
    _demo(db)
    capsys.readouterr()
    verify_scope = MemoryAdmin.verify_scope

    def racing(self: MemoryAdmin, scope: str) -> VerifyReport:
        report = verify_scope(self, scope)
        mark = Path(f"{db}.vault").stat()
        os.utime(f"{db}.vault", ns=(mark.st_atime_ns, mark.st_mtime_ns + 1_000_000))  # as a checkpoint would
        return report

    monkeypatch.setattr(MemoryAdmin, "verify_scope", racing)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--db", str(db)])
    assert exit_.value.code == f"{db} changed while it was read (a process wrote it); run the command again"
    assert capsys.readouterr().out == ""


# --------------------------------------------------------------------------- permissions


_AS_NOBODY = """
import gettext, locale, os, pwd, sys  # argparse imports the first two late
import urllib.parse  # pathlib (3.13) imports it late; nobody may not read the interpreter's own files
from engram_memory.cli import main
if os.geteuid() == 0:  # root bypasses file permissions: drop to nobody, after the imports
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)
sys.exit(main(sys.argv[1:]))
"""
"""The CLI as a user without write access to other users' files (``nobody`` when run by root)."""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory that ``nobody`` can reach (pytest's own temporary directories are owner-only)."""
    folder = Path(tempfile.mkdtemp(prefix="engram-cli-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder)


def _cli_unprivileged(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, *args], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )


def _readable_by_all(folder: Path, directory_mode: int) -> None:
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(directory_mode)


def _open_key_warning(key_file: str) -> str:
    """What the vault says on standard error of a key file anyone may read (as these tests make it)."""
    return (
        f"the master key file {key_file} is open to its group or others (mode 0444): "
        "anyone who can read it can decrypt the memory; make it 0600\n"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_directory_is_inspected(command: str, shared: Path) -> None:
    """A read-only directory (a backup mount, another user's folder) needs no write access."""
    folder = shared / "ro"
    folder.mkdir()
    _demo(folder / "memory.db")
    _readable_by_all(folder, 0o555)
    before = _state(folder)
    done = _cli_unprivileged(shared, command, "--db", "ro/memory.db")
    assert (done.returncode, done.stderr) == (0, _open_key_warning("ro/memory.db.key"))
    assert done.stdout.startswith(scope_key("acme", "platform"))
    assert _state(folder) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_user_who_cannot_write_the_files_leaves_no_file_behind(command: str, shared: Path) -> None:
    """In a directory anyone may write, a reader who cannot write the files creates no ``-wal``
    or ``-shm`` (owned by that reader, they would keep the files' owner from writing)."""
    folder = shared / "service"
    folder.mkdir()
    db = folder / "memory.db"
    _demo(db)
    _readable_by_all(folder, 0o777)
    before = _state(folder)
    done = _cli_unprivileged(shared, command, "--db", "service/memory.db")
    assert (done.returncode, done.stderr) == (0, _open_key_warning("service/memory.db.key"))
    assert _state(folder) == before
    for path in folder.iterdir():
        path.chmod(0o600)
    folder.chmod(0o700)
    with connect(f"sqlite:///{db}") as service:  # the owner's service still writes
        captured = service.call_tool("engram_memory_capture", capture_args(make_key("after")), make_binding())
        assert captured["ok"] is True, captured


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_that_cannot_be_searched_is_a_one_line_failure(command: str, shared: Path) -> None:
    folder = shared / "private"
    folder.mkdir()
    _demo(folder / "memory.db")
    folder.chmod(0o700 if os.geteuid() == 0 else 0o000)  # as root, the CLI runs as nobody
    done = _cli_unprivileged(shared, command, "--db", "private/memory.db")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "cannot look at private/memory.db: Permission denied\n"


# --------------------------------------------------------------------------- the read-only open itself


def test_a_read_only_store_and_vault_refuse_every_write(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _crashed(db)
    before = _state(tmp_path)
    store = SQLiteStore(db, read_only=True)
    vault = SQLiteKeyVault(f"{db}.vault", master_key_file=f"{db}.key", read_only=True)
    service = MemoryService(store=store, vault=vault, policy=DefaultPolicy(), clock=SystemClock())
    try:
        assert MemoryAdmin(service).verify_scope(SCOPE).ok
        answer = service.call_tool("engram_memory_capture", capture_args(make_key("refused")), make_binding())
        assert answer["error"]["code"] == ErrorCode.STORE_UNAVAILABLE.value
        with pytest.raises(StoreUnavailableError), store.write(SCOPE):
            pass
        with pytest.raises(StoreUnavailableError):
            vault.seal("context", b"plaintext")
        with pytest.raises(StoreUnavailableError):
            store.compact()
    finally:
        service.close()  # even destroying the doomed keys is refused; nothing is written
    assert _state(tmp_path) == before


@pytest.mark.parametrize("kind", ["store", "vault"])
def test_a_read_only_open_creates_nothing(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    opener: Callable[[], object] = (
        (lambda: SQLiteStore(path, read_only=True))
        if kind == "store"
        else (lambda: SQLiteKeyVault(path, master_key_file=tmp_path / "missing.key", read_only=True))
    )
    with pytest.raises(StoreUnavailableError):
        opener()
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_vault_never_makes_up_a_key_file(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _demo(db)
    Path(f"{db}.key").unlink()
    before = _state(tmp_path)
    with pytest.raises(MasterKeyError):
        SQLiteKeyVault(f"{db}.vault", master_key_file=f"{db}.key", read_only=True)
    assert _state(tmp_path) == before


def test_a_read_only_open_refuses_an_outdated_schema_instead_of_migrating(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    write_schema_1_store(db)
    before = _state(tmp_path)
    with pytest.raises(MigrationLedgerError) as refused:
        SQLiteStore(db, read_only=True)
    assert (refused.value.found, refused.value.supported) == (1, STORE_SCHEMA.latest)
    assert _state(tmp_path) == before


@pytest.mark.parametrize("kind", ["store", "vault"])
def test_a_read_only_open_of_an_empty_file_refuses_it_untouched(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    opener: Callable[[], object] = (
        (lambda: SQLiteStore(path, read_only=True))
        if kind == "store"
        else (lambda: SQLiteKeyVault(path, master_key=bytes(32), read_only=True))
    )
    with pytest.raises(MigrationLedgerError):
        opener()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"empty.db": b""}


def test_a_read_only_vault_refuses_a_wrong_master_key(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _demo(db)
    before = _state(tmp_path)
    with pytest.raises(MasterKeyError):
        SQLiteKeyVault(f"{db}.vault", master_key=bytes(32), read_only=True)
    assert _state(tmp_path) == before


def test_a_failure_while_reading_is_a_one_line_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "memory.db"
    _demo(db)

    def failing(self: MemoryAdmin, scope: str) -> VerifyReport:
        raise StoreUnavailableError("sqlite read failed: SQLITE_IOERR")

    monkeypatch.setattr(MemoryAdmin, "verify_scope", failing)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "--db", str(db)])
    assert exit_.value.code == f"cannot read {db}: sqlite read failed: SQLITE_IOERR"
    assert capsys.readouterr().out == ""
