#!/usr/bin/env python3
"""engram_memory benchmarks: write path, read path, cost growth, memory, and the limits.

Usage::

    python benchmarks/run.py --quick              # 1k and 10k existing records, < 2 minutes
    python benchmarks/run.py                      # 1k, 10k and 100k, < 20 minutes on 2 cores
    python benchmarks/run.py --sizes 1000,50000   # any sizes
    python benchmarks/run.py --output results.md --json results.json

Prints Markdown tables (see ``docs/performance.md`` for the method and the latest figures).
Uses only the standard library and the project's runtime dependencies (no pytest).

Method, in short. Each measurement runs in its own subprocess, so peak RSS and caches are not
polluted by earlier phases. For each size ``N`` the base corpus (``N`` documents of tenant 0 plus a
small background in three other tenants) is preloaded through the store's units of work with
:func:`engram_memory.testing.corpus.preload_admitted` (the rows capture + an accepting admission
write, built with the library's own functions); the SQLite base file is built once per size and
copied for each ``synchronous`` mode. Then every measured operation goes through the real
``MemoryService.call_tool`` (the JSON contract, as an MCP host calls it) on top of that state.
The limits (bare durable SQLite transactions with the row counts of our cycle, RFC 8785 + SHA-256
+ AES-GCM of the same payload, FTS5 ``bm25()`` over the same documents) are timed in the same
process, interleaved one-for-one with our operations, so a neighbour slowing the disk or the CPU
slows both. Cost growth compares processes run minutes apart, so the writes are measured a
second time in a paired pass (the smallest and the largest size in two processes alive at once,
taking turns in blocks of ten operations), and a write counts as flat only if both passes say so,
by p50 and by mean. Reads are measured before the writes, while the scope holds exactly ``N``
records, as the FTS5 limit does.
Three private handles are used, read-only or for the preload only: the vault's connection (one
transaction around a preload batch's seals), the store's idle connections (a larger page cache
while preloading; trace callbacks to count the rows a cycle writes).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import platform
import random
import resource
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Self

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import attrs  # noqa: E402 - after the path fix-up, so the benchmark runs from a checkout
import rfc8785  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402

import engram_memory  # noqa: E402
from engram_memory import DefaultPolicy, HostBinding, MemoryService, connect  # noqa: E402
from engram_memory.canonical import canonical_bytes  # noqa: E402
from engram_memory.ports import RankingQuery  # noqa: E402
from engram_memory.ranking.tokenizer import field_texts  # noqa: E402
from engram_memory.records import complete_payload  # noqa: E402

CAPTURE = "engram_memory_capture"
ADMISSION = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
SEARCH = "engram_memory_search"
GET = "engram_memory_get"
REASON = "reason:bench"

MASTER_KEY = hashlib.sha256(b"engram-memory benchmark master key").digest()
POLICY = DefaultPolicy(admission="accept")
BACKGROUND_FRACTION = 0.02
"""Each of the three other tenants holds this fraction of ``N`` (they share the SQLite file)."""
AUDIT_CYCLES = 32
"""Warm-up cycles whose statements are counted (two batches of the vault's reserve and of key destruction)."""
PRELOAD_VAULT_RESERVE = 2000
"""Keys the vault writes ahead during the preload: one vault commit per preload batch."""
FIELD_WEIGHTS = (3.0, 2.0, 1.5, 1.0, 0.5)
TERM_COUNTS = (1, 3, 8)
SELECTIVITIES = ("selective", "common")

# operation counts per measurement process: (quick, full)
COUNTS = {
    "capture": (100, 200),
    "admission": (50, 100),
    "withdraw": (50, 100),
    "cycle": (50, 100),
    "forget": (50, 100),
    "get": (150, 300),
    "queries": (10, 30),
    "walks": (3, 5),
}
FRESH_DOCUMENTS = 10_000_000
"""Index of tenant 0's first document written by the measured operations, past any preloaded one:
every size captures and admits the same payloads."""
SEARCH_CLASS_BUDGET_S = (4.0, 15.0)
"""Stop a search class early after this long (at least 3 samples are always taken)."""


def _load_corpus() -> ModuleType:
    """``engram_memory/testing/corpus.py`` without importing ``engram_memory.testing`` (pytest).

    Read from the package as imported: the checkout, or an installed wheel.
    """
    path = Path(engram_memory.__file__).resolve().parent / "testing" / "corpus.py"
    spec = importlib.util.spec_from_file_location("engram_benchmark_corpus", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus_module = _load_corpus()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(latencies: Sequence[float]) -> dict[str, float]:
    """Operations/s (single caller), mean, p50 and p99 in seconds, sample count."""
    total = sum(latencies)
    return {
        "n": len(latencies),
        "ops": len(latencies) / total if total > 0 else 0.0,
        "mean": total / len(latencies),
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
    }


def peak_rss_kib() -> int:
    """Peak resident set size of this process, in KiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak // 1024) if sys.platform == "darwin" else int(peak)


# --------------------------------------------------------------------------- service helpers


def binding_for(tenant: Any) -> HostBinding:
    binding: HostBinding = tenant.binding("benchmark")
    return binding


def ok(envelope: dict[str, Any]) -> dict[str, Any]:
    if envelope.get("ok") is not True:
        raise RuntimeError(f"operation failed: {json.dumps(envelope)[:600]}")
    value: dict[str, Any] = envelope["output"]["value"]
    return value


def confirmed(service: MemoryService, tool: str, args: dict[str, Any], binding: HostBinding) -> HostBinding:
    """``binding`` with a valid confirmation of this exact call (built outside the timed region)."""
    now = datetime.now(UTC)
    confirmation = service.confirmation(
        tool,
        args,
        binding,
        confirmation_id="confirmation-" + uuid.uuid4().hex,
        requested_at=now - timedelta(seconds=5),
        approved_at=now,
    )
    return attrs.evolve(binding, confirmation=confirmation)


@contextlib.contextmanager
def vault_transaction(vault: Any) -> Iterator[None]:
    """One vault transaction per preload batch's seals (a private handle; preload only).

    ``SQLiteKeyVault`` writes its keys ahead in reserves of 32, one durable commit each; a reserve
    of a whole batch makes that one commit per batch, which is all the preload needs. Any other
    vault is left alone.
    """
    if not hasattr(vault, "_reserve_size"):
        yield
        return
    saved = vault._reserve_size  # noqa: SLF001
    vault._reserve_size = PRELOAD_VAULT_RESERVE  # noqa: SLF001
    try:
        yield
    finally:
        vault._reserve_size = saved  # noqa: SLF001


def bulk_cache(store: Any, kib: int) -> None:
    """A larger page cache on the store's idle connections (preload only; measured runs use defaults)."""
    for conn in getattr(store, "_pool", []):
        conn.execute(f"PRAGMA cache_size = -{int(kib)}")


def preload(service: MemoryService, corpus: Any, size: int) -> tuple[list[str], dict[str, float]]:
    """Load ``size`` documents into tenant 0 and the background tenants; return tenant 0's record ids."""
    now = datetime.now(UTC)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    ids = corpus_module.preload_admitted(
        service.store,
        service.vault,
        binding_for(corpus.tenants[0]),
        corpus.documents(0, size),
        policy=POLICY,
        now=now,
        batch=2000,
        vault_batch=lambda: vault_transaction(service.vault),
    )
    timings["main_s"] = time.perf_counter() - started
    background = max(10, int(size * BACKGROUND_FRACTION))
    started = time.perf_counter()
    for tenant in corpus.tenants[1:]:
        corpus_module.preload_admitted(
            service.store,
            service.vault,
            binding_for(tenant),
            corpus.documents(tenant.index, background),
            policy=POLICY,
            now=now,
            batch=2000,
            vault_batch=lambda: vault_transaction(service.vault),
        )
    timings["background_s"] = time.perf_counter() - started
    timings["background_docs"] = background * (len(corpus.tenants) - 1)
    return ids, timings


def sqlite_url(path: Path) -> str:
    return "sqlite:///" + str(path)


def open_sqlite(path: Path, synchronous: str) -> MemoryService:
    return connect(sqlite_url(path), policy=POLICY, synchronous=synchronous, master_key=MASTER_KEY)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- statement audit


class StatementAudit:
    """Counts what an operation does to SQLite: commits, changed rows, vault commits, checkpoints.

    Hooks the trace callbacks of the store's pooled connections and the vault's connection
    (private handles, read-only use; the benchmark needs them to count rows). Counts add up over
    every ``with`` block; :meth:`per` gives the mean per operation (the vault writes keys ahead
    and accepts destroy keys in batches, so one operation alone says little).
    """

    def __init__(self, service: MemoryService) -> None:
        self.store_conns: list[sqlite3.Connection] = list(getattr(service.store, "_pool", []))
        vault_conn = getattr(service.vault, "_conn", None)
        self.vault_conns: list[sqlite3.Connection] = [vault_conn] if isinstance(vault_conn, sqlite3.Connection) else []
        self.statements: list[tuple[str, str]] = []
        self.totals: dict[str, int] = {}

    def per(self, operations: int) -> dict[str, float]:
        """Mean counts per operation over ``operations`` audited blocks."""
        return {name: value / operations for name, value in self.totals.items()}

    def __enter__(self) -> Self:
        self._before = {
            "store": sum(c.total_changes for c in self.store_conns),
            "vault": sum(c.total_changes for c in self.vault_conns),
        }
        for label, conns in (("store", self.store_conns), ("vault", self.vault_conns)):
            for conn in conns:
                conn.set_trace_callback(self._tracer(label))
        return self

    def _tracer(self, label: str) -> Callable[[str], None]:
        def trace(sql: str) -> None:
            self.statements.append((label, sql))

        return trace

    def __exit__(self, *exc: object) -> None:
        for conn in self.store_conns + self.vault_conns:
            conn.set_trace_callback(None)
        store_rows = sum(c.total_changes for c in self.store_conns) - self._before["store"]
        vault_rows = sum(c.total_changes for c in self.vault_conns) - self._before["vault"]

        def count(label: str, predicate: Callable[[str], bool]) -> int:
            return sum(1 for who, sql in self.statements if who == label and predicate(sql.strip().upper()))

        result = {
            "store_rows": store_rows,
            "store_commits": count("store", lambda s: s.startswith("COMMIT")),
            "vault_rows": vault_rows,
            "vault_commits": count("vault", lambda s: s.startswith("COMMIT")),
            "vault_checkpoints": count("vault", lambda s: "WAL_CHECKPOINT" in s),
        }
        self.statements.clear()
        for name, value in result.items():
            self.totals[name] = self.totals.get(name, 0) + value


# --------------------------------------------------------------------------- workers


def _count(name: str, quick: bool) -> int:
    return COUNTS[name][0 if quick else 1]


class WriteBench:
    """The five write operations on one service, run in blocks of any size.

    State carries over between blocks: admissions and withdraws each take the next pending
    captures not yet decided (admissions run first, so they get the earliest), forgets take
    preloaded records from a fixed random sample. The sequential pass runs each operation once with its full count
    (:func:`measure_writes`); the paired pass runs them in small blocks, alternating with a
    process at another size (:func:`measure_paired`).
    """

    def __init__(
        self, service: MemoryService, corpus: Any, binding: HostBinding, ids: list[str], *, quick: bool
    ) -> None:
        self.service, self.corpus, self.binding = service, corpus, binding
        self.position = FRESH_DOCUMENTS  # the same new documents at every size
        self.pending: list[tuple[str, str]] = []
        self.decided = 0  # pending captures already admitted or withdrawn, in capture order
        rng = random.Random(f"forget/{len(ids)}")
        self.forgettable = rng.sample(ids, min(_count("forget", quick), len(ids) // 2))
        self.forgotten: list[str] = []
        self.cycle_limit: list[float] = []  # bare durable transactions timed after each cycle
        self.one_row: list[float] = []
        self.steps: dict[str, list[float]] = {"capture": [], "admission": []}  # each cycle's two steps
        self.step_limits: dict[str, list[float]] = {"capture": [], "admission": []}  # and their bare txns

    def next_args(self) -> dict[str, Any]:
        args: dict[str, Any] = self.corpus.capture_arguments(0, self.position)
        self.position += 1
        return args

    def admit(self, candidate_id: str, key: str) -> dict[str, Any]:
        args = {"candidate_id": candidate_id, "idempotency_key": corpus_module.admission_key(key)}
        return self.service.call_tool(ADMISSION, args, self.binding)

    def gated(self, tool: str, args: dict[str, Any]) -> float:
        """One confirmed call of a gated tool; its duration (the confirmation is built untimed)."""
        bound = confirmed(self.service, tool, args, self.binding)
        started = time.perf_counter()
        envelope = self.service.call_tool(tool, args, bound)
        elapsed = time.perf_counter() - started
        ok(envelope)
        return elapsed

    def warm_up(self, cycles: int) -> dict[str, Any]:
        """``cycles`` untimed capture+admit cycles, their statements counted (capture and admission apart)."""
        capture_audit, admit_audit = StatementAudit(self.service), StatementAudit(self.service)
        for _ in range(cycles):
            args = self.next_args()
            with capture_audit:
                value = ok(self.service.call_tool(CAPTURE, args, self.binding))
            with admit_audit:
                ok(self.admit(value["candidate_id"], args["idempotency_key"]))
        return {"capture": capture_audit.per(cycles), "admission": admit_audit.per(cycles)}

    def capture(self, count: int, limit: list[float] | None = None, sizes: list[int] | None = None) -> list[float]:
        """``count`` captures (kept pending); with ``limit``, the bare crypto of each payload too."""
        latencies: list[float] = []
        for _ in range(count):
            args = self.next_args()
            started = time.perf_counter()
            envelope = self.service.call_tool(CAPTURE, args, self.binding)
            latencies.append(time.perf_counter() - started)
            self.pending.append((ok(envelope)["candidate_id"], args["idempotency_key"]))
            if limit is not None and sizes is not None:
                completed = complete_payload(args["payload"], self.binding.scope)
                limit.append(bare_crypto(completed, self.binding.scope))
                sizes.append(len(rfc8785.dumps(completed)))
        return latencies

    def admission(self, count: int) -> list[float]:
        """Accepting admissions of the next ``count`` pending captures."""
        latencies: list[float] = []
        for candidate_id, key in self._undecided(count):
            started = time.perf_counter()
            envelope = self.admit(candidate_id, key)
            latencies.append(time.perf_counter() - started)
            if ok(envelope)["outcome"]["status"] != "accepted":
                raise RuntimeError("admission did not accept")
        return latencies

    def withdraw(self, count: int) -> list[float]:
        """Withdraws of the next ``count`` pending captures."""
        return [
            self.gated(
                WITHDRAW, {"candidate_id": candidate_id, "idempotency_key": key + ":withdraw", "reason_ref": REASON}
            )
            for candidate_id, key in self._undecided(count)
        ]

    def _undecided(self, count: int) -> list[tuple[str, str]]:
        """The next ``count`` pending captures not yet admitted or withdrawn; they count as decided."""
        batch = self.pending[self.decided : self.decided + count]
        self.decided += len(batch)
        return batch

    def cycle(self, count: int, bare: BareDurable | None = None, split: tuple[int, int] = (0, 0)) -> list[float]:
        """``count`` capture+admit cycles; with ``bare``, the bare durable transactions of each too."""
        latencies: list[float] = []
        for _ in range(count):
            args = self.next_args()
            started = time.perf_counter()
            value = ok(self.service.call_tool(CAPTURE, args, self.binding))
            captured = time.perf_counter()
            ok(self.admit(value["candidate_id"], args["idempotency_key"]))
            ended = time.perf_counter()
            latencies.append(ended - started)
            self.steps["capture"].append(captured - started)
            self.steps["admission"].append(ended - captured)
            if bare is not None:
                capture_limit, admission_limit = bare.transaction(split[0]), bare.transaction(split[1])
                self.step_limits["capture"].append(capture_limit)
                self.step_limits["admission"].append(admission_limit)
                self.cycle_limit.append(capture_limit + admission_limit)
                self.one_row.append(bare.transaction(1))
        return latencies

    def forget(self, count: int) -> list[float]:
        """Forgets of the next ``count`` records of the sample."""
        start = len(self.forgotten)
        batch = self.forgettable[start : start + count]
        latencies = [
            self.gated(
                FORGET,
                {"record_id": record_id, "idempotency_key": f"bench-forget-{start + index:06d}", "reason_ref": REASON},
            )
            for index, record_id in enumerate(batch)
        ]
        self.forgotten += batch
        return latencies


def measure_writes(
    service: MemoryService,
    corpus: Any,
    binding: HostBinding,
    ids: list[str],
    gone: set[str],
    *,
    quick: bool,
    bare: BareDurable | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """capture, request_admission, withdraw, capture+admit cycle, forget; plus one audited cycle.

    The limits are timed interleaved with ours (one bare measurement after each of our operations),
    so a disk or CPU slowed down by a neighbour affects both alike.
    """
    bench = WriteBench(service, corpus, binding, ids, quick=quick)
    audit = bench.warm_up(AUDIT_CYCLES)
    results: dict[str, Any] = {}
    limit: list[float] = []
    sizes: list[int] = []
    results["capture"] = summary(bench.capture(_count("capture", quick), limit, sizes))
    results["limit_crypto_canonical"] = {**summary(limit), "payload_bytes": percentile(sizes, 50)}
    results["request_admission"] = summary(bench.admission(_count("admission", quick)))
    results["withdraw"] = summary(bench.withdraw(_count("withdraw", quick)))
    split = (
        round(audit["capture"]["store_rows"] + audit["capture"]["vault_rows"]),
        round(audit["admission"]["store_rows"] + audit["admission"]["vault_rows"]),
    )
    results["capture_admit_cycle"] = summary(bench.cycle(_count("cycle", quick), bare, split))
    for step in ("capture", "admission"):  # the cycle's two durable steps, for their own limits
        results[f"cycle_{step}"] = summary(bench.steps[step])
    if bench.cycle_limit:
        results["limit_durable_cycle"] = {**summary(bench.cycle_limit), "rows": list(split)}
        results["limit_durable_capture"] = {**summary(bench.step_limits["capture"]), "rows": split[0]}
        results["limit_durable_admission"] = {**summary(bench.step_limits["admission"]), "rows": split[1]}
        results["limit_one_row_commit"] = summary(bench.one_row)
    results["forget"] = summary(bench.forget(_count("forget", quick)))
    gone.update(bench.forgotten)
    return results, audit


def readable_sample(corpus: Any, ids: list[str], gone: set[str], count: int) -> list[str]:
    """Random preloaded records that ``get`` can read now: not forgotten, valid-time interval still open."""
    rng = random.Random(f"get/{len(ids)}")
    sample: list[str] = []
    while len(sample) < count:
        index = rng.randrange(len(ids))
        if ids[index] in gone or "t_end" in corpus.capture_arguments(0, index)["payload"]["valid_time"]:
            continue
        sample.append(ids[index])
    return sample


def measure_reads(  # noqa: C901 - one loop per kind of read
    service: MemoryService,
    corpus: Any,
    binding: HostBinding,
    ids: list[str],
    gone: set[str],
    *,
    quick: bool,
    fts: sqlite3.Connection | None,
) -> dict[str, Any]:
    """get, search per class (terms x selectivity), and a 100-result page walk.

    With ``fts``, each of our searches is followed by the same query on the bare FTS5 table.
    """
    results: dict[str, Any] = {}
    latencies: list[float] = []
    sample = readable_sample(corpus, ids, gone, _count("get", quick))
    ok(service.call_tool(GET, {"record_id": sample[0], "purpose_ref": corpus_module.PURPOSE}, binding))
    for record_id in sample:
        args = {"record_id": record_id, "purpose_ref": corpus_module.PURPOSE}
        started = time.perf_counter()
        envelope = service.call_tool(GET, args, binding)
        latencies.append(time.perf_counter() - started)
        ok(envelope)
    results["get"] = summary(latencies)

    budget = SEARCH_CLASS_BUDGET_S[0 if quick else 1]
    for selectivity in SELECTIVITIES:
        for terms in TERM_COUNTS:
            queries = corpus.queries(_count("queries", quick), terms, selectivity)
            ok(
                service.call_tool(
                    SEARCH, {"query": " ".join(queries[-1]), "purpose_ref": corpus_module.PURPOSE}, binding
                )
            )
            latencies = []
            limit: list[float] = []
            ranking: list[float] = []
            hits: list[int] = []
            class_started = time.perf_counter()
            for query in queries:
                args = {"query": " ".join(query), "purpose_ref": corpus_module.PURPOSE}
                started = time.perf_counter()
                envelope = service.call_tool(SEARCH, args, binding)
                latencies.append(time.perf_counter() - started)
                hits.append(ok(envelope)["rank_receipt"]["candidate_count"])
                if fts is not None:
                    limit.append(fts5_search(fts, query))
                ranking.append(rank_only(service, binding, query))
                if len(latencies) >= 3 and time.perf_counter() - class_started > budget:
                    break
            results[f"search_{terms}_{selectivity}"] = {**summary(latencies), "hits": percentile(hits, 50)}
            if limit:
                results[f"limit_fts5_{terms}_{selectivity}"] = summary(limit)
            results[f"rank_{terms}_{selectivity}"] = summary(ranking)

    latencies = []
    for query in corpus.queries(_count("walks", quick), 3, "common"):
        page: dict[str, Any] = {"query": " ".join(query), "purpose_ref": corpus_module.PURPOSE, "limit": 10}
        seen = 0
        started = time.perf_counter()
        while seen < 100:
            value = ok(service.call_tool(SEARCH, page, binding))
            seen += len(value["records"])
            if value.get("next_page_cursor") is None:
                break
            page = {**page, "page_cursor": value["next_page_cursor"]}
        latencies.append(time.perf_counter() - started)
        if seen < 100:
            log(f"page walk found only {seen} results")
    results["page_walk_100"] = summary(latencies)
    return results


def worker_load(params: dict[str, Any]) -> dict[str, Any]:
    """Build the SQLite base file of one size; report load time and peak RSS."""
    corpus = corpus_module.SyntheticCorpus()
    path = Path(params["path"])
    service = open_sqlite(path, "NORMAL")
    bulk_cache(service.store, 1_000_000)
    started = time.perf_counter()
    ids, timings = preload(service, corpus, params["size"])
    service.close()
    elapsed = time.perf_counter() - started
    Path(params["ids"]).write_text(json.dumps(ids))
    on_disk = sum(f.stat().st_size for f in path.parent.iterdir() if f.name.startswith(path.name))
    return {"load_s": elapsed, **timings, "rss_kib": peak_rss_kib(), "file_bytes": on_disk}


def worker_measure(params: dict[str, Any]) -> dict[str, Any]:
    """Reads (unless ``params["reads"]`` is false) then writes through the service, on one backend at one size."""
    corpus = corpus_module.SyntheticCorpus()
    quick = bool(params["quick"])
    size = int(params["size"])
    out: dict[str, Any] = {}
    bare: BareDurable | None = None
    fts: sqlite3.Connection | None = None
    if params["backend"] == "memory":
        service = connect("memory:", policy=POLICY)
        ids, timings = preload(service, corpus, size)
        out["load"] = {**timings, "rss_kib": peak_rss_kib()}
    else:
        path = Path(params["path"])
        service = open_sqlite(path, params["synchronous"])
        ids = json.loads(Path(params["ids"]).read_text())
        bare = BareDurable(path.parent / "bare.db", params["synchronous"])
        if params.get("fts"):
            fts, out["fts5_build_s"] = build_fts5(path.parent / "fts5.db", corpus, size)
    binding = binding_for(corpus.tenants[0])
    try:
        gone: set[str] = set()
        if params.get("reads", True):  # first, while the scope holds exactly ``size`` records, as FTS5 does
            out["reads"] = measure_reads(service, corpus, binding, ids, gone, quick=quick, fts=fts)
        writes, audit = measure_writes(service, corpus, binding, ids, gone, quick=quick, bare=bare)
        out["writes"] = writes
        out["audit"] = audit
    finally:
        service.close()
        if bare is not None:
            bare.close()
        if fts is not None:
            fts.close()
    out["rss_kib"] = peak_rss_kib()
    return out


def worker_paced(params: dict[str, Any]) -> dict[str, Any]:
    """The writes of :class:`WriteBench` in blocks, as the parent asks over stdin (see :func:`measure_paired`).

    Prepares the store as ``worker_measure`` does, runs the warm-up cycles, prints ``{"ready": …}``,
    then answers each request line ``{"op": …, "count": n}`` with ``{"latencies": […]}`` until
    ``{"op": "done"}``.
    """
    corpus = corpus_module.SyntheticCorpus()
    quick = bool(params["quick"])
    if params["backend"] == "memory":
        service = connect("memory:", policy=POLICY)
        ids, _ = preload(service, corpus, int(params["size"]))
    else:
        service = open_sqlite(Path(params["path"]), params["synchronous"])
        ids = json.loads(Path(params["ids"]).read_text())
    try:
        bench = WriteBench(service, corpus, binding_for(corpus.tenants[0]), ids, quick=quick)
        bench.warm_up(AUDIT_CYCLES)
        print(json.dumps({"ready": int(params["size"])}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            op, count = request["op"], int(request.get("count", 0))
            if op == "done":
                break
            latencies = getattr(bench, op)(count)
            print(json.dumps({"latencies": latencies}), flush=True)
    finally:
        service.close()
    return {"rss_kib": peak_rss_kib()}


def worker_search_rss(params: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of a process that opens the base file and (unless ``idle``) runs 18 searches."""
    corpus = corpus_module.SyntheticCorpus()
    service = open_sqlite(Path(params["path"]), "FULL")
    binding = binding_for(corpus.tenants[0])
    searches = 0
    if not params.get("idle"):
        for selectivity in SELECTIVITIES:
            for terms in TERM_COUNTS:
                for query in corpus.queries(3, terms, selectivity):
                    ok(
                        service.call_tool(
                            SEARCH, {"query": " ".join(query), "purpose_ref": corpus_module.PURPOSE}, binding
                        )
                    )
                    searches += 1
    service.close()
    return {"rss_kib": peak_rss_kib(), "searches": searches}


class BareDurable:
    """The limit for durable writes: the cheapest SQLite transaction with the same rows and durability.

    Same journal mode (WAL) and ``synchronous`` as the store, in a file beside it; the rows (112
    bytes each) are appended to one rowid table, so a transaction writes as few pages as its row
    count allows. Where a store keeps its rows (postings at keyed positions, say) is its own cost,
    not the limit's. Until run K the limit inserted random 16-byte keys into a table of 200k rows:
    a review measured those transactions writing 30-40 % more WAL pages than our admission, a
    limit heavier than the work it bounds.
    """

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, k BLOB NOT NULL, v BLOB NOT NULL) STRICT"
        )

    def transaction(self, rows: int) -> float:
        """One transaction appending ``rows`` rows; its duration."""
        values = [(secrets.token_bytes(16), b"\x5a" * 96) for _ in range(rows)]
        started = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("INSERT INTO t (k, v) VALUES (?, ?)", values)
        self.conn.execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        self.conn.close()


def bare_crypto(payload: dict[str, Any], scope: str) -> float:
    """The CPU limit of a capture: RFC 8785 once, SHA-256 once, one AES-256-GCM seal under a fresh key.

    The RFC 8785 step uses the fastest encoder we have whose bytes equal the ``rfc8785`` package's
    (the library's ``canonical_bytes``, about 4× faster; checked on the payload before timing).
    """
    if canonical_bytes(payload) != rfc8785.dumps(payload):
        raise AssertionError("canonical_bytes and rfc8785 disagree on a benchmark payload")
    started = time.perf_counter()
    canonical = canonical_bytes(payload)
    hashlib.sha256(b"graphify-memory/payload/v2\0" + canonical).hexdigest()
    AESGCM(AESGCM.generate_key(bit_length=256)).encrypt(secrets.token_bytes(12), canonical, scope.encode())
    return time.perf_counter() - started


def build_fts5(path: Path, corpus: Any, size: int) -> tuple[sqlite3.Connection, float]:
    """An FTS5 table with the same five fields' text of the same ``size`` documents; its build time.

    The index is merged into one segment (FTS5 ``optimize``) after the load, as a bulk-loaded
    index would be in production: the limit is the fastest bare query, not one that also walks
    the segments the batched inserts left (it answers a selective query ~25 % faster).
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(f_primary, f_decision, f_evidence, f_context, f_citations)")
    started = time.perf_counter()
    conn.execute("BEGIN")
    batch: list[tuple[str, ...]] = []
    for args in corpus.documents(0, size):
        texts = field_texts(complete_payload(args["payload"], "scope"))
        batch.append(tuple(texts.values()))
        if len(batch) >= 5000:
            conn.executemany("INSERT INTO fts VALUES (?, ?, ?, ?, ?)", batch)
            batch = []
    conn.executemany("INSERT INTO fts VALUES (?, ?, ?, ?, ?)", batch)
    conn.execute("COMMIT")
    conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
    return conn, time.perf_counter() - started


FTS5_QUERY = (
    "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts, "  # noqa: S608 - constants only
    + ", ".join(str(w) for w in FIELD_WEIGHTS)
    + ") LIMIT 10"
)


def rank_only(service: MemoryService, binding: HostBinding, terms: Sequence[str]) -> float:
    """The ranking alone (``service.ranker.rank`` on a read view): the part comparable with FTS5."""
    now_ms = time.time_ns() // 1_000_000
    query = RankingQuery(terms=tuple(service.ranker.tokenize(" ".join(terms))), valid_as_of=now_ms, now_ms=now_ms)
    with service.store.read(binding.scope) as reader:
        started = time.perf_counter()
        service.ranker.rank(reader, query)
        return time.perf_counter() - started


def fts5_search(conn: sqlite3.Connection, terms: Sequence[str]) -> float:
    """A bare FTS5 ``bm25()`` top-10 query (any of the terms, field weights as ours); its duration."""
    match = " OR ".join(f'"{term}"' for term in terms)
    started = time.perf_counter()
    conn.execute(FTS5_QUERY, (match,)).fetchall()
    return time.perf_counter() - started


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "load": worker_load,
    "measure": worker_measure,
    "search_rss": worker_search_rss,
    "paced": worker_paced,
}


def run_worker(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its last stdout line is the JSON result."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--params", json.dumps(params)]
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise SystemExit(f"worker {kind} failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- report


def machine() -> dict[str, str]:
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


def fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_ops(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def fmt_size(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


BACKEND_LABELS = {"memory": "in-memory", "sqlite-FULL": "SQLite FULL", "sqlite-NORMAL": "SQLite NORMAL"}
WRITE_OPS = ("capture", "request_admission", "capture_admit_cycle", "withdraw", "forget")
READ_OPS = (
    *(f"search_{t}_{s}" for s in SELECTIVITIES for t in TERM_COUNTS),
    "get",
    "page_walk_100",
)


def op_label(op: str) -> str:
    if op.startswith("search_"):
        _, terms, selectivity = op.split("_")
        return f"search {terms}-term {selectivity}"
    return {
        "capture_admit_cycle": "capture+admit cycle",
        "request_admission": "request_admission (accept)",
        "page_walk_100": "page walk, 100 results",
    }.get(op, op)


def figure(results: dict[str, Any], backend: str, size: int, section: str, op: str) -> dict[str, Any] | None:
    entry = results["measure"].get(backend, {}).get(str(size))
    if entry is None:
        return None
    value: dict[str, Any] | None = entry[section].get(op)
    return value


def table(results: dict[str, Any], section: str, ops: Sequence[str]) -> list[str]:
    sizes = results["sizes"]
    head = "| backend | operation | " + " | ".join(f"{fmt_size(s)}: ops/s · p50 · p99 (ms)" for s in sizes) + " |"
    lines = [head, "|" + " --- |" * (2 + len(sizes))]
    for backend in results["backends"]:
        for op in ops:
            cells = []
            for size in sizes:
                value = figure(results, backend, size, section, op)
                if value is None:
                    cells.append("–")
                    continue
                cell = f"{fmt_ops(value['ops'])} · {fmt_ms(value['p50'])} · {fmt_ms(value['p99'])}"
                if "hits" in value:
                    cell += f" ({value['hits']:.0f} hits)"
                cells.append(cell)
            lines.append(f"| {BACKEND_LABELS[backend]} | {op_label(op)} | " + " | ".join(cells) + " |")
    return [*lines, "", sample_note(results, section, ops)]


def sample_note(results: dict[str, Any], section: str, ops: Sequence[str]) -> str:
    """How many samples each figure has (the most any cell had), and what that means for its p99."""
    counts: dict[str, int] = {}
    for backend in results["backends"]:
        for size in results["sizes"]:
            for op in ops:
                value = figure(results, backend, size, section, op)
                if value is not None:
                    counts[op] = max(counts.get(op, 0), int(value["n"]))
    listed = ", ".join(f"{op_label(op)} {n}" for op, n in counts.items())
    return (
        f"Samples per cell (n, at most): {listed}. A p99 is interpolated between the two largest of n samples "
        "when n ≤ 100, so with few samples it is close to the maximum: read it as the worst case seen."
    )


def growth(results: dict[str, Any]) -> tuple[list[str], list[tuple[str, bool | None, str]]]:
    """The cost-growth table and, per write, whether it is flat (≤ 1.25×).

    Writes are measured twice, with the rest of the run (sizes one after another) and in the paired
    pass (smallest and largest size at once, see :func:`measure_paired`); their cells read
    ``sequential · paired``. A write's cost is judged by its p50 and by its mean (which carries the
    work done once every few operations: checkpoints, key batches): it is flat only if all four
    ratios are ≤ 1.25×.
    """
    sizes = results["sizes"]
    small, large = sizes[0], sizes[-1]
    factor = large / small
    lines = [
        (
            f"| backend | operation | p50 {fmt_size(small)} (ms) | p50 {fmt_size(large)} (ms) "
            "| ratio | mean ratio | p99 ratio | goal |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: list[tuple[str, bool | None, str]] = []
    for backend in results["backends"]:
        for section, ops in (("writes", WRITE_OPS), ("reads", READ_OPS)):
            for op in ops:
                passes = [(figure(results, backend, small, section, op), figure(results, backend, large, section, op))]
                if section == "writes":
                    passes.append((paired(results, backend, small, op), paired(results, backend, large, op)))
                measured = [(a, b) for a, b in passes if a is not None and b is not None]
                if not measured:
                    continue
                ratios = [b["p50"] / a["p50"] for a, b in measured]
                means = [b["mean"] / a["mean"] for a, b in measured]
                tails = [b["p99"] / a["p99"] for a, b in measured]
                if section == "writes":
                    worst = max(*ratios, *means)
                    goal, met = "≤ 1.25× (flat)", worst <= 1.25
                    which = "p50" if max(ratios) >= max(means) else "mean"
                    verdicts.append((f"{BACKEND_LABELS[backend]} {op_label(op)}", met, f"{worst:.2f}× ({which})"))
                elif op == "get":
                    goal, met = "≤ 1.25× (flat)", max(*ratios, *means) <= 1.25
                else:
                    goal, met = f"sub-linear (< {factor:.0f}×)", max(*ratios, *means) < factor
                lines.append(
                    f"| {BACKEND_LABELS[backend]} | {op_label(op)} "
                    f"| {' · '.join(fmt_ms(a['p50']) for a, _ in measured)} "
                    f"| {' · '.join(fmt_ms(b['p50']) for _, b in measured)} "
                    f"| {' · '.join(f'{ratio:.2f}×' for ratio in ratios)} "
                    f"| {' · '.join(f'{ratio:.2f}×' for ratio in means)} "
                    f"| {' · '.join(f'{ratio:.2f}×' for ratio in tails)} "
                    f"| {goal}{'' if met is None else (' ✓' if met else ' ✗')} |"
                )
    return lines, verdicts


def paired(results: dict[str, Any], backend: str, size: int, op: str) -> dict[str, Any] | None:
    """The paired-pass figure of a write, if measured."""
    value: dict[str, Any] | None = results.get("paired", {}).get(backend, {}).get(str(size), {}).get(op)
    return value


def render(results: dict[str, Any]) -> str:  # noqa: C901, PLR0912, PLR0915 - one report, top to bottom
    info = results["machine"]
    sizes = results["sizes"]
    large = sizes[-1]
    out = [
        f"# engram_memory benchmark ({'quick' if results['quick'] else 'full'} run, sizes "
        + ", ".join(fmt_size(s) for s in sizes)
        + ")",
        "",
        (
            f"Machine: {info['cpus']} CPUs, {info['cpu']}; Python {info['python']}; SQLite {info['sqlite']}; "
            f"{info['platform']}. Run took {results['elapsed_s']:.0f} s."
        ),
        "",
        (
            "Single caller, `MemoryService.call_tool` (JSON contract). ops/s = 1 / mean latency. "
            "Sizes = records already admitted in the measured scope (plus 3 background tenants at "
            f"{BACKGROUND_FRACTION:.0%} of N each)."
        ),
        "",
        "## Write path",
        "",
        *table(results, "writes", WRITE_OPS),
        "",
        "## Read path",
        "",
        *table(results, "reads", READ_OPS),
        "",
        f"## Cost growth ({fmt_size(sizes[-1])} vs {fmt_size(sizes[0])})",
        "",
    ]
    if any(results.get("paired", {}).values()):
        out += [
            (
                "Writes are measured twice: in the run above, each size in its own process minutes apart, and in a "
                f"paired pass, where a {fmt_size(sizes[0])} and a {fmt_size(sizes[-1])} process (fresh copies) are "
                f"alive at once and take turns, {PAIRED_BLOCK} operations at a time, so a drift of the machine "
                "reaches both sizes alike. Their cells read sequential · paired. A write is flat only if all four "
                "ratios, p50 and mean in both passes, are ≤ 1.25× (the mean carries what is done once every few "
                "operations: WAL checkpoints, batched key destruction)."
            ),
            "",
        ]
    targets: list[tuple[str, bool | None, str]] = []
    if len(sizes) > 1:
        lines, verdicts = growth(results)
        out += lines
        writes_met = all(met for _, met, _ in verdicts) if verdicts else None
        worst = max(verdicts, key=lambda v: float(v[2].split("×")[0])) if verdicts else None
        targets.append(
            (
                f"writes at {fmt_size(large)} ≤ 1.25× their cost at {fmt_size(sizes[0])}",
                writes_met,
                f"worst: {worst[0]} {worst[2]}" if worst else "–",
            )
        )
    else:
        out.append("(one size only)")
    out += ["", f"## Memory (SQLite, {fmt_size(large)} records)", ""]
    memory = results.get("memory", {})
    out += ["| process | peak RSS (MiB) |", "| --- | --- |"]
    for label, key in (
        ("open the store, no query (floor)", "idle"),
        (f"load {fmt_size(large)} records (preload, with a 1 GB page cache of its own)", "load"),
        ("open + 18 searches", "search"),
    ):
        if key in memory:
            out.append(f"| {label} | {memory[key] / 1024:.0f} |")
    mem = figure(results, "memory", large, "writes", "capture")
    if mem is not None:
        rss = results["measure"]["memory"][str(large)]["rss_kib"]
        out.append(f"| in-memory backend, {fmt_size(large)} records + measurements | {rss / 1024:.0f} |")
    load = results.get("load", {}).get(str(large))
    if load:
        out += [
            "",
            (
                f"Preload of the SQLite base file: {load['load_s']:.0f} s for {large:,} + "
                f"{load['background_docs']:,.0f} documents ({load['file_bytes'] / 2**20:.0f} MiB on disk)."
            ),
        ]

    out += ["", "## The limit (same run, same corpus, timed interleaved with ours)", ""]
    out += [
        "| figure (p50) | limit | "
        + " | ".join(f"{fmt_size(s)}: ours · limit (ms) · ratio" for s in sizes)
        + " | target |",
        "|" + " --- |" * (3 + len(sizes)),
    ]

    def limit_row(
        label: str,
        what: str,
        backend: str,
        *,
        section: str,
        op: str,
        key: str,
        target: float | None,
        mean: bool = False,
    ) -> None:
        """One row: p50 (or, with ``mean``, mean latency = 1 / ops) of ours, of the limit, and their ratio."""

        def stat(values: dict[str, Any]) -> float:
            return 1 / values["ops"] if mean else float(values["p50"])

        cells = []
        ratio = None
        for size in sizes:
            ours = figure(results, backend, size, section, op)
            bare = figure(results, backend, size, section, key)
            if ours is None or bare is None or (mean and not (ours["ops"] and bare["ops"])):
                cells.append("–")
                continue
            ratio = stat(ours) / stat(bare)
            cells.append(f"{fmt_ms(stat(ours))} · {fmt_ms(stat(bare))} · {ratio:.2f}×")
        goal = ""
        if target is not None and ratio is not None:
            met = ratio <= target
            goal = f"≤ {target:g}× " + ("✓" if met else "✗")
            targets.append((f"{label} ≤ {target:g}× {what} ({fmt_size(large)})", met, f"{ratio:.2f}×"))
        out.append(f"| {label} | {what} | " + " | ".join(cells) + f" | {goal} |")

    for mode in ("FULL", "NORMAL"):
        limit_row(
            f"capture+admit cycle, SQLite {mode}",
            "2 bare durable txns, same rows",
            f"sqlite-{mode}",
            section="writes",
            op="capture_admit_cycle",
            key="limit_durable_cycle",
            target=2.5 if mode == "FULL" else None,
        )
    for mode in ("FULL", "NORMAL"):
        for step, op_name, txn in (
            ("capture", "capture", "1 bare durable txn, the capture's rows"),
            ("admission", "request_admission (accept)", "1 bare durable txn, the admission's rows"),
        ):
            limit_row(
                f"{op_name} within the cycle, SQLite {mode}",
                txn,
                f"sqlite-{mode}",
                section="writes",
                op=f"cycle_{step}",
                key=f"limit_durable_{step}",
                target=None,
            )
    limit_row(
        "capture+admit cycle, SQLite FULL, **mean**",
        "2 bare durable txns, same rows (mean)",
        "sqlite-FULL",
        section="writes",
        op="capture_admit_cycle",
        key="limit_durable_cycle",
        target=2.5,
        mean=True,
    )
    limit_row(
        "capture, in-memory",
        "RFC 8785 (fastest byte-identical encoder) + SHA-256 + AES-GCM seal of the payload",
        "memory",
        section="writes",
        op="capture",
        key="limit_crypto_canonical",
        target=None,
    )
    fts_backend = "sqlite-FULL" if "sqlite-FULL" in results["backends"] else "sqlite-NORMAL"
    for selectivity in SELECTIVITIES:
        for terms in TERM_COUNTS:
            limit_row(
                f"search {terms}-term {selectivity}, SQLite",
                "FTS5 bm25() top-10",
                fts_backend,
                section="reads",
                op=f"search_{terms}_{selectivity}",
                key=f"limit_fts5_{terms}_{selectivity}",
                target=3.0 if terms == 3 else None,
            )
    for selectivity in SELECTIVITIES:
        for terms in TERM_COUNTS:
            limit_row(
                f"ranking only ({terms}-term {selectivity}), SQLite",
                "FTS5 bm25() top-10",
                fts_backend,
                section="reads",
                op=f"rank_{terms}_{selectivity}",
                key=f"limit_fts5_{terms}_{selectivity}",
                target=None,
            )
    entry = results["measure"].get("sqlite-FULL", {}).get(str(large), {})
    commit = entry.get("writes", {}).get("limit_one_row_commit")
    normal = results["measure"].get("sqlite-NORMAL", {}).get(str(large), {}).get("writes", {})
    if commit:
        text = f"One-row durable commit (building block), p50: FULL {fmt_ms(commit['p50'])} ms"
        if "limit_one_row_commit" in normal:
            text += f", NORMAL {fmt_ms(normal['limit_one_row_commit']['p50'])} ms"
        out += ["", text + "."]
    crypto = figure(results, "memory", large, "writes", "limit_crypto_canonical")
    if crypto:
        out.append(f"Median canonical payload: {crypto['payload_bytes']:.0f} bytes.")
    audit = entry.get("audit")
    if audit:
        cap, adm = audit["capture"], audit["admission"]
        out.append(
            f"What a capture+admit cycle writes (SQLite, counted with trace callbacks, mean of {AUDIT_CYCLES} "
            f"cycles): capture {cap['store_rows']:.3g} store rows in {cap['store_commits']:.3g} store commit(s) + "
            f"{cap['vault_rows']:.3g} vault row(s) in {cap['vault_commits']:.3g} vault commit(s); admission "
            f"{adm['store_rows']:.3g} store rows in {adm['store_commits']:.3g} store commit(s) + "
            f"{adm['vault_rows']:.3g} vault rows in {adm['vault_commits']:.3g} vault commit(s) and "
            f"{adm['vault_checkpoints']:.3g} vault WAL checkpoint(s). The bare limit writes the same "
            f"{cap['store_rows'] + cap['vault_rows']:.0f} + {adm['store_rows'] + adm['vault_rows']:.0f} rows in 2 "
            "transactions (the minimum: capture and admission must each be durable when they return)."
        )
    if entry.get("fts5_build_s") is not None:
        built = entry["fts5_build_s"]
        out.append(f"FTS5 index build (load and optimize) over the same {large:,} documents: {built:.1f} s.")

    get = figure(results, "sqlite-FULL", large, "reads", "get")
    if get:
        targets.append(("get p50 under 1 ms on SQLite", get["p50"] < 0.001, f"{fmt_ms(get['p50'])} ms"))
    out += ["", "## Targets", "", "| target | met | figure |", "| --- | --- | --- |"]
    for label, met, detail in targets:
        out.append(f"| {label} | {'–' if met is None else ('yes' if met else 'no')} | {detail} |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- driver


def measure(
    workdir: Path, size: int, backend: str, backends: Sequence[str], quick: bool, *, reads: bool = True
) -> dict[str, Any]:
    """One ``measure`` worker on ``backend`` at ``size`` (SQLite: on a fresh copy of the base file)."""
    kind, _, mode = backend.partition("-")
    params: dict[str, Any] = {"size": size, "quick": quick, "backend": kind, "reads": reads}
    if kind != "sqlite":
        return run_worker("measure", params)
    copy_dir = workdir / f"n{size}-{mode}"
    shutil.rmtree(copy_dir, ignore_errors=True)
    shutil.copytree(workdir / f"n{size}", copy_dir)
    os.sync()  # no writeback of the copy under the measured fsyncs
    params |= {
        "path": str(copy_dir / "base.db"),
        "ids": str(copy_dir / "ids.json"),
        "synchronous": mode,
        "fts": mode == "FULL" or "sqlite-FULL" not in backends,
    }
    try:
        return run_worker("measure", params)
    finally:
        shutil.rmtree(copy_dir, ignore_errors=True)


PAIRED_BLOCK = 10
"""Operations per block in the paired pass; the two processes take turns block by block."""
PAIRED_OPS = (
    ("capture", "capture", "capture"),
    ("request_admission", "admission", "admission"),
    ("withdraw", "withdraw", "withdraw"),
    ("capture_admit_cycle", "cycle", "cycle"),
    ("forget", "forget", "forget"),
)
"""(figure, ``WriteBench`` method, ``COUNTS`` entry), in the order of the sequential pass."""


class PacedWorker:
    """A ``paced`` worker process: it prepares its store, then runs write blocks on request."""

    def __init__(self, params: dict[str, Any]) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", "paced", "--params", json.dumps(params)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # noqa: S603

    def reply(self) -> dict[str, Any]:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise SystemExit(f"paced worker exited with code {self.proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, op: str, count: int) -> list[float]:
        if self.proc.stdin is None:  # pragma: no cover - always a pipe
            raise SystemExit("paced worker has no stdin")
        self.proc.stdin.write(json.dumps({"op": op, "count": count}) + "\n")
        self.proc.stdin.flush()
        latencies: list[float] = self.reply()["latencies"]
        return latencies

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.proc.communicate(json.dumps({"op": "done"}) + "\n", timeout=600)
        if self.proc.poll() is None:  # pragma: no cover - a stuck worker
            self.proc.kill()


def measure_paired(workdir: Path, small: int, large: int, backend: str, quick: bool) -> dict[str, Any]:
    """The writes at the smallest and the largest size, measured by two processes alive at once.

    Each prepares its store (SQLite: a fresh copy of its base file) and runs the warm-up; then they
    take turns, ``PAIRED_BLOCK`` operations at a time, the first turn alternating between them, so
    a drift of the machine during the pass reaches both sizes alike. Returns the summaries by size
    and figure, and under ``"turns"`` the (figure, size, operations) of every turn in order.
    """
    kind, _, mode = backend.partition("-")
    copies: list[Path] = []
    workers: dict[int, PacedWorker] = {}
    try:
        params: dict[int, dict[str, Any]] = {}
        for size in (small, large):
            params[size] = {"size": size, "quick": quick, "backend": kind}
            if kind == "sqlite":
                copy_dir = workdir / f"n{size}-{mode}-paired"
                shutil.rmtree(copy_dir, ignore_errors=True)
                shutil.copytree(workdir / f"n{size}", copy_dir)
                copies.append(copy_dir)
                params[size] |= {
                    "path": str(copy_dir / "base.db"),
                    "ids": str(copy_dir / "ids.json"),
                    "synchronous": mode,
                }
        os.sync()
        for size, size_params in params.items():
            workers[size] = PacedWorker(size_params)
        for worker in workers.values():
            worker.reply()  # ready
        latencies: dict[int, dict[str, list[float]]] = {size: {} for size in workers}
        turns: list[tuple[str, int, int]] = []
        for figure_name, method, count_name in PAIRED_OPS:
            total = _count(count_name, quick)
            for turn, done in enumerate(range(0, total, PAIRED_BLOCK)):
                for size in (small, large) if turn % 2 == 0 else (large, small):
                    block = workers[size].ask(method, min(PAIRED_BLOCK, total - done))
                    latencies[size].setdefault(figure_name, []).extend(block)
                    turns.append((figure_name, size, len(block)))
        figures: dict[str, Any] = {
            str(size): {name: summary(values) for name, values in ops.items()} for size, ops in latencies.items()
        }
        return figures | {"turns": turns}
    finally:
        for worker in workers.values():
            worker.close()
        for copy_dir in copies:
            shutil.rmtree(copy_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:  # noqa: C901, PLR0912, PLR0915 - the whole run, in order
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="sizes 1k and 10k, fewer samples (< 2 minutes)")
    parser.add_argument("--sizes", help="comma-separated record counts (default 1000,10000,100000)")
    parser.add_argument("--backends", default="memory,sqlite-FULL,sqlite-NORMAL", help="subset to run")
    parser.add_argument("--output", help="also write the Markdown report to this file")
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--workdir", help="where the databases go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--reuse", action="store_true", help="reuse SQLite base files already in --workdir (investigations)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        result = WORKERS[options.worker](json.loads(options.params))
        print(json.dumps(result))
        return 0

    started = time.perf_counter()
    default = "1000,10000" if options.quick else "1000,10000,100000"
    sizes = sorted({int(s.replace("_", "")) for s in (options.sizes or default).split(",")})
    backends = [b for b in options.backends.split(",") if b]
    for backend in backends:
        if backend not in BACKEND_LABELS:
            parser.error(f"unknown backend {backend!r}")
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="engram-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "quick": options.quick,
        "sizes": sizes,
        "backends": backends,
        "machine": machine(),
        "measure": {b: {} for b in backends},
        "paired": {},
        "load": {},
        "memory": {},
    }
    try:
        for size in sizes:
            base_dir = workdir / f"n{size}"
            base_dir.mkdir(exist_ok=True)
            base = base_dir / "base.db"
            ids = base_dir / "ids.json"
            sqlite_backends = [b for b in backends if b.startswith("sqlite-")]
            reuse = options.reuse and base.exists() and ids.exists() and (base_dir / "load.json").exists()
            if sqlite_backends and reuse:
                log(f"N={size}: reusing the SQLite base file")
                results["load"][str(size)] = json.loads((base_dir / "load.json").read_text())
            elif sqlite_backends:
                log(f"N={size}: building the SQLite base file")
                shutil.rmtree(base_dir)  # what an earlier run left there would collide with the preload
                base_dir.mkdir()
                results["load"][str(size)] = run_worker("load", {"size": size, "path": str(base), "ids": str(ids)})
                (base_dir / "load.json").write_text(json.dumps(results["load"][str(size)]))
                os.sync()
            for backend in backends:
                log(f"N={size}: measuring {backend}")
                results["measure"][backend][str(size)] = measure(workdir, size, backend, backends, options.quick)
            if size == sizes[-1] and sqlite_backends:
                log(f"N={size}: peak RSS of a searching process")
                results["memory"]["idle"] = run_worker("search_rss", {"path": str(base), "idle": True})["rss_kib"]
                results["memory"]["search"] = run_worker("search_rss", {"path": str(base)})["rss_kib"]
                results["memory"]["load"] = results["load"][str(size)]["rss_kib"]
        if len(sizes) > 1:  # the writes once more, both sizes at once (see growth())
            for backend in backends:
                log(f"N={sizes[0]} and N={sizes[-1]}: paired pass of the writes on {backend}")
                results["paired"][backend] = measure_paired(workdir, sizes[0], sizes[-1], backend, options.quick)
        if not options.keep:
            for size in sizes:
                shutil.rmtree(workdir / f"n{size}", ignore_errors=True)
    finally:
        if not options.keep and not options.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    results["elapsed_s"] = time.perf_counter() - started
    report = render(results)
    print(report)
    if options.output:
        Path(options.output).write_text(report)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1))
    log(f"done in {results['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
