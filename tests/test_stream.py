"""Splitter.astream / stream: answers delivered as they are produced, in the caller's order."""

from __future__ import annotations

from collections import defaultdict

import anyio
import openai
import pytest

from splitter import (
    InvalidInputError,
    Limits,
    Policy,
    Question,
    RetryPolicy,
    Splitter,
    StreamEvent,
    StreamInterruptedError,
)
from splitter.sim import Faults, SimService, answer_tag, serve
from splitter.sim._faults import draw_fault, request_rng
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio

# Requests go out together (no slow start): these tests time answers against each other.
TOGETHER = Limits(slow_start=False)
FANOUT = Policy(strategy="fanout", limits=TOGETHER)


def texts_by_question(events: list[StreamEvent]) -> dict[int, str]:
    joined: dict[int, str] = defaultdict(str)
    for event in events:
        joined[event.index] += event.delta
    return dict(joined)


def assert_each_done_once_in_order(events: list[StreamEvent], n: int) -> None:
    done = [e.index for e in events if e.done]
    assert done == list(range(n))
    # In order: once a question's last event is out, no event of it or of one before follows.
    indexes = [e.index for e in events]
    assert indexes == sorted(indexes)


async def test_answers_stream_in_input_order_and_add_up_to_each_answer() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    # The first question's answer is the longest: the others finish first and must wait.
    questions = ["Tell me a long story. [len=120]", "Short one? [len=5]", "Medium? [len=30]"]
    async with open_sim_client(service) as client:
        async with Splitter(client, policy=FANOUT).astream(questions, model="m") as events:
            seen = [event async for event in events]
        result = events.result
    assert_each_done_once_in_order(seen, 3)
    joined = texts_by_question(seen)
    for answer in result:
        assert answer.ok
        assert joined[answer.index] == answer.text
        assert (answer.text or "").startswith(answer_tag(questions[answer.index]))
    # The question being delivered streamed live, in many pieces; the rest came as one
    # buffered piece and then their done event.
    assert sum(1 for e in seen if e.index == 0 and e.delta) > 10
    assert all(r.stream for r in service.log)


async def test_in_order_the_rest_are_sent_after_the_first_answers_first_token() -> None:
    """The live answer's request goes alone until its first token (0.25 simulated seconds
    of TTFT at least): sent beside it, the others' prefill would delay that token."""
    scale = 0.02
    service = SimService("gpt-4o-mini", time_scale=scale)
    questions = [f"Part {k}? [len=30]" for k in range(4)]
    async with (
        open_sim_client(service) as client,
        Splitter(client, policy=FANOUT).astream(questions, model="m") as events,
    ):
        seen = [event async for event in events]
    assert_each_done_once_in_order(seen, 4)
    arrived = {record.user_text: record.arrived for record in service.log}
    head_start = min(arrived[q] for q in questions[1:]) - arrived[questions[0]]
    assert head_start >= 0.25 * scale * 0.9


async def test_unordered_yields_each_answer_whole_as_it_finishes() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = ["Long? [len=150]", "Short? [len=3]"]
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=FANOUT)
        async with splitter.astream(questions, model="m", ordered=False) as events:
            seen = [event async for event in events]
    assert [e.index for e in seen] == [1, 0]
    assert all(e.done and e.answer is not None and e.delta == e.answer.text for e in seen)


async def test_merged_answers_come_whole_on_their_turn() -> None:
    """Merging is forced, but the first question, streamed live, has a request of its own;
    the merged ones arrive whole when their turn comes."""
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = [f"Question {k}? [len=30]" for k in range(4)]
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=Policy(strategy="merge"))
        async with splitter.astream(questions, model="m") as events:
            seen = [event async for event in events]
    assert len(service.log) == 2
    assert_each_done_once_in_order(seen, 4)
    assert sum(1 for e in seen if e.index == 0 and e.delta) > 5
    later = [e for e in seen if e.index > 0]
    assert [e.delta.startswith(answer_tag(questions[e.index])) for e in later] == [True] * 3
    assert all(e.done for e in later)


