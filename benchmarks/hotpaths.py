#!/usr/bin/env python3
"""Profile the hot paths with cProfile: capture+admit, search, get (SQLite or in-memory).

Usage::

    python benchmarks/hotpaths.py --size 10000                 # SQLite FULL, all paths
    python benchmarks/hotpaths.py --size 10000 --backend memory
    python benchmarks/hotpaths.py --size 100000 --paths search --top 30 --dump search.pstats

Builds a scope of ``--size`` admitted records with the same corpus and preload as
``benchmarks/run.py``, then runs each path under :mod:`cProfile` and prints the functions with the
most own time and the most cumulative time. Standard library and project dependencies only.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def _load_run() -> ModuleType:
    path = Path(__file__).resolve().parent / "run.py"
    spec = importlib.util.spec_from_file_location("engram_benchmark_run", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


run = _load_run()


def profiled(label: str, work: Callable[[], object], top: int, dump: str | None) -> None:
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    work()
    profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"\n## {label} ({elapsed:.2f} s under the profiler)\n")
    for order in ("tottime", "cumulative"):
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        lines = buffer.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
        print(f"### by {order}\n")
        print("\n".join(lines[start:]).rstrip())
        print()
    if dump:
        profiler.dump_stats(f"{dump}.{label.split(maxsplit=1)[0]}")


def main() -> int:  # noqa: C901, PLR0915 - one script, top to bottom
    parser = argparse.ArgumentParser(description="cProfile the hot paths")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--backend", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    parser.add_argument("--paths", default="cycle,search,get", help="comma-separated: cycle, search, get")
    parser.add_argument("--selectivity", default="common", choices=("selective", "mid", "common"))
    parser.add_argument("--terms", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--dump", help="also write raw pstats files with this prefix")
    options = parser.parse_args()

    corpus = run.corpus_module.SyntheticCorpus()
    workdir = Path(tempfile.mkdtemp(prefix="engram-profile-"))
    try:
        if options.backend == "memory":
            service = run.connect("memory:", policy=run.POLICY)
        else:
            service = run.open_sqlite(workdir / "profile.db", options.synchronous)
            run.bulk_cache(service.store, 1_000_000)
        started = time.perf_counter()
        ids, _ = run.preload(service, corpus, options.size)
        if options.backend == "sqlite":  # measure on default connections, as the benchmark does
            service.close()
            service = run.open_sqlite(workdir / "profile.db", options.synchronous)
        print(f"# profile: {options.backend}, {options.size:,} records (preload {time.perf_counter() - started:.0f} s)")
        binding = run.binding_for(corpus.tenants[0])
        paths = options.paths.split(",")
        position = options.size

        if "cycle" in paths:

            def cycles() -> None:
                nonlocal position
                for _ in range(options.repeat):
                    args: dict[str, Any] = corpus.capture_arguments(0, position)
                    position += 1
                    value = run.ok(service.call_tool(run.CAPTURE, args, binding))
                    admit = {
                        "candidate_id": value["candidate_id"],
                        "idempotency_key": run.corpus_module.admission_key(args["idempotency_key"]),
                    }
                    run.ok(service.call_tool(run.ADMISSION, admit, binding))

            profiled(f"capture+admit x{options.repeat}", cycles, options.top, options.dump)

        if "search" in paths:
            queries = corpus.queries(options.repeat, options.terms, options.selectivity)

            def searches() -> None:
                for query in queries:
                    args = {"query": " ".join(query), "purpose_ref": run.corpus_module.PURPOSE}
                    run.ok(service.call_tool(run.SEARCH, args, binding))

            profiled(
                f"search ({options.terms}-term {options.selectivity}) x{options.repeat}",
                searches,
                options.top,
                options.dump,
            )

        if "get" in paths:
            sample = run.readable_sample(corpus, ids, set(), options.repeat * 4)

            def gets() -> None:
                for record_id in sample:
                    args = {"record_id": record_id, "purpose_ref": run.corpus_module.PURPOSE}
                    run.ok(service.call_tool(run.GET, args, binding))

            profiled(f"get x{len(sample)}", gets, options.top, options.dump)
        service.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
