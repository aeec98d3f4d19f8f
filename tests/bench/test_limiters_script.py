"""The limiter-zoo benchmark script, run as a real subprocess with --quick."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

CELLS = ("openai-120rpm", "leaky-5r/s")
ROW = re.compile(
    r"^(?P<cell>\S+)\s+(?P<told>-|\d+)\s+(?P<sent>\d+)\s+(?P<share>\d\.\d\d)\s+(?P<rate>\d+\.\d\d)"
    r"\s+(?P<ratio>-|\d+\.\d\d)\s+(?P<ratio_acc>-|\d+\.\d\d)\s+(?P<wall>\d+\.\d)\s+(?P<answered>\d+)\s+(?P<failed>\d+)"
    r"\s+(?P<lost>\d+)$",
    re.M,
)


def test_limiters_quick_rows_lose_nothing(tmp_path: Path, run_bench: RunBench) -> None:
    """It exits 0, prints a well-formed row per cell in which no question is lost, and writes
    every request to JSON; no 429 share, rate or time is asserted."""
    out = tmp_path / "limiters.json"
    proc = run_bench("limiters.py", "--quick", "--json", str(out))
    rows = {m["cell"]: m for m in ROW.finditer(proc.stdout)}
    assert tuple(rows) == CELLS, proc.stdout
    for row in rows.values():
        assert int(row["lost"]) == 0, proc.stdout
        assert int(row["answered"]) + int(row["failed"]) == 20, proc.stdout
        assert int(row["sent"]) >= int(row["answered"]) > 0, proc.stdout
        assert 0 <= float(row["share"]) <= 1, proc.stdout
    saved = json.loads(out.read_text())
    assert saved["n"] == 20
    assert [cell["name"] for cell in saved["cells"]] == list(CELLS)
    for cell in saved["cells"]:
        assert len(cell["records"]) == cell["sent"]
        assert {status for *_, status in cell["records"]} <= {200, 429}
