"""pydantic-ai (``pydantic-ai-slim[openai]``) given a wrapped client: a compound prompt is
split, through ``Agent.run`` and ``Agent.run_stream``; structured output goes whole."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from framework_support import (
    COMPOUND,
    MODEL,
    Sim,
    assert_sent_whole,
    assert_split_and_joined,
    require,
)

require("pydantic-ai-slim", "pydantic_ai", extra="openai")

from pydantic_ai import Agent, NativeOutput  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

pytestmark = pytest.mark.anyio


def agent(sim: Sim, **kwargs: Any) -> Agent[None, Any]:
    provider = OpenAIProvider(openai_client=sim.client())
    return Agent(OpenAIChatModel(MODEL, provider=provider), **kwargs)


async def test_agent_run_splits_a_compound_prompt(sim: Sim) -> None:
    result = await agent(sim, instructions="Be concise.").run(COMPOUND)
    assert_split_and_joined(sim, result.output)


async def test_agent_run_stream_splits_a_compound_prompt(sim: Sim) -> None:
    """pydantic-ai reads each chunk inside a cancel scope of its own."""
    async with agent(sim).run_stream(COMPOUND) as result:
        pieces = [piece async for piece in result.stream_text(delta=True, debounce_by=None)]
    assert len(pieces) > 1
    assert_split_and_joined(sim, "".join(pieces))


class Facts(pydantic.BaseModel):
    capital: str
    total: int


async def test_structured_output_goes_whole(sim: Sim) -> None:
    result = await agent(sim, output_type=NativeOutput(Facts)).run(COMPOUND)
    assert isinstance(result.output, Facts)
    assert len(sim.chats) == 1
    assert_sent_whole(sim)


async def test_a_prompt_with_tools_goes_whole(sim: Sim) -> None:
    weather = agent(sim)

    @weather.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}."

    result = await weather.run(f"{COMPOUND} Use get_weather.")
    assert isinstance(result.output, str)
    assert len(sim.chats) == 2  # the tool call, then the answer with its result
    assert_sent_whole(sim)
