"""The planner-matrix benchmark script, run as a real subprocess on its --quick subset."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

SUMMARY_LINE = re.compile(
    r"^summary: cells=(\d+) max regret=(\S+) median regret=(\S+) cells over 1\.10=(\d+) "
    r"median \|pred/meas-1\|=(\S+) cells off >25%=(\d+)$",
    re.M,
)


def test_planner_matrix_quick_prints_a_summary(tmp_path: Path, run_bench: RunBench) -> None:
    """It exits 0 and prints a parseable summary with a positive regret; targets not asserted."""
    out = tmp_path / "matrix.json"
    proc = run_bench("planner_matrix.py", "--quick", "--json", str(out))
    match = SUMMARY_LINE.search(proc.stdout)
    assert match is not None, proc.stdout
    cells = int(match.group(1))
    assert cells >= 1
    assert float(match.group(2)) > 0
    assert float(match.group(3)) > 0
    saved = json.loads(out.read_text())
    assert len(saved["cells"]) == cells
    assert all(cell["regret"] > 0 for cell in saved["cells"])
    assert all(cell["explain"] for cell in saved["cells"])
