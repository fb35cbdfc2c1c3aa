"""``benchmarks/run.py`` runs end to end and reports what its method says (no timing is asserted).

A tiny run (quick counts, 200 and 400 records, in-memory and SQLite NORMAL) in a subprocess, as
a user runs it: the figures exist for every backend, size and operation, each write was measured
in both passes with the same counts, the paired pass took turns as documented, and the report
shows the ratios by p50, by mean and by p99, judges flatness on the four p50 and mean ratios,
and says how many samples each figure has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import groupby
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"
WRITES = ("capture", "request_admission", "withdraw", "capture_admit_cycle", "forget")
QUICK_COUNTS = {"capture": 100, "request_admission": 50, "withdraw": 50, "capture_admit_cycle": 50, "forget": 50}


def test_a_tiny_run_reports_both_passes(tmp_path: Path) -> None:
    figures = tmp_path / "run.json"
    command = [sys.executable, str(SCRIPT), "--quick", "--sizes", "200,400", "--backends", "memory,sqlite-NORMAL"]
    done = subprocess.run(
        [*command, "--json", str(figures), "--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(figures.read_text())
    report = done.stdout

    for backend in ("memory", "sqlite-NORMAL"):
        for size in ("200", "400"):
            sequential = results["measure"][backend][size]["writes"]
            paired = results["paired"][backend][size]
            for op in WRITES:
                assert sequential[op]["n"] == paired[op]["n"] == QUICK_COUNTS[op], (backend, size, op)
                assert 0 < paired[op]["p50"] <= paired[op]["p99"]
        turns = results["paired"][backend]["turns"]
        assert [op for op, _ in groupby(op for op, _, _ in turns)] == list(WRITES)  # the sequential order
        for op, op_turns in groupby(turns, key=lambda turn: turn[0]):
            pairs = list(op_turns)
            firsts = [size for _, size, _ in pairs[0::2]]
            seconds = [size for _, size, _ in pairs[1::2]]
            assert firsts == [200 if turn % 2 == 0 else 400 for turn in range(len(firsts))], op  # first turn alternates
            assert all(first != second for first, second in zip(firsts, seconds, strict=True)), op
            assert all(count <= 10 for _, _, count in pairs)

    assert "sequential · paired" in report
    ratios: dict[tuple[str, str, str], tuple[float, float]] = {}
    for backend in ("memory", "sqlite-NORMAL"):
        for op in WRITES:
            for stat in ("p50", "mean"):
                sequential = [results["measure"][backend][size]["writes"][op][stat] for size in ("200", "400")]
                paired = [results["paired"][backend][size][op][stat] for size in ("200", "400")]
                ratios[backend, op, stat] = (sequential[1] / sequential[0], paired[1] / paired[0])
    growth = report[report.index("## Cost growth") : report.index("## Memory")]
    capture_row = next(line for line in growth.splitlines() if line.startswith("| in-memory | capture |"))
    p50_ratios, mean_ratios = ratios["memory", "capture", "p50"], ratios["memory", "capture", "mean"]
    tail_ratios = tuple(
        source["400"]["p99"] / source["200"]["p99"]
        for source in (
            {size: results["measure"]["memory"][size]["writes"]["capture"] for size in ("200", "400")},
            {size: results["paired"]["memory"][size]["capture"] for size in ("200", "400")},
        )
    )
    cells = " | ".join(" · ".join(f"{ratio:.2f}×" for ratio in pair) for pair in (p50_ratios, mean_ratios, tail_ratios))
    assert f"| {cells} |" in capture_row
    assert "Samples per cell (n, at most): capture 100, request_admission (accept) 50," in report
    worst = max(max(pair) for pair in ratios.values())
    verdict = next(
        line for line in report.splitlines() if line.startswith("| writes at 400 ≤ 1.25× their cost at 200 |")
    )
    assert verdict.split("|")[2].strip() == ("yes" if worst <= 1.25 else "no")  # flat only if all four ratios are
    assert f"{worst:.2f}× (" in verdict
