"""Auto chooses between merged, fan-out and primed fan-out by the objective (issue #19 item
2), on the simulator on virtual time, with a service model that knows the engine: merged
where one shared context's prefill dominates, primed fan-out where a prefix cache serves the
followers, fan-out where decoding dominates. The prediction is held to the simulated wall."""

from __future__ import annotations

import pytest

from splitter import Limits, MergePolicy, Policy, Question, ServicePrior, Splitter
from splitter.sim import Profile, SimService
from splitter.testing import open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

DOC = "the cat sat " * 800  # 2,400 prompt tokens of shared context, as both count them
ENGINE = dict(rtt=0.004, ttft0=0.02, prefill_rate=1_000.0, tpot1=0.01, beta=0.05, slots=8)


def _questions(n: int, answer: int) -> list[Question]:
    return [Question(text=f"Item {i}? [len={answer}]", expected_tokens=answer) for i in range(n)]


async def _auto(
    cache: str, answer: int, context: str | None, cached_rate: float | None = None
) -> tuple[str, float, float]:
    """(the chosen plan's label, its predicted wall, the simulated wall)."""
    profile = Profile(
        name="doc", context_window=200_000, prefix_cache=cache, shared_prefill=True, **ENGINE
    )  # type: ignore[arg-type]
    prior = ServicePrior(prefill_share=1.0, cached_rate=cached_rate, weight=1e6, **ENGINE)  # type: ignore[arg-type]
    merge = MergePolicy(max_per_request=5, canaries=False)
    policy = Policy(prior=prior, merge=merge, limits=Limits(slow_start=False))
    async with open_sim_client(SimService(profile)) as client:
        result = await Splitter(client, policy=policy, model="m").aask_many(
            _questions(5, answer), context=context
        )
    assert result.stats.failed == 0
    assert result.plan is not None
    return result.plan.chosen.label, result.plan.predicted_latency, result.stats.wall_time


async def test_merged_where_the_shared_prefill_dominates() -> None:
    label, predicted, wall = await _auto("none", answer=8, context=DOC)
    assert label == "merge"
    assert predicted == pytest.approx(wall, rel=0.10)


async def test_primed_fan_out_where_the_cache_serves_the_followers() -> None:
    label, predicted, wall = await _auto("shared", answer=120, context=DOC, cached_rate=1e6)
    assert label == "primed fan-out"
    assert predicted == pytest.approx(wall, rel=0.10)


async def test_fan_out_where_decoding_dominates() -> None:
    label, predicted, wall = await _auto("shared", answer=300, context=None, cached_rate=1e6)
    assert label == "fan-out"
    assert predicted == pytest.approx(wall, rel=0.10)


async def test_the_cache_and_the_shared_prefill_are_learned_then_primed_is_chosen() -> None:
    """No prefill share or cache in the prior: llama-server-like timings at two
    concurrencies teach the share, cached tokens in usage teach the cache's rate."""
    profile = Profile(
        name="doc",
        context_window=200_000,
        prefix_cache="shared",
        shared_prefill=True,
        timings=True,
        **ENGINE,
    )  # type: ignore[arg-type]
    policy = Policy(
        prior=ServicePrior(weight=1e6, **ENGINE),  # type: ignore[arg-type]
        merge=MergePolicy(max_per_request=5, canaries=False),
        limits=Limits(slow_start=False),
    )
    fanout = policy.model_copy(update={"strategy": "fanout"})
    async with open_sim_client(SimService(profile)) as client:
        splitter_ = Splitter(client, policy=fanout, model="m")
        before = splitter_.service_model("m").estimate()
        for n, doc in enumerate(("the dog sat " * 800, "the cow sat " * 800)):
            await splitter_.aask_many(_questions(1 + 3 * n, 40), context=doc)  # 1 alone, then 4
        await splitter_.aask_many(_questions(2, 40), context="the cow sat " * 800)  # cached
        learned = splitter_.service_model("m").estimate()
        splitter_.policy = policy
        result = await splitter_.aask_many(_questions(5, 120), context=DOC)
    assert (before.prefill_share, before.cached_rate) == (0.0, None)
    assert learned.prefill_share > 0.5  # concurrent prefills were timed ~4x slower
    assert learned.cached_rate is not None
    assert learned.cached_rate > 10 * learned.prefill_rate
    assert result.plan is not None
    assert result.plan.chosen.label == "primed fan-out"
    assert result.plan.predicted_latency == pytest.approx(result.stats.wall_time, rel=0.10)
    assert result.usage.cached_tokens >= 4 * 2_400
