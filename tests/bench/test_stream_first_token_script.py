"""The streaming first-token benchmark script, run as a real subprocess on a short setting."""

from __future__ import annotations

import re

from bench_support import RunBench

ROW = re.compile(r"^(?P<arm>unwrapped|wrapped)\s+(?P<first>\S+)\s+(?P<end>\S+)$", re.M)
FIRST = re.compile(r"first token wrapped / unwrapped: (?P<ratio>[\d.]+)")
END = re.compile(r"end of stream wrapped / unwrapped: (?P<ratio>[\d.]+)")


def test_stream_first_token_prints_both_arms_and_their_ratios(run_bench: RunBench) -> None:
    """It exits 0 and prints both arms and the first-token and end-of-stream ratios (the
    targets, about 1 and about 1/N, are not asserted: real time on a busy machine is noisy)."""
    proc = run_bench("stream_first_token.py", "--rounds", "3", "--tokens", "60", "--scale", "0.3")
    rows = {m["arm"] for m in ROW.finditer(proc.stdout)}
    assert rows == {"unwrapped", "wrapped"}, proc.stdout
    first, end = FIRST.search(proc.stdout), END.search(proc.stdout)
    assert first is not None, proc.stdout
    assert end is not None, proc.stdout
    assert float(first["ratio"]) > 0, proc.stdout
    assert float(end["ratio"]) > 0, proc.stdout
