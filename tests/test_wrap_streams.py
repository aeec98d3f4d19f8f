"""A split async stream read the ways frameworks read it: each chunk under its own timeout or
cancel scope, from more than one task, left early and closed; nothing is held across a read."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
import sniffio
from openai.types.chat import ChatCompletionChunk

import splitter
from splitter import InvalidInputError, Policy
from splitter.sim import SimService, answer_tag

pytestmark = pytest.mark.anyio

# openai's AsyncStream leaves its event iterator unclosed at [DONE]; trio's async-generator
# finalizer warns about it (see tests/sim/test_api.py). Not splitter's doing.
OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
FIRST = "Tell a long story about the sea. [len=60]"
SECOND = "Name one color. [len=3]"
PROMPT = f"Please answer separately:\n1. {FIRST}\n2. {SECOND}"
MESSAGES = [{"role": "user", "content": PROMPT}]
# For the tests that leave early: the second part still runs long after the first opens
# (~5 real seconds at time scale 0.05: in a full run the part had finished before the dropped
# stream was collected, and no part was seen cut).
LONG_MESSAGES = [
    {
        "role": "user",
        "content": "Please answer separately:\n1. Name one color. [len=2]\n"
        "2. Write an essay. [len=9000]",
    }
]


@asynccontextmanager
async def split_stream(
    messages: list[dict[str, str]] = MESSAGES,
) -> AsyncIterator[tuple[SimService, object]]:
    """A streamed split of ``messages`` on a wrapped client (parts take some real time)."""
    service = SimService("gpt-4o-mini", time_scale=0.05)
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,  # type: ignore[arg-type]
            stream=True,
        )
        yield service, stream


def text_of(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def tag_of(service: SimService, question: str) -> str:
    """The answer tag of the part request that asked ``question`` (sent with its preamble)."""
    return next(answer_tag(r.user_text) for r in service.log if question in r.user_text)


def assert_whole_answer(text: str, stream: object, service: SimService) -> None:
    assert text == stream.splitter_details.text  # type: ignore[attr-defined]
    assert 0 <= text.find(tag_of(service, FIRST)) < text.find(tag_of(service, SECOND))
    assert len(service.log) == 2


async def read_each(stream: object, guard: Callable[[], object]) -> list[ChatCompletionChunk]:
    """Every chunk, each read inside ``guard()`` (a cancel scope or timeout of its own)."""
    reader = stream.__aiter__()  # type: ignore[attr-defined]
    chunks: list[ChatCompletionChunk] = []
    while True:
        with guard():  # type: ignore[attr-defined]
            try:
                chunks.append(await reader.__anext__())
            except StopAsyncIteration:
                return chunks


@OPENAI_TRIO_STREAM_LEAK
async def test_each_chunk_read_under_anyio_fail_after() -> None:
    async with split_stream() as (service, stream):
        chunks = await read_each(stream, lambda: anyio.fail_after(30))
    assert_whole_answer(text_of(chunks), stream, service)


@OPENAI_TRIO_STREAM_LEAK
async def test_each_chunk_read_under_a_cancel_scope_of_its_own() -> None:
    async with split_stream() as (service, stream):
        chunks = await read_each(stream, anyio.CancelScope)
    assert_whole_answer(text_of(chunks), stream, service)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_each_chunk_read_with_asyncio_wait_for() -> None:
    """``asyncio.wait_for`` (3.11) reads each chunk in a task of its own."""
    async with split_stream() as (service, stream):
        reader = stream.__aiter__()  # type: ignore[attr-defined]
        chunks: list[ChatCompletionChunk] = []
        while True:
            try:
                chunks.append(await asyncio.wait_for(reader.__anext__(), timeout=30))
            except StopAsyncIteration:
                break
    assert_whole_answer(text_of(chunks), stream, service)


@OPENAI_TRIO_STREAM_LEAK
async def test_the_first_chunk_read_in_one_task_and_the_rest_in_another() -> None:
    chunks: list[ChatCompletionChunk] = []
    async with split_stream() as (service, stream):

        async def first() -> None:
            chunks.append(await stream.__aiter__().__anext__())  # type: ignore[attr-defined]

        async def rest() -> None:
            chunks.extend([chunk async for chunk in stream])  # type: ignore[attr-defined]

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
        async with anyio.create_task_group() as tg:
            tg.start_soon(rest)
    assert len(chunks) > 3
    assert_whole_answer(text_of(chunks), stream, service)


def running_tasks() -> set[object]:
    """Every task of the running event loop (trio: of the whole run, system tasks too)."""
    if sniffio.current_async_library() == "trio":
        import trio

        found: set[object] = set()
        todo = [trio.lowlevel.current_root_task()]
        while todo:
            task = todo.pop()
            found.add(task)
            todo.extend(t for n in task.child_nurseries for t in n.child_tasks)
        return found
    return set(asyncio.all_tasks())


@OPENAI_TRIO_STREAM_LEAK
async def test_close_after_a_break_leaves_no_task_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No ``async with``: ``break`` then ``aclose()``; the parts still running are
    cancelled, no task is left behind, and nothing is logged (no generator finalised late)."""
    caplog.set_level(logging.DEBUG)
    before = running_tasks()
    async with split_stream(LONG_MESSAGES) as (service, stream):
        async for chunk in stream:  # type: ignore[attr-defined]
            if "1. " in (chunk.choices[0].delta.content or ""):
                break
        await stream.aclose()  # type: ignore[attr-defined]
        assert running_tasks() == before
    assert stream.splitter_details is None  # type: ignore[attr-defined]  # never finished
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.status == 499 for r in service.log)  # the essay was abandoned mid-way


async def test_a_failure_reaches_the_reader_and_ends_the_stream() -> None:
    """A system message that cannot be sent (a lone surrogate) fails the split before any
    request: the reader's read raises that error, and the stream is over."""
    service = SimService("instant")
    async with service.async_client() as plain:
        stream = await splitter.wrap(plain).chat.completions.create(
            model="m",
            messages=[{"role": "system", "content": "Be brief \ud800."}, *MESSAGES],  # type: ignore[list-item]
            stream=True,
        )
        with pytest.raises(InvalidInputError, match="system"):
            async for _ in stream:
                pass
        assert [chunk async for chunk in stream] == []
    assert service.log == []


@OPENAI_TRIO_STREAM_LEAK
async def test_a_stream_dropped_after_a_break_stops_its_parts_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No ``async with``, no close: once the stream is collected, its reading task stops at
    its next chunk and the parts still running are cancelled, with no warning or log."""
    caplog.set_level(logging.DEBUG)
    before = running_tasks()
    service = SimService("gpt-4o-mini", time_scale=0.05)
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=LONG_MESSAGES,  # type: ignore[arg-type]
            stream=True,
        )
        async for chunk in stream:
            if "1. " in (chunk.choices[0].delta.content or ""):
                break
        del stream, chunk
        gc.collect()
        with anyio.fail_after(30):
            while running_tasks() != before:
                await anyio.sleep(0.01)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.status == 499 for r in service.log)
