"""What wrap(client) does not split still goes through the budget and splitter's retries."""

from __future__ import annotations

import anyio
import openai
import pytest

import splitter
from splitter import Limits, Policy, RetryPolicy
from splitter.sim import Faults, SimLimits, SimService, serve

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=30, initial_wait=0.01, max_wait=0.1, jitter=0.01)


async def many_single_calls(
    service: SimService, policy: Policy, n: int, *, warm_up: bool = False
) -> list[str | None]:
    """``n`` concurrent one-question calls; each reply's text, or None where it failed.
    ``warm_up`` sends one call first, whose headers tell the budget the limits."""
    replies: list[str | None] = []
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=policy)
        if warm_up:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Warm-up?"}]
            )

        async def one(i: int) -> None:
            try:
                completion = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"Question {i}?"}]
                )
            except openai.RateLimitError:
                replies.append(None)
                return
            replies.append(completion.choices[0].message.content or "")

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
    return replies


@pytest.mark.virtual_time
async def test_passthrough_calls_wait_for_the_budget_instead_of_drawing_429s() -> None:
    """120 calls at RPM 60, on virtual time: the budget spreads them, (almost) no 429."""
    service = SimService("instant", limits=SimLimits(rpm=60))
    # The limits are learned from the first response's headers.
    replies = await many_single_calls(service, Policy(retry=FAST), 120, warm_up=True)
    assert len(replies) == 120
    assert None not in replies
    rejected = sum(r.status == 429 for r in service.log)
    assert rejected <= 1, f"{rejected} of {len(service.log)} requests were 429"


@pytest.mark.virtual_time
async def test_without_the_budget_the_same_calls_storm() -> None:
    """The contrast: with the budget off, the same 120 calls draw a 429 storm (on virtual
    time, so they arrive together however busy the machine is)."""
    service = SimService("instant", limits=SimLimits(rpm=60))
    policy = Policy(limits=Limits(enforce=False), retry=RetryPolicy(max_attempts=2))
    await many_single_calls(service, policy, 120, warm_up=True)
    assert sum(r.status == 429 for r in service.log) > 30


async def test_an_empty_quota_is_not_retried_and_raises_openais_error() -> None:
    service = SimService("instant", faults=Faults(rate_quota=1.0))
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(retry=FAST))
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Hi?"}]
            )
    assert caught.value.code == "insufficient_quota"
    assert len(service.log) == 1  # openai alone would have sent it three times


async def test_server_errors_are_retried_by_splitters_policy_alone() -> None:
    service = SimService("instant", faults=Faults(rate_503=1.0))
    policy = Policy(retry=RetryPolicy(max_attempts=3, initial_wait=0.01, jitter=0))
    async with service.async_client() as plain:  # openai's default: 2 retries of its own
        client = splitter.wrap(plain, policy=policy)
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Hi?"}]
            )
    assert len(service.log) == 3  # splitter's three attempts, not 3 x 3


async def test_flaky_calls_all_come_back_through_the_retries() -> None:
    service = SimService("instant", faults=Faults(rate_503=0.3, rate_reset=0.2), seed=7)
    replies = await many_single_calls(service, Policy(retry=FAST), 20)
    assert len(replies) == 20
    assert None not in replies
    assert len(service.log) > 20  # some failed and were retried


def test_the_sync_client_goes_through_the_same_gate() -> None:
    service = SimService("instant", faults=Faults(rate_quota=1.0))
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="sk") as plain:
        client = splitter.wrap(plain, policy=Policy(retry=FAST))
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "?"}])
    assert len(service.log) == 1
