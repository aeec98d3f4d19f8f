"""bench/plots.py on the simulator, on a short setting: tables, JSON and both PNGs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LATENCY_ROW = re.compile(r"^\s+(?P<n>\d+)(?:\s+[\d.]+){4}\s+\S+ k=\d+$", re.M)
TPOT_ROW = re.compile(r"^\s+(?P<m>\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+$", re.M)


def test_plots_script_writes_tables_json_and_pngs(tmp_path: Path, run_bench: RunBench) -> None:
    """Two batch sizes and two concurrencies on the CPU-engine profile: a latency row per N
    (merged, fan-out, auto, limit, auto's plan), a TPOT row per m (measured and learned),
    every question answered, the JSON holding what is plotted, and two real PNG files."""
    proc = run_bench(
        "plots.py",
        *("--profile", "llama-cpp-cpu", "--ns", "1,3", "--concurrency", "1,3"),
        *("--tokens", "30", "--calibration", "1", "--time-scale", "0.02"),
        *("--out", str(tmp_path), "--name", "smoke"),
    )
    assert [m["n"] for m in LATENCY_ROW.finditer(proc.stdout)] == ["1", "3"], proc.stdout
    assert [m["m"] for m in TPOT_ROW.finditer(proc.stdout)] == ["1", "3"], proc.stdout
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert [p["answered"] for p in report["points"]] == [p["asked"] for p in report["points"]]
    assert all(p["merged"] > 0 and p["fan-out"] > 0 for p in report["points"])
    assert all(row["measured"] > 0 and row["learned"] > 0 for row in report["tpot"])
    for name in ("smoke-latency-vs-n.png", "smoke-tpot.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC
