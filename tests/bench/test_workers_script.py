"""bench/workers.py, run as a real subprocess with small numbers."""

from __future__ import annotations

import re

from bench_support import RunBench

ROW = re.compile(r"^\s+(\d+)\s+([\d.]+) \([\d.]+-[\d.]+\)\s+([\d.]+)" + r"\s+(\d+)" * 6 + "$", re.M)


def test_workers_script_prints_a_row_per_worker_count_each_id_once(run_bench: RunBench) -> None:
    """One row each for 1 and 2 workers: a positive rate and CPU per request, one request
    per question, and every one of the 30 ids answered exactly once."""
    proc = run_bench("workers.py", "--questions", "30", "--rounds", "1", "--workers", "1", "2")
    rows = {int(m.group(1)): m.groups()[1:] for m in ROW.finditer(proc.stdout)}
    assert sorted(rows) == [1, 2], proc.stdout
    for rate, cpu, requests, rejected, once, missing, twice, asked_twice in rows.values():
        assert float(rate) > 0
        assert float(cpu) > 0
        assert (int(requests), int(rejected)) == (30, 0)
        assert (int(once), int(missing), int(twice), int(asked_twice)) == (30, 0, 0, 0)