async def test_dependent_questions_stream_after_what_they_need() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = [
        Question(text="Pick a country. [len=6]"),
        Question(text="Its capital? Earlier: {answer:0} [len=6]", depends_on=(0,)),
        Question(text="Unrelated? [len=40]"),
    ]
    async with open_sim_client(service) as client:
        async with Splitter(client, policy=FANOUT).astream(questions, model="m") as events:
            seen = [event async for event in events]
        result = events.result
    assert_each_done_once_in_order(seen, 3)
    assert [a.wave for a in result] == [0, 1, 0]
    joined = texts_by_question(seen)
    assert [joined[i] for i in range(3)] == result.texts


async def test_a_broken_stream_not_yet_shown_is_retried_with_its_start_dropped() -> None:
    # The first answer is long (about 0.5 s real), so the short ones are still buffered
    # when their truncated streams break: they are re-asked, and what the broken attempt
    # had sent is discarded. The first answer's request goes first; a seed that leaves it
    # whole keeps the others buffered (broken early, it would bring their turn sooner).
    faults = Faults(rate_truncate=0.4)
    seed = next(s for s in range(100) if draw_fault(faults, request_rng(s, 1)) is None)
    service = SimService("gpt-4o-mini", time_scale=0.03, faults=faults, seed=seed)
    questions = ["Tell a long story. [len=1200]"] + [f"Short {k}? [len=20]" for k in range(11)]
    policy = Policy(strategy="fanout", retry=RetryPolicy(initial_wait=0.01, jitter=0))
    async with open_sim_client(service) as client:
        async with Splitter(client, policy=policy).astream(questions, model="m") as events:
            seen = [event async for event in events]
        result = events.result
    assert_each_done_once_in_order(seen, 12)
    joined = texts_by_question(seen)
    # Re-asked after a break, and what reached the caller is exactly the good attempt's text.
    assert any(a.ok and a.attempts > 1 for a in result)
    for answer in result:
        if answer.ok:
            assert joined[answer.index] == answer.text
            assert (answer.text or "").startswith(answer_tag(questions[answer.index]))
        else:  # broke after its turn had come: see the next test
            assert isinstance(answer.error, StreamInterruptedError)


async def test_a_broken_stream_already_shown_ends_without_a_retry() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01, faults=Faults(rate_truncate=1.0))
    question = "Tell a long story. [len=60]"
    policy = Policy(retry=RetryPolicy(initial_wait=0.01, jitter=0))
    async with (
        open_sim_client(service) as client,
        Splitter(client, policy=policy).astream([question], model="m") as events,
    ):
        seen = [event async for event in events]
    (answer,) = events.result
    assert isinstance(answer.error, StreamInterruptedError)
    assert len(service.log) == 1  # not re-asked: the caller already holds part of it
    shown = texts_by_question(seen)[0]
    assert shown
    assert answer_tag(question).startswith(shown) or shown.startswith(answer_tag(question))


async def test_leaving_early_cancels_the_rest() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.05)
    questions = ["First? [len=5]", *[f"Slow {k}? [len=400]" for k in range(3)]]
    async with open_sim_client(service) as client:
        with anyio.fail_after(10):
            async with Splitter(client, policy=FANOUT).astream(questions, model="m") as events:
                async for event in events:
                    if event.done:
                        break
        with pytest.raises(RuntimeError, match="has not ended"):
            _ = events.result
    assert event.index == 0


async def test_an_error_raised_while_reading_comes_out_as_itself() -> None:
    """The reader's own exception is not wrapped in an ExceptionGroup by the stream's tasks."""
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = [f"Part {k}? [len=200]" for k in range(3)]

    async def read(client: openai.AsyncOpenAI) -> None:
        async with Splitter(client, policy=FANOUT).astream(questions, model="m") as events:
            async for _ in events:
                raise LookupError("reader gave up")

    async with open_sim_client(service) as client:
        with pytest.raises(LookupError, match="reader gave up"):
            await read(client)
    assert service.in_flight == 0


