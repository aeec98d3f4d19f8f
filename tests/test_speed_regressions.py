"""Speed cuts that must not change a result: each fast path is checked against the plain
version it replaced (kept here as the reference), on fixed random inputs."""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

import pytest

from splitter._cost_model import ServiceEstimate, simulate
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


def _reference_simulate(
    inputs: list[int],
    outputs: list[int],
    ready: list[float],
    estimate: ServiceEstimate,
    concurrency: int,
) -> tuple[list[float], list[float]]:
    """The event simulation as first written, calling ``estimate.tpot`` at every event."""
    half_rtt = estimate.rtt / 2
    server_slots = estimate.slots if estimate.slots is not None else len(inputs)
    starts, finishes = [0.0] * len(inputs), [0.0] * len(inputs)
    events: list[tuple[float, int, int]] = []
    decoding: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    now = produced = 0.0
    free, upcoming, engine_free = concurrency, 0, server_slots

    def admit(i: int) -> None:
        prefill = estimate.ttft0 + inputs[i] / estimate.prefill_rate
        heapq.heappush(events, (now + prefill, 0, i))

    while upcoming < len(inputs) or events or decoding:
        t_start = max(now, ready[upcoming]) if free and upcoming < len(inputs) else math.inf
        t_event = events[0][0] if events else math.inf
        tpot = estimate.tpot(len(decoding))
        t_decoded = now + (decoding[0][0] - produced) * tpot if decoding else math.inf
        t_next = min(t_start, t_event, t_decoded)
        if decoding:
            produced += (t_next - now) / tpot
        now = t_next
        if t_next == t_decoded:
            _, i = heapq.heappop(decoding)
            heapq.heappush(events, (now + half_rtt, 1, i))
            if queue:
                admit(queue.popleft())
            else:
                engine_free += 1
        elif t_next == t_event:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                heapq.heappush(decoding, (produced + outputs[i], i))
            elif kind == 1:
                finishes[i] = now
                free += 1
            elif engine_free:
                engine_free -= 1
                admit(i)
            else:
                queue.append(i)
        else:
            i, upcoming, free = upcoming, upcoming + 1, free - 1
            starts[i] = now
            heapq.heappush(events, (now + half_rtt, 2, i))
    return starts, finishes


def test_simulate_matches_the_plain_event_loop() -> None:
    """200 random schedules (slot limits, client limits, ready times, beta 0 to 1): the same
    start and finish times, exactly, as the loop that asked the estimate for TPOT each event."""
    rng = random.Random(19)
    for _ in range(200):
        n = rng.randint(1, 120)
        estimate = ServiceEstimate(
            rtt=rng.choice([0.0, 0.05]),
            ttft0=rng.uniform(0, 0.3),
            prefill_rate=rng.uniform(500, 20000),
            tpot1=rng.uniform(0.001, 0.05),
            beta=rng.choice([0.0, 0.02, 0.4, 1.0]),
            slots=rng.choice([None, 1, 4, 32]),
        )
        inputs = [rng.randint(1, 900) for _ in range(n)]
        outputs = [rng.choice([1, 50, rng.randint(1, 400)]) for _ in range(n)]
        ready = sorted(rng.choice([0.0, rng.uniform(0, 10)]) for _ in range(n))
        concurrency = rng.choice([1, 8, n])
        assert simulate(inputs, outputs, ready, estimate, concurrency) == _reference_simulate(
            inputs, outputs, ready, estimate, concurrency
        )
