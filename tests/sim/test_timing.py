"""Batching, queueing and cancellation, in-process on both backends, on virtual time.

Every latency is the profile's, exactly, however busy the machine is (docs/testing.md).
"""

from __future__ import annotations

import anyio
import openai
import pytest

from splitter.sim import PROFILES, SimService

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

TOKENS = 200


def questions(n: int) -> str:
    return "\n".join(f"{i}. Question {i} [len={TOKENS}]?" for i in range(1, n + 1))


async def ask(client: openai.AsyncOpenAI, text: str) -> None:
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])


async def fan_out(client: openai.AsyncOpenAI, n: int) -> float:
    """Seconds for n single-question requests sent at once."""
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(ask, client, f"Question {i} [len={TOKENS}]?")
    return anyio.current_time() - start


async def merged(client: openai.AsyncOpenAI, n: int) -> float:
    """Seconds for one request holding n questions."""
    start = anyio.current_time()
    await ask(client, questions(n))
    return anyio.current_time() - start


async def test_gpu_profile_batches_for_free() -> None:
    """On gpt-4o-mini five concurrent requests take one request's time and a 2% slower
    step, under half of one request holding all five."""
    profile = PROFILES["gpt-4o-mini"]
    service = SimService(profile)
    async with service.async_client() as client:
        single = await fan_out(client, 1)
        five = await fan_out(client, 5)
        one_big = await merged(client, 5)
    prompt, big = service.log[0].prompt_tokens, service.log[-1]
    ahead = profile.rtt + profile.prefill_seconds(prompt)
    assert single == pytest.approx(ahead + TOKENS * profile.step_seconds(1), abs=1e-6)
    assert five == pytest.approx(ahead + TOKENS * profile.step_seconds(5), abs=1e-6)
    assert big.completion_tokens >= 5 * TOKENS
    assert one_big == pytest.approx(
        profile.rtt
        + profile.prefill_seconds(big.prompt_tokens)
        + big.completion_tokens * profile.step_seconds(1),
        abs=1e-6,
    )
    assert five < 1.5 * single
    assert five < 0.45 * one_big


async def test_serial_profile_gains_nothing() -> None:
    """With beta = 1 fanning out is no faster than one merged request."""
    service = SimService("serial")
    async with service.async_client() as client:
        five = await fan_out(client, 5)
        one_big = await merged(client, 5)
    assert five >= 0.7 * one_big


async def test_llama_cpp_batch_and_slot_queue() -> None:
    """On llama-cpp-cpu five requests share a step slowed by beta; a sixth queues for a free
    slot and decodes alone after the five, which end together."""
    profile = PROFILES["llama-cpp-cpu"]
    service = SimService(profile)
    async with service.async_client() as client:
        single = await fan_out(client, 1)
        five = await fan_out(client, 5)
        service.log.clear()
        await fan_out(client, 6)
    prompt = service.log[0].prompt_tokens
    ahead = profile.rtt + profile.prefill_seconds(prompt)
    assert single == pytest.approx(ahead + TOKENS * profile.step_seconds(1), abs=1e-6)
    assert five == pytest.approx(ahead + TOKENS * profile.step_seconds(5), abs=1e-6)
    assert 1.8 * single < five < 4.0 * single  # ideal 14.5 / 5.5 = 2.6
    ends = sorted(r.finished for r in service.log)
    decode_alone = TOKENS * profile.step_seconds(1)
    assert ends[:5] == pytest.approx([ends[0]] * 5, abs=1e-6)
    assert ends[-1] - ends[-2] == pytest.approx(profile.prefill_seconds(prompt) + decode_alone)


async def test_cancelled_request_leaves_no_trace_in_flight() -> None:
    """Cancelling a waiting request frees its slot and brings in_flight back to 0."""
    service = SimService("llama-cpp-cpu")
    async with service.async_client() as client:
        with anyio.move_on_after(2):
            async with anyio.create_task_group() as tg:
                for _ in range(7):
                    tg.start_soon(ask, client, "Long [len=500]")
        assert service.in_flight == 0
        assert [r.status for r in service.log] == [499] * 7
        await ask(client, "Short [len=2]")  # the engine is free again: no stale sequences
    assert service.log[-1].status == 200


@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_abandoned_stream_is_released() -> None:
    """Closing a stream early ends its request (status 499) and frees the engine."""
    service = SimService("gpt-4o-mini")
    async with service.async_client() as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Long [len=400]"}], stream=True
        )
        async with stream:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
        assert service.in_flight == 0
    (record,) = service.log
    assert (record.status, record.error_code) == (499, "client_disconnected")


async def test_instant_profile_is_fast() -> None:
    """The instant profile answers without simulated waits: no time passes at all."""
    service = SimService("instant")
    async with service.async_client() as client:
        start = anyio.current_time()
        for _ in range(20):
            await ask(client, "Q [len=200]")
        elapsed = anyio.current_time() - start
    assert elapsed == 0
    assert len(service.log) == 20
