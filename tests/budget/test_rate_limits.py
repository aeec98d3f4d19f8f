"""The budget against a rate-limited simulated service: no 429 storm, the budget well used.

On virtual time: the utilisation is a ratio of times, and on the real clock a loaded
machine stretched them (0.73 of the RPM was measured beside a CPU-heavy job)."""

from __future__ import annotations

import pytest

from splitter import BatchResult, Limits, Policy, RetryPolicy, Splitter
from splitter.sim import SimLimits, SimService
from splitter.testing import open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

SCALE = 0.01  # one simulated minute passes in 0.6 s
RPM, TPM, N = 60, 40_000, 1000


async def _run(*, enforce: bool, attempts: int = 30) -> tuple[SimService, BatchResult]:
    service = SimService(
        "instant", time_scale=SCALE, limits=SimLimits(rpm=RPM, tpm=TPM), default_answer_tokens=20
    )
    policy = Policy(
        strategy="fanout",  # one request per question: this measures the budget, not merging
        # Below the RPM bucket, so the first wave, sent before any header has told the
        # limits, cannot overflow it.
        limits=Limits(max_concurrency=32, enforce=enforce),
        retry=RetryPolicy(max_attempts=attempts, initial_wait=0.01, max_wait=0.1),
    )
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            [f"Question number {i}?" for i in range(N)], model="m"
        )
    return service, result


def _utilisation(service: SimService) -> float:
    """Accepted requests over the most the limit allowed in the run's time."""
    accepted = sum(r.status == 200 for r in service.log)
    minutes = (
        (max(r.arrived for r in service.log) - min(r.arrived for r in service.log)) / SCALE / 60
    )
    return accepted / (RPM + RPM * minutes)


async def test_budget_keeps_429s_rare_and_uses_the_rpm() -> None:
    """1,000 questions at RPM 60 / TPM 40k: <= 1% of requests get a 429, >= 90% of RPM used."""
    service, result = await _run(enforce=True)
    assert result.ok
    rejected = sum(r.status == 429 for r in service.log)
    assert rejected <= 0.01 * len(service.log), f"{rejected} of {len(service.log)} were 429"
    assert _utilisation(service) >= 0.9


async def test_without_the_budget_the_same_run_storms() -> None:
    """With the budget off, the same run draws a 429 storm: the budget is what prevents it."""
    service, _ = await _run(enforce=False, attempts=3)  # a storm retried 30 times runs long
    rejected = sum(r.status == 429 for r in service.log)
    assert rejected > 0.2 * len(service.log)
