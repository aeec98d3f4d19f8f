"""Choices, logprobs, JSON replies and tool calls through the real openai client, both doors."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import openai
import pydantic
import pytest

from splitter.sim import SimService, answer_text
from splitter.sim._structured import schema_value

OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]
pytestmark = pytest.mark.anyio
SCALE = 0.001
MERGED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "answer": {"type": "string", "maxLength": 200},
                },
                "required": ["id", "answer"],
            },
            "minItems": 1,
            "maxItems": 8,
        }
    },
    "required": ["answers"],
}
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "days"],
        },
    },
}


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


class Reading(pydantic.BaseModel):
    """A nested model, as a user would pass to ``parse``."""

    label: str = pydantic.Field(max_length=6)
    level: int
    ok: bool
    tags: list[str] = pydantic.Field(min_length=2, max_length=3)
    unit: str = pydantic.Field(json_schema_extra={"enum": ["kg", "lb"]})


class Report(pydantic.BaseModel):
    answer: str
    readings: list[Reading]


async def test_n_choices_are_counted_in_usage(open_client: OpenClient) -> None:
    """n=3 gives three choices, each the answer, and usage bills all three."""
    service = SimService(time_scale=SCALE, default_answer_tokens=6, max_choices=8)
    async with open_client(service) as client:
        reply = await client.chat.completions.create(model="m", messages=user("Why?"), n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert {c.message.content for c in reply.choices} == {answer_text("Why?", 6)}
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 18


async def test_n_above_the_service_limit_is_refused(open_client: OpenClient) -> None:
    """By default n > 1 stays a 400 naming n, as before."""
    service = SimService(time_scale=SCALE)
    async with open_client(service) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="m", messages=user("Q"), n=2)
    assert refused.value.param == "n"


async def test_logprobs_cover_every_token_and_repeat(open_client: OpenClient) -> None:
    """logprobs has one entry per token, top_logprobs many alternatives, the same each time."""
    service = SimService(time_scale=SCALE, default_answer_tokens=5)
    async with open_client(service) as client:
        replies = [
            await client.chat.completions.create(
                model="m", messages=user("Q?"), logprobs=True, top_logprobs=3
            )
            for _ in range(2)
        ]
    content = replies[0].choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None
    assert "".join(t.token for t in content) == answer_text("Q?", 5)
    assert all(-2 <= t.logprob <= 0 and len(t.top_logprobs) == 3 for t in content)
    assert all(t.top_logprobs[0].logprob > t.top_logprobs[1].logprob for t in content)
    assert replies[0].choices[0].logprobs == replies[1].choices[0].logprobs


@OPENAI_TRIO_STREAM_LEAK
async def test_streamed_logprobs_match_the_whole_reply(open_client: OpenClient) -> None:
    """Streamed chunks carry each token's logprob, the same as the non-streamed reply's."""
    service = SimService(time_scale=SCALE, default_answer_tokens=7, max_choices=2)
    async with open_client(service) as client:
        whole = await client.chat.completions.create(model="m", messages=user("S?"), logprobs=True)
        stream = await client.chat.completions.create(
            model="m", messages=user("S?"), logprobs=True, stream=True, n=2
        )
        streamed: dict[int, list[float]] = {0: [], 1: []}
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.logprobs and choice.logprobs.content:
                    streamed[choice.index] += [t.logprob for t in choice.logprobs.content]
    expected = [t.logprob for t in whole.choices[0].logprobs.content]  # type: ignore[union-attr]
    assert streamed == {0: expected, 1: expected}
    assert len(expected) == 7


async def test_json_object_answers_each_question_by_id(open_client: OpenClient) -> None:
    """json_object mode answers a list as {"answers": [{"id", "answer"}]}."""
    service = SimService(time_scale=SCALE, default_answer_tokens=4)
    async with open_client(service) as client:
        reply = await client.chat.completions.create(
            model="m",
            messages=user("1. Alpha?\n2. Beta?"),
            response_format={"type": "json_object"},
        )
    data = json.loads(reply.choices[0].message.content or "")
    expected = [{"id": 1, "answer": answer_text("Alpha?", 4)}, {"id": 2, "answer": "x"}]
    expected[1]["answer"] = answer_text("Beta?", 4)
    assert data == {"answers": expected}


async def test_json_schema_merged_answers_are_right_by_id(open_client: OpenClient) -> None:
    """The merged-answers schema gets one item per question, numbered as the prompt, answered."""
    service = SimService(time_scale=SCALE, default_answer_tokens=4)
    response_format: Any = {
        "type": "json_schema",
        "json_schema": {"name": "answers", "schema": MERGED_SCHEMA, "strict": True},
    }
    async with open_client(service) as client:
        reply = await client.chat.completions.create(
            model="m", messages=user("3. Gamma?\n5. Epsilon?"), response_format=response_format
        )
    data = json.loads(reply.choices[0].message.content or "")
    assert data == {
        "answers": [
            {"id": 3, "answer": answer_text("Gamma?", 4)},
            {"id": 5, "answer": answer_text("Epsilon?", 4)},
        ]
    }


async def test_parse_with_a_pydantic_model_validates(open_client: OpenClient) -> None:
    """openai's parse() with a nested pydantic model gets an object that validates."""
    service = SimService(time_scale=SCALE, default_answer_tokens=3)
    async with open_client(service) as client:
        reply = await client.chat.completions.parse(
            model="m", messages=user("Report?"), response_format=Report
        )
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Report)
    assert parsed.answer == answer_text("Report?", 3)
    assert parsed.readings
    assert 2 <= len(parsed.readings[0].tags) <= 3


