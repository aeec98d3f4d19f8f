"""Running a bench/ script the way a reader would: a real subprocess (see conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
RunBench = Callable[..., subprocess.CompletedProcess[str]]


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``bench/<script> *args`` to completion (60 s at most) and check it exited 0."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc
