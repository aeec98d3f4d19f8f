"""Splitter.amap / map: inputs of any length, a bounded window, every answer once, its own."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator

import anyio
import openai
import pytest

from splitter import (
    Answer,
    AnswerDone,
    AnswerFailed,
    BatchStarted,
    Event,
    InvalidInputError,
    Limits,
    MappedAnswers,
    Policy,
    Progress,
    Question,
    Splitter,
)
from splitter.sim import SimService, answer_tag, serve
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


class Source:
    """A lazy input that counts how far it has been read."""

    def __init__(self, texts: list[str], *, fail_at: int | None = None) -> None:
        self.texts = texts
        self.fail_at = fail_at
        self.read = 0

    def __iter__(self) -> Iterator[str]:
        for k, text in enumerate(self.texts):
            if k == self.fail_at:
                raise ValueError(f"source broke at item {k}")
            self.read += 1
            yield text

    async def aiter(self) -> AsyncIterator[str]:
        for text in self:
            await anyio.sleep(0)  # a real async source suspends between items
            yield text


def texts(n: int) -> list[str]:
    # Lengths vary so that answers finish out of input order.
    return [f"Question {k}? [len={3 + (k * 7) % 23}]" for k in range(n)]


def assert_own_answers(answers: list[Answer], questions: list[str]) -> None:
    for answer in answers:
        assert answer.ok, answer.error
        assert answer.question.text == questions[answer.index]
        assert (answer.text or "").startswith(answer_tag(questions[answer.index]))


async def collect(mapped: MappedAnswers, into: list[Answer]) -> None:
    """Read every answer into ``into`` (kept when the reading raises)."""
    async with mapped as answers:
        async for answer in answers:
            into.append(answer)


def sim(time_scale: float = 0.002) -> SimService:
    return SimService("gpt-4o-mini", time_scale=time_scale)


async def test_ordered_map_answers_a_longer_input_than_the_window_once_each_in_order() -> None:
    questions = texts(60)
    source = Source(questions)
    async with open_sim_client(sim()) as client:
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        got: list[Answer] = []
        async with splitter.amap(source, model="m", window=8) as answers:
            async for answer in answers:
                # Never more than a window's worth read ahead of what was handed out.
                assert source.read - len(got) <= 8
                got.append(answer)
    assert [a.index for a in got] == list(range(60))
    assert [a.id for a in got] == [str(k) for k in range(60)]
    assert_own_answers(got, questions)


async def test_a_slow_first_answer_stops_the_reading_at_the_window() -> None:
    """In order, answers behind a slow head wait in the window; the input is not read on."""
    questions = ["Tell me a long story. [len=400]", *texts(40)]
    source = Source(questions)
    async with open_sim_client(sim()) as client:
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        async with splitter.amap(source, model="m", window=6) as answers:
            first = await anext(answers)
            read_when_head_answered = source.read
            rest = [a async for a in answers]
    assert first.index == 0
    assert read_when_head_answered <= 6
    assert [a.index for a in rest] == list(range(1, 41))
    assert_own_answers([first, *rest], questions)


async def test_unordered_map_hands_out_answers_as_they_finish() -> None:
    questions = ["Tell me a long story. [len=300]", *[f"Short {k}? [len=2]" for k in range(20)]]
    async with open_sim_client(sim(0.02)) as client:
        # Sent together (no slow start), the long answer finishes last.
        policy = Policy(strategy="fanout", limits=Limits(slow_start=False))
        splitter = Splitter(client, policy=policy)
        async with splitter.amap(questions, model="m", window=8, ordered=False) as answers:
            got = [a async for a in answers]
    indexes = [a.index for a in got]
    assert sorted(indexes) == list(range(21))  # each once
    assert indexes[0] != 0  # the long first answer did not hold the short ones back
    assert_own_answers(got, questions)


async def test_map_reads_an_async_iterable_with_ids_and_question_objects() -> None:
    questions = texts(30)
    source = Source(questions)

    async def items() -> AsyncIterator[Question]:
        async for text in source.aiter():
            yield Question(text=text, id=f"q-{source.read}", expected_tokens=5)

    async with (
        open_sim_client(sim()) as client,
        Splitter(client).amap(items(), model="m", window=10) as answers,
    ):
        got = [a async for a in answers]
    assert [a.id for a in got] == [f"q-{k + 1}" for k in range(30)]
    assert_own_answers(got, questions)


async def test_an_input_that_raises_midway_surfaces_after_the_answers_before_it() -> None:
    questions = texts(30)
    source = Source(questions, fail_at=17)
    got: list[Answer] = []
    async with open_sim_client(sim()) as client:
        with pytest.raises(ValueError, match="source broke at item 17"):
            await collect(Splitter(client).amap(source, model="m", window=5), got)
    assert [a.index for a in got] == list(range(17))
    assert_own_answers(got, questions)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param(42, r"questions\[3\] must be a str or Question, not int", id="not-a-str"),
        pytest.param("   ", r"questions\[3\]: the question is blank", id="blank"),
        pytest.param(
            Question(text="And then? {answer:0}"),
            r"questions\[3\] depends on '0'",
            id="placeholder",
        ),
        pytest.param(
            Question(text="Why?", depends_on=(1,)), r"questions\[3\] depends on 1", id="depends-on"
        ),
    ],
)
async def test_a_bad_item_is_an_error_naming_its_index_after_the_answers_before_it(
    bad: object, message: str
) -> None:
    items: list[object] = ["One?", "Two?", "Three?", bad, "Five?"]
    got: list[Answer] = []
    async with open_sim_client(sim()) as client:
        mapped = Splitter(client).amap(items, model="m", window=2)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=message) as caught:
            await collect(mapped, got)
    assert caught.value.index == 3
    assert [a.index for a in got] == [0, 1, 2]


async def test_leaving_early_cancels_what_is_in_flight_and_stops_reading() -> None:
    service = sim()
    questions = [f"Question {k}? [len=200]" for k in range(100)]
    source = Source(questions)
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        async with splitter.amap(source, model="m", window=16) as answers:
            got = [await anext(answers) for _ in range(3)]
        assert service.in_flight == 0  # every request still out was cancelled
    assert source.read <= 3 + 16
    assert_own_answers(got, questions)


async def test_batches_of_one_map_share_the_concurrency_limit() -> None:
    service = sim()
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=3))
    # A window of 40 refills in steps of 10: several batches run at once.
    async with (
        open_sim_client(service) as client,
        Splitter(client, policy=policy).amap(texts(80), model="m", window=40) as answers,
    ):
        got = [a async for a in answers]
    assert len(got) == 80
    events = sorted([(r.arrived, 1) for r in service.log] + [(r.finished, -1) for r in service.log])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 3


async def test_map_tells_events_by_input_position_and_draws_one_bar() -> None:
    """Through windows of 8, the hook hears each question end once under its input
    position (never a window's local index), and one bar follows every batch."""
    questions = texts(30)
    heard: list[Event] = []
    out = io.StringIO()
    answers: list[Answer] = []
    async with open_sim_client(sim()) as client:
        with Progress(file=out, mininterval=0) as bar:
            mapped = Splitter(client).amap(
                questions, window=8, model="m", on_event=heard.append, progress=bar
            )
            await collect(mapped, answers)
    assert_own_answers(answers, questions)
    ended = [e.index for e in heard if isinstance(e, AnswerDone | AnswerFailed)]
    assert sorted(ended) == list(range(30))
    batches = [e for e in heard if isinstance(e, BatchStarted)]
    assert len(batches) > 1  # more than one window's batch, all on the one bar
    assert sum(b.questions for b in batches) == 30
    assert (bar.answered, bar.total) == (30, 30)
    assert "30/30" in out.getvalue().rsplit("\r", 1)[-1]


async def test_window_and_input_are_checked_before_anything_is_read() -> None:
    splitter = Splitter(model="m")
    for window in (0, -1, 1.5, True):
        with pytest.raises(InvalidInputError, match="window must be a positive int"):
            splitter.amap(["Why?"], window=window)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not a string"):
        splitter.amap("Why is the sky blue?")
    with pytest.raises(InvalidInputError, match="keyword 'stream' is not accepted"):
        splitter.amap(["Why?"], stream=True)


def test_sync_map_is_a_generator_that_can_stop_early() -> None:
    """Through a sync client on a loopback server; closing the generator cancels the rest."""
    service = sim()
    questions = texts(40)
    source = Source(questions)
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="sk") as client:
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        everything = list(splitter.map(texts(25), model="m", window=7))
        mapped = splitter.map(source, model="m", window=7)
        first_two = [next(mapped), next(mapped)]
        mapped.close()
    assert [a.index for a in everything] == list(range(25))
    assert_own_answers(everything, texts(25))
    assert [a.index for a in first_two] == [0, 1]
    assert_own_answers(first_two, questions)
    assert source.read <= 2 + 7
    assert service.in_flight == 0
