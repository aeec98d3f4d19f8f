"""The leaky-bucket sweep, run as a real subprocess on a small grid."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bench_support import BENCH, RunBench

SUMMARY = re.compile(r"^summary: met in (\d+) of (\d+) cells", re.M)


def test_leaky_sweep_prints_a_cell_per_rate_and_burst(tmp_path: Path, run_bench: RunBench) -> None:
    """It exits 0, prints the grid and a summary that agrees with its JSON, each cell's
    figures consistent with its targets (a cell is met exactly when its 429s and rate are)."""
    out = tmp_path / "sweep.json"
    proc = run_bench(
        "leaky_sweep.py", "--rates", "5", "20", "--bursts", "0", "5", "--n", "40",
        "--rtt", "0.01", "--json", str(out),
    )  # fmt: skip
    summary = SUMMARY.search(proc.stdout)
    assert summary is not None, proc.stdout
    saved = json.loads(out.read_text())
    assert saved["rtt"] == 0.01
    assert "round trip 10 ms" in proc.stdout
    cells = saved["cells"]
    assert [(c["rate"], c["burst"]) for c in cells] == [(5, 0), (5, 5), (20, 0), (20, 5)]
    assert int(summary.group(2)) == 4
    assert int(summary.group(1)) == sum(c["met"] for c in cells)
    for c in cells:
        assert c["requests"] >= 40
        assert 0 <= c["rejected"] < c["requests"]
        assert c["met"] == (c["rejected"] <= 0.02 * c["requests"] and c["reached"] >= 0.85)


def test_leaky_sweep_refuses_a_rate_of_zero() -> None:
    """Bad input: a clear error naming the flag, exit status 2."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "leaky_sweep.py"), "--rates", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "--rates" in proc.stderr
