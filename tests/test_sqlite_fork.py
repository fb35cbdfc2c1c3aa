"""A service on SQLite survives ``fork``: the child opens its own connections and never touches
its parent's (SQLite forbids carrying a connection across ``fork``), and both keep working."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from engram_memory import DefaultPolicy, ManualClock, MemoryService
from engram_memory.connect import connect
from engram_memory.testing import capture_args, make_binding, ok
from engram_memory.testing.fakes import ADMISSION, CAPTURE, PURPOSE, SEARCH

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

BINDING = make_binding()


def _capture_and_admit(service: MemoryService, key: str, words: tuple[str, ...]) -> str:
    candidate_id = ok(service.call_tool(CAPTURE, capture_args(key, words=words), BINDING))["candidate_id"]
    admitted = ok(service.call_tool(ADMISSION, {"candidate_id": candidate_id, "idempotency_key": key + "-a"}, BINDING))
    record_id: str = admitted["outcome"]["record_id"]
    return record_id


def _found(service: MemoryService, word: str) -> list[str]:
    value = ok(service.call_tool(SEARCH, {"query": word, "purpose_ref": PURPOSE}, BINDING))
    return [packet["record"]["record_id"] for packet in value["records"]]


def _connections(service: MemoryService) -> set[int]:
    """Ids of the store's idle connections and of the vault's connection (white box)."""
    store: Any = service.store
    vault: Any = service.vault
    return {id(conn) for conn in store._pool} | {id(vault._conn)}


def test_a_forked_child_opens_its_own_connections_and_both_processes_keep_working(tmp_path: Path) -> None:
    service = connect(
        "sqlite:///" + str(tmp_path / "fork.db"), policy=DefaultPolicy(admission="accept"), clock=ManualClock()
    )
    before = _capture_and_admit(service, "fork-parent-capture-1", ("zqparentbefore", "alpha", "beta"))
    parent_connections = _connections(service)
    report = tmp_path / "child.json"
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        code = 1
        try:
            child = _capture_and_admit(service, "fork-child-capture-1", ("zqchildonly", "gamma", "delta"))
            found = {"before": _found(service, "zqparentbefore"), "child": _found(service, "zqchildonly")}
            reused = sorted(_connections(service) & parent_connections)
            service.close()
            report.write_text(json.dumps({"child": child, "found": found, "reused": reused}), encoding="utf-8")
            code = 0
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result = json.loads(report.read_text(encoding="utf-8"))
    assert result["reused"] == []
    assert result["found"] == {"before": [before], "child": [result["child"]]}

    after = _capture_and_admit(service, "fork-parent-capture-2", ("zqparentafter", "alpha", "beta"))
    assert _found(service, "zqparentbefore") == [before]
    assert _found(service, "zqchildonly") == [result["child"]]
    assert _found(service, "zqparentafter") == [after]
    service.close()
    for name in ("fork.db", "fork.db.vault"):
        with closing(sqlite3.connect(tmp_path / name)) as raw:  # a connection's own `with` does not close it
            assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
