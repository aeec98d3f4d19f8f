"""Speed cuts that must not change a result: each fast path is checked against the plain
version it replaced (kept here as the reference), on fixed random inputs."""

from __future__ import annotations

import heapq
import random

import pytest

from splitter._meter import InFlightMeter
from splitter._service_model import _DECAY, _dot, _Fit, _solve4


class _NeverForgets(InFlightMeter):
    """The meter with every return time kept: what pruning must not change."""

    def _forget(self) -> None:
        pass


@pytest.mark.parametrize(("width", "requests"), [(4, 200), (64, 600), (300, 900)])
def test_meter_pruning_changes_no_reading(width: int, requests: int) -> None:
    """Requests of random lengths, ``width`` in flight at a time (some sent at the same
    instant, some returning at the same instant): every finish reads exactly what a meter
    that forgets nothing reads, and the pruned meter keeps fewer return times."""
    rng = random.Random(width)
    pruned, reference = InFlightMeter(), _NeverForgets()
    out: list[tuple[float, int, int]] = []
    now, sent, kept_max = 0.0, 0, 0
    while sent < requests or out:
        if sent < requests and len(out) < width:
            now += rng.choice([0.0, 0.0, 0.5])
            token = pruned.start(now)
            assert reference.start(now) == token
            heapq.heappush(out, (now + rng.choice([1.0, 2.0, rng.uniform(0.5, 30.0)]), token, 0))
            sent += 1
            continue
        finish, token, _ = heapq.heappop(out)
        now = max(now, finish)
        assert pruned.finish(token, now) == reference.finish(token, now)
        kept_max = max(kept_max, len(pruned._returned))
    assert kept_max < len(reference._returned) == requests


def _reference_solve4(a: list[list[float]], b: list[float]) -> tuple[float, ...]:
    """The elimination as first written (max() for the pivot, sum() of a generator)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            factor = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= factor * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return tuple(x)


def test_fit_sums_and_solution_match_the_plain_loops() -> None:
    """The decayed least-squares sums and their ridge solution, bit for bit the values of
    the plain double loop and elimination, over 300 random observations (ties in the pivot
    column included: a zero column and repeated rows)."""
    rng = random.Random(7)
    fit = _Fit(None)
    xtx = [[0.0] * 4 for _ in range(4)]
    xty, yy = [0.0] * 4, 0.0
    for n in range(300):
        inputs, outputs = float(rng.randint(1, 900)), float(rng.randint(1, 400))
        running, target = rng.choice([1.0, 0.5, rng.uniform(1, 64)]), rng.uniform(0.01, 20)
        fit.add(inputs, outputs, running, target)
        x = (1.0, inputs, outputs, outputs * (max(1.0, running) - 1))
        yy = yy * _DECAY + target * target
        for i in range(4):
            xty[i] = xty[i] * _DECAY + x[i] * target
            for j in range(4):
                xtx[i][j] = xtx[i][j] * _DECAY + x[i] * x[j]
        assert (fit.xtx, fit.xty, fit.yy) == (xtx, xty, yy)
        theta0 = tuple(rng.uniform(0, 1) for _ in range(4))
        small = n % 7 == 0 and n > 10  # nearly no ridge
        lams = tuple(1e-9 if small else rng.uniform(0, 5) for _ in range(4))
        a = [
            [v + (lams[i] if i == j else 0.0) for j, v in enumerate(row)]
            for i, row in enumerate(xtx)
        ]
        b = [v + lams[i] * theta0[i] for i, v in enumerate(xty)]
        if n % 11 == 0:
            a[2] = a[1][:]  # a tie for the pivot
            b[2] = b[1]
            a[2][2] += 1.0
        assert _solve4([r[:] for r in a], b[:]) == _reference_solve4(a, b)
        assert _dot(x, theta0) == sum(p * q for p, q in zip(x, theta0, strict=True))
