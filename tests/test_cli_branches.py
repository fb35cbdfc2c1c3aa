"""The ``engram-memory`` command's remaining failure paths, each driven by the situation that reaches it.

A path that cannot be looked at, a store or vault whose header is damaged, a lock another process
holds, a ``-shm`` the reader may not open, files that change between the check and the open or
while they are read, a master key file that is missing or wrong, a damaged candidate row, a
temporary directory that is gone, a demo path that cannot be created, and a reader that left the
output pipe. Each ends in the exit status and the one line the module docstring promises, and
leaves the files as they were where nothing should be written.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.admin import MemoryAdmin
from engram_memory.cli import main
from engram_memory.errors import StoreUnavailableError
from engram_memory.journal import VerifyReport
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.stores.sqlite._files import _WAL_WITHOUT_SHM
from tests.test_cli_failures import SERVE
from tests.test_cli_inspection import _crashed, _state
from tests.test_cli_key_file import Moved, _key_file, _wrong_key_message
from tests.test_cli_operator_audit import SCOPE_ARGS, _argv, _digests, _exit_of, _pending, _review_db
from tests.test_sqlite_integrity import flip


@pytest.fixture
def review(tmp_path: Path) -> tuple[Path, str]:
    """A database whose scope acme/platform holds one candidate waiting for the host, and its id."""
    db = tmp_path / "review.db"
    return db, _review_db(db)


@pytest.fixture
def mcp_extra() -> None:
    pytest.importorskip("engram_memory.adapters.mcp")


# --------------------------------------------------------------------------- paths that cannot be looked at


@pytest.mark.parametrize("command", ["verify", "adjudicate", "demo"])
def test_a_path_through_a_regular_file_is_a_one_line_failure(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--db notes.txt/memory.db``: ``stat`` fails with ENOTDIR, which is not "missing" (files.py 41-42)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a directory\n")
    db = notes / "memory.db"
    exit_ = _exit_of(_argv(command, db) if command != "demo" else ["demo", "--db", str(db)])
    assert exit_.code == f"cannot look at {db}: Not a directory"
    assert capsys.readouterr().out == ""
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == {"notes.txt": "not a directory\n"}


# --------------------------------------------------------------------------- reading a file's marks


@pytest.mark.parametrize("command", ["verify", "adjudicate"])
def test_a_store_whose_header_is_damaged_is_named_as_not_a_database(
    command: str, review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged first sector: SQLite's DatabaseError (not an OperationalError) names it (files.py 69)."""
    db, candidate = review
    flip(db, 0)  # "SQLite format 3" no longer starts the file
    before = _digests(db.parent)
    capsys.readouterr()
    assert _exit_of(_argv(command, db, candidate)).code == f"cannot open {db}: file is not a database"
    assert capsys.readouterr().out == ""
    assert _digests(db.parent) == before


@contextlib.contextmanager
def _held_exclusively(db: Path) -> Iterator[sqlite3.Connection]:
    """Another connection that opened ``db`` in WAL mode, then holds it in exclusive locking mode."""
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the -wal and its -shm
        yield holder
    finally:
        holder.close()


def _lock(holder: sqlite3.Connection) -> None:
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("COMMIT")  # the exclusive lock stays until the connection closes


