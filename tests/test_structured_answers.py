"""Structured answers: ``response_format=`` a pydantic class or a JSON-schema dict is sent as
openai's ``.parse()`` sends it, and each answer's ``parsed`` holds the validated value; a
reply that does not validate is re-asked alone once, then reported by name.

Against the simulator (which fills a ``json_schema`` deterministically) over the real
openai client; requests are counted from the simulator's log."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import openai
import pytest
from body_support import recording_client
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel, field_validator

from splitter import Answer, InvalidInputError, InvalidResponseError, Policy, Question, Splitter
from splitter._structured import Structured, merged_format, parse_merged_json, structured_of
from splitter.sim import SimService

pytestmark = pytest.mark.anyio

MODEL = "gpt-4o-mini"
QUESTIONS = [f"What is {k} plus {k}?" for k in range(1, 6)]


class Inner(BaseModel):
    unit: str
    note: str | None = None


class Reply(BaseModel):
    answer: str
    confidence: int
    inner: Inner
    tags: list[str]


class Other(BaseModel):
    answer: str


class Picky(BaseModel):
    """Refuses the first reply it sees for each answer: the re-ask is what validates."""

    seen: ClassVar[set[str]] = set()
    answer: str

    @field_validator("answer")
    @classmethod
    def _second_time(cls, answer: str) -> str:
        if answer not in cls.seen:
            cls.seen.add(answer)
            raise ValueError("not on the first try")
        return answer


class Never(BaseModel):
    answer: str

    @field_validator("answer")
    @classmethod
    def _refuse(cls, answer: str) -> str:
        raise ValueError("never valid")


_client = recording_client


def _service() -> SimService:
    return SimService(MODEL, time_scale=0.002)


def _expected_format(body: dict[str, Any]) -> dict[str, Any]:
    """What a request of ``body``'s kind should carry for ``Reply``: openai's own form
    asked alone; merged, an ``answers`` array of exactly one ``{id, answer}`` per question."""
    alone: Any = type_to_response_format_param(Reply)
    assert isinstance(alone, dict)
    count = body["messages"][-1]["content"].count(" question ")
    if count <= 1:
        return dict(alone)
    schema = dict(alone["json_schema"]["schema"])
    defs = schema.pop("$defs")
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "enum": list(range(1, count + 1))},
            "answer": schema,
        },
        "required": ["id", "answer"],
        "additionalProperties": False,
    }
    merged = {
        "type": "object",
        "properties": {
            "answers": {"type": "array", "items": item, "minItems": count, "maxItems": count}
        },
        "required": ["answers"],
        "additionalProperties": False,
        "$defs": defs,
    }
    return {
        "type": "json_schema",
        "json_schema": {"name": "answers", "schema": merged, "strict": True},
    }


@pytest.mark.parametrize("strategy", ["auto", "fanout", "merge"])
async def test_a_pydantic_class_gives_every_answer_a_validated_instance(
    door: str, strategy: str
) -> None:
    """The class is sent as openai's own helper sends it (merged: inside one array item
    per question), and every answer's ``parsed`` is an instance holding that question's
    answer, whatever the strategy, with nothing re-asked."""
    service = _service()
    async with _client(service, door) as (client, bodies):
        splitter = Splitter(client, policy=Policy(strategy=strategy))  # type: ignore[arg-type]
        result = await splitter.aask_many(QUESTIONS, model=MODEL, response_format=Reply)
    assert result.ok, result.failed
    assert all(b["response_format"] == _expected_format(b) for b in bodies)
    for answer in result:
        assert isinstance(answer.parsed, Reply)
        assert answer.parsed == Reply.model_validate_json(answer.text or "")
    assert len({a.parsed.answer for a in result}) == len(QUESTIONS)  # each its own answer
    assert result.stats.repaired == 0
    if strategy == "merge":
        assert [a.via for a in result] == ["merged"] * len(QUESTIONS)
        assert all(len(r.questions) > 1 for r in service.log)
        assert sum(len(r.questions) for r in service.log) == len(QUESTIONS)


async def test_a_json_schema_dict_gives_the_parsed_json(door: str) -> None:
    """A ``json_schema`` dict is sent unchanged; ``parsed`` is the reply's JSON value."""
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "n": {"type": "integer", "minimum": 3}},
        "required": ["answer", "n"],
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    service = _service()
    async with _client(service, door) as (client, bodies):
        result = await Splitter(client).aask_many(
            QUESTIONS, model=MODEL, response_format=response_format
        )
    assert result.ok
    assert all(b["response_format"] == response_format for b in bodies)
    for answer in result:
        assert answer.parsed == json.loads(answer.text or "")
        assert answer.parsed["n"] == 3


