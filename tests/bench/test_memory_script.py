"""The memory benchmark script, run as a real subprocess on small sizes."""

from __future__ import annotations

import re

import pytest
from bench_support import RunBench

ROW = re.compile(
    r"^\s*(?P<n>\d+)\s+(?P<answered>\d+)\s+(?P<wrong>\d+)\s+\d+\s+[\d.]+\s+(?P<rss>[\d.]+)", re.M
)
RATIO = re.compile(r"peak RSS 2000 / 200: (?P<ratio>[\d.]+)")


def test_memory_prints_both_sizes_every_answer_its_own_and_a_flat_peak(run_bench: RunBench) -> None:
    """Ten times the questions, about the same peak (loose bound: 1.5, the target)."""
    proc = run_bench("memory.py", "--sizes", "200", "2000", "--window", "32")
    rows = {int(m["n"]): m for m in ROW.finditer(proc.stdout)}
    assert set(rows) == {200, 2000}, proc.stdout
    for n, row in rows.items():
        assert (int(row["answered"]), int(row["wrong"])) == (n, 0), proc.stdout
    ratio = RATIO.search(proc.stdout)
    assert ratio is not None, proc.stdout
    assert float(ratio["ratio"]) <= 1.5, proc.stdout
    shown = float(rows[2000]["rss"]) / float(rows[200]["rss"])
    assert float(ratio["ratio"]) == pytest.approx(shown, abs=0.02)
    assert "every question answered once with its own answer: yes" in proc.stdout
