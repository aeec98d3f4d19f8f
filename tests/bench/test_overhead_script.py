"""The overhead benchmark script, run as a real subprocess with small numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

RATIO_LINE = re.compile(r"^overhead: splitter/raw throughput = (\S+) \(target >= 0\.95\)$", re.M)
OWN_LINE = re.compile(r"^splitter's own client CPU: (-?\d+) us per request", re.M)


def test_overhead_script_prints_a_ratio(tmp_path: Path, run_bench: RunBench) -> None:
    """It exits 0 and prints a positive ratio and splitter's own CPU per request (the target
    is not asserted: timings are noisy)."""
    out = tmp_path / "overhead.json"
    proc = run_bench("overhead.py", "--requests", "32", "--rounds", "2", "--json", str(out))
    match = RATIO_LINE.search(proc.stdout)
    assert match is not None, proc.stdout
    ratio = float(match.group(1))
    assert ratio > 0
    own = OWN_LINE.search(proc.stdout)
    assert own is not None, proc.stdout
    saved = json.loads(out.read_text())
    assert round(saved["own_us_per_request"]) == int(own.group(1))
    assert saved["ratio"] > 0
    assert len(saved["raw"]["rates"]) == len(saved["splitter"]["rates"]) == 2
    assert "load average" in proc.stdout
    assert "GC us/req (full)" in proc.stdout
    assert saved["splitter"]["gc_us_per_request"] >= saved["splitter"]["gc_full_us_per_request"]
    assert saved["load_before"].startswith("load average ")


def test_overhead_script_profiles_splitters_own_functions(run_bench: RunBench) -> None:
    """``--profile 1`` prints splitter's own functions by time per request, the sender's
    among them."""
    proc = run_bench("overhead.py", "--requests", "16", "--profile", "1")
    assert "splitter's own functions:" in proc.stdout, proc.stdout
    assert "_send.py:" in proc.stdout


def test_overhead_script_runs_without_a_server(tmp_path: Path, run_bench: RunBench) -> None:
    """``--server mock`` answers from the client's transport: both arms' requests all
    succeed, and the JSON holds splitter's own CPU without the collector's time and each
    arm's full collections."""
    out = tmp_path / "overhead.json"
    proc = run_bench(
        "overhead.py", "--server", "mock", "--requests", "16", "--rounds", "2", "--json", str(out)
    )
    assert "server: mock" in proc.stdout, proc.stdout
    saved = json.loads(out.read_text())
    assert saved["server"] == "mock"
    assert "own_us_per_request_without_gc" in saved
    assert saved["raw"]["full_collections"] >= 0
    assert "without the GC's time" in proc.stdout


def test_overhead_script_freezes_the_heap_when_asked(tmp_path: Path, run_bench: RunBench) -> None:
    """``--freeze`` freezes the warmed-up heap before the measured rounds (openai, pydantic
    and httpx: tens of thousands of objects) and says so; without it nothing is frozen."""
    frozen, plain = tmp_path / "frozen.json", tmp_path / "plain.json"
    args = ("overhead.py", "--server", "mock", "--requests", "16", "--rounds", "1", "--json")
    proc = run_bench(*args, str(frozen), "--freeze")
    assert "heap frozen after the warm-up" in proc.stdout, proc.stdout
    saved = json.loads(frozen.read_text())
    assert saved["freeze"] is True
    assert saved["frozen_objects"] > 10_000
    run_bench(*args, str(plain))
    assert json.loads(plain.read_text())["frozen_objects"] == 0
