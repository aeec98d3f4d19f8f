"""The merge-quality knobs: merged answers degrade past k items, or are non-answers."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import openai
import pytest

from splitter.sim import PROFILES, SimService, answer_text

OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]
pytestmark = pytest.mark.anyio
FOUR = "1. A?\n2. B?\n3. C?\n4. D?"


def lines(content: str | None) -> list[str]:
    return (content or "").splitlines()


async def ask(client: openai.AsyncOpenAI, text: str) -> str | None:
    reply = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content


async def test_items_past_k_are_off_topic(open_client: OpenClient) -> None:
    """merge_good_items=2: items 1-2 are right, 3-4 are another question's answer."""
    profile = PROFILES["instant"].model_copy(update={"merge_good_items": 2})
    service = SimService(profile, default_answer_tokens=3)
    async with open_client(service) as client:
        merged = await ask(client, FOUR)
        alone = await ask(client, "C?")
    got = lines(merged)
    assert got[:2] == [f"1. {answer_text('A?', 3)}", f"2. {answer_text('B?', 3)}"]
    assert got[2].startswith("3. ")
    assert got[2] != f"3. {answer_text('C?', 3)}"
    assert len(got[2].split()) == 4  # well-formed: the number and three tokens
    assert alone == answer_text("C?", 3)


async def test_non_answers_are_well_formed_and_seeded(open_client: OpenClient) -> None:
    """merge_non_answer_rate=0.5 makes some merged replies non-answers, the same per seed."""
    profile = PROFILES["instant"].model_copy(update={"merge_non_answer_rate": 0.5})

    async def run(seed: int) -> list[bool]:
        service = SimService(profile, default_answer_tokens=3, seed=seed)
        async with open_client(service) as client:
            replies = [await ask(client, FOUR) for _ in range(12)]
        return [lines(r)[0] == "1. I am not sure about that." for r in replies]

    first, again = await run(1), await run(1)
    assert first == again
    assert 0 < sum(first) < 12
    service = SimService(profile, default_answer_tokens=3)
    async with open_client(service) as client:
        assert [await ask(client, "Alone?") for _ in range(4)] == [answer_text("Alone?", 3)] * 4