@pytest.mark.parametrize("command", ["verify", "adjudicate"])
def test_a_lock_another_process_holds_says_so_for_a_reader_and_a_writer(
    command: str, review: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The marks cannot be read within the busy timeout: a reader (SQLITE_BUSY) and a writer (any
    OperationalError) get the lock hint (files.py 64-66)."""
    db, candidate = review
    with _held_exclusively(db) as holder:
        _lock(holder)
        exit_ = _exit_of(_argv(command, db, candidate))  # after the 5 s busy timeout
    assert exit_.code == f"cannot open {db}: database is locked; another process holds the lock; run the command again"
    assert capsys.readouterr().out == ""
    assert candidate in _pending(db, capsys)[0]  # nothing was decided


@contextlib.contextmanager
def _as_another_user() -> Iterator[None]:
    """Run the block as a user whom file modes restrict: ``nobody`` for root (effective ids, restored)."""
    if os.geteuid() != 0:
        yield
        return
    nobody = pwd.getpwnam("nobody")
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory any user can reach (pytest's own temporary directories are owner-only)."""
    folder = Path(tempfile.mkdtemp(prefix="engram-cli-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_a_shm_the_reader_may_not_open_is_refused_with_the_owners_hint(
    shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crashed service left its ``-wal`` and an owner-only ``-shm``: another user cannot read through
    the log, and is told to run as the owner (files.py 67, the read-only branch of 65)."""
    db = shared / "memory.db"
    _crashed(db)
    for path in shared.iterdir():
        path.chmod(0o644)
    Path(f"{db}-shm").chmod(0o000)
    before = _state(shared)
    with _as_another_user():
        exit_ = _exit_of(["verify", "--db", str(db)])
    assert exit_.code == (
        f"cannot open {db} read-only: unable to open database file; run the command as the user that owns the files"
    )
    assert capsys.readouterr().out == ""
    assert _state(shared) == before


# --------------------------------------------------------------------------- files that change under the command


def test_a_vault_moved_away_while_it_is_read_is_reported_as_changed(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process moves the vault away mid-read: it can no longer be looked at, which counts as a
    change (files.py 111-112 inside ``_changed``, 125-126); nothing read is printed."""
    db, _ = review
    vault = Path(f"{db}.vault")
    moved = db.parent / "rotated.vault"
    data = vault.read_bytes()
    verify_scope = MemoryAdmin.verify_scope

    def moving(self: MemoryAdmin, scope: str) -> VerifyReport:
        report = verify_scope(self, scope)
        vault.rename(moved)  # e.g. a backup rotation: the open connection keeps reading the moved file
        return report

    monkeypatch.setattr(MemoryAdmin, "verify_scope", moving)
    capsys.readouterr()
    exit_ = _exit_of(["verify", "--db", str(db)])
    assert exit_.code == f"{db} changed while it was read (a process wrote it); run the command again"
    assert capsys.readouterr().out == ""
    assert moved.read_bytes() == data  # read, never written


def _at_the_store_open(monkeypatch: pytest.MonkeyPatch, event: Callable[[], object]) -> None:
    """Make ``event`` happen after the command checked the files, just as it opens the store."""

    def opening(path: str, *, read_only: bool) -> SQLiteStore:
        event()
        return SQLiteStore(path, read_only=read_only)

    monkeypatch.setattr("engram_memory.cli.files.SQLiteStore", opening)


def test_a_log_without_its_shm_that_appears_after_the_check_is_refused(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process opening the store (``-wal`` first) is killed between the check and the open: the
    store's own refusal says what to do, with no owner hint (files.py 192-193)."""
    db, _ = review
    wal = Path(f"{db}-wal")
    before = _digests(db.parent)
    _at_the_store_open(monkeypatch, lambda: wal.write_bytes(b""))
    capsys.readouterr()
    exit_ = _exit_of(["verify", "--db", str(db)])  # after the store's one-second re-check
    assert exit_.code == f"cannot open {db} read-only: {_WAL_WITHOUT_SHM}"
    assert capsys.readouterr().out == ""
    assert not Path(f"{db}-shm").exists()  # reading would have created it
    assert wal.read_bytes() == b""
    wal.unlink()
    assert _digests(db.parent) == before


def test_a_lock_taken_between_the_check_and_the_open_is_a_one_line_failure(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check passed; another process then holds the store exclusively: the open's
    StoreUnavailableError is one line that says a lock is held, not to change user (files.py 194-196)."""
    db, _ = review
    with _held_exclusively(db) as holder:
        _at_the_store_open(monkeypatch, lambda: _lock(holder))
        capsys.readouterr()
        exit_ = _exit_of(["verify", "--db", str(db)])  # after the store's 5 s busy timeout
    assert exit_.code == (
        f"cannot open {db} read-only: sqlite open failed: SQLITE_BUSY (database is locked; retry); "
        "another process holds the lock; run the command again"
    )
    assert capsys.readouterr().out == ""


# --------------------------------------------------------------------------- the master key file of a writer


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_with_a_missing_key_file_names_it_and_creates_nothing(tmp_path: Path) -> None:
    """``serve-mcp`` checks no file first: its key file is read, and missing, here (files.py 211-212)."""
    moved = Moved(tmp_path)
    missing = moved.key.parent / "no-such.key"
    before = moved.files()
    assert _exit_of(moved.argv("serve-mcp", "--key-file", str(missing))).code == f"no master key file at {missing}"
    assert moved.files() == before
    assert not missing.exists()


@pytest.mark.parametrize("command", ["adjudicate", "serve-mcp"])
def test_a_writer_with_a_wrong_key_file_names_the_key_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key of another database: connect() names the vault, the command adds the key file (files.py 227-229)."""
    if command == "serve-mcp":
        pytest.importorskip("engram_memory.adapters.mcp")
    moved = Moved(tmp_path)
    wrong = _key_file(moved.key.parent / "other.key", os.urandom(32))
    before = moved.files()
    exit_ = _exit_of(moved.argv(command, "--key-file", str(wrong)))
    assert exit_.code == _wrong_key_message(moved, command, wrong)
    assert moved.files() == before
    capsys.readouterr()
    assert main(moved.argv("pending", "--key-file", str(moved.key))) == 0
    assert moved.candidate in capsys.readouterr().out  # still waiting for the host


# --------------------------------------------------------------------------- adjudicate on damaged or failing reads


def test_a_damaged_candidate_row_under_readmit_forgotten_is_one_line(review: tuple[Path, str]) -> None:
    """``--readmit-forgotten`` first reads the candidate for the closing line: text that is not
    UTF-8 there is the store's read failure, one line (commands.py 174-175)."""
    db, candidate = review
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute("UPDATE candidates SET policy_version = CAST(x'ff61' AS TEXT)")  # as a damaged page reads
    finally:
        conn.close()
    before = _digests(db.parent)
    argv = ["adjudicate", "--db", str(db), *SCOPE_ARGS, "--candidate", candidate, "--decision", "accept"]
    exit_ = _exit_of([*argv, "--readmit-forgotten"])
    assert exit_.code == (
        f"adjudicate {candidate}: sqlite read failed: OperationalError (a text value is not UTF-8: damaged file)"
    )
    assert _digests(db.parent) == before


@pytest.fixture
def rejected(review: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """``review`` after the host rejected its candidate (through the command)."""
    db, candidate = review
    assert main(_argv("adjudicate", db, candidate)) == 0
    assert capsys.readouterr().out == f"{candidate}: rejected\n"
    return db, candidate


def _reads_fail_after_the_decision(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """The store's reads raise ``error`` once the library answered the decision (a disk going bad)."""
    adjudicate = MemoryAdmin.adjudicate

    def failing_read(self: SQLiteStore, scope: str) -> Any:
        raise error

    def deciding(self: MemoryAdmin, **kwargs: Any) -> Any:
        try:
            return adjudicate(self, **kwargs)
        finally:
            monkeypatch.setattr(SQLiteStore, "read", failing_read)

    monkeypatch.setattr(MemoryAdmin, "adjudicate", deciding)


def test_an_already_rejected_candidate_is_explained_even_when_its_row_cannot_be_read(
    rejected: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALREADY_TERMINAL, then the store fails reading the row: the state falls back to
    "rejected or withdrawn" instead of a second failure (commands.py 195-196)."""
    db, candidate = rejected
    before = _digests(db.parent)
    _reads_fail_after_the_decision(monkeypatch, StoreUnavailableError("sqlite read failed: SQLITE_IOERR"))
    exit_ = _exit_of([*_argv("adjudicate", db, candidate)[:-1], "accept"])
    assert exit_.code == (
        f"adjudicate {candidate}: ALREADY_TERMINAL (already rejected or withdrawn; its content was destroyed: "
        "to have it admitted, it must be captured again)"
    )
    assert _digests(db.parent) == before


def test_the_same_refusal_with_a_readable_row_names_its_state(
    rejected: tuple[Path, str],
) -> None:
    """The contrast to the test above: without the failing read, the row's own state is shown."""
    db, candidate = rejected
    exit_ = _exit_of([*_argv("adjudicate", db, candidate)[:-1], "accept"])
    assert exit_.code == (
        f"adjudicate {candidate}: ALREADY_TERMINAL (already rejected; its content was destroyed: "
        "to have it admitted, it must be captured again)"
    )


def test_text_that_is_not_utf8_while_explaining_a_refusal_is_one_line(
    rejected: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged text read while the command explains ALREADY_TERMINAL leaves ``_adjudicate``:
    the command's own line, not a traceback (commands.py 139-140)."""
    db, candidate = rejected
    before = _digests(db.parent)
    _reads_fail_after_the_decision(monkeypatch, UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
    exit_ = _exit_of(_argv("adjudicate", db, candidate))
    assert exit_.code == f"adjudicate {candidate}: a text value is not valid UTF-8: the file is damaged"
    assert capsys.readouterr().out == ""
    assert _digests(db.parent) == before


# --------------------------------------------------------------------------- serve-mcp and demo: where files go


@pytest.mark.usefixtures("mcp_extra")
def test_serve_mcp_in_a_missing_directory_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In process, as the shell test in test_cli_failures does it from outside (commands.py 215-216)."""
    db = tmp_path / "no-such-dir" / "x.db"
    assert _exit_of(["serve-mcp", "--db", str(db), *SERVE]).code == f"cannot open {db}: its directory does not exist"
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_demo_whose_temporary_directory_is_gone_is_a_one_line_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary directory Python settled on (``tempfile.tempdir``) was removed (demo.py 184-185)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "removed"))
    exit_ = _exit_of(["demo"])
    assert exit_.code == "demo cannot create a temporary directory: No such file or directory"
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_demo_on_a_link_into_a_missing_directory_is_a_one_line_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The link itself is "nothing there" and its directory exists, but the file it names cannot be
    created: the exclusive creation's error is named (demo.py 220-221)."""
    link = tmp_path / "demo.db"
    link.symlink_to(tmp_path / "gone" / "demo.db")
    exit_ = _exit_of(["demo", "--db", str(link)])
    assert exit_.code == f"cannot create {link}: No such file or directory"
    assert capsys.readouterr().out == ""
    assert [path.name for path in tmp_path.iterdir()] == ["demo.db"]
    assert link.is_symlink()
    assert link.readlink() == tmp_path / "gone" / "demo.db"


# --------------------------------------------------------------------------- a reader that left a real pipe


def test_a_closed_pipe_in_process_points_stdout_at_devnull(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standard output is a pipe whose reader left: status 1, nothing on stderr, the demo's files
    removed, and the pipe's descriptor now ``/dev/null``, so the flush at exit cannot fail again
    (__init__.py 243)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`| head -1`) exited
    pipe = open(write_end, "w")  # noqa: PTH123, SIM115 - a text stream on the pipe, as sys.stdout is
    try:
        monkeypatch.setattr(sys, "stdout", pipe)
        status = main(["demo", "--db", str(tmp_path / "demo.db")])
        monkeypatch.undo()
        assert status == 1
        assert os.path.samestat(os.fstat(write_end), Path(os.devnull).stat())
        pipe.close()  # flushes what the failed write left in the buffer: into /dev/null, no BrokenPipeError
    finally:
        with contextlib.suppress(OSError):
            pipe.close()
    assert capsys.readouterr().err == ""
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- keys the command could not destroy


def _vault_locked(*_args: object) -> None:
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorname = "SQLITE_BUSY"  # as the sqlite3 module sets it
    raise busy


def _note(db: Path) -> str:
    run = f"run engram-memory reap-keys --db {db}"
    return f"adjudicate: doomed keys could not be destroyed yet (they stay doomed): {run}\n"


@pytest.mark.parametrize("decision", ["accept", "reject"])
def test_a_decision_whose_keys_cannot_be_destroyed_yet_stands_with_one_note(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, decision: str
) -> None:
    """Status 0 and its line; the keys stay doomed for reap-keys; no library log record, no traceback.

    (A reject destroys its key within the decision, an accept at the end of the command.)
    """
    db, candidate = review
    monkeypatch.setattr(SQLiteKeyVault, "destroy", _vault_locked)
    assert main([*_argv("adjudicate", db, candidate)[:-1], decision]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{candidate}: {decision}ed")
    assert err == _note(db)
    monkeypatch.undo()
    assert main(["reap-keys", "--db", str(db)]) == 0
    assert capsys.readouterr().out == "1 doomed key(s) destroyed\n"


def test_a_failed_decision_still_notes_keys_it_could_not_destroy(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note comes before the command's one failure line (a key left doomed by an earlier accept)."""
    db, candidate = review
    monkeypatch.setattr(SQLiteKeyVault, "destroy", _vault_locked)
    assert main([*_argv("adjudicate", db, candidate)[:-1], "accept"]) == 0
    capsys.readouterr()
    failed = _exit_of([*_argv("adjudicate", db, "candidate_00")[:-1], "accept"])
    assert failed.code == "adjudicate candidate_00: NOT_FOUND (memory target not found)"
    assert capsys.readouterr().err == _note(db)


def test_reap_keys_blames_the_store_not_the_vault_when_the_store_cannot_list_its_scopes(
    review: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = review
    listed = SQLiteStore.scopes
    calls: list[int] = []

    def busy_on_the_second_listing(store: SQLiteStore) -> list[str]:
        calls.append(1)
        if len(calls) == 2:  # the command's own listing passes; reap_keys' meets a busy store
            raise StoreUnavailableError("sqlite begin read failed: SQLITE_BUSY")
        return listed(store)

    monkeypatch.setattr(SQLiteStore, "scopes", busy_on_the_second_listing)
    assert _exit_of(["reap-keys", "--db", str(db)]).code == "reap-keys: sqlite begin read failed: SQLITE_BUSY"
    assert capsys.readouterr().err == ""
