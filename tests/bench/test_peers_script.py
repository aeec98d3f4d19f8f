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
