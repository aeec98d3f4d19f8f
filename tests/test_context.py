"""Shared context (``context=``): one system message, byte for byte the same in every
request of a batch, so an engine's prefix cache serves fan-out siblings after the first;
a merged request carries it once; bad values refused naming the field.

Against the simulator over the real openai client, through both doors; bodies are read
from what the client sent (an httpx request hook), requests from the simulator's log."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from body_support import recording_client

from splitter import Cache, InvalidInputError, Policy, Question, RequestStarted, Splitter
from splitter._estimate import count_tokens
from splitter._request_spec import sends_cache_key
from splitter.sim import Profile, SimService, serve
from splitter.testing import assert_answers_match

pytestmark = pytest.mark.anyio

MODEL = "m"
DOC = "The contract runs for two years and renews unless cancelled. " * 80  # ~1,200 tokens
DOC_TOKENS = len(DOC.encode()) // 4  # the simulator's count: a token per 4 bytes
SYSTEM = "Answer from the document only."
QUESTIONS = ["How long does it run?", "Does it renew?", "Who may cancel?", "What notice?"]


def _service(slots: int = 1, cache: str = "slot") -> SimService:
    """One slot keeping its last prompt (llama.cpp's): requests are served one after the
    other, each after the first finding the shared prefix in the slot."""
    profile = Profile(
        name=MODEL, rtt=0.0, ttft0=0.0, prefill_rate=200_000, tpot1=0.0002, beta=0.0,
        slots=slots, context_window=100_000, prefix_cache=cache,  # type: ignore[arg-type]
    )  # fmt: skip
    return SimService(profile, time_scale=0.5)


def _splitter(client: Any, strategy: str = "fanout", **policy: Any) -> Splitter:
    return Splitter(client, policy=Policy(strategy=strategy, **policy), model=MODEL)  # type: ignore[arg-type]


def _heads(bodies: list[dict[str, Any]]) -> list[str]:
    """The system message of every chat body sent."""
    return [b["messages"][0]["content"] for b in bodies if b["messages"][0]["role"] == "system"]


async def test_fan_out_siblings_share_the_context_and_read_it_from_the_cache(door: str) -> None:
    """Every request opens with the same system message (system prompt, then the context);
    the question alone is the user message; after the first, each reads the prefix cached."""
    service = _service()
    async with recording_client(service, door) as (client, bodies):
        result = await _splitter(client).aask_many(QUESTIONS, system=SYSTEM, context=DOC)
    assert result.ok
    assert_answers_match(result)
    assert [a.question.text for a in result] == QUESTIONS
    assert len(service.log) == len(QUESTIONS) == len(bodies)
    assert _heads(bodies) == [f"{SYSTEM}\n\n{DOC}"] * len(QUESTIONS)
    assert sorted(b["messages"][-1]["content"] for b in bodies) == sorted(QUESTIONS)
    cached = sorted(a.usage.cached_tokens for a in result)
    assert cached[0] == 0  # the first one computed the document
    assert all(c >= DOC_TOKENS for c in cached[1:])
    assert result.usage.cached_tokens == sum(cached)


async def test_a_merged_request_carries_the_context_once(door: str) -> None:
    """Merged: one request whose body holds the document once (in its system message) and
    whose prompt is about one document's worth of tokens, not one per question."""
    service = _service()
    async with recording_client(service, door) as (client, bodies):
        result = await _splitter(client, "merge").aask_many(QUESTIONS, context=DOC)
    assert result.ok
    assert_answers_match(result)
    assert [a.via for a in result] == ["merged"] * len(QUESTIONS)
    (record,) = service.log
    assert sorted(record.questions) == sorted(QUESTIONS)
    assert DOC_TOKENS < record.prompt_tokens < 2 * DOC_TOKENS
    (body,) = bodies
    assert str(body).count(DOC) == 1
    assert body["messages"][0] == {"role": "system", "content": DOC}
    assert DOC not in body["messages"][-1]["content"]


async def test_questions_about_different_documents_are_merged_apart() -> None:
    """A question's own context replaces the batch's ('' for none): questions are merged
    only with those about the same document, each request carrying its own once."""
    other = "A lease of a flat in Leeds, monthly rent, one month's notice. " * 40
    questions = [
        "How long?",
        Question(text="What rent?", context=other),
        "Renews?",
        Question(text="Notice?", context=other),
        Question(text="Nothing shared?", context=""),
    ]
    service = _service(slots=4, cache="none")
    async with recording_client(service, "inprocess") as (client, bodies):
        result = await _splitter(client, "merge").aask_many(questions, context=DOC)
    assert result.ok
    assert_answers_match(result)
    asked = sorted(sorted(r.questions) for r in service.log)
    assert asked == sorted(
        [["How long?", "Renews?"], ["Notice?", "What rent?"], ["Nothing shared?"]]
    )
    heads = sorted(_heads(bodies))
    assert heads == sorted([DOC, other])
    bare = [b for b in bodies if b["messages"][0]["role"] == "user"]
    assert [b["messages"] for b in bare] == [[{"role": "user", "content": "Nothing shared?"}]]


async def test_history_goes_after_the_context() -> None:
    """A question with history: system message (system prompt and context) first, then its
    history, then the question, so its prefix is the batch's."""
    history = (
        {"role": "user", "content": "I am the tenant."},
        {"role": "assistant", "content": "Understood."},
    )
    service = _service(slots=4, cache="none")
    async with recording_client(service, "inprocess") as (client, bodies):
        result = await _splitter(client).aask_many(
            ["Plain?", Question(text="May I leave early?", messages=history)],
            system=SYSTEM,
            context=DOC,
        )
    assert result.ok
    by_question = {b["messages"][-1]["content"]: b["messages"] for b in bodies}
    head = {"role": "system", "content": f"{SYSTEM}\n\n{DOC}"}
    assert by_question["May I leave early?"] == [
        head,
        *history,
        {"role": "user", "content": "May I leave early?"},
    ]
    assert by_question["Plain?"] == [head, {"role": "user", "content": "Plain?"}]


async def test_streamed_and_mapped_answers_carry_the_context() -> None:
    """astream and amap send the same system message as aask_many; answers in order."""
    service = _service(slots=4, cache="shared")
    async with recording_client(service, "inprocess") as (client, bodies):
        splitter_ = _splitter(client)
        async with splitter_.astream(QUESTIONS[:2], context=DOC) as events:
            streamed = [event async for event in events]
            result = events.result
        async with splitter_.amap(QUESTIONS[2:], context=DOC, window=2) as answers:
            mapped = [answer async for answer in answers]
    assert result is not None
    assert result.ok
    assert_answers_match(result)
    assert streamed[-1].answer is not None
    assert [a.question.text for a in mapped] == QUESTIONS[2:]
    assert all(a.ok for a in mapped)
    assert _heads(bodies) == [DOC] * len(QUESTIONS)


def test_the_sync_twins_take_context_too() -> None:
    """ask_many, stream and map (a sync client, over loopback) send the context as their
    async twins do."""
    service = _service(slots=4, cache="none")
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="k") as client:
        splitter_ = _splitter(client)
        result = splitter_.ask_many(QUESTIONS[:2], context=DOC)
        with splitter_.stream(QUESTIONS[2:3], context=DOC) as events:
            streamed = list(events)
        mapped = list(splitter_.map(QUESTIONS[3:], context=DOC))
    assert result.ok
    assert streamed[-1].answer is not None
    assert mapped[0].ok
    assert len(service.log) == len(QUESTIONS)
    assert all(r.prompt_tokens > DOC_TOKENS for r in service.log)


