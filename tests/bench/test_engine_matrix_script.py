"""The engine-matrix benchmark script (issue #19), run as a real subprocess at a tiny size
on the bundled simulator, on virtual time."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

PLANS = ("merged", "fan-out", "primed", "auto")
ROW = re.compile(r"^(N=\d+ T=\d+ ctx=\w+)\s+(merged|fan-out|primed|auto)\s+(\d+\.\d+)\s", re.M)


def test_a_tiny_matrix_prints_every_cell_and_plan_and_answers_every_question(
    tmp_path: Path, run_bench: RunBench
) -> None:
    """Two cells (no context and the document) x four plans, two rounds: one table row per
    (cell, plan), and every batch answered each of its questions once, by its own answer."""
    out = tmp_path / "matrix.json"
    proc = run_bench(
        "engine_matrix.py",
        *("--ns", "2", "--tokens", "16", "--contexts", "none,doc", "--rounds", "2"),
        *("--json", str(out)),
    )
    rows = ROW.findall(proc.stdout)
    cells = ["N=2 T=16 ctx=none", "N=2 T=16 ctx=doc"]
    assert [(c, p) for c, p, _ in rows] == [(c, p) for c in cells for p in PLANS]
    assert all(float(wall) > 0 for *_, wall in rows)
    assert len(re.findall(r"best (merged|fan-out|primed), auto chose ", proc.stdout)) == 2
    assert re.search(r"^summary: cells=2 ", proc.stdout, re.M), proc.stdout
    saved = json.loads(out.read_text())["cells"]
    assert [c["cell"]["context"] for c in saved] == [False, True]
    for cell in saved:
        runs = cell["runs"]
        assert sorted(r["plan"] for r in runs) == sorted(PLANS * 2)
        assert all(r["asked"] == r["answered"] == r["own"] == 2 for r in runs)
        assert all(0 < r["planned"] <= r["wall"] for r in runs)
        assert cell["summary"]["auto_chose"] in {r["chosen"] for r in runs}
    doc = saved[1]["runs"]
    assert all(r["prompt_tokens"] > 1000 * r["requests"] for r in doc)  # the document went
    again = run_bench("engine_matrix.py", "--from-json", str(out))  # sends nothing
    assert ROW.findall(again.stdout) == rows
