"""The seeds' benchmark script (and ``splitter bench``) on the simulator, on a short setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_support import RunBench

from splitter._cli import main

ROW = re.compile(
    r"^(?P<arm>merged|fan-out|auto)\s+(?P<plan>\S+ k=\d+\*?)\s+(?P<requests>[\d.]+)\s+"
    r"(?P<median>[\d.]+)\s+(?P<min>[\d.]+)\s+(?P<max>[\d.]+)\s+(?P<speedup>[\d.]+)x$",
    re.M,
)
BEST = re.compile(
    r"^auto / best measured plan \((?P<best>merged|fan-out), .*: (?P<ratio>[\d.]+)", re.M
)
LIMIT = re.compile(
    r"^physical limit: .* = (?P<limit>[\d.]+); auto / limit = (?P<ratio>[\d.]+)$", re.M
)


def test_seed_benchmark_prints_the_table_and_writes_json(
    tmp_path: Path, run_bench: RunBench
) -> None:
    """Three questions of 40 tokens on the GPU profile, one round: every arm has a row,
    merged is one request, the limit is printed, every answer is its own question's, and
    the JSON holds the rounds (times are not asserted: the machine may be busy)."""
    out = tmp_path / "seed.json"
    proc = run_bench(
        "seed_benchmark.py",
        *("--questions", "3", "--tokens", "40", "--rounds", "1", "--calibration", "1"),
        *("--time-scale", "0.05", "--json", str(out)),
    )
    rows = {m["arm"]: m for m in ROW.finditer(proc.stdout)}
    assert set(rows) == {"merged", "fan-out", "auto"}, proc.stdout
    assert rows["merged"]["plan"] == "merge k=1"
    assert rows["fan-out"]["plan"] == "fan-out k=3"
    assert float(rows["merged"]["speedup"]) == pytest.approx(1.0)
    best = BEST.search(proc.stdout)
    assert best is not None, proc.stdout
    assert float(best["ratio"]) > 0
    limit = LIMIT.search(proc.stdout)
    assert limit is not None, proc.stdout
    assert float(limit["limit"]) > 0
    assert "attached to their own question: 9/9" in proc.stdout
    saved = json.loads(out.read_text())
    assert [len(saved["arms"][arm]) for arm in ("merged", "fan-out", "auto")] == [1, 1, 1]
    assert saved["summary"]["probe"]["tpot_n"] > 0
    assert "api_key" not in saved["settings"]
    assert saved["settings"]["profile"] == "gpt-4o-mini"  # the simulator's: it applied


def test_splitter_bench_runs_the_same_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    """``splitter bench`` is the script's code behind the console command."""
    argv = ["bench", "--questions", "2", "--tokens", "20", "--rounds", "1", "--time-scale", "0.05"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert {m["arm"] for m in ROW.finditer(out)} == {"merged", "fan-out", "auto"}, out
    assert "attached to their own question: 6/6" in out


def test_splitter_bench_json_records_only_what_applied_to_an_endpoint(tmp_path: Path) -> None:
    """Against a base URL, the simulated profile and its time scale did not apply: the JSON
    leaves them out (and never holds the key)."""
    from splitter.sim import SimService, serve

    out = tmp_path / "bench.json"
    with serve(SimService("instant")) as base_url:
        argv = [
            "bench", "--base-url", base_url, "--api-key", "sk-secret", "--model", "m",
            "--questions", "2", "--tokens", "10", "--rounds", "1", "--json", str(out),
        ]  # fmt: skip
        assert main(argv) == 0
    settings = json.loads(out.read_text())["settings"]
    assert settings["base_url"] == base_url
    assert "profile" not in settings
    assert "time_scale" not in settings
    assert "sk-secret" not in out.read_text()
