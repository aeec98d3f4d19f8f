"""Prefix caches and compute-bound prefill, in-process on both backends, on virtual time."""

from __future__ import annotations

import anyio
import openai
import pytest

from splitter.sim import Profile, SimService

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]
DOC = "lorem ipsum " * 400  # 4,800 bytes: 1,204 prompt tokens as a system message


def profile(**update: object) -> Profile:
    base = Profile(
        name="p", rtt=0.0, ttft0=0.0, prefill_rate=1000, tpot1=0.0, beta=0.0, slots=4,
        context_window=100_000,
    )  # fmt: skip
    return base.model_copy(update=update)


async def ask(client: openai.AsyncOpenAI, question: str) -> tuple[int, float]:
    """(cached tokens, seconds) for one question about DOC."""
    start = anyio.current_time()
    reply = await client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": DOC}, {"role": "user", "content": question}],
    )
    assert reply.usage is not None
    details = reply.usage.prompt_tokens_details
    return (details.cached_tokens or 0) if details else -1, anyio.current_time() - start


async def test_no_cache_reports_no_details() -> None:
    """Without a prefix cache usage has no prompt_tokens_details, as before."""
    async with SimService(profile()).async_client() as client:
        assert (await ask(client, "A?"))[0] == -1


async def test_slot_cache_reuses_only_on_the_same_slot() -> None:
    """llama.cpp-like: after one request, of four concurrent followers one reuses the slot."""
    async with SimService(profile(prefix_cache="slot")).async_client() as client:
        cached, first = await ask(client, "A?")
        results: list[tuple[int, float]] = []

        async def follower(q: str) -> None:
            results.append(await ask(client, q))

        async with anyio.create_task_group() as tg:
            for q in ("B?", "C?", "D?", "E?"):
                tg.start_soon(follower, q)
    hits = sorted(c for c, _ in results)
    assert cached == 0
    assert hits[:3] == [0, 0, 0]
    assert hits[3] >= 1200
    assert min(t for _, t in results) == pytest.approx(first - hits[3] / 1000, abs=1e-3)


async def test_shared_cache_serves_every_follower() -> None:
    """vLLM-like: once the first prefill is done every follower hits the shared blocks."""
    async with SimService(profile(prefix_cache="shared")).async_client() as client:
        await ask(client, "A?")
        hits = [(await ask(client, q))[0] for q in ("B?", "C?")]
    assert all(h >= 1200 and h % 16 == 0 for h in hits)


async def test_shared_cache_capacity_evicts() -> None:
    """A cache smaller than the document keeps none of its leading blocks."""
    async with SimService(profile(prefix_cache="shared", cache_capacity=64)).async_client() as c:
        await ask(c, "A?")
        assert (await ask(c, "B?"))[0] == 0


async def test_shared_prefill_is_compute_bound() -> None:
    """Four concurrent prefills take four times one alone when prefill is shared."""
    for shared, factor in ((False, 1), (True, 4)):
        async with SimService(profile(shared_prefill=shared)).async_client() as client:
            _, alone = await ask(client, "A?")
            times: list[float] = []

            async def one(q: str, times: list[float] = times) -> None:
                times.append((await ask(client, q))[1])

            async with anyio.create_task_group() as tg:
                for q in ("B?", "C?", "D?", "E?"):
                    tg.start_soon(one, q)
        assert max(times) == pytest.approx(factor * alone, rel=1e-3)


async def test_shared_prefill_shares_the_tokens_not_each_requests_fixed_part() -> None:
    """Compute-bound prefill shares the prompt tokens' work; each request's fixed part
    (``ttft0``) is its own and runs beside the others', as llama-server batches concurrent
    prompts into one pass (measured there, 2 cores: five 44-token prompts at once took at
    most 484 ms of ``prompt_ms`` against 124 ms for one alone, under five times; the fixed
    part of one alone ~9 ms). Regression: four at once took 4 x (ttft0 + tokens)."""
    fixed = 0.5
    async with SimService(profile(shared_prefill=True, ttft0=fixed)).async_client() as client:
        _, alone = await ask(client, "A?")
        times: list[float] = []

        async def one(q: str) -> None:
            times.append((await ask(client, q))[1])

        async with anyio.create_task_group() as tg:
            for q in ("B?", "C?", "D?", "E?"):
                tg.start_soon(one, q)
    tokens = alone - fixed  # the prompt's own share of one alone
    assert tokens > 1.0
    assert max(times) == pytest.approx(fixed + 4 * tokens, rel=1e-3)
