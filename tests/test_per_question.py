"""Per-question requests: a question's own system prompt, history and keywords, checked,
sent, merged only with questions whose request agrees, and keyed so in the response cache.

Against the simulator over the real openai client; requests are counted from the
simulator's log and read from the bodies the client sent (an httpx request hook)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest
from body_support import recording_client

from splitter import Cache, InvalidInputError, Policy, Question, Splitter
from splitter import _cache as cache_module
from splitter.events import AnswerDone, Event, RequestStarted
from splitter.sim import SimService
from splitter.testing import assert_answers_match

pytestmark = pytest.mark.anyio

MODEL = "gpt-4o-mini"
HISTORY = (
    {"role": "user", "content": "My name is Ada."},
    {"role": "assistant", "content": "Nice to meet you, Ada."},
)


_client = recording_client


async def _drain(splitter: Splitter, questions: list[Any]) -> None:
    async with splitter.amap(questions, model=MODEL) as answers:
        async for _ in answers:
            pass


def _service() -> SimService:
    return SimService(MODEL, time_scale=0.002)


def _by_question(bodies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each single request's body by its question (the last message's text)."""
    return {b["messages"][-1]["content"]: b for b in bodies}


async def test_a_question_s_own_system_history_and_keywords_override_the_batch_s(
    door: str,
) -> None:
    """Own system replaces the batch's ('' removes it), own keywords win key by key,
    history goes between the system prompt and the question."""
    questions = [
        "Plain question?",
        Question(text="Own system?", system="Answer in French."),
        Question(text="No system?", system=""),
        Question(text="Own keywords?", params={"temperature": 0.1, "seed": 7}),
        Question(text="With history?", messages=HISTORY),
    ]
    service = _service()
    async with _client(service, door) as (client, bodies):
        result = await Splitter(client, policy=Policy(strategy="fanout")).aask_many(
            questions, model=MODEL, system="Be brief.", temperature=0.5
        )
    assert result.ok
    assert_answers_match(result)
    assert len(service.log) == 5
    sent = _by_question(bodies)
    assert sent["Plain question?"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Plain question?"},
    ]
    assert sent["Own system?"]["messages"][0] == {"role": "system", "content": "Answer in French."}
    assert [m["role"] for m in sent["No system?"]["messages"]] == ["user"]
    assert (sent["Own keywords?"]["temperature"], sent["Own keywords?"]["seed"]) == (0.1, 7)
    assert sent["Plain question?"]["temperature"] == 0.5
    assert "seed" not in sent["Plain question?"]
    assert sent["With history?"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        *HISTORY,
        {"role": "user", "content": "With history?"},
    ]


async def test_only_questions_whose_requests_agree_are_merged(door: str) -> None:
    """With merging forced: one request for the batch's own shape, one per other shape,
    one alone for each question with history; answers in input order, each its own."""
    cold = {"temperature": 0.0}
    questions = [
        "Alpha?",
        Question(text="Cold one?", params=cold),
        Question(text="Beta?", id="b"),
        Question(text="History one?", messages=HISTORY),
        Question(text="Cold two?", params=cold),
        Question(text="History two?", messages=HISTORY),
        Question(text="Same as the batch?", params={"temperature": 0.5}),
    ]
    events: list[Event] = []
    service = _service()
    async with _client(service, door) as (client, bodies):
        result = await Splitter(client, policy=Policy(strategy="merge")).aask_many(
            questions, model=MODEL, temperature=0.5, on_event=events.append
        )
    assert result.ok
    assert_answers_match(result)
    assert [a.index for a in result] == list(range(7))
    assert [a.question.text for a in result] == [
        q if isinstance(q, str) else q.text for q in questions
    ]
    assert result[2].id == "b"
    asked = sorted(sorted(r.questions) for r in service.log)
    assert asked == sorted(
        [
            sorted(["Alpha?", "Beta?", "Same as the batch?"]),  # its keyword is the batch's
            sorted(["Cold one?", "Cold two?"]),
            ["History one?"],
            ["History two?"],
        ]
    )
    temperatures = sorted(b["temperature"] for b in bodies)
    assert temperatures == [0.0, 0.5, 0.5, 0.5]
    assert [a.via for a in result] == [
        "merged",
        "merged",
        "merged",
        "single",
        "merged",
        "single",
        "merged",
    ]
    started = [e for e in events if isinstance(e, RequestStarted)]
    assert sorted(sorted(e.indexes) for e in started) == [[0, 2, 6], [1, 4], [3], [5]]
    done = sorted(e.index for e in events if isinstance(e, AnswerDone))
    assert done == list(range(7))


