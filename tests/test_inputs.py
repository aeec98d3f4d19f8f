"""Bad input is refused before any request, with an error that names the item or keyword."""

from __future__ import annotations

import pytest

from splitter import InvalidInputError, Policy, Question, Splitter
from splitter.sim import SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("questions", "match", "index"),
    [
        pytest.param(["ok", 3], r"questions\[1\] must be a str or Question, not int", 1, id="int"),
        pytest.param(["ok", None], r"questions\[1\] .* not NoneType", 1, id="none"),
        pytest.param(["ok", "ok", "  \n"], r"questions\[2\]: the question is blank", 2, id="blank"),
        pytest.param([""], r"questions\[0\]: the question is blank", 0, id="empty"),
        pytest.param(
            ["ok", "What is a\ud800b?"],
            r"questions\[1\]: the question holds a lone surrogate at position 9",
            1,
            id="lone-surrogate",
        ),
        pytest.param(
            ["fine", "word " * 2000],
            r"questions\[1\] is ~\d+ tokens, over max_question",
            1,
            id="huge",
        ),
        pytest.param(
            [Question(text="a", id="x"), Question(text="b", id="x")],
            r"questions\[1\] repeats id 'x' of questions\[0\]",
            1,
            id="duplicate-id",
        ),
    ],
)
async def test_bad_items_name_their_index(questions: list[object], match: str, index: int) -> None:
    """Each bad item raises InvalidInputError (a ValueError) naming it; nothing is sent."""
    service = SimService("instant")
    policy = Policy(max_question_tokens=1000)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match=match) as info:
            await Splitter(client, policy=policy).aask_many(questions, model="m")  # type: ignore[arg-type]
    assert info.value.index == index
    assert isinstance(info.value, ValueError)
    assert service.log == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"messages": []}, "'messages' is not accepted", id="messages"),
        pytest.param({"stream": True}, "'stream' is not accepted", id="stream"),
        pytest.param({"n": 3}, "'n' is not accepted", id="n"),
    ],
)
async def test_owned_keywords_are_refused(kwargs: dict[str, object], match: str) -> None:
    """Keywords splitter builds itself are refused by name instead of silently fighting it."""
    async with open_sim_client(SimService("instant")) as client:
        with pytest.raises(InvalidInputError, match=match):
            await Splitter(client).aask_many(["q"], model="m", **kwargs)


async def test_a_single_string_is_not_taken_as_characters() -> None:
    """Passing one string instead of a list is an error, not one question per character."""
    async with open_sim_client(SimService("instant")) as client:
        with pytest.raises(InvalidInputError, match="not a single string"):
            await Splitter(client).aask_many("What is 2+2?", model="m")


async def test_model_is_required() -> None:
    """Without a model anywhere, the error says where to give one."""
    async with open_sim_client(SimService("instant")) as client:
        with pytest.raises(InvalidInputError, match="model is required"):
            await Splitter(client).aask_many(["q"])


async def test_n_equal_one_is_allowed() -> None:
    """n=1 is what splitter does anyway, so it passes through."""
    async with open_sim_client(SimService("instant")) as client:
        result = await Splitter(client, model="m").aask_many(["q"], n=1)
    assert result.ok


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param("system", r"system holds a lone surrogate at position 1", id="system"),
        pytest.param("prompt", r"the prompt holds a lone surrogate at position 7", id="prompt"),
    ],
)
async def test_unsendable_text_outside_the_questions_is_refused(call: str, match: str) -> None:
    """A lone surrogate in the system prompt or a compound prompt is InvalidInputError
    before any request (openai's body encoder raised UnicodeEncodeError mid-batch)."""
    service = SimService("instant")
    async with open_sim_client(service) as client:
        splitter = Splitter(client, model="gpt-4o-mini")
        ask = (
            splitter.aask_many(["What is DNS?"], system="a\udfffb")
            if call == "system"
            else splitter.aask("1. Why?\ud800 2. How?")
        )
        with pytest.raises(InvalidInputError, match=match):
            await ask
    assert service.log == []


@pytest.mark.parametrize("questions", [None, 42], ids=["None", "int"])
async def test_questions_that_are_not_a_list_are_refused_by_name(questions: object) -> None:
    service = SimService("instant")
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match="questions must be a list of questions, not"):
            await Splitter(client).aask_many(questions, model="m")  # type: ignore[arg-type]
    assert service.log == []


@pytest.mark.parametrize("strategy", ["fanout", "merge"])
async def test_a_misspelt_keyword_reaches_the_caller_as_itself(strategy: str) -> None:
    """Every request fails the same way before it is sent: the caller gets that TypeError,
    naming the keyword, not an ExceptionGroup from splitter's task group."""
    service = SimService("instant")
    policy = Policy(strategy=strategy)  # type: ignore[arg-type]
    async with open_sim_client(service) as client:
        with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
            await Splitter(client, policy=policy).aask_many(
                ["What is 1+1?", "What is 2+2?", "What is 3+3?"], model="m", temprature=0
            )
    assert service.log == []
