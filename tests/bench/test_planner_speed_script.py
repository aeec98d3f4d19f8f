"""The planning-cost benchmark script, run as a real subprocess with small numbers."""

from __future__ import annotations

import re

from bench_support import RunBench

ROW = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$", re.M)


def test_planner_speed_prints_the_three_costs_side_by_side(run_bench: RunBench) -> None:
    """It exits 0 and prints, per n asked for, the planner's, plan()'s, one tokenization
    pass's and a second plan()'s cost per question and plan()'s ratio to the pass, and
    decompose() of both prompts of 12 items with their parts and how many wait (the
    targets are not asserted: timings)."""
    proc = run_bench("planner_speed.py", "--ns", "10", "30", "--runs", "1", "--decompose", "12")
    rows = ROW.findall(proc.stdout)
    assert [int(r[0]) for r in rows] == [10, 30], proc.stdout
    for _, planner, plan, tokenize, again, ratio in rows:
        assert min(float(planner), float(plan), float(tokenize), float(again)) > 0
        assert abs(float(plan) / float(tokenize) - float(ratio)) < 0.01 + 0.01 * float(ratio)
    decomposed = re.findall(
        r"^\s+12 (numbered|pointing)\s+[\d.]+\s+[\d.]+\s+12\s+(\d+)$", proc.stdout, re.M
    )
    assert [name for name, _ in decomposed] == ["numbered", "pointing"], proc.stdout
    assert int(decomposed[1][1]) > 0  # the pointing prompt's questions wait for others