@pytest.mark.parametrize(
    ("schema", "check"),
    [
        pytest.param(
            {"type": "array", "items": {"type": "integer", "minimum": 4}, "minItems": 3},
            lambda v: v == [4, 4, 4],
            id="array-min-items",
        ),
        pytest.param(
            {"type": "string", "maxLength": 5},
            lambda v: isinstance(v, str) and len(v) <= 5,
            id="max-length",
        ),
        pytest.param({"enum": ["a", "b", "c"]}, lambda v: v in ("a", "b", "c"), id="enum"),
        pytest.param({"type": "boolean"}, lambda v: isinstance(v, bool), id="boolean"),
        pytest.param({"type": ["null", "number"]}, lambda v: v == 1.0, id="nullable-number"),
        pytest.param({"const": 7}, lambda v: v == 7, id="const"),
    ],
)
def test_schema_values_keep_the_bounds(schema: dict[str, Any], check: Any) -> None:
    """Each schema keyword bounds the generated value."""
    value = schema_value(schema, [(1, "the answer")])
    assert check(value), value
    assert value == schema_value(schema, [(1, "the answer")])


async def test_a_named_tool_is_called_then_answered(open_client: OpenClient) -> None:
    """A question naming an offered tool gets a tool call; after the tool's result, an answer."""
    service = SimService(time_scale=SCALE, default_answer_tokens=4)
    question = "Use get_weather for Paris"
    async with open_client(service) as client:
        called = await client.chat.completions.create(
            model="m", messages=user(question), tools=[WEATHER_TOOL]
        )
        (call,) = called.choices[0].message.tool_calls or []
        follow = [
            *user(question),
            called.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ]
        answered = await client.chat.completions.create(
            model="m", messages=follow, tools=[WEATHER_TOOL]
        )
        plain = await client.chat.completions.create(
            model="m", messages=user("Why?"), tools=[WEATHER_TOOL]
        )
    assert called.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    args = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert isinstance(args["city"], str)
    assert args["days"] == 1
    assert answered.choices[0].message.content == answer_text(question, 4)
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].finish_reason == "stop"


@OPENAI_TRIO_STREAM_LEAK
async def test_a_streamed_tool_call(open_client: OpenClient) -> None:
    """tool_choice="required" streams one tool call and finish_reason tool_calls."""
    service = SimService(time_scale=SCALE)
    async with open_client(service) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=user("Anything"),
            tools=[WEATHER_TOOL],
            tool_choice="required",
            stream=True,
        )
        names, finishes = [], []
        async for chunk in stream:
            for choice in chunk.choices:
                names += [t.function.name for t in choice.delta.tool_calls or [] if t.function]
                finishes += [choice.finish_reason] if choice.finish_reason else []
    assert (names, finishes) == (["get_weather"], ["tool_calls"])


@OPENAI_TRIO_STREAM_LEAK
async def test_responses_stream_events(open_client: OpenClient) -> None:
    """The Responses API streams created, one delta per token, completed, as openai parses."""
    service = SimService(time_scale=SCALE, default_answer_tokens=6)
    async with open_client(service) as client:
        stream = await client.responses.create(model="m", input="Stream?", stream=True)
        events = [event async for event in stream]
        async with client.responses.stream(model="m", input="Stream?") as helper:
            final = await helper.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == answer_text("Stream?", 6)
    assert len(deltas) == 6
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == answer_text("Stream?", 6)
    assert [r.status for r in service.log] == [200, 200]