async def test_the_planner_never_merges_across_shapes_on_auto() -> None:
    """On auto, whatever it chooses, no request mixes a question's own system prompt with
    the batch's."""
    questions = [f"Shared {i}?" for i in range(6)]
    questions += [Question(text=f"French {i}?", system="En français.") for i in range(6)]
    splitter = Splitter(SimService(MODEL).async_client())
    plan = splitter.plan(questions, model=MODEL)
    for candidate in plan.candidates:
        for group in candidate.groups:
            kinds = {i >= 6 for i in group.indexes}
            assert len(kinds) == 1, f"{candidate.label} mixes shapes in {group.indexes}"
    assert any(g.merged for c in plan.candidates for g in c.groups)
    french = [g for g in plan.candidates[0].groups if g.indexes[0] >= 6]
    shared = [g for g in plan.candidates[0].groups if g.indexes[0] < 6]
    # The French prompt is counted for the French questions' requests, not the batch's none.
    assert min(g.input_tokens for g in french) > max(g.input_tokens for g in shared)


async def test_a_question_with_its_own_system_is_its_own_cache_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal texts with different own system prompts are two entries and two requests;
    asked again, both come from the cache."""
    questions = [
        Question(text="Same words?", system="Be formal."),
        Question(text="Same words?", system="Be casual."),
        Question(text="Same words?", system="Be formal."),  # identical to the first
    ]
    path = tmp_path / "cache.sqlite"
    service = _service()
    monkeypatch.setattr(cache_module, "_stores", {})  # no store of another test
    async with _client(service, "inprocess") as (client, bodies):
        policy = Policy(cache=Cache(path=path), strategy="fanout")
        first = await Splitter(client, policy=policy).aask_many(questions, model=MODEL)
        sent = len(service.log)
        again = await Splitter(client, policy=policy).aask_many(questions, model=MODEL)
    assert first.ok
    assert again.ok
    assert sent == 2
    assert len(service.log) == 2
    assert sorted(b["messages"][0]["content"] for b in bodies) == ["Be casual.", "Be formal."]
    assert [a.via for a in first] == ["single", "single", "cache"]
    assert again.stats.cache_hits == 3
    with sqlite3.connect(path) as db:
        (entries,) = db.execute("SELECT COUNT(*) FROM answers").fetchone()
    assert entries == 2


@pytest.mark.parametrize(
    ("question", "message"),
    [
        pytest.param(
            Question(text="q", params={"model": "gpt-4o"}),
            "questions[1].params: keyword 'model' is not accepted",
            id="own-model",
        ),
        pytest.param(
            Question(text="q", params={"stream": True}),
            "questions[1].params: keyword 'stream' is not accepted",
            id="own-stream",
        ),
        pytest.param(
            Question(text="q", params={"messages": []}),
            "questions[1].params: keyword 'messages' is not accepted: pass the history as "
            "Question(messages=...)",
            id="own-messages",
        ),
        pytest.param(
            Question(text="q", params={"system": "x"}),
            "questions[1].params: keyword 'system' is not accepted: pass Question(system=...)",
            id="system-as-keyword",
        ),
        pytest.param(
            Question(text="q", params={"seed": 1}),
            "questions[1].params: keyword 'seed' has no Responses API equivalent",
            id="responses-api",
        ),
    ],
)
async def test_a_question_s_keywords_splitter_owns_are_refused(
    question: Question, message: str
) -> None:
    """Refused before any request, naming the item and the keyword (as the batch's are)."""
    service = _service()
    policy = Policy(api="responses")
    async with _client(service, "inprocess") as (client, _):
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client, policy=policy).aask_many(["fine", question], model=MODEL)
        with pytest.raises(InvalidInputError, match=r"questions\[1\]\.params"):
            await _drain(Splitter(client, policy=policy), ["fine", question])
    assert str(caught.value).startswith(message)
    assert caught.value.index == 1
    assert len(service.log) <= 1  # amap may have asked the good one; the batch asked none


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"messages": "hi"}, "messages must be a list of chat messages", id="str"),
        pytest.param(
            {"messages": ["hi"]},
            "messages[0] must be a chat message (a dict with 'role' and 'content'), not str",
            id="item-not-a-dict",
        ),
        pytest.param({"messages": [{"content": "x"}]}, "messages[0] has role None", id="no-role"),
        pytest.param(
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]},
            "messages[1] has no 'content'",
            id="no-content",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": 5}]},
            "messages[0] content must be a string or a list of parts, not int",
            id="content-int",
        ),
        pytest.param({"params": ["temperature"]}, "params", id="params-not-a-dict"),
        pytest.param({"system": "\ud800"}, "the system prompt holds a lone surrogate", id="surr"),
    ],
)
def test_bad_own_request_fields_are_refused_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        Question(text="q", **fields)
    assert message in str(caught.value)


