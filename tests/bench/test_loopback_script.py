"""The loopback benchmark script, run as a real subprocess with few requests."""

from __future__ import annotations

import re

from bench_support import RunBench

ROW = re.compile(r"^(?P<door>http|in-process)\s+(?P<ms>[\d.]+)$", re.M)
RATIO = re.compile(r"^loopback: http / in-process = (?P<ratio>\S+) \(target < 8\)$", re.M)


def test_loopback_prints_both_doors_and_a_ratio(run_bench: RunBench) -> None:
    """It exits 0 and prints both doors' medians and their ratio (the target is not
    asserted: real sockets on a busy machine are noisy)."""
    proc = run_bench("loopback.py", "--requests", "5")
    assert {m["door"] for m in ROW.finditer(proc.stdout)} == {"http", "in-process"}, proc.stdout
    ratio = RATIO.search(proc.stdout)
    assert ratio is not None, proc.stdout
    assert float(ratio["ratio"]) > 0
