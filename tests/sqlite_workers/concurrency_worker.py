"""One of four processes hammering one SQLite file (``tests/test_sqlite_concurrency.py``).

``python -m tests.sqlite_workers.concurrency_worker DB PROCESS MUTATIONS SEED BUSY_MS OUT``: process
``PROCESS`` (0–3) belongs to pair ``PROCESS // 2``. Both processes of a pair follow the same plan
(:func:`plan`), so they send the *same* shared keys with the same arguments at about the same time,
and each sends its own private keys in the same slots. It prints ``{"event": "ready"}``, waits for
one line on stdin (the start signal shared by all four), runs exactly ``MUTATIONS`` mutation calls,
retrying every retriable failure with back-off, and writes one JSON report to ``OUT``.
``BUSY_MS`` 0 opens the service with :func:`~engram_memory.connect.connect` (default busy timeout);
a positive value opens the store and the vault with that busy timeout, short enough that lock
contention surfaces as ``STORE_UNAVAILABLE`` answers the worker must retry.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Final

from engram_memory import DefaultPolicy, MemoryService
from engram_memory.clock import SystemClock
from engram_memory.connect import connect
from engram_memory.keyvaults.sqlite import SQLiteKeyVault
from engram_memory.stores.sqlite import SQLiteStore
from engram_memory.testing import capture_args, confirm, distinctive_words
from engram_memory.testing.fakes import ADMISSION, CAPTURE, FORGET, WITHDRAW
from tests.sqlite_workers.common import SCOPES, binding, emit

FLAVOURS: Final = ("admit", "admit", "withdraw", "forget")
RETRY_BUDGET_SECONDS: Final = 60.0


def pair_principal(pair: int) -> str:
    """The principal of both processes of a pair (idempotency keys are scoped to it)."""
    return f"principal-pair-{pair}"


def plan(pair: int, role: int, mutations: int, seed: int) -> list[dict[str, Any]]:
    """The calls of process ``role`` of ``pair``: shared items identical in both, private ones not.

    Each item is a capture followed by an admission, a withdraw, or an admission and a forget, in
    one scope. Items go ``shared``, ``private``, ``shared``… with random scopes and flavours drawn
    from the pair's seed, so both processes see the same sequence of shared keys.
    """
    rng = random.Random(seed * 10 + pair)  # noqa: S311 - a reproducible workload
    calls: list[dict[str, Any]] = []
    item = 0
    while len(calls) < mutations:
        shared = item % 2 == 0 or rng.random() < 0.25  # about 60 % shared items
        scope = rng.randrange(len(SCOPES))
        flavour = rng.choice(FLAVOURS)
        owner = f"pair{pair}" if shared else f"pair{pair}-process{role}"
        stem = f"idempotency-key:concurrency-{owner}-item{item}"
        words = distinctive_words(stem)
        steps: list[tuple[str, str]] = [(CAPTURE, stem)]
        steps += [(ADMISSION, stem + ":admit")] if flavour != "withdraw" else [(WITHDRAW, stem + ":withdraw")]
        if flavour == "forget":
            steps.append((FORGET, stem + ":forget"))
        for tool, key in steps:
            calls.append(
                {"tool": tool, "key": key, "stem": stem, "scope": scope, "shared": shared, "words": list(words)}
            )
        item += 1
    return calls[:mutations]


class _Worker:
    def __init__(self, service: MemoryService, principal: str) -> None:
        self.service = service
        self.principal = principal
        self.clock = SystemClock()
        self.candidates: dict[str, str] = {}
        """capture key → candidate id (this process's view)."""
        self.records: dict[str, str] = {}
        """capture key → record id."""

    def arguments(self, call: dict[str, Any]) -> dict[str, Any]:
        tool, key, stem = call["tool"], call["key"], call["stem"]
        if tool == CAPTURE:
            return capture_args(key, words=call["words"])
        if tool == ADMISSION:
            return {"candidate_id": self.candidates[stem], "idempotency_key": key}
        if tool == WITHDRAW:
            return {"candidate_id": self.candidates[stem], "idempotency_key": key, "reason_ref": "reason:obsolete"}
        return {"record_id": self.records[stem], "idempotency_key": key, "reason_ref": "reason:erasure-request"}

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        """Send one mutation until it succeeds or fails for good; return the call's report."""
        tool = call["tool"]
        arguments = self.arguments(call)
        retried: list[str] = []
        delay = 0.002
        started = time.monotonic()
        while True:
            bound = binding(call["scope"], self.principal)
            if tool in {WITHDRAW, FORGET}:
                bound = confirm(self.service, tool, arguments, bound, self.clock)
            envelope = self.service.call_tool(tool, arguments, bound)
            if envelope["ok"] or not envelope["error"]["retriable"]:
                break
            retried.append(envelope["error"]["code"])
            if time.monotonic() - started > RETRY_BUDGET_SECONDS:
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        if envelope["ok"]:
            value = envelope["output"]["value"]
            if tool == CAPTURE:
                self.candidates[call["stem"]] = value["candidate_id"]
            elif tool == ADMISSION:
                self.records[call["stem"]] = value["outcome"]["record_id"]
        return {**call, "arguments": arguments, "envelope": envelope, "retried": retried}


def open_service(path: str, busy_ms: int) -> MemoryService:
    """The service over ``path`` (see the module docstring for ``busy_ms``)."""
    policy = DefaultPolicy(admission="accept")
    if busy_ms == 0:
        return connect("sqlite:///" + path, policy=policy, synchronous="FULL")
    store = SQLiteStore(path, synchronous="FULL", busy_timeout_ms=busy_ms)
    vault = SQLiteKeyVault(path + ".vault", master_key_file=path + ".key", busy_timeout_ms=busy_ms)
    return MemoryService(store=store, vault=vault, policy=policy, clock=SystemClock())


def main(argv: list[str]) -> int:
    path, process, mutations, seed, busy_ms = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    out = Path(argv[5])
    pair, role = divmod(process, 2)
    service = open_service(path, busy_ms)
    calls = plan(pair, role, mutations, seed)
    worker = _Worker(service, pair_principal(pair))
    emit({"event": "ready", "process": process})
    if sys.stdin.readline().strip() != "go":
        return 2
    started = time.monotonic()
    reports = [worker.run(call) for call in calls]
    elapsed = time.monotonic() - started
    service.close()
    out.write_text(json.dumps({"process": process, "seconds": elapsed, "calls": reports}), encoding="utf-8")
    emit({"event": "finished", "process": process})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
