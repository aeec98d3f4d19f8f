"""Primed fan-out (issue #19): one request of a shared-prefix batch first, the rest at its
first token, so the engine's prefix cache serves them. On the simulator, virtual time."""

from __future__ import annotations

import pytest

from splitter import InvalidInputError, Limits, Policy, Question, Splitter
from splitter.sim import Faults, Profile, SimService
from splitter.testing import open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

DOC = "lorem ipsum " * 400  # ~1,200 prompt tokens of shared context
QUESTIONS = ["Who signed it?", "When does it end?", "What is the fee?", "Where is it filed?"]


def _service(cache: str = "shared") -> SimService:
    profile = Profile(
        name="doc", rtt=0.002, ttft0=0.01, prefill_rate=1_000, tpot1=0.01, beta=0.05,
        slots=8, context_window=100_000, prefix_cache=cache, shared_prefill=True,
    )  # fmt: skip
    return SimService(profile)


def _policy(strategy: str) -> Policy:
    return Policy(strategy=strategy, limits=Limits(slow_start=False))  # type: ignore[arg-type]


async def _run(strategy: str, cache: str = "shared") -> tuple[list[int], list[str], float, str]:
    async with open_sim_client(_service(cache)) as client:
        result = await Splitter(client, policy=_policy(strategy), model="m").aask_many(
            QUESTIONS, context=DOC
        )
    assert result.stats.failed == 0
    texts = [a.text or "" for a in result]
    return [a.usage.cached_tokens for a in result], texts, result.stats.wall_time, result.explain()


async def test_pinned_primed_fan_out_lets_the_cache_serve_the_followers() -> None:
    cached, texts, wall, explained = await _run("primed")
    # The first goes alone and cold; the three sent at its first token read the context
    # from the cache.
    assert sorted(cached)[0] == 0
    assert all(c >= 1_200 for c in sorted(cached)[1:])
    assert "> primed fan-out" in explained
    # Plain fan-out on a cold cache: all four prefill the context at once, none cached.
    fan_cached, fan_texts, fan_wall, _ = await _run("fanout")
    assert fan_cached == [0, 0, 0, 0]
    assert texts == fan_texts  # same answers, in input order
    assert wall < fan_wall  # compute-bound prefill: four at once cost four prefills


async def test_primed_needs_one_shared_prefix() -> None:
    async with open_sim_client(_service()) as client:
        splitter_ = Splitter(client, policy=_policy("primed"), model="m")
        with pytest.raises(InvalidInputError, match="share one prefix"):
            await splitter_.aask_many(["A?", "B?"])  # no system prompt or context to share
        with pytest.raises(InvalidInputError, match="share one prefix"):
            await splitter_.aask_many(["A?", Question(text="B?", system="Other.")], context=DOC)
        one = await splitter_.aask_many(["Only?"], context=DOC)
    assert one.stats.failed == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_primed_fan_out_retries_as_usual_and_loses_nothing(seed: int) -> None:
    """500s and streams cut short (the head is streamed to see its first token): every
    question is answered, in input order, the same answers as without faults."""
    faulty = SimService(
        _service().profile, faults=Faults(rate_500=0.3, rate_truncate=0.2), seed=seed
    )
    async with open_sim_client(faulty) as client:
        result = await Splitter(client, policy=_policy("primed"), model="m").aask_many(
            QUESTIONS, context=DOC
        )
    _, clean, _, _ = await _run("primed")
    assert result.stats.failed == 0
    assert [a.text for a in result] == clean
    assert result.stats.retries == result.stats.requests - len(QUESTIONS)
    assert result.stats.retries >= 1
    assert result.plan is not None
    assert result.plan.chosen.primed


async def test_primed_fan_out_streams_in_order() -> None:
    """Streamed (ordered): the first answer is delivered live, the followers read the
    context from the cache and come out after it in input order."""
    async with open_sim_client(_service()) as client:
        splitter_ = Splitter(client, policy=_policy("primed"), model="m")
        async with splitter_.astream(QUESTIONS, context=DOC) as events:
            _ = [event async for event in events]
            result = events.result
    assert result is not None
    assert result.stats.failed == 0
    _, clean, _, _ = await _run("primed")
    assert [a.text for a in result] == clean
    cached = [a.usage.cached_tokens for a in result]
    assert cached[0] == 0
    assert all(c >= 1_200 for c in cached[1:])
