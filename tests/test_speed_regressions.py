"""Speed cuts that must not change a result: each fast path is checked against the plain
version it replaced (kept here as the reference), on fixed random inputs."""

from __future__ import annotations

import heapq
import random

import pytest

from splitter._meter import InFlightMeter


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
