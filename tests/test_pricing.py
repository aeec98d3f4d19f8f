"""Pricing: cached prompt tokens read from real responses (chat and Responses API, whole and
streamed) and priced as such in RunStats.cost and BatchResult.explain()."""

from __future__ import annotations

import pytest

from splitter import Limits, Policy, Pricing, Splitter, Usage
from splitter._pricing import price_for
from splitter.sim import Profile, SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio

DOC = "lorem ipsum " * 400  # ~1,200 prompt tokens of shared system prompt
PRICE = Pricing(input=2.0, cached_input=0.5, output=8.0)


def _service() -> SimService:
    profile = Profile(
        name="cached", rtt=0.0, ttft0=0.0, prefill_rate=100_000, tpot1=0.0001, beta=0.0,
        slots=4, context_window=100_000, prefix_cache="shared",
    )  # fmt: skip
    return SimService(profile)


def _policy(api: str = "chat") -> Policy:
    return Policy(pricing=PRICE, api=api, strategy="fanout", limits=Limits(slow_start=False))  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_cached_input_is_read_and_priced_at_its_own_rate(api: str) -> None:
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(api), model="m")
        first = await splitter_.aask_many(["Warm the cache?"], system=DOC)
        second = await splitter_.aask_many(["Cached A?", "Cached B?"], system=DOC)
    assert first.usage.cached_tokens == 0
    usage = second.usage
    assert usage.cached_tokens >= 2 * 1_200  # each of the two read the document from cache
    assert usage.cached_tokens <= usage.prompt_tokens
    expected = (
        (usage.prompt_tokens - usage.cached_tokens) * 2.0
        + usage.cached_tokens * 0.5
        + usage.completion_tokens * 8.0
    ) / 1_000_000
    assert second.stats.cost == pytest.approx(expected)
    assert first.stats.cost is not None
    assert second.stats.cost < Usage(usage.prompt_tokens, usage.completion_tokens).cost(PRICE)
    assert f"({usage.cached_tokens} cached)" in second.explain()


async def test_a_streamed_answer_reads_its_cached_tokens_too() -> None:
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model="m")
        await splitter_.aask_many(["Warm the cache?"], system=DOC)
        async with splitter_.astream(["Streamed?"], system=DOC) as events:
            _ = [event async for event in events]
            result = events.result
    assert result is not None
    assert result.usage.cached_tokens >= 1_200
    assert result.stats.cost is not None


async def test_without_pricing_there_is_no_cost() -> None:
    async with open_sim_client(_service()) as client:
        result = await Splitter(client, model="m").aask_many(["Free?"])
    assert result.stats.cost is None
    assert "billed" not in result.explain()


def test_a_model_row_wins_over_the_row_for_any_model() -> None:
    mini = Pricing(model="mini", input=0.1, output=0.4)
    table = (Pricing(input=5, output=15), mini)
    assert price_for(table, "mini") is mini
    assert price_for(table, "other") == Pricing(input=5, output=15)
    assert price_for((mini,), "other") is None
    assert price_for(None, "mini") is None


def test_usage_cost_prices_cached_tokens_apart() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=500_000, cached_tokens=400_000)
    assert usage.cost(PRICE) == pytest.approx(600_000 * 2e-6 + 400_000 * 0.5e-6 + 500_000 * 8e-6)
    assert (usage + usage).cached_tokens == 800_000
    assert Usage(10, 0, 0).cost(Pricing(input=1, output=1)) == pytest.approx(1e-5)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"input": -1, "output": 1}, "input"),
        ({"input": 1, "output": 1, "cached_input": 2}, "cached_input"),
        ({"input": 1}, "output"),
    ],
)
def test_a_bad_price_is_refused_naming_the_field(fields: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Pricing(**fields)  # type: ignore[arg-type]