async def test_without_a_schema_parsed_is_none() -> None:
    """No ``response_format`` (or a plain one): answers are text, ``parsed`` is None."""
    service = _service()
    async with _client(service, "inprocess") as (client, _):
        plain = await Splitter(client).aask_many(QUESTIONS[:2], model=MODEL)
        as_object = await Splitter(client).aask_many(
            QUESTIONS[:2], model=MODEL, response_format={"type": "json_object"}
        )
    assert [a.parsed for a in [*plain, *as_object]] == [None] * 4
    assert plain.ok
    assert as_object.ok


async def test_questions_merge_only_with_questions_of_the_same_schema() -> None:
    """Forced to merge: the plain questions share a marker-merged request, those with one
    schema a JSON-merged one read back by id (0 re-asks), the one with another schema is
    asked alone; every answer's ``parsed`` is its question's own."""
    questions: list[str | Question] = [
        "Alpha?",
        Question(text="Gamma?", params={"response_format": Reply}),
        "Beta?",
        Question(text="Delta?", params={"response_format": Reply}),
        Question(text="Epsilon?", params={"response_format": Other}),
    ]
    service = _service()
    async with _client(service, "inprocess") as (client, _):
        result = await Splitter(client, policy=Policy(strategy="merge")).aask_many(
            questions, model=MODEL
        )
    assert result.ok, result.failed
    assert [a.via for a in result] == ["merged"] * 4 + ["single"]
    assert [type(a.parsed) for a in result] == [type(None), Reply, type(None), Reply, Other]
    assert sorted(len(r.questions) for r in service.log) == [1, 2, 2]
    assert result.stats.repaired == 0
    pairs = [r.user_text for r in service.log if len(r.questions) == 2]
    assert any("Gamma?" in text and "Delta?" in text for text in pairs)
    gamma, delta = result[1].parsed, result[3].parsed
    assert isinstance(gamma, Reply)
    assert isinstance(delta, Reply)
    assert gamma.answer != delta.answer


async def test_a_merged_reply_item_that_does_not_validate_is_re_asked_alone() -> None:
    """Merged items refused by the class are re-asked alone, and those replies validate."""
    Picky.seen.clear()
    service = _service()
    async with _client(service, "inprocess") as (client, _):
        result = await Splitter(client, policy=Policy(strategy="merge")).aask_many(
            QUESTIONS, model=MODEL, response_format=Picky
        )
    assert result.ok, result.failed
    assert all(isinstance(a.parsed, Picky) for a in result)
    assert [a.via for a in result] == ["repair"] * len(QUESTIONS)
    assert result.stats.repaired == len(QUESTIONS)
    merged = [len(r.questions) for r in service.log if len(r.questions) > 1]
    alone = [len(r.questions) for r in service.log if len(r.questions) == 1]
    assert sum(merged) == len(QUESTIONS)
    assert alone == [1] * len(QUESTIONS)


async def test_an_invalid_reply_is_re_asked_alone_and_then_validates() -> None:
    """A reply the class refuses is asked once more; the second validates."""
    Picky.seen.clear()
    service = _service()
    async with _client(service, "inprocess") as (client, _):
        result = await Splitter(client).aask_many(QUESTIONS, model=MODEL, response_format=Picky)
    assert result.ok
    assert all(isinstance(a.parsed, Picky) for a in result)
    assert [a.via for a in result] == ["repair"] * len(QUESTIONS)
    assert result.stats.repaired == len(QUESTIONS)
    assert len(service.log) == 2 * len(QUESTIONS)
    # Each answer is billed both requests: the refused reply's tokens were spent too.
    for answer in result:
        sent = [r for r in service.log if r.user_text == answer.question.text]
        assert len(sent) == 2
        assert answer.usage.prompt_tokens == sum(r.prompt_tokens for r in sent)


