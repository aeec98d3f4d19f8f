"""The planner against brute force, on virtual time: every regime, exact and load-proof.

Runs ``bench/planner_matrix.py``'s reduced matrix (generation-bound, round-trip-bound with
many and few connections, tight RPM, tight TPM, llama.cpp's slots, a serial server) cell by
cell on virtual time: auto must be within 5% of the best plan it may choose, and its
predicted wall time within 10% of the measured one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from clock_support import needs_one_clock

from splitter.testing import run_virtual

REGRET = 1.05
PREDICTION = 0.10


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "planner_matrix.py"
    spec = importlib.util.spec_from_file_location("planner_matrix", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


matrix = _bench()

# Cells whose prediction misses by more than 10%: the service model's fit, not the clock
# (the real-time matrix shows the same). strict: a fix turns these red until removed.
_MISPREDICTED = {
    "serial/300ms/500t/ample/n5": "the fit takes a serial server (beta 1) for one slot with a "
    "7.7 s ttft0 after calibration; predicts 168 s for 51 s",
}


# Cells where auto is more than 5% off the best plan, with the cause (docs/benchmarks.md).
# strict, as above. None since a bucket's refill counts from the request's send (the
# tight 500-token cell waited a whole refill too long).
_OVER_REGRET: dict[str, str] = {}


def _param(cell: object) -> object:
    tag = cell.tag  # type: ignore[attr-defined]
    reason = _MISPREDICTED.get(tag) or _OVER_REGRET.get(tag)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(cell, id=tag, marks=marks)


def test_the_reduced_matrix_covers_every_regime() -> None:
    """At least 24 cells, with every regime the planner prices among them."""
    cells = matrix.REDUCED
    assert len(cells) >= 24
    assert {c.headroom for c in cells} == {"ample", "tight", "tpm"}
    assert {c.profile for c in cells} >= {"gpt-4o-mini", "llama-cpp-cpu", "serial"}
    assert any(c.conns is not None for c in cells)
    assert {c.rtt for c in cells} >= {0.005, 2.0}
    assert {c.out for c in cells} >= {5, 500}


@needs_one_clock
@pytest.mark.parametrize("cell", [_param(c) for c in matrix.REDUCED])
def test_auto_is_near_the_best_plan_and_predicts_its_time(cell: object) -> None:
    """Auto's makespan is within 5% of the best plan's, and its prediction within 10%."""
    result = run_virtual(matrix.run_cell, cell, 1, 2, 0.5, 0.1, "virtual", backend="asyncio")
    assert result.auto.failed == 0
    assert result.regret <= REGRET, result.explain
    assert abs(result.predicted_over_measured - 1) <= PREDICTION, result.explain
