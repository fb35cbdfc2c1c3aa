"""Capture and admit in a loop on one SQLite file until killed (``tests/test_sqlite_crash.py``).

``python -m tests.sqlite_workers.crash_worker DB RUN SEED``: opens ``sqlite:///DB`` with
``synchronous=FULL`` and an accepting policy, prints ``{"event": "ready"}``, then alternates a
capture (fresh key) and the admission of that candidate (fresh key) in a random scope. Before each
call it prints a ``start`` line with the tool, scope and exact arguments; only after the response
arrived does it print the ``done`` line with the whole envelope. Every line is flushed at once.
It stops by itself after ``MAX_OPERATIONS`` or ``MAX_SECONDS`` (the test kills it long before).
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any, Final

from engram_memory import DefaultPolicy
from engram_memory.connect import connect
from engram_memory.testing import capture_args
from engram_memory.testing.fakes import ADMISSION, CAPTURE
from tests.sqlite_workers.common import SCOPES, binding, emit

MAX_OPERATIONS: Final = 5_000
MAX_SECONDS: Final = 20.0


def main(argv: list[str]) -> int:
    path, run, seed = argv[0], int(argv[1]), int(argv[2])
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    service = connect("sqlite:///" + path, policy=DefaultPolicy(admission="accept"), synchronous="FULL")
    emit({"event": "ready", "run": run})
    deadline = time.monotonic() + MAX_SECONDS
    pending: tuple[int, str] | None = None
    for number in range(MAX_OPERATIONS):
        if time.monotonic() > deadline:
            break
        key = f"idempotency-key:crash-r{run}-op{number}"
        arguments: dict[str, Any]
        if pending is None:
            scope, tool = rng.randrange(len(SCOPES)), CAPTURE
            arguments = capture_args(key)
        else:
            scope, tool = pending[0], ADMISSION
            arguments = {"candidate_id": pending[1], "idempotency_key": key}
        emit({"event": "start", "op": number, "tool": tool, "scope": scope, "arguments": arguments})
        envelope = service.call_tool(tool, arguments, binding(scope))
        emit({"event": "done", "op": number, "tool": tool, "scope": scope, "envelope": envelope})
        if not envelope["ok"]:
            return 1
        value = envelope["output"]["value"]
        pending = (scope, value["candidate_id"]) if tool == CAPTURE else None
    service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
