"""Every script in examples/ runs against `python -m splitter.sim` as a user would run it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    """A real `python -m splitter.sim` server process on a free loopback port."""
    port = _free_port()
    args = [sys.executable, "-m", "splitter.sim", "--port", str(port), "--time-scale", "0.01"]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("splitter.sim did not start")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)
        assert server.stdout is not None
        server.stdout.close()


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path, sim_url: str) -> None:
    """The example exits 0 and prints no failure."""
    env = {**os.environ, "OPENAI_BASE_URL": sim_url, "OPENAI_API_KEY": "sk-sim"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stdout
    assert done.stdout.strip()


def test_the_aggregator_example_shows_its_callers_aggregated(sim_url: str) -> None:
    """12 concurrent callers of 3 tenants become one batch per tenant, and under the
    example's tight budget fewer requests than callers, merged; the output says so."""
    env = {**os.environ, "OPENAI_BASE_URL": sim_url, "OPENAI_API_KEY": "sk-sim"}
    script = ROOT / "examples" / "aggregator_fastapi.py"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    said = re.search(
        r"^aggregated: 12 callers were asked in 3 batches \(questions per batch: \[4, 4, 4\]\) "
        r"sent as (\d+) requests$",
        done.stdout,
        re.M,
    )
    assert said is not None, done.stdout
    assert int(said.group(1)) < 12
    merged = re.search(r"^(\d+) of 12 answers came from merged requests$", done.stdout, re.M)
    assert merged is not None
    assert int(merged.group(1)) == done.stdout.count("-> (merged)") > 0
