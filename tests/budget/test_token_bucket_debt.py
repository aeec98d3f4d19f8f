"""The budget at the edge of an empty token bucket that counts refused requests (OpenAI's),
on virtual time: a long batch of short answers drains the bucket, and from then on every
request is sent into a bucket refilling at the limit's rate.

Three readings went wrong there: a bucket in debt says ``remaining: 0`` though its reset
shows how deep it is (each counted 429 digs it a request deeper); an older reading compared
raw with a newer one looked lower than it was and undid it; and a request read as counted
the instant it left overtook the refill by a fraction of a request a time. Together they
drew 81-84 429s in ~1,080 requests, and a question could run out of retries."""

from __future__ import annotations

import pytest

from splitter import Limits, Policy, Splitter
from splitter.sim import SimLimits, SimService
from splitter.testing import assert_answers_match, open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]


@pytest.mark.parametrize("seed", [0, 1])
async def test_a_drained_bucket_is_paced_at_its_refill_without_a_429_storm(seed: int) -> None:
    """1,000 short questions against 600 RPM (a bucket of 600, 10 a second back): the first
    600 find the bucket full, the other 400 wait for its refill. At most 2% of requests
    answered 429, every question answered once, and the batch takes no more than 15% over
    the refill's time."""
    service = SimService(
        "gpt-4o-mini",
        time_scale=0.1,
        seed=seed,
        limits=SimLimits(rpm=600, tpm=10_000_000),
        default_answer_tokens=20,
    )
    questions = [f"Short question {i}: what is {i} plus one?" for i in range(1000)]
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=64))
    async with open_sim_client(service, max_retries=0) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="gpt-4o-mini")
    assert result.ok, [a.error for a in result.answers if not a.ok][:3]
    assert_answers_match(result)
    log = service.log
    rejected = sum(r.status == 429 for r in log)
    assert rejected <= 0.02 * len(log), f"{rejected} of {len(log)} answered 429"
    accepted = [r.arrived for r in log if r.status == 200]
    assert len(accepted) == 1000
    # 400 requests beyond the bucket at 10 a second: 40 s of refill, 4 s at time_scale 0.1.
    span = max(accepted) - min(r.arrived for r in log)
    assert span <= 1.15 * 4.0, f"{span:.2f} s (scaled) for 400 requests at 10 r/s"