async def test_the_plan_prices_the_context_once_per_request() -> None:
    """plan(): a fan-out request's input holds the context, and merged input holds it once."""
    async with SimService("gpt-4o-mini").async_client() as client:
        splitter_ = Splitter(client, model=MODEL)
        plain = splitter_.plan(QUESTIONS)
        shared = splitter_.plan(QUESTIONS, context=DOC)

    def inputs(plan: Any, kind: str) -> list[int]:
        (candidate,) = [c for c in plan.candidates if c.label == kind]
        return [g.input_tokens for g in candidate.groups]

    extra = [
        s - p for s, p in zip(inputs(shared, "fan-out"), inputs(plain, "fan-out"), strict=True)
    ]
    assert len(set(extra)) == 1
    assert extra[0] >= count_tokens(DOC, MODEL)
    (merged_extra,) = [
        s - p for s, p in zip(inputs(shared, "merge"), inputs(plain, "merge"), strict=True)
    ]
    assert merged_extra == extra[0]  # once, not once per question


@pytest.mark.parametrize("strategy", ["fanout", "merge"])
async def test_every_request_books_the_context_it_carries(strategy: str) -> None:
    """The token budget books what a request sends: a fan-out request's input holds the
    context as a merged one's does (it booked the question alone: 39 tokens for a request
    carrying a 1,450-token document, and a stated token limit never counted the context),
    and the plan's own booking agrees."""
    booked: dict[int, int] = {}

    def on_event(event: object) -> None:
        if isinstance(event, RequestStarted):
            booked[event.request] = event.reserved_tokens

    async with _service(slots=4).async_client() as client:
        splitter_ = _splitter(client, strategy)
        planned = splitter_.plan(QUESTIONS, context=DOC)
        result = await splitter_.aask_many(QUESTIONS, context=DOC, on_event=on_event)
    assert result.ok
    assert_answers_match(result)
    groups = planned.chosen.groups
    assert len(booked) == len(groups) == (len(QUESTIONS) if strategy == "fanout" else 1)
    assert all(tokens > count_tokens(DOC, MODEL) for tokens in booked.values())
    assert sorted(booked.values()) == sorted(
        g.input_tokens + (g.max_tokens or g.output_tokens) for g in groups
    )


