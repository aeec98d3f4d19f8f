"""Fixtures for the bench/ smoke tests."""

from __future__ import annotations

import pytest
from bench_support import RunBench, run_bench


@pytest.fixture(name="run_bench")
def run_bench_fixture() -> RunBench:
    """``run_bench("overhead.py", *args)``: a bench script run as a real subprocess."""
    return run_bench
