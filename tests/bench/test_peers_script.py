"""``bench/peers.py`` end to end on a tiny workload: every arm answers every question, once,
with its own answer (the simulator's answers name their question)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _arms() -> list[str]:
    arms = ["splitter", "gather", "cookbook"]
    if importlib.util.find_spec("litellm") is not None:
        arms.append("litellm")
    if importlib.util.find_spec("langchain_openai") is not None:
        arms.append("langchain")
    return arms


def test_peers_tiny_faults_workload() -> None:
    pytest.importorskip("uvicorn", reason="the simulator's server needs splitter[sim]")
    arms = _arms()
    cmd = [sys.executable, str(ROOT / "bench" / "peers.py"), "--rounds", "1", "--scale", "0.01"]
    cmd += ["--workloads", "faults", "--arms", ",".join(arms)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    rows = [
        line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| faults")
    ]
    assert [r[1].strip() for r in rows] == arms
    for row in rows:
        cells = [c.strip() for c in row]
        answered, wrong = int(cells[5]), int(cells[6])
        assert (answered, wrong) == (10, 0), row
        assert int(cells[3]) >= 10  # at least one request per question


def test_peers_why_table_counts_splitters_requests() -> None:
    """``--why`` explains splitter's run from its events: the retries it reports are the
    requests beyond one per question that the HTTP hook counted, and the scaled arm's
    backoffs are the default's times the time scale (0.1). The simulator's faults are
    drawn from its seed in request order, so both arms meet the same number."""
    pytest.importorskip("uvicorn", reason="the simulator's server needs splitter[sim]")
    cmd = [sys.executable, str(ROOT / "bench" / "peers.py"), "--rounds", "1", "--scale", "0.02"]
    cmd += ["--workloads", "faults", "--arms", "splitter,splitter-scaled", "--why"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    lines = out.stdout.splitlines()
    rows = (x.split("|")[1:-1] for x in lines if x.startswith("| faults |"))
    table = {r[1].strip(): r for r in rows}
    head = next(x for x in lines if x.startswith("| splitter, medians"))
    keys = [k.strip() for k in head.split("|")[2:-1]]
    whys = {}
    for arm in ("splitter", "splitter-scaled"):
        row = next(x for x in lines if x.startswith(f"| faults {arm} |"))
        why = whys[arm] = dict(zip(keys, (float(v) for v in row.split("|")[2:-1]), strict=True))
        assert why["planned requests"] == 20
        assert why["retries"] == int(table[arm][3]) - 20, (row, table[arm])
    retries = whys["splitter"]["retries"]
    assert retries >= 1
    assert whys["splitter-scaled"]["retries"] == retries
    assert whys["splitter"]["backoff sum s"] >= 0.5 * retries  # initial_wait 0.5 s
    assert whys["splitter-scaled"]["backoff sum s"] <= 0.1 * whys["splitter"]["backoff sum s"] + 0.1
