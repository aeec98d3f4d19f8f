"""LangChain (``langchain-openai``) given a wrapped client: ``ChatOpenAI.invoke``/``ainvoke``
(through ``with_raw_response``) and ``astream`` split a compound prompt; tools and structured
output go whole."""

from __future__ import annotations

from typing import Any

import anyio
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

require("langchain-openai", "langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

pytestmark = pytest.mark.anyio


def chat_model(sim: Sim, **kwargs: Any) -> ChatOpenAI:
    """LangChain's documented way to bring your own clients: the resource and its root."""
    wrapped, wrapped_sync = sim.client(), sim.sync_client()
    return ChatOpenAI(
        model=MODEL,
        api_key="sk-sim",  # type: ignore[arg-type]
        base_url=sim.base_url,
        root_async_client=wrapped,
        async_client=wrapped.chat.completions,
        root_client=wrapped_sync,
        client=wrapped_sync.chat.completions,
        **kwargs,
    )


async def test_ainvoke_splits_a_compound_prompt(sim: Sim) -> None:
    message = await chat_model(sim).ainvoke(COMPOUND)
    assert isinstance(message.content, str)
    assert_split_and_joined(sim, message.content)


async def test_invoke_splits_a_compound_prompt_with_response_headers(sim: Sim) -> None:
    """The sync client (from a worker thread), and ``include_response_headers``: the
    headers are the first part's."""
    model = chat_model(sim, include_response_headers=True)
    message = await anyio.to_thread.run_sync(model.invoke, COMPOUND)
    assert isinstance(message.content, str)
    assert_split_and_joined(sim, message.content)
    headers = message.response_metadata["headers"]
    assert headers["x-request-id"] in {r.request_id for r in sim.chats}


async def test_astream_splits_a_compound_prompt(sim: Sim) -> None:
    pieces = [chunk.content async for chunk in chat_model(sim).astream(COMPOUND)]
    assert len(pieces) > 1
    assert_split_and_joined(sim, "".join(str(p) for p in pieces))


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}."


async def test_a_prompt_with_tools_goes_whole(sim: Sim) -> None:
    prompt = f"{COMPOUND} Use get_weather."
    message = await chat_model(sim).bind_tools([get_weather]).ainvoke(prompt)
    assert [call["name"] for call in message.tool_calls] == ["get_weather"]  # type: ignore[attr-defined]
    assert len(sim.chats) == 1
    assert_sent_whole(sim)


class Facts(pydantic.BaseModel):
    capital: str
    total: int


async def test_structured_output_goes_whole(sim: Sim) -> None:
    facts = await chat_model(sim).with_structured_output(Facts).ainvoke(COMPOUND)
    assert isinstance(facts, Facts)
    assert len(sim.chats) == 1
    assert_sent_whole(sim)