async def test_a_cached_answer_is_never_given_for_another_context() -> None:
    """The response cache's key holds the context: the same question about another
    document is asked again."""
    service = _service(slots=4, cache="none")
    async with recording_client(service, "inprocess") as (client, _):
        splitter_ = _splitter(client, cache=Cache())
        first = await splitter_.aask_many(["Renews?"], context=DOC)
        again = await splitter_.aask_many(["Renews?"], context=DOC)
        other = await splitter_.aask_many(["Renews?"], context="Another document.")
    assert (first.stats.cache_hits, again.stats.cache_hits, other.stats.cache_hits) == (0, 1, 0)
    assert len(service.log) == 2


@pytest.mark.parametrize(
    ("context", "match"),
    [
        pytest.param(5, r"context must be a str or None, not int", id="int"),
        pytest.param(b"doc", r"context must be a str or None, not bytes", id="bytes"),
        pytest.param("", r"context is empty", id="empty"),
        pytest.param(" \n\t", r"context is empty", id="blank"),
        pytest.param("a\ud800b", r"context holds a lone surrogate at position 1", id="surrogate"),
    ],
)
async def test_a_bad_context_is_refused_naming_the_field(context: object, match: str) -> None:
    """Every entry point refuses a context that is not a non-empty, sendable str, before
    anything is sent."""
    service = SimService("gpt-4o-mini")
    async with service.async_client() as client:
        splitter_ = Splitter(client, model=MODEL)
        with pytest.raises(InvalidInputError, match=match):
            await splitter_.aask_many(["Q?"], context=context)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=match):
            splitter_.astream(["Q?"], context=context)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=match):
            splitter_.amap(["Q?"], context=context)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=match):
            splitter_.plan(["Q?"], context=context)  # type: ignore[arg-type]
    assert service.log == []


