"""Policy(api="responses"): every request of a batch goes to the Responses API, whole or
streamed, through the real openai client; the simulator's log says where each went."""

from __future__ import annotations

import json

import openai
import pytest

from splitter import InvalidInputError, Limits, Policy, Splitter
from splitter._responses_api import request_of
from splitter.sim import SimService, serve
from splitter.testing import assert_answers_match, open_sim_client

pytestmark = pytest.mark.anyio

MODEL = "gpt-4o-mini"


def _policy(**kwargs: object) -> Policy:
    return Policy(api="responses", limits=Limits(slow_start=False), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["fanout", "merge"])
async def test_a_batch_is_answered_through_the_responses_api(door: str, strategy: str) -> None:
    questions = [f"Responses question {i}?" for i in range(4)]
    service = SimService(MODEL, time_scale=0.002)
    async with open_sim_client(service, door=door) as client:
        result = await Splitter(client, policy=_policy(strategy=strategy)).aask_many(
            questions, model=MODEL, system="Answer briefly."
        )
    assert result.ok
    assert_answers_match(result)
    assert {r.path for r in service.log} == {"/v1/responses"}
    assert len(service.log) == (4 if strategy == "fanout" else 1)
    assert all(a.usage.completion_tokens > 0 for a in result)
    assert {a.finish_reason for a in result} == {"stop"}


async def test_an_answer_cut_at_max_tokens_says_length() -> None:
    service = SimService(MODEL, time_scale=0.002)
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=_policy()).aask_many(
            ["A long one [len=50]"], model=MODEL, max_tokens=7
        )
    (answer,) = result
    assert answer.finish_reason == "length"
    assert answer.usage.completion_tokens == 7
    assert service.log[0].completion_tokens == 7


async def test_a_stream_arrives_piece_by_piece_from_the_responses_api(door: str) -> None:
    questions = [f"Streamed responses question {i}? [len=30]" for i in range(3)]
    service = SimService(MODEL, time_scale=0.002)
    async with open_sim_client(service, door=door) as client:
        splitter_ = Splitter(client, policy=_policy(strategy="fanout"), model=MODEL)
        async with splitter_.astream(questions) as events:
            pieces = [event async for event in events]
            result = events.result
    assert result is not None
    assert_answers_match(result)
    first = [e for e in pieces if e.index == 0 and e.answer is None]
    assert len(first) > 1  # the head question came in several pieces, not whole
    assert "".join(e.delta for e in pieces if e.index == 0) == result[0].text
    assert any(r.stream for r in service.log)
    assert {r.path for r in service.log} == {"/v1/responses"}


def test_a_sync_client_sends_to_the_responses_api_too() -> None:
    service = SimService(MODEL, time_scale=0.002)
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="k") as client:
        result = Splitter(client, policy=_policy(strategy="fanout")).ask_many(
            ["Sync one?", "Sync two?"], model=MODEL
        )
    assert_answers_match(result)
    assert [r.path for r in service.log] == ["/v1/responses"] * 2


async def test_a_keyword_with_no_responses_equivalent_is_refused_by_name() -> None:
    service = SimService(MODEL, time_scale=0.002)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match="'stop'"):
            await Splitter(client, policy=_policy()).aask_many(
                ["One?", "Two?"], model=MODEL, stop=["\n"]
            )
    assert service.log == []


def test_chat_keywords_become_their_responses_forms() -> None:
    schema = {"name": "reply", "schema": {"type": "object"}, "strict": True}
    sent = request_of(
        MODEL,
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi?"},
        ],
        {
            "max_tokens": 9,
            "temperature": 0.2,
            "response_format": {"type": "json_schema", "json_schema": schema},
            "stream_options": {"include_usage": True},
        },
    )
    assert sent == {
        "model": MODEL,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Hi?"}],
        "max_output_tokens": 9,
        "temperature": 0.2,
        "text": {"format": {"type": "json_schema", **schema}},
    }
    json.dumps(sent)  # all of it can go on the wire


@pytest.mark.parametrize(
    ("response_format", "message"),
    [
        ({"type": "yaml"}, "'yaml'"),
        ({"type": "json_schema"}, "json_schema"),
        ("json", "must be a dict"),
    ],
)
def test_a_response_format_without_a_responses_form_is_refused(
    response_format: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        request_of(MODEL, [{"role": "user", "content": "x"}], {"response_format": response_format})


def test_the_policy_refuses_an_unknown_api_naming_the_field() -> None:
    with pytest.raises(ValueError, match="api"):
        Policy(api="completions")  # type: ignore[arg-type]