async def test_iterating_without_async_with_reads_everything() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    async with open_sim_client(service) as client:
        stream = Splitter(client).astream(["A? [len=4]", "B? [len=4]"], model="m")
        seen = [event async for event in stream]
    assert_each_done_once_in_order(seen, 2)


async def test_bad_input_raises_before_anything_is_sent() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match=r"questions\[1\]"):
            Splitter(client).astream(["fine", "  "], model="m")
        with pytest.raises(InvalidInputError, match="'stream' is not accepted"):
            Splitter(client).astream(["fine"], model="m", stream=True)
    assert service.log == []


def test_the_sync_twin_streams_through_a_sync_client() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = ["Long? [len=60]", "Short? [len=4]"]
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="sk") as client:
        seen = list(Splitter(client, policy=FANOUT).stream(questions, model="m"))
        # Stopping early closes the stream and cancels the rest.
        first = next(iter(Splitter(client, policy=FANOUT).stream(questions, model="m")))
    assert_each_done_once_in_order(seen, 2)
    assert sum(1 for e in seen if e.index == 0 and e.delta) > 5
    assert texts_by_question(seen)[1].startswith(answer_tag(questions[1]))
    assert first.index == 0


def test_the_sync_twin_has_the_result_at_its_end_as_the_async_one_does() -> None:
    """``stream(...).result`` is the whole BatchResult once read to the end (refused
    before), its answers the texts the events delivered; closing early ends the stream."""
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = ["Long? [len=30]", "Short? [len=4]", "Third? [len=8]"]
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="sk") as client:
        splitter = Splitter(client, policy=FANOUT)
        events = splitter.stream(questions, model="m")
        with pytest.raises(RuntimeError, match="not ended yet"):
            events.result  # noqa: B018 - reading it is the test
        seen = list(events)
        with splitter.stream(questions, model="m") as stopped:
            first = next(stopped)
    result = events.result
    assert [a.index for a in result] == [0, 1, 2]
    assert all(a.ok for a in result)
    assert [a.text for a in result] == [texts_by_question(seen)[i] for i in range(3)]
    assert (result[1].text or "").startswith(answer_tag(questions[1]))
    assert first.index == 0
    with pytest.raises(RuntimeError, match="not ended yet"):
        stopped.result  # noqa: B018 - closed early, it never ended


async def test_a_failed_attempts_buffer_is_never_shown_when_its_turn_comes_during_backoff() -> None:
    """Both streams break: the first, live, ends with StreamInterruptedError, and so the
    second's turn comes while it waits to retry. That turn must not deliver the broken
    attempt's buffered text: the retry goes ahead and the caller gets exactly its answer
    (regression: the stale buffer came out, which then refused the retry)."""
    # Seed 1: requests 1 and 2 (each question's first attempt, in whichever order they
    # arrive) are cut halfway; request 3 (the second question's retry) is clean. The second
    # question breaks ~15 ms in, the first ~60 ms in, the retry goes ~500 ms in.
    service = SimService("gpt-4o-mini", time_scale=0.05, faults=Faults(rate_truncate=0.5), seed=1)
    questions = ["Long one. [len=200]", "Second one. [len=40]"]
    policy = Policy(
        strategy="fanout", limits=TOGETHER, retry=RetryPolicy(initial_wait=0.5, jitter=0)
    )
    async with open_sim_client(service) as client:
        async with Splitter(client, policy=policy).astream(questions, model="m") as events:
            seen = [event async for event in events]
        result = events.result
    by_arrival = sorted(service.log, key=lambda r: r.arrived)
    assert [r.error_code for r in by_arrival] == ["truncated", "truncated", None]
    assert_each_done_once_in_order(seen, 2)
    assert isinstance(result[0].error, StreamInterruptedError)
    assert (result[1].error, result[1].attempts) == (None, 2)
    assert texts_by_question(seen)[1] == result[1].text
