"""The overhead benchmark script, run as a real subprocess with small numbers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"
RATIO_LINE = re.compile(r"^overhead: splitter/raw throughput = (\S+) \(target >= 0\.90\)$", re.M)


def test_overhead_script_prints_a_ratio(tmp_path: Path) -> None:
    """It exits 0 and prints a positive ratio (the target is not asserted: timings are noisy)."""
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", "32", "--rounds", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    match = RATIO_LINE.search(proc.stdout)
    assert match is not None, proc.stdout
    ratio = float(match.group(1))
    assert ratio > 0
    saved = json.loads(out.read_text())
    assert saved["ratio"] > 0
    assert len(saved["raw"]["rates"]) == len(saved["splitter"]["rates"]) == 2
