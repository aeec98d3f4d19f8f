"""openai-agents given a wrapped client (``OpenAIChatCompletionsModel``): ``Runner.run`` and
``Runner.run_streamed`` split a compound prompt; tools and structured output go whole."""

from __future__ import annotations

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

require("openai-agents", "agents")

from agents import (  # noqa: E402
    Agent,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai.types.responses import ResponseTextDeltaEvent  # noqa: E402

pytestmark = pytest.mark.anyio
NO_TRACING = RunConfig(tracing_disabled=True)  # tracing would export to api.openai.com


def agent(sim: Sim, **kwargs: object) -> Agent[None]:
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=sim.client())
    return Agent(name="assistant", instructions="Be concise.", model=model, **kwargs)  # type: ignore[arg-type]


async def test_runner_run_splits_a_compound_prompt(sim: Sim) -> None:
    result = await Runner.run(agent(sim), COMPOUND, run_config=NO_TRACING)
    assert_split_and_joined(sim, result.final_output)


async def test_runner_run_streamed_splits_a_compound_prompt(sim: Sim) -> None:
    result = Runner.run_streamed(agent(sim), COMPOUND, run_config=NO_TRACING)
    pieces = [
        event.data.delta
        async for event in result.stream_events()
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
    ]
    assert len(pieces) > 1
    assert_split_and_joined(sim, "".join(pieces))
    assert result.final_output == "".join(pieces)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


async def test_a_prompt_with_tools_goes_whole(sim: Sim) -> None:
    prompt = f"{COMPOUND} Use get_weather."
    result = await Runner.run(agent(sim, tools=[get_weather]), prompt, run_config=NO_TRACING)
    assert isinstance(result.final_output, str)
    assert len(sim.chats) == 2  # the tool call, then the answer with its result
    assert_sent_whole(sim)


class Facts(pydantic.BaseModel):
    capital: str
    total: int


async def test_structured_output_goes_whole(sim: Sim) -> None:
    result = await Runner.run(agent(sim, output_type=Facts), COMPOUND, run_config=NO_TRACING)
    assert isinstance(result.final_output, Facts)
    assert len(sim.chats) == 1
    assert_sent_whole(sim)
