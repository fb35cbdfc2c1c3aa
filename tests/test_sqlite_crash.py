"""Crash safety (DESIGN D4, D6, D13–D15): SIGKILL at random moments loses no acknowledged write.

A worker process (``tests/sqlite_workers/crash_worker.py``) captures and admits in a loop on one
SQLite file with ``synchronous=FULL``, printing a ``start`` line before each call and a ``done``
line only after the response arrived. The test kills it with SIGKILL 20–300 ms after it reported
``ready`` (seeded delays), ``KILLS`` times on the same files, and after every kill reopens the
store and the vault and checks:

* ``MemoryAdmin.verify`` passes for every scope (the chain is intact and every pending candidate
  and live record still has its sealed body **and its key in the separate vault file**);
* every acknowledged operation is there: the same key and arguments replay the original response
  byte for byte (``duplicate_exact`` / ``replayed: true``), and the candidate or record is
  reachable (admitted records through ``get``);
* the interrupted operation (``start`` without ``done``), retried with the same key, completes
  exactly once: the journal grows by one event if no idempotency row was committed before the
  kill, by none if it was (then the retry is a replay), and a second retry replays;
* key destructions left undone by a kill between commit and destruction are reaped, and after the
  reap the vault no longer holds those keys;
* the journal heights of all scopes add up to the number of distinct logical operations.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

import attrs

from engram_memory import DefaultPolicy, ManualClock, MemoryAdmin, MemoryService
from engram_memory.canonical import canonical_bytes
from engram_memory.connect import connect
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.testing.fakes import ADMISSION, CAPTURE, GET, PURPOSE
from tests.sqlite_workers.common import PRINCIPAL, SCOPES, binding

REPO: Final = Path(__file__).resolve().parents[1]
KILLS: Final = 24
SEED: Final = 20_260_101
MIN_DELAY, MAX_DELAY = 0.020, 0.300
READY_TIMEOUT: Final = 30.0
EXIT_TIMEOUT: Final = 10.0


@attrs.define
class _Run:
    """What the parent saw of one worker run."""

    lines: list[dict[str, Any]]
    stderr: str

    @property
    def done(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["event"] == "done"]

    @property
    def interrupted(self) -> dict[str, Any] | None:
        finished = {line["op"] for line in self.done}
        started = [line for line in self.lines if line["event"] == "start" and line["op"] not in finished]
        assert len(started) <= 1, started
        return started[0] if started else None


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _worker_env() -> dict[str, str]:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _run_and_kill(db: Path, run: int, delay: float, stderr_path: Path) -> _Run:
    """Start a worker, wait for ``ready``, sleep ``delay``, SIGKILL it, and collect its lines."""
    lines: queue.Queue[str | None] = queue.Queue()
    with stderr_path.open("w+", encoding="utf-8") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.sqlite_workers.crash_worker", str(db), str(run), str(SEED + run)],
            cwd=REPO,
            env=_worker_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert child.stdout is not None
            reader = threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True)
            reader.start()
            first = lines.get(timeout=READY_TIMEOUT)
            assert first is not None, ("worker ended before it was ready", stderr_path.read_text(encoding="utf-8"))
            assert json.loads(first)["event"] == "ready", first
            time.sleep(delay)
            assert child.poll() is None, (
                "worker stopped before it was killed",
                stderr_path.read_text(encoding="utf-8"),
            )
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=EXIT_TIMEOUT) == -signal.SIGKILL
            reader.join(timeout=EXIT_TIMEOUT)
            assert not reader.is_alive()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=EXIT_TIMEOUT)
            if child.stdout is not None:
                child.stdout.close()
        stderr.seek(0)
        text = stderr.read()
    received: list[dict[str, Any]] = []
    while True:
        text_line = lines.get_nowait()
        if text_line is None:
            break
        if text_line.endswith("\n"):  # a line cut by the kill was never acknowledged
            received.append(json.loads(text_line))
    starts = {line["op"]: line for line in received if line["event"] == "start"}
    for line in received:
        if line["event"] == "done":  # the exact arguments the worker sent
            line["arguments"] = starts[line["op"]]["arguments"]
    return _Run(lines=received, stderr=text)


@contextmanager
def _reopened(db: Path) -> Iterator[MemoryService]:
    service = connect("sqlite:///" + str(db), policy=DefaultPolicy(admission="accept"), clock=ManualClock())
    try:
        yield service
    finally:
        service.close()


def _high_water(service: MemoryService, scope: int) -> int:
    with service.store.read(binding(scope).scope) as reader:
        return reader.high_water()


def _verify_all(service: MemoryService) -> None:
    admin = MemoryAdmin(service)
    for tenant, workspace in SCOPES:
        report = admin.verify(tenant_id=tenant, workspace_id=workspace)
        assert report.ok, report
    for scope in service.store.scopes():
        assert admin.verify_scope(scope).ok, scope


def _replay(service: MemoryService, tool: str, scope: int, arguments: dict[str, Any]) -> dict[str, Any]:
    envelope = service.call_tool(tool, arguments, binding(scope))
    assert envelope["ok"] is True, envelope
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def _as_replay(tool: str, value: dict[str, Any]) -> bytes:
    """The bytes a replay of an original ``value`` must have."""
    if tool == CAPTURE:
        return canonical_bytes({**value, "status": "duplicate_exact"})
    return canonical_bytes({**value, "replayed": True})


def _is_replay(tool: str, value: dict[str, Any]) -> bool:
    return value["status"] == "duplicate_exact" if tool == CAPTURE else value["replayed"] is True


def _check_acknowledged(service: MemoryService, done: dict[str, Any]) -> None:
    """An acknowledged operation replays byte for byte and its target is reachable."""
    tool, scope, original = done["tool"], done["scope"], done["envelope"]["output"]["value"]
    replay = _replay(service, tool, scope, done["arguments"])
    assert canonical_bytes(replay) == _as_replay(tool, original), (done, replay)
    with service.store.read(binding(scope).scope) as reader:
        if tool == CAPTURE:
            row = reader.candidate(original["candidate_id"])
            assert row is not None
            assert row.state in {"pending", "admitted"}
        else:
            row = reader.candidate(original["outcome"]["candidate_id"])
            assert row is not None
            assert row.state == "admitted"
    if tool == ADMISSION:
        record_id = original["outcome"]["record_id"]
        got = service.call_tool(GET, {"record_id": record_id, "purpose_ref": PURPOSE}, binding(scope))
        assert got["ok"] is True, got
        assert got["output"]["value"]["record"]["record_id"] == record_id


def _retry_interrupted(service: MemoryService, started: dict[str, Any]) -> bool:
    """Retry the interrupted operation twice; return whether it had committed before the kill."""
    tool, scope, arguments = started["tool"], started["scope"], started["arguments"]
    with service.store.read(binding(scope).scope) as reader:
        committed = reader.idempotency(PRINCIPAL, arguments["idempotency_key"]) is not None
    before = _high_water(service, scope)
    first = _replay(service, tool, scope, arguments)
    assert _is_replay(tool, first) is committed, (started, first)
    if tool == ADMISSION:
        assert first["outcome"]["status"] == "accepted", first
    else:
        assert first["status"] in {"committed_pending", "duplicate_exact"}, first
    assert _high_water(service, scope) == before + (0 if committed else 1)
    second = _replay(service, tool, scope, arguments)
    assert canonical_bytes(second) == _as_replay(tool, first), (first, second)
    assert _high_water(service, scope) == before + (0 if committed else 1)
    return committed


def _reap(service: MemoryService) -> int:
    """Destroy keys doomed by a commit whose destruction the kill prevented; return how many."""
    doomed: list[str] = []
    for index in range(len(SCOPES)):
        with service.store.read(binding(index).scope) as reader:
            doomed += reader.doomed_keys()
    assert MemoryAdmin(service).reap_keys() == len(doomed)
    vault = service.vault
    assert isinstance(vault, SQLiteKeyVault)
    assert not any(vault.holds(key_ref) for key_ref in doomed)
    for index in range(len(SCOPES)):
        with service.store.read(binding(index).scope) as reader:
            assert reader.doomed_keys() == []
    return len(doomed)


def _orphan_keys(db: Path) -> int:
    """Vault keys no store row refers to (sealed by a unit the kill rolled back): harmless, counted."""
    store = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    vault = sqlite3.connect(f"file:{db}.vault?mode=ro", uri=True)
    try:
        used = {row[0] for row in store.execute("SELECT key_ref FROM candidates WHERE key_ref IS NOT NULL")}
        used |= {row[0] for row in store.execute("SELECT key_ref FROM records WHERE key_ref IS NOT NULL")}
        held = {row[0] for row in vault.execute("SELECT key_ref FROM data_keys")}
    finally:
        store.close()
        vault.close()
    assert used <= held  # every live sealed body has its key
    return len(held - used)


def test_sigkill_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    rng = random.Random(SEED)  # noqa: S311 - reproducible kill moments
    db = tmp_path / "crash.db"
    with _reopened(db):  # create the schema, the vault and its key file once
        pass
    logical = 0
    acknowledged: list[dict[str, Any]] = []
    stats = {"kills": 0, "acknowledged": 0, "interrupted": 0, "committed_before_kill": 0, "reaped_keys": 0}
    started_at = time.monotonic()
    for run in range(KILLS):
        seen = _run_and_kill(db, run, rng.uniform(MIN_DELAY, MAX_DELAY), tmp_path / f"worker-{run}.stderr")
        stats["kills"] += 1
        assert not any(line["event"] == "done" and not line["envelope"]["ok"] for line in seen.lines), seen
        with _reopened(db) as service:
            _verify_all(service)
            for done in seen.done:
                _check_acknowledged(service, done)
            interrupted = seen.interrupted
            logical += len(seen.done)
            if interrupted is not None:
                stats["interrupted"] += 1
                stats["committed_before_kill"] += _retry_interrupted(service, interrupted)
                logical += 1
            stats["reaped_keys"] += _reap(service)
            _verify_all(service)
            assert sum(_high_water(service, index) for index in range(len(SCOPES))) == logical, (run, seen.stderr)
        acknowledged += seen.done
        stats["acknowledged"] += len(seen.done)
    with _reopened(db) as service:  # every acknowledged operation of every run is still there
        for done in acknowledged:
            _check_acknowledged(service, done)
        _verify_all(service)
    stats["orphan_vault_keys"] = _orphan_keys(db)
    elapsed = time.monotonic() - started_at
    assert stats["kills"] >= 20
    assert stats["acknowledged"] > KILLS, stats  # the workers did real work between kills
    assert stats["interrupted"] > KILLS // 2, stats  # and most kills landed inside an operation
    print(f"crash safety: {stats}, {elapsed:.1f} s")  # noqa: T201 - the numbers the issue asks for