def test_an_assistant_message_with_tool_calls_needs_no_content_and_questions_still_hash() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    q = Question(text="q", messages=[{"role": "assistant", "tool_calls": [call]}])
    assert q.messages[0]["tool_calls"] == [call]
    assert hash(Question(text="q", params={"temperature": 0})) == hash(Question(text="q"))
    assert Question(text="q", params={"temperature": 0}) != Question(text="q")


async def test_streamed_and_dependent_questions_keep_their_own_requests(door: str) -> None:
    """astream sends each question with its own system prompt (streamed); a question that
    waits for another's answer is sent, filled in, with its own history and keywords."""
    streamed = [
        Question(text="Stream plain?"),
        Question(text="Stream own?", system="Own streamed system."),
    ]
    service = _service()
    async with _client(service, door) as (client, bodies):
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        async with splitter.astream(streamed, model=MODEL, system="Batch system.") as events:
            finals = [e.answer async for e in events if e.answer is not None]
        stream_bodies = _by_question(bodies)
        bodies.clear()
        dependent = [
            Question(text="Name a colour.", id="colour"),
            Question(
                text="What rhymes with {answer:colour}?",
                messages=HISTORY,
                params={"temperature": 0.3},
            ),
        ]
        result = await splitter.aask_many(dependent, model=MODEL)
    assert [a.index for a in finals] == [0, 1]
    assert all(a.ok for a in finals)
    assert stream_bodies["Stream own?"]["stream"] is True
    assert stream_bodies["Stream own?"]["messages"][0]["content"] == "Own streamed system."
    assert stream_bodies["Stream plain?"]["messages"][0]["content"] == "Batch system."
    assert result.ok
    assert [a.wave for a in result] == [0, 1]
    (second,) = [b for b in bodies if b["messages"][-1]["content"].startswith("What rhymes")]
    assert second["messages"][:-1] == list(HISTORY)
    assert second["temperature"] == 0.3
    assert result[0].text is not None
    assert result[0].text in second["messages"][-1]["content"]  # its dependency filled in


async def test_own_requests_go_to_the_responses_api_too() -> None:
    """With Policy(api="responses"): a question's own system prompt is its instructions and
    its history leads its input."""
    questions = [
        Question(text="Responses own?", system="Own instructions.", messages=HISTORY),
        "Responses plain?",
    ]
    service = _service()
    kept: list[dict[str, Any]] = []

    async def keep(request: httpx.Request) -> None:
        kept.append(json.loads(request.content))

    http = openai.DefaultAsyncHttpxClient(
        transport=service.transport(), event_hooks={"request": [keep]}
    )
    async with openai.AsyncOpenAI(
        base_url=service.base_url, api_key="sk-sim", http_client=http
    ) as client:
        result = await Splitter(
            client, policy=Policy(api="responses", strategy="fanout")
        ).aask_many(questions, model=MODEL, system="Batch instructions.")
    assert result.ok
    assert_answers_match(result)
    assert {r.path for r in service.log} == {"/v1/responses"}
    own = next(b for b in kept if b["input"][-1]["content"] == "Responses own?")
    plain = next(b for b in kept if b["input"][-1]["content"] == "Responses plain?")
    assert own["instructions"] == "Own instructions."
    assert own["input"][:-1] == list(HISTORY)
    assert plain["instructions"] == "Batch instructions."
