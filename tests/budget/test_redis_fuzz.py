"""The Redis-shared budget fed malformed rate-limit headers (docs/security.md, issue 8)."""

from __future__ import annotations

import itertools
import math

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_support import RedisServer

from splitter import Limits, SharedBudget
from splitter._budget._redis import RedisBudget

values = st.one_of(
    st.floats().map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["nan", "inf", "-1", "1e400", "", "x", "9" * 400 + "s", "1h2m3.5s", "0s"]),
    st.integers(0, 10**6).map(lambda n: f"{n}ms"),
)
headers = st.dictionaries(
    st.sampled_from(
        [
            f"x-ratelimit-{w}-{k}"
            for w in ("limit", "remaining", "reset")
            for k in ("requests", "tokens")
        ]
    ),
    values,
    max_size=6,
)


def test_garbage_headers_leave_the_shared_budget_readable(redis_server: RedisServer) -> None:
    """Whatever the headers say (NaN, inf, negative, huge, unreadable), the shared account
    takes the reading and its snapshot holds finite, non-negative rates."""
    shared = SharedBudget(url=redis_server.url, namespace="fuzz")
    examples = itertools.count()

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(headers, min_size=1, max_size=3))
    def check(readings: list[dict[str, str]]) -> None:
        # A fresh account per example, whose requests all go before the first reading: a
        # garbage reading may rightly hold the next request for as long as it says.
        fingerprint = f"{next(examples):024d}"
        limits = Limits(shared=shared, tpm=10**9)  # stated, so no slow start; never short
        budget = RedisBudget(shared, fingerprint=fingerprint, limits=limits)

        async def settle_all() -> None:
            reservations = [await budget.acquire(1) for _ in readings]
            for reservation, reading in zip(reservations, readings, strict=True):
                await budget.settle(reservation, reading)

        anyio.run(settle_all)
        snap = budget.snapshot()
        for rate in (snap.requests_per_second, snap.tokens_per_second):
            assert rate is None or (math.isfinite(rate) and rate >= 0)
        assert not budget._warned  # Redis answered every script: no fall back to local

    check()
