"""The in-memory budget, driven by a hand-moved clock."""

from __future__ import annotations

import pytest

from splitter._budget import MemoryBudget

pytestmark = pytest.mark.anyio


class Clock:
    """A clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def _budget(clock: Clock, **kwargs: int | float) -> MemoryBudget:
    return MemoryBudget(clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


async def test_unknown_limits_never_wait() -> None:
    """With no limit given or read, acquire is free and the snapshot knows nothing."""
    clock = Clock()
    budget = _budget(clock)
    for _ in range(1000):
        await budget.acquire(10_000)
    assert clock.slept == []
    assert budget.snapshot().remaining_requests is None


PACE = 0.97  # we spend a little under the service's refill rate


async def test_requests_are_paced_not_burst() -> None:
    """RPM 60 with a 1/6 burst: 10 go at once, then about one per second, in order."""
    clock = Clock()
    budget = _budget(clock, rpm=60, burst=1 / 6)
    for _ in range(13):
        await budget.acquire(1)
    assert clock.slept == pytest.approx([1 / PACE] * 3)


async def test_tokens_bucket_counts_input_plus_max_tokens() -> None:
    """TPM 6000 (100/s): a 600-token request after 600 spent waits 6 s for the refill."""
    clock = Clock()
    budget = _budget(clock, tpm=6000, burst=0.1)
    await budget.acquire(600)
    await budget.acquire(600)
    assert clock.slept == pytest.approx([6.0 / PACE])


async def test_refund_returns_what_was_not_used() -> None:
    """Booking max_tokens but using less gives the difference back at once."""
    clock = Clock()
    budget = _budget(clock, tpm=6000, burst=0.1)
    reservation = await budget.acquire(600)
    await budget.refund(reservation, used_tokens=100)
    assert budget.snapshot().remaining_tokens == pytest.approx(500)


async def test_oversized_request_goes_once_and_leaves_a_debt() -> None:
    """A request bigger than the bucket waits for a full bucket, goes, and the debt refills."""
    clock = Clock()
    budget = _budget(clock, tpm=600, burst=1.0)  # 10 tokens/s, holds 600
    await budget.acquire(1000)
    assert clock.slept == []
    assert budget.snapshot().remaining_tokens == pytest.approx(-400)
    await budget.acquire(10)
    assert clock.slept == pytest.approx([41.0 / PACE])


async def test_a_429_pauses_its_bucket_until_the_reset() -> None:
    """After a 429 with retry-after 5 s, the next acquire waits 5 s; tokens are untouched."""
    clock = Clock()
    budget = _budget(clock, rpm=600, tpm=60_000)
    await budget.rate_limited("requests", 5.0)
    await budget.acquire(1)
    assert clock.slept == [5.0]
    assert budget.buckets["tokens"].blocked_until == 0.0


async def test_a_429_moves_every_booked_request_back() -> None:
    """Requests already waiting their turn are moved back by the refill time of the charged
    request plus a reserve, once per burst of 429s, so they do not hit an empty bucket."""
    clock = Clock()
    budget = _budget(clock, rpm=60, burst=1 / 60)  # one at once, then one a second
    await budget.acquire(1)
    await budget.rate_limited("requests", 0.5)
    await budget.rate_limited("requests", 0.5)  # same burst: no second shift
    await budget.acquire(1)
    reserve = 6  # 10% of the limit
    assert sum(clock.slept) == pytest.approx((1 + (1 + reserve)) / PACE)


async def test_headers_teach_limits_and_the_true_refill_rate() -> None:
    """Limits come from x-ratelimit-limit-*, the rate from remaining and reset ("6m0s"...):
    the reported remaining is rounded down, so one reading leaves up to one unit of doubt
    about the deficit, and the budget takes the slower end."""
    clock = Clock()
    budget = _budget(clock, burst=1.0)
    await budget.sync(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "30",
            "x-ratelimit-reset-requests": "300ms",  # a time-scaled service: 100 per second
            "x-ratelimit-limit-tokens": "40000",
            "x-ratelimit-remaining-tokens": "39000",
            "x-ratelimit-reset-tokens": "1m30s",
        }
    )
    snap = budget.snapshot()
    assert (snap.remaining_requests, snap.remaining_tokens) == (30, 39000)
    assert snap.requests_per_second == pytest.approx(29 / 0.3005)  # 100 per second at most
    assert snap.tokens_per_second == pytest.approx(999 / 90.0005)


async def test_headers_never_raise_our_level_above_what_we_booked() -> None:
    """The service's count caps ours (others share the key) but never adds to it."""
    clock = Clock()
    budget = _budget(clock, rpm=60, burst=1.0)
    for _ in range(50):
        await budget.acquire(1)
    await budget.sync({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59"})
    assert budget.snapshot().remaining_requests == pytest.approx(10)
    await budget.sync({"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "3"})
    assert budget.snapshot().remaining_requests == pytest.approx(3)


async def test_cancelled_waiter_returns_its_booking() -> None:
    """A waiter cancelled before its turn gives its request back to the bucket."""
    import anyio

    budget = MemoryBudget(rpm=60, burst=1 / 60)  # one request, then one per second
    await budget.acquire(1)
    with anyio.move_on_after(0.05):
        await budget.acquire(1)
    assert budget.snapshot().remaining_requests == pytest.approx(0, abs=0.2)


def _limit_headers(limit: int, remaining: int, reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
    }


async def test_an_empty_bucket_reading_is_only_provisional() -> None:
    """At remaining 0 the service may be in debt (a longer reset): that rate estimate is used
    only until a reading with requests left arrives, which replaces it."""
    clock = Clock()
    budget = _budget(clock, burst=1.0)
    await budget.sync(_limit_headers(60, 0, "1m3s"))  # 3 s of hidden debt
    assert budget.snapshot().requests_per_second == pytest.approx(59 / 63, rel=1e-4)
    await budget.sync(_limit_headers(60, 59, "1s"))  # a full bucket less our request: exact
    assert budget.snapshot().requests_per_second == pytest.approx(1.0, rel=1e-3)
    await budget.sync(_limit_headers(60, 0, "2m"))  # an empty reading never overrides it
    assert budget.snapshot().requests_per_second == pytest.approx(1.0, rel=1e-3)


async def test_a_rounded_down_remaining_cannot_double_the_rate() -> None:
    """A bucket refilled to just under full reports one unit less than it holds: "3 of 5
    left, 12.12 s to full" fits a rate of 1/12 as well as 2/12. Readings are intersected and
    the slower end is kept, so the budget never paces faster than the service refills."""
    clock = Clock()
    budget = _budget(clock, burst=1.0)
    await budget.sync(_limit_headers(5, 3, "12.12s"))
    assert budget.snapshot().requests_per_second == pytest.approx(1 / 12.1205)
    await budget.sync(_limit_headers(5, 4, "12s"))  # a full bucket less our request: exact
    assert budget.snapshot().requests_per_second == pytest.approx(1 / 12, rel=1e-4)
    await budget.sync(_limit_headers(5, 3, "12.12s"))  # no longer moves it up
    assert budget.snapshot().requests_per_second == pytest.approx(1 / 12, rel=1e-4)


async def test_a_limit_of_one_still_teaches_its_rate() -> None:
    """RPM 1 never shows more than one missing request; that reading is still read."""
    clock = Clock()
    budget = _budget(clock, burst=1.0)
    await budget.sync(_limit_headers(1, 0, "600ms"))  # a time-scaled "minute"
    assert budget.snapshot().requests_per_second == pytest.approx(1 / 0.6, rel=1e-3)


async def test_a_wait_is_told_before_it_is_slept_with_the_limit_that_is_short() -> None:
    """on_wait hears each sleep's length and which bucket is short: requests, then tokens."""
    clock = Clock()
    told: list[tuple[float, str]] = []

    def on_wait(seconds: float, kind: str) -> None:
        told.append((round(seconds, 6), kind))

    by_requests = _budget(clock, rpm=60, tpm=60_000, burst=0.1)  # 6 requests at once
    for _ in range(7):
        await by_requests.acquire(1, on_wait)
    by_tokens = _budget(clock, rpm=60_000, tpm=6000, burst=0.1)  # 600 tokens at once
    await by_tokens.acquire(600, on_wait)
    await by_tokens.acquire(300, on_wait)
    assert [k for _, k in told] == ["requests", "tokens"]
    assert [s for s, _ in told] == clock.slept
