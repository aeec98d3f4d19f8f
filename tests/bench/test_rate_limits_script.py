"""The rate-limits benchmark script, run as a real subprocess with --quick."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

ARMS = ("splitter", "naive-gather", "cookbook")
ROW = re.compile(
    r"^(?P<arm>splitter|naive-gather|cookbook)\s+(?P<wall>\S+)\s+(?P<thru>\S+)\s+(?P<r429>\S+)"
    r"\s+(?P<requests>\d+)\s+(?P<answered>\d+)\s+(?P<failed>\d+)\s+(?P<first>\S+)$",
    re.M,
)


def test_rate_limits_quick_prints_three_arms(tmp_path: Path, run_bench: RunBench) -> None:
    """It exits 0 and prints a parseable row per arm; no timing targets are asserted."""
    out = tmp_path / "rate_limits.json"
    proc = run_bench("rate_limits.py", "--quick", "--json", str(out))
    rows = {m["arm"]: m for m in ROW.finditer(proc.stdout)}
    assert tuple(rows) == ARMS, proc.stdout
    for row in rows.values():
        assert float(row["wall"]) > 0
        assert 0 <= float(row["thru"]) <= 2, proc.stdout
        assert 0 <= float(row["r429"]) <= 1, proc.stdout
        assert int(row["answered"]) + int(row["failed"]) == 200
        assert int(row["requests"]) >= int(row["answered"])
        assert float(row["first"]) >= 0
    saved = json.loads(out.read_text())
    assert [arm["name"] for arm in saved["arms"]] == list(ARMS)
    assert saved["config"]["n"] == 200