async def test_a_reply_still_invalid_after_the_re_ask_is_reported_by_name() -> None:
    """Twice refused: the answer carries ``InvalidResponseError`` naming the question."""
    service = _service()
    questions: list[str | Question] = [Question(text="Alpha?", id="alpha"), "Beta?"]
    async with _client(service, "inprocess") as (client, _):
        result = await Splitter(client).aask_many(questions, model=MODEL, response_format=Never)
    assert [a.ok for a in result] == [False, False]
    errors = [a.error for a in result]
    assert all(isinstance(e, InvalidResponseError) for e in errors)
    assert "question 'alpha'" in str(errors[0])
    assert "never valid" in str(errors[0])
    assert "'Beta?'" in str(errors[1])
    assert [a.parsed for a in result] == [None, None]
    assert len(service.log) == 4
    assert result.stats.repaired == 2


def test_a_class_that_is_not_a_pydantic_model_is_refused() -> None:
    """A class openai could not turn into a schema fails before anything is sent, by name."""
    splitter = Splitter(openai.OpenAI(base_url="http://127.0.0.1:9", api_key="k"))
    with pytest.raises(InvalidInputError, match="not the class dict"):
        splitter.ask_many(["Alpha?"], model=MODEL, response_format=dict)


async def test_map_and_stream_answers_carry_parsed() -> None:
    """``amap`` and ``astream`` give the same validated instances as ``aask_many``."""
    service = _service()
    async with _client(service, "inprocess") as (client, _):
        splitter = Splitter(client)
        mapped: list[Answer] = []
        async with splitter.amap(QUESTIONS, model=MODEL, response_format=Reply) as stream_in:
            async for answer in stream_in:
                mapped.append(answer)
        finals: list[Answer] = []
        async with splitter.astream(QUESTIONS, model=MODEL, response_format=Reply) as stream:
            async for event in stream:
                if event.answer is not None:
                    finals.append(event.answer)
    for got in (mapped, finals):
        assert [a.question.text for a in got] == QUESTIONS
        assert all(isinstance(a.parsed, Reply) for a in got)
        assert [a.parsed.answer for a in got] == [a.parsed.answer for a in mapped]


_ITEMS = Structured(
    {"type": "json_schema", "json_schema": {"name": "o", "schema": {}}}, model=Other
)


@pytest.mark.parametrize(
    ("reply", "found"),
    [
        pytest.param(
            '{"answers": [{"id": 2, "answer": {"answer": "b"}}, '
            '{"id": 1, "answer": {"answer": "a"}}]}',
            {1: "a", 2: "b"},
            id="by-id-any-order",
        ),
        pytest.param("not json", {}, id="bad-json"),
        pytest.param('{"answers": {"id": 1}}', {}, id="not-an-array"),
        pytest.param('{"answers": [{"id": 1, "answer": {"answer": "a"}}]}', {1: "a"}, id="missing"),
        pytest.param(
            '{"answers": [{"id": 1, "answer": {"answer": "a"}}, '
            '{"id": 1, "answer": {"answer": "b"}}, {"id": 2, "answer": {"answer": "c"}}]}',
            {2: "c"},
            id="repeated",
        ),
        pytest.param(
            '{"answers": [{"id": 3, "answer": {"answer": "x"}}, '
            '{"id": "2", "answer": {"answer": "y"}}, {"id": 2, "answer": {"answer": "b"}}]}',
            {2: "b"},
            id="out-of-range-and-extra",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": {"wrong": "a"}}, {"id": 2}]}',
            {},
            id="invalid-items",
        ),
    ],
)
def test_a_merged_json_reply_is_read_by_id_and_only_valid_items_kept(
    reply: str, found: dict[int, str]
) -> None:
    """Each id 1..n found once with a valid answer is kept; the rest are left to re-ask."""
    read = parse_merged_json(reply, 2, _ITEMS)
    assert {k: parsed.answer for k, (_, parsed) in read.items()} == found
    assert all(Other.model_validate_json(text) == parsed for text, parsed in read.values())


def test_the_merged_schema_holds_one_item_per_question() -> None:
    """The array is exactly ``count`` items of ``{id, answer}``; the class's ``$defs`` move
    to the root, where its ``$ref``s point."""
    structured = structured_of({"response_format": Reply})
    assert structured is not None
    schema = merged_format(structured, 3)["json_schema"]["schema"]
    answers = schema["properties"]["answers"]
    assert (answers["minItems"], answers["maxItems"]) == (3, 3)
    assert answers["items"]["required"] == ["id", "answer"]
    assert "$defs" not in answers["items"]["properties"]["answer"]
    assert set(schema["$defs"]) == {"Inner"}
    assert answers["items"]["properties"]["answer"]["properties"]["inner"] == {
        "$ref": "#/$defs/Inner"
    }
    assert schema["$defs"]["Inner"]["additionalProperties"] is False