def test_a_question_s_own_bad_context_names_the_question() -> None:
    """Question(context=...) is checked as a field; a context keyword in its params is
    refused, pointing at the field."""
    with pytest.raises(ValueError, match="context"):
        Question(text="Q?", context=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the context holds a lone surrogate"):
        Question(text="Q?", context="\ud800")
    splitter_ = Splitter(openai.AsyncOpenAI(base_url="http://sim.invalid/v1", api_key="k"))
    with pytest.raises(InvalidInputError, match=r"questions\[0\].params: .*Question\(context="):
        splitter_.plan([Question(text="Q?", params={"context": DOC})], model=MODEL)


# -- prompt_cache_key ------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_fan_out_siblings_carry_one_prompt_cache_key(door: str, api: str) -> None:
    """With the switch on, every request about one document carries the same key, one
    about another document another key, and a request with no system message none."""
    own = [Question(text="Other?", context="Another document."), Question(text="Bare?", context="")]
    questions: list[str | Question] = [*QUESTIONS, *own]
    service = _service(slots=4, cache="none")
    async with recording_client(service, door) as (client, _):
        splitter_ = _splitter(client, prompt_cache_key=True, api=api)
        result = await splitter_.aask_many(questions, context=DOC)
    assert result.ok
    keys = {r.questions[0]: r.prompt_cache_key for r in service.log}
    shared = {keys[q] for q in QUESTIONS}
    assert len(shared) == 1
    (key,) = shared
    assert key is not None
    assert key.startswith("splitter-")
    assert keys["Other?"] not in (None, key)
    assert keys["Bare?"] is None


async def test_auto_sends_the_key_to_openai_only() -> None:
    """'auto' (the default) sends no key to another server, and one to api.openai.com
    (here the simulator behind a client whose base URL is OpenAI's)."""
    service = _service(slots=4, cache="none")
    async with recording_client(service, "inprocess") as (client, bodies):
        await _splitter(client).aask_many(QUESTIONS[:2], context=DOC)
        openai_client = client.with_options(base_url="https://api.openai.com/v1")
        await _splitter(openai_client).aask_many(QUESTIONS[2:], context=DOC)
    assert [r.prompt_cache_key is None for r in service.log] == [True, True, False, False]
    assert ["prompt_cache_key" in b for b in bodies] == [False, False, True, True]


async def test_a_key_of_your_own_wins() -> None:
    """A prompt_cache_key keyword (or one in extra_body) is sent as given."""
    service = _service(slots=4, cache="none")
    async with recording_client(service, "inprocess") as (client, _):
        splitter_ = _splitter(client, prompt_cache_key=True)
        await splitter_.aask_many(QUESTIONS[:2], context=DOC, prompt_cache_key="mine")
        await splitter_.aask_many(
            QUESTIONS[2:], context=DOC, extra_body={"prompt_cache_key": "body"}
        )
    assert [r.prompt_cache_key for r in service.log] == ["mine", "mine", "body", "body"]


@pytest.mark.parametrize(
    ("setting", "base_url", "sent"),
    [
        pytest.param("auto", "https://api.openai.com/v1", True, id="auto-openai"),
        pytest.param("auto", "http://127.0.0.1:8080/v1", False, id="auto-local"),
        pytest.param("auto", "https://proxy.example/api.openai.com/v1", False, id="auto-path"),
        pytest.param(True, "http://127.0.0.1:8080/v1", True, id="on"),
        pytest.param(False, "https://api.openai.com/v1", False, id="off"),
    ],
)
def test_which_endpoints_get_a_key(setting: bool | str, base_url: str, sent: bool) -> None:
    """'auto' means OpenAI's own host; True and False mean what they say."""
    assert sends_cache_key(setting, base_url) is sent


def test_the_switch_is_validated() -> None:
    """Policy(prompt_cache_key=...) takes True, False or 'auto' only."""
    with pytest.raises(ValueError, match="prompt_cache_key"):
        Policy(prompt_cache_key="sometimes")  # type: ignore[arg-type]
