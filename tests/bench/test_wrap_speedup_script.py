"""The wrap() speed-up benchmark script, run as a real subprocess on a short setting."""

from __future__ import annotations

import re

from bench_support import RunBench

ROW = re.compile(
    r"^(?P<arm>unwrapped|wrapped)\s+(?P<median>\S+)\s+(?P<min>\S+)\s+(?P<max>\S+)$", re.M
)
RATIO = re.compile(r"speed-up wrapped vs unwrapped: (?P<ratio>[\d.]+)x")


def test_wrap_speedup_prints_both_arms_and_a_generous_ratio(run_bench: RunBench) -> None:
    """Five questions of 100 tokens on the GPU profile, on virtual time (exact, whatever the
    machine's load): splitting wins clearly, and the wrapped call takes the physical limit."""
    proc = run_bench("wrap_speedup.py", "--rounds", "1", "--tokens", "100", "--clock", "virtual")
    rows = {m["arm"]: float(m["median"]) for m in ROW.finditer(proc.stdout)}
    assert set(rows) == {"unwrapped", "wrapped"}, proc.stdout
    ratio = RATIO.search(proc.stdout)
    assert ratio is not None, proc.stdout
    assert float(ratio["ratio"]) > 1.5, proc.stdout
    assert "wrapped / limit = 1.00" in proc.stdout, proc.stdout
