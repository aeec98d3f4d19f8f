"""Every fault the simulator has, at once: no question is lost, answered twice or given
another question's answer, on asyncio and trio, over a real loopback server."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Literal

import pytest

from splitter import (
    Policy,
    QuotaExceededError,
    RetryPolicy,
    Splitter,
    StreamInterruptedError,
)
from splitter.sim import Faults, SimLimits, SimService, answer_text
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio

N = 240
FAULTS = Faults(
    rate_429=0.06,
    # An empty quota stops the whole batch (tests/test_endpoint.py): none here.
    rate_quota=0.0,
    rate_500=0.03,
    rate_502=0.02,
    rate_503=0.03,
    rate_reset=0.04,
    rate_stall=0.03,
    stall_seconds=100,  # 1 s at the time scale: well past the timeout
    rate_truncate=0.04,
    rate_sloppy=0.05,
    sloppy_swaps=False,  # a swap under correct markers is invisible to any client
    retry_after=1.0,
)
FAST = RetryPolicy(initial_wait=0.02, max_wait=0.2, jitter=0.02)
attempts = FAST.max_attempts
# Far above a normal answer (~20 ms here) and under a stall; tighter, the first burst's
# connection set-up (client and server share this process) times out attempts in a row.
TIMEOUT = 0.5


def questions() -> list[str]:
    return [f"Reliability {i}? [len={3 + i % 17}]" for i in range(N)]


def expected(question: str) -> str:
    return answer_text(question, int(question.rsplit("=", 1)[1].rstrip("]")))


def service(seed: int) -> SimService:
    return SimService(
        "gpt-4o-mini",
        time_scale=0.01,
        faults=FAULTS,
        limits=SimLimits(rpm=3000),  # 500 requests/s: real 429s when the client bursts
        default_answer_tokens=10,
        seed=seed,
    )


@pytest.mark.parametrize("strategy", ["merge", "fanout", "auto"])
async def test_every_question_gets_its_own_answer_or_its_own_error(
    strategy: Literal["auto", "merge", "fanout"],
) -> None:
    """Each index holds its question; an answer is exactly that question's; a failure stays
    at its question and is one that cannot be retried (an empty quota) or was retried to
    the last attempt."""
    asked = questions()
    # Every fault kind is drawn within this seed's first 23 requests (the sim draws request
    # n's fault from the seed and n alone): far fewer than the ~60 of the merged plan, so
    # the kinds checked below all occur whatever the timing. (Seed 3's first stall was its
    # 87th request, which a merged run reaches or not: a CI run on openai 2.x did not.)
    sim = service(seed=13)
    policy = Policy(strategy=strategy, timeout=TIMEOUT, retry=FAST)
    async with open_sim_client(sim, door="server") as client:
        result = await Splitter(client, policy=policy).aask_many(asked, model="m")
    assert [(a.index, a.question.text) for a in result] == list(enumerate(asked))
    answered = [(a.text, expected(a.question.text)) for a in result if a.ok]
    assert [text for text, _ in answered] == [own for _, own in answered]
    # A failure is an empty quota (never retried) or a retryable fault on every attempt.
    gave_up = [
        (a.index, a.attempts, repr(a.error))
        for a in result
        if not (a.ok or isinstance(a.error, QuotaExceededError) or a.attempts == attempts)
    ]
    assert gave_up == []
    assert sum(a.ok for a in result) >= 0.95 * N
    kinds = Counter(r.error_code for r in sim.log)
    assert {"server_error", "reset", "stall", "truncated", "rate_limit_exceeded"} <= set(kinds)
    if strategy == "merge":
        assert kinds["sloppy"] + kinds["sloppy_format"] > 0
        assert result.stats.repaired > 0


async def test_streamed_in_order_each_question_ends_once_with_what_was_shown() -> None:
    """Through astream under the same faults: one final event per question, in order, and
    an answered question's deltas add up to exactly its answer."""
    asked = questions()
    sim = service(seed=5)
    policy = Policy(timeout=TIMEOUT, retry=FAST)
    async with open_sim_client(sim, door="server") as client:
        async with Splitter(client, policy=policy).astream(asked, model="m") as events:
            seen = [event async for event in events]
        result = events.result
    assert [e.index for e in seen if e.done] == list(range(N))
    shown: dict[int, str] = defaultdict(str)
    for event in seen:
        shown[event.index] += event.delta
    for question, answer in zip(asked, result, strict=True):
        if answer.ok:
            assert (answer.text, shown[answer.index]) == (expected(question),) * 2
        else:  # an empty quota, or a stream cut after part of it was shown (by design)
            assert isinstance(answer.error, QuotaExceededError | StreamInterruptedError)
    assert sum(a.ok for a in result) >= 0.95 * N
