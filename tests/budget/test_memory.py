"""The in-memory budget, driven by a hand-moved clock: how it learns any limiter."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from splitter._budget import MemoryBudget, Reservation
from splitter._budget._account import SLOW_START_STEP, Account, Limit
from splitter._budget._probe import CLOSE_ENOUGH, FIRST_CUT

pytestmark = pytest.mark.anyio

START = 100.0
PACE = 0.97  # a stated rate is spent a little under the service's


class Clock:
    """A clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = START
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def _budget(clock: Clock, **kwargs: int | float) -> MemoryBudget:
    return MemoryBudget(clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


async def _sent_at(budget: MemoryBudget, clock: Clock, tokens: int = 1) -> float:
    await budget.acquire(tokens)
    return round(clock.now - START, 6)


def _window(limit: int, remaining: int, reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
    }


async def test_a_cold_endpoint_opens_like_slow_start() -> None:
    """Knowing nothing, requests go in waves of 1, 2, 4, 8 one step apart, never a flood;
    each wave spread evenly over its step, so a 429 can stop the rest of it."""
    clock = Clock()
    budget = _budget(clock)
    times = [await _sent_at(budget, clock) for _ in range(15)]
    step = SLOW_START_STEP
    expected = [(k + i / 2**k) * step for k in range(4) for i in range(2**k)]
    assert times == pytest.approx(expected)
    assert expected[:4] == pytest.approx([0.0, step, 1.5 * step, 2 * step])


async def test_slow_start_never_catches_up_after_a_stall() -> None:
    """A process stalled past slow start's schedule before any answer came (a loaded
    machine, a first connection that took seconds) goes on at its wave's spacing.
    Regression: the waves were due at fixed times from the first send, so after a 3 s
    stall every one of them was due and 49 requests left in 0.2 s (47 answered 429 by a
    leaky bucket)."""
    clock = Clock()
    budget = _budget(clock)
    await budget.acquire(1)
    clock.now += 5.0  # stalled: by the schedule, waves 0-9 are all due now
    times = [await _sent_at(budget, clock) for _ in range(7)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[0] == pytest.approx(5.0)
    assert gaps == pytest.approx(
        [SLOW_START_STEP / 2] + [SLOW_START_STEP / 4] * 4 + [SLOW_START_STEP / 8]
    )


async def test_a_429_in_the_middle_of_a_slow_start_wave_holds_the_rest_of_it() -> None:
    """Regression: a wave went out at once, so a leaky bucket with a burst of 5 refused
    the 7 requests of the wave of 8 that came after its burst. Now the second request of
    a wave waits its turn, and a 429 for the first that comes back before then (loopback:
    milliseconds) holds it to the pace the 429 sets."""
    clock = Clock()
    budget = _budget(clock)
    sent = [await budget.acquire(1) for _ in range(8)]  # waves 0-2, and the first of 3
    wave_start = clock.now
    account = budget.account
    delay, _ = account.wait(1, wave_start)
    assert delay == pytest.approx(SLOW_START_STEP / 8)
    for reservation in sent[:7]:
        await budget.settle(reservation, {})
    clock.now = wave_start + 0.002  # the 429 for the first of the wave comes back
    await _rejected(budget, sent[7])
    assert account.probe.rate is not None
    delay, _ = account.wait(1, clock.now)
    # Two intervals: a limiter counting the refused request holds it for one of them.
    assert delay == pytest.approx(2 / account.probe.rate)
    assert delay > SLOW_START_STEP / 8


async def test_slow_start_ends_and_unknown_limits_then_never_wait() -> None:
    """After ten waves (1,023 requests could have gone) nothing is held back any more."""
    clock = Clock()
    budget = _budget(clock)
    for _ in range(1023):
        await budget.acquire(10_000)
    slept = len(clock.slept)
    for _ in range(1000):
        await budget.acquire(10_000)
    assert len(clock.slept) == slept
    assert budget.snapshot().remaining_requests is None


async def test_rate_headers_end_slow_start_and_what_remains_goes_at_once() -> None:
    """A window with 2 left sends 2 at once (no pacing), then waits for its reset."""
    clock = Clock()
    budget = _budget(clock)
    first = await budget.acquire(1)
    await budget.settle(first, _window(10, 2, "5s"))
    assert [await _sent_at(budget, clock) for _ in range(2)] == [0.0, 0.0]
    assert await _sent_at(budget, clock) == pytest.approx(5.0, abs=0.01)


async def test_a_fixed_window_is_whole_again_at_each_reset() -> None:
    """The first reset lets one request read the new window; once it shows a whole window,
    later resets are taken as whole at once (no probe, no pacing)."""
    clock = Clock()
    budget = _budget(clock)
    r = await budget.acquire(1)
    await budget.settle(r, _window(3, 2, "2s"))
    for left in (1, 0):
        await budget.settle(await budget.acquire(1), _window(3, left, "2s"))
    probe = await budget.acquire(1)  # after the reset: one request to read the window
    assert clock.now - START == pytest.approx(2.0, abs=0.01)
    clock.now += 0.01
    await budget.settle(probe, _window(3, 2, "1990ms"))
    assert [await _sent_at(budget, clock) for _ in range(2)] == pytest.approx([2.01] * 2)
    assert await _sent_at(budget, clock) == pytest.approx(4.0, abs=0.02)
    assert budget.account.requests.full_at_reset


async def test_a_token_bucket_is_recognised_by_a_reset_that_moves_later() -> None:
    """OpenAI's reset is the time to refill to full: as we spend it moves later, which a
    window's end never does; the budget then refills continuously at the rate it implies."""
    clock = Clock()
    budget = _budget(clock)
    first, second = await budget.acquire(1), await budget.acquire(1)
    await budget.settle(first, _window(60, 59, "1s"))
    await budget.settle(second, _window(60, 58, "2s"))
    limit = budget.account.requests
    assert limit.refill == pytest.approx(1.0, rel=0.01)
    assert budget.snapshot().requests_per_second == pytest.approx(1.0, rel=0.01)


def _tokens(remaining: int, reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-tokens": "40000",
        "x-ratelimit-remaining-tokens": str(remaining),
        "x-ratelimit-reset-tokens": reset,
    }


async def test_a_window_whole_but_for_our_own_request_is_whole_at_each_reset() -> None:
    """OpenAI's tokens reset in "0s" at a high limit: the reading counts the request's own
    tokens (the service's count, a little above our estimate), so the window is whole
    again at each reset and the next requests all go at once (regression: each reset let
    one request through and the rest waited a second: 1 request per second on RPM 12,000)."""
    clock = Clock()
    budget = _budget(clock)
    await budget.settle(await budget.acquire(37), _tokens(39_961, "0s"))
    probe = await budget.acquire(37)  # the first reset: one request reads what came back
    await budget.settle(probe, _tokens(39_961, "0s"))
    assert budget.account.tokens.full_at_reset
    times = [await _sent_at(budget, clock, tokens=37) for _ in range(20)]
    assert times == [0.0] * 20


async def test_a_wait_on_a_probe_ends_when_its_answer_comes() -> None:
    """After a reset one request goes to read the new state; the others wait for its answer,
    not for the second a lost answer is given: they look again every few milliseconds."""
    clock = Clock()
    probes: list[Reservation] = []

    async def answer_then_sleep(seconds: float) -> None:
        if probes:  # the probe's answer comes while the next request waits
            await budget.settle(probes.pop(), _window(10, 8, "2s"))
        await clock.sleep(seconds)

    budget = MemoryBudget(clock=clock, sleep=answer_then_sleep)
    await budget.settle(await budget.acquire(1), _window(10, 0, "50ms"))
    probes.append(await budget.acquire(1))  # the log freed one slot after 50 ms
    assert budget.account.awaiting("requests", clock.now)
    assert await _sent_at(budget, clock) == pytest.approx(0.1, abs=0.001)
    assert clock.slept[-1] == pytest.approx(0.05)


async def test_a_reading_overtaken_by_a_newer_one_never_adds_room() -> None:
    """Responses arrive out of order: in a window the lowest reading is the service's
    latest state, and requests still on their way are kept off the room."""
    clock = Clock()
    budget = _budget(clock)
    await budget.settle(await budget.acquire(1), _window(10, 9, "10s"))
    late = [await budget.acquire(1) for _ in range(3)]
    await budget.settle(late[2], _window(10, 6, "10s"))  # counted last, answered first
    assert budget.snapshot().remaining_requests == pytest.approx(6 - 2)
    await budget.settle(late[0], _window(10, 8, "10s"))  # an older state: not taken
    assert budget.snapshot().remaining_requests == pytest.approx(6 - 1)
    await budget.settle(late[1], _window(10, 7, "10s"))
    assert budget.snapshot().remaining_requests == pytest.approx(6)


async def test_a_stated_limit_is_paced_from_the_first_request() -> None:
    """Limits(rpm=60) against a service that shows nothing: one now, then one a second."""
    clock = Clock()
    budget = _budget(clock, rpm=60, burst=1 / 6)
    times = [await _sent_at(budget, clock) for _ in range(4)]
    assert times == pytest.approx([0, 1 / PACE, 2 / PACE, 3 / PACE], abs=2e-3)


async def test_tokens_count_input_plus_max_tokens_and_unused_come_back() -> None:
    """TPM 6000 (100/s) with a 600-token bucket: a second 600 waits; a refund returns."""
    clock = Clock()
    budget = _budget(clock, tpm=6000, burst=0.1)
    reservation = await budget.acquire(600)
    await budget.settle(reservation, {}, used_tokens=100)
    assert budget.snapshot().remaining_tokens == pytest.approx(500)
    await budget.acquire(600)
    assert clock.now - START == pytest.approx(1 / PACE, rel=1e-3)


async def test_a_429_with_retry_after_holds_everything_until_then() -> None:
    """retry-after 5 s: no request goes before it has passed, and (the service said when to
    come back) the request rate is not searched for."""
    clock = Clock()
    budget = _budget(clock, rpm=6000)
    reservation = await budget.acquire(1)
    await budget.settle(reservation, {}, limited="requests", retry_after=5.0)
    assert await _sent_at(budget, clock) >= 5.0
    assert budget.account.probe.rate is None


async def _rejected(budget: MemoryBudget, reservation: Reservation) -> None:
    await budget.settle(reservation, {}, limited="requests")


async def test_429s_without_headers_search_for_the_rate() -> None:
    """No headers at all (nginx): the first 429 cuts the rate it was sent at (the gap to
    the send before it, not an average over slow start's speeding-up waves) by FIRST_CUT;
    a rate held for a while without one is known good; the next guess climbs 10% above it
    (a bisection spent two or three 429s finding a limit just above the floor)."""
    clock = Clock()
    budget = _budget(clock)
    sent = [await budget.acquire(1) for _ in range(3)]  # the 3rd 1/2 step after the 2nd
    await _rejected(budget, sent[2])
    probe = budget.account.probe
    assert probe.high == pytest.approx(1 / SLOW_START_STEP * 2)
    assert probe.rate == pytest.approx(probe.high * FIRST_CUT)
    for _ in range(100):
        await budget.settle(await budget.acquire(1), {})
        if probe.low:
            break
    good = 20.0 * FIRST_CUT
    assert probe.low == pytest.approx(good)
    assert probe.rate == pytest.approx(good * 1.1)


async def test_slow_starts_first_429_is_bracketed_by_the_rate_accepted_before_it() -> None:
    """A leaky bucket with no burst accepts only what comes at its rate or slower: when
    slow start's first 429 comes at a clearly faster rate than the one accepted just before
    it, the limit lies between the two, and the pace is the accepted rate (regression: it
    was half the refused one, 0.5-0.6 of a 5 r/s limit measured at 4.8 and 5.2)."""
    clock = Clock()
    budget = _budget(clock)
    sent = [await budget.acquire(1) for _ in range(3)]  # at 0, 1 step, 1.5 steps
    await budget.settle(sent[0], {})
    await budget.settle(sent[1], {})  # accepted 1 step after the first: 10 a second
    await _rejected(budget, sent[2])  # refused half a step after it: 20 a second
    probe = budget.account.probe
    assert (probe.low, probe.high) == (pytest.approx(10.0), pytest.approx(20.0))
    assert probe.rate == pytest.approx(10.0)
    for _ in range(100):  # both ends were measured: the search bisects between them
        await budget.settle(await budget.acquire(1), {})
        if probe.rate != pytest.approx(10.0):
            break
    assert probe.rate == pytest.approx(math.sqrt(10.0 * 20.0))


async def test_a_limit_met_exactly_is_bracketed_just_under_it() -> None:
    """Slow start accepted one request 20 a second after the one before and refused the
    next at about the same rate: the limit is about that rate and timing decided (a
    leaky bucket with no burst, met exactly); the pace starts a margin under it, not at
    half (regression: taken for a burst, 0.5 of the rate)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    probe = budget.account.probe
    sent = []
    for at in (0.0, 0.1, 0.15, 0.199):
        clock.now = START + at
        sent.append(await budget.acquire(1))
    for reservation in sent[:3]:
        await budget.settle(reservation, {})  # the third 0.05 s after the second
    await _rejected(budget, sent[3])  # refused 0.049 s after the third
    too_fast = 1 / 0.049
    assert probe.rate == pytest.approx(too_fast / CLOSE_ENOUGH)
    assert probe.low == pytest.approx(too_fast / CLOSE_ENOUGH)


async def test_a_429_at_the_rate_just_accepted_is_a_burst_and_bounds_nothing() -> None:
    """Accepted at about the rate that was then refused, the accepted requests were a
    burst allowance's: no floor is taken from them (the rate is cut as before)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    probe = budget.account.probe
    sent = []
    for i in range(4):
        clock.now = START + i * 0.05
        sent.append(await budget.acquire(1))
    for reservation in sent[:3]:
        await budget.settle(reservation, {})  # accepted 20 a second apart
    await _rejected(budget, sent[3])  # and refused at 20 a second
    assert probe.low == 0.0
    assert probe.rate == pytest.approx(20.0 * FIRST_CUT)


async def test_what_was_accepted_between_two_429s_bounds_the_rate_from_below() -> None:
    """A 429 means the limiter was full; between two of them it drained at least what it
    accepted, less one: that floor, not a guess, is where the search resumes (regression:
    a burst allowance made a too-fast rate look sustainable, and the next 429 cut to 0.4
    of it)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    probe = budget.account.probe
    probe.rate, probe.low, probe.high = 8.0, 6.0, 10.0
    first = await budget.acquire(1)
    await _rejected(budget, first)  # the limiter is full: the search goes on from here
    assert probe.high == 8.0
    start = first.ticket.at
    for _ in range(41):  # 41 accepted in 7 s: it drained at least 40 / 7 a second
        clock.now = start + (_ + 1) * 7 / 42
        await budget.settle(await budget.acquire(1), {})
    clock.now = start + 7.0
    last = await budget.acquire(1)
    await _rejected(budget, last)
    assert probe.high <= 8.0
    assert probe.low == pytest.approx(40 / 7, rel=0.02)


async def test_a_429_at_a_pace_that_held_while_the_limiter_was_full_cuts_a_little() -> None:
    """After a 429 the limiter is full: requests accepted at the pace since then had no
    burst allowance to borrow from, so a 429 at that pace means the limit was met exactly
    (a send a few ms early): the floor goes a margin under the pace, not to half of it
    (regression: real nginx at 5 r/s, paced at 5, was then searched from 2.5 and ran
    at 0.61 of its rate)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    probe = budget.account.probe
    probe.rate, probe.low = 5.5, 5.0  # climbing above a floor of 5 a second
    first = await budget.acquire(1)
    await _rejected(budget, first)  # a climb's step refused: the limiter is full
    assert probe.rate == pytest.approx(5.0)
    for _ in range(3):  # three accepted at the pace, 0.2 s apart
        await budget.settle(await budget.acquire(1), {})
    refused = await budget.acquire(1)
    await _rejected(budget, refused)  # refused at that same pace
    assert probe.low == pytest.approx(5.0 / CLOSE_ENOUGH, rel=0.01)
    assert probe.rate == pytest.approx(probe.low)


async def test_a_429_at_slow_starts_floor_with_no_burst_cuts_a_little() -> None:
    """Slow start's first 429 was bracketed (accepted at 20 a second, refused at 44: a
    limiter that lends nothing), and the pace at that floor is refused before two requests
    held at it: the limit was met exactly, so the floor goes a margin under it, not to
    half (regression: a floor measured a hair over a 20 r/s limit, at the wire of four
    processes, was halved to 10 and the climb back cost 1.5 s of a 10 s run)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    probe = budget.account.probe
    sent = []
    for at in (0.0, 0.1, 0.15, 0.1725):
        clock.now = START + at
        sent.append(await budget.acquire(1))
    for reservation in sent[:3]:
        await budget.settle(reservation, {})  # the third 0.05 s after the second
    await _rejected(budget, sent[3])  # refused 0.0225 s after the third
    assert (probe.low, probe.rate) == (pytest.approx(20.0), pytest.approx(20.0))
    await budget.settle(await budget.acquire(1), {})  # one accepted at the pace
    await _rejected(budget, await budget.acquire(1))  # and the next refused at it
    assert probe.high == pytest.approx(20.0)
    assert probe.low == pytest.approx(20.0 / CLOSE_ENOUGH)
    assert probe.rate == pytest.approx(probe.low)


async def test_a_refused_burst_bounds_no_rate_and_the_search_climbs_from_a_guess() -> None:
    """Sent together (no slow start), requests refused say nothing of the rate the service
    takes: the pace starts at a guess (10 a second) with no ceiling, and climbs while it
    holds, 10% above it, then 20% and 40% above each new floor (regression: the guess was
    taken for a rate known too fast, a ceiling forever)."""
    clock = Clock()
    budget = _budget(clock, slow_start=False)
    burst = [await budget.acquire(1) for _ in range(5)]
    assert clock.now == START
    await _rejected(budget, burst[4])
    probe = budget.account.probe
    assert (probe.rate, probe.high) == (pytest.approx(10.0), math.inf)
    rates = []
    for _ in range(200):
        await budget.settle(await budget.acquire(1), {})
        if probe.rate not in rates:
            rates.append(probe.rate)
    assert rates[:4] == pytest.approx([10.0, 11.0, 11.0 * 1.2, 11.0 * 1.2 * 1.4])
    assert probe.high == math.inf


async def test_a_stated_pace_refused_with_no_header_carries_no_credit() -> None:
    """Limits(rpm=600) where a 429 without headers comes at the stated pace: the search
    starts from the stated rate, and a request sent late is not made up for by the next."""
    clock = Clock()
    budget = _budget(clock, rpm=600)
    first = await budget.acquire(1)
    await _rejected(budget, first)
    limit = budget.account.requests
    assert limit.spaced
    assert limit.capacity() == 1.0
    assert budget.account.probe.rate == pytest.approx(10 * PACE)


async def test_a_burst_of_429s_from_one_overload_cuts_the_rate_once() -> None:
    """Requests sent before the cut that come back 429 are the same overload."""
    clock = Clock()
    budget = _budget(clock)
    sent = [await budget.acquire(1) for _ in range(7)]
    for reservation in sent[1:]:
        await _rejected(budget, reservation)
    assert budget.account.probe.rate == pytest.approx(budget.account.probe.high * FIRST_CUT)


async def test_a_429_the_headers_do_not_explain_paces_below_them() -> None:
    """Azure-style: the headers still show room, yet a 429 came (10-second sub-windows):
    the budget paces requests from then on instead of sending what the headers allow."""
    clock = Clock()
    budget = _budget(clock)
    first = await budget.acquire(1)
    await budget.settle(first, {"x-ratelimit-remaining-requests": "50"})
    burst = [await budget.acquire(1) for _ in range(10)]
    await budget.settle(burst[-1], {"x-ratelimit-remaining-requests": "40"}, limited="requests")
    assert budget.account.probe.rate is not None
    times = []
    for _ in range(3):
        reservation = await budget.acquire(1)
        times.append(clock.now)
        await budget.settle(reservation, {"x-ratelimit-remaining-requests": "30"})
    assert times[2] - times[1] == pytest.approx(1 / budget.account.probe.rate, rel=1e-3)


async def test_a_wait_is_told_once_with_the_limit_that_is_short() -> None:
    """on_wait hears a waiting acquire once, with the bucket that is short."""
    clock = Clock()
    told: list[str] = []
    by_requests = _budget(clock, rpm=60, tpm=60_000)
    for _ in range(2):
        await by_requests.acquire(1, lambda s, kind: told.append(kind))
    by_tokens = _budget(clock, rpm=60_000, tpm=6000, burst=0.1)
    for _ in range(2):
        await by_tokens.acquire(600, lambda s, kind: told.append(kind))
    assert told == ["requests", "tokens"]


async def test_the_account_survives_a_round_trip_through_json() -> None:
    """A shared budget keeps the account as JSON: every learned figure comes back."""
    clock = Clock()
    budget = _budget(clock, rpm=120)
    sent = [await budget.acquire(1) for _ in range(3)]
    await budget.settle(sent[0], _window(60, 59, "1s"))
    await budget.settle(sent[1], _window(60, 58, "2s"))
    await _rejected(budget, sent[2])
    data = json.loads(json.dumps(budget.account.dump()))
    assert Account.load(data) == budget.account


async def test_what_was_learned_starts_another_budget_knowing_it() -> None:
    """A saved service model carries the limits learned (no moments): a budget taught them
    skips slow start and paces at the rate found, in another process, on another clock."""
    clock = Clock()
    budget = _budget(clock)
    sent = [await budget.acquire(1) for _ in range(3)]
    await _rejected(budget, sent[2])  # nginx-like: the rate search begins
    learned = json.loads(json.dumps(budget.account.learned()))
    fresh = _budget(Clock())
    fresh.teach(learned)
    assert fresh.account.probe.rate == pytest.approx(budget.account.probe.rate)
    assert fresh.account.evidence


def test_a_sliding_logs_reset_jumping_later_is_not_a_token_bucket() -> None:
    """A sliding log's reset is the age of its oldest request: 2 ms, then 299 ms at the
    same deficit once that one left. Regression: any reset that moved later was taken for
    a token bucket, whose refill then opened room the log did not have (a storm of 429s)."""
    limit = Limit()
    limit.read(10, 4, 0.002, sent_at=0.0, now=0.001)
    limit.read(10, 4, 0.299, sent_at=0.0, now=0.002)
    assert limit.refill is None
    # A token bucket's resets grow with its deficit at one rate: that is recognised.
    bucket = Limit()
    bucket.read(120, 119, 0.5, sent_at=0.0, now=0.001)
    bucket.read(120, 118, 1.0, sent_at=0.0, now=0.002)
    assert bucket.refill == pytest.approx(2.0, rel=0.01)  # 120 a minute


def test_a_reading_sent_before_an_assumed_reset_does_not_make_the_window_whole() -> None:
    """Regression: requests still on their way when a reset passed answered after it with
    the old window's count; with themselves counted as unread, the window looked whole
    again at the reset, and every later reset sent a whole window into a sliding log."""
    limit = Limit()
    limit.read(10, 5, 0.003, sent_at=0.0, now=0.001)
    before = []
    for _ in range(5):
        limit.take(1, 0.001)
        before.append(limit.booked)
    assert limit.room(0.005) == math.inf  # the reset passed: one request may look
    assert limit.probing
    limit.take(1, 0.005)
    for i, mark in enumerate(before):  # the old window's answers come back
        limit.answered(mark)
        limit.read(10, 5 - i, 0.3, sent_at=0.001, now=0.006)
    assert not limit.full_at_reset


def test_a_buckets_refill_counts_from_when_the_request_was_sent() -> None:
    """Regression (the planner matrix's tight 500-token cells, regret 1.48): a reading came
    with a response that took 30 s to generate, and the refill was counted from the
    response, not from when the service counted the request: 30 s of a 2-a-minute bucket
    (one request) were lost every time, and the third request went at 64 s, not 31 s."""
    limit = Limit()
    limit.read(2, 1, 30.0, sent_at=0.0, now=0.01)
    limit.read(2, 0, 60.0, sent_at=0.0, now=0.02)  # the reset moved later: a bucket
    assert limit.refill == pytest.approx(1 / 30, rel=0.01)
    limit.take(1, 100.0)
    mark = limit.booked
    limit.answered(mark)
    limit.read(2, 0, 60.0, sent_at=100.0, now=130.0)  # 30 s of decoding later
    wait = limit.room_wait(1, 130.0)
    assert wait == pytest.approx(100.0 + 30 / 0.97 - 130.0, abs=0.05)
