"""Split answers streamed as openai chunks: ``SplitStream`` and ``AsyncSplitStream``."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any

import anyio
import sniffio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionUsage

from .._compound import Parts, no_answer
from .._decompose import Decomposition
from .._questions import CompoundAnswer
from .._splitter import Splitter
from .._stream import AnswerStream
from .._sync import iterate_sync
from ._reply import cut


class _ChunkSource:
    """A split prompt's answers as ``ChatCompletionChunk``s, in the prompt's own numbering:
    the part being delivered streams live, later parts follow in turn (``Splitter.astream``).
    Entering it takes the prompt apart and starts the questions."""

    def __init__(
        self,
        splitter: Splitter,
        prompt: str,
        found: Decomposition,
        system: str | None,
        params: dict[str, Any],
        request: dict[str, Any],
    ) -> None:
        self._splitter = splitter
        self._prompt = prompt
        self._found = found
        self._system = system
        self._params = params
        self._model: str = request["model"]
        options = request.get("stream_options")
        self._include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        self._id = f"splitter-{uuid.uuid4().hex}"
        self._created = int(time.time())
        self._events: AnswerStream | None = None
        self._parts: Parts | None = None
        self._reading: AsyncGenerator[ChatCompletionChunk, None] | None = None
        self.details: CompoundAnswer | None = None

    async def __aenter__(self) -> _ChunkSource:
        self._parts = await self._splitter._parts(self._prompt, self._model, self._found)
        self._events = self._splitter.astream(
            self._parts.questions, model=self._model, system=self._system, **self._params
        )
        await self._events.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._events is not None
        if self._reading is not None:
            await self._reading.aclose()  # left mid-way: finished here, not by the GC
        return await self._events.__aexit__(*exc_info)

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        if self._reading is None:
            self._reading = self.chunks()
        return self._reading

    async def chunks(self) -> AsyncGenerator[ChatCompletionChunk, None]:
        assert self._events is not None
        assert self._parts is not None
        parts = self._parts
        yield self._chunk(ChoiceDelta(role="assistant", content=""))
        opened: set[int] = set()
        async for event in self._events:
            text = event.delta
            answer = event.answer
            if answer is not None and not answer.ok:
                text += f"{' ' if event.index in opened else ''}{no_answer(answer.error)}"
            if not text:
                continue
            if event.index not in opened:
                text = parts.heading(event.index, first=not opened) + text
            opened.add(event.index)
            yield self._chunk(ChoiceDelta(content=text))
        result = self._events.result
        self.details = parts.answer(result)
        # As the whole reply says it: "length" only for a part cut at its cap (docs/wrap.md).
        finish = "length" if cut(self.details) else "stop"
        yield self._chunk(ChoiceDelta(), finish_reason=finish)
        if self._include_usage:
            usage = self.details.usage
            yield ChatCompletionChunk(
                id=self._id,
                object="chat.completion.chunk",
                created=self._created,
                model=self._model,
                choices=[],
                usage=CompletionUsage(
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    total_tokens=usage.total_tokens,
                ),
            )

    def _chunk(self, delta: ChoiceDelta, finish_reason: Any = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self._id,
            object="chat.completion.chunk",
            created=self._created,
            model=self._model,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)],
        )


class _Detached:
    """One task of its own, in no caller's task group or cancel scope.

    A split stream reads its parts in the background between the caller's reads. Held in a
    task group entered by the caller, that background would tie the stream to the task and
    the cancel scopes it was entered from: a per-chunk ``asyncio.wait_for``/``fail_after``,
    or a second task reading on (as pydantic-ai and LangChain do), would exit those scopes
    out of order. So it runs as a task of the event loop (asyncio) or a system task (trio),
    in a copy of the caller's context, and ``stop()`` cancels it and waits for its end.
    """

    def __init__(self, body: Callable[[], Awaitable[None]]) -> None:
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()

        async def run() -> None:
            try:
                with self._scope:
                    await body()
            finally:
                self._done.set()

        if sniffio.current_async_library() == "trio":
            import trio

            trio.lowlevel.spawn_system_task(run, context=contextvars.copy_context())
        else:
            task = asyncio.get_running_loop().create_task(run())
            _RUNNING.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(_RUNNING.discard)

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended (its own cleanup included)."""
        self._scope.cancel()
        with anyio.CancelScope(shield=True):
            await self._done.wait()


_RUNNING: set[asyncio.Task[None]] = set()


async def _pump(
    source: _ChunkSource, send: MemoryObjectSendStream[ChatCompletionChunk | Exception]
) -> None:
    """Read the split's chunks into ``send`` until they end, fail or nobody reads them."""
    with send:
        try:
            async with source as chunks:
                async for chunk in chunks:
                    send.send_nowait(chunk)  # unbounded: a split answer is small text
        except Exception as exc:  # the reader raises it, as openai's stream would
            with contextlib.suppress(anyio.BrokenResourceError):
                send.send_nowait(exc)


class AsyncSplitStream:
    """What ``create(..., stream=True)`` returns for a split prompt on an async client: like
    openai's ``AsyncStream`` (though not an instance of it), iterate it for
    ``ChatCompletionChunk``s, inside ``async with`` or followed by ``close()`` if you may
    stop early; ``splitter_details`` holds the ``CompoundAnswer`` at the end.

    The parts are read by a task of its own, started by ``async with`` or the first read,
    so each read may be made under its own timeout or cancel scope, and from any task.
    """

    def __init__(self, source: _ChunkSource) -> None:
        self._source = source
        self._reader: _Detached | None = None
        self._received: MemoryObjectReceiveStream[ChatCompletionChunk | Exception] | None = None

    @property
    def splitter_details(self) -> CompoundAnswer | None:
        return self._source.details

    async def __aenter__(self) -> AsyncSplitStream:
        self._start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncSplitStream:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        received = self._start()
        try:
            item = await received.receive()
        except anyio.ClosedResourceError:
            raise StopAsyncIteration from None
        except anyio.EndOfStream:
            received.close()
            raise StopAsyncIteration from None
        if isinstance(item, Exception):
            received.close()  # the stream ends with its error, as openai's would
            raise item
        return item

    def _start(self) -> MemoryObjectReceiveStream[ChatCompletionChunk | Exception]:
        if self._received is None:
            send, self._received = anyio.create_memory_object_stream[
                ChatCompletionChunk | Exception
            ](math.inf)
            source = self._source  # the task must not keep the stream itself alive
            self._reader = _Detached(lambda: _pump(source, send))
        return self._received

    async def close(self) -> None:
        """Stop early: the questions still running are cancelled; returns once they are."""
        if self._reader is not None:
            await self._reader.stop()
        if self._received is not None:
            self._received.close()

    aclose = close

    def __del__(self) -> None:
        # Dropped unclosed after a break: the reader stops at its next chunk (its send
        # fails), which cancels the parts still running; no warning for the buffer.
        if self._received is not None:
            self._received.close()


class SplitStream:
    """The sync twin of :class:`AsyncSplitStream` (an ``openai.Stream`` look-alike)."""

    def __init__(self, source: _ChunkSource) -> None:
        self._source = source
        self._chunks: Iterator[ChatCompletionChunk] | None = None

    @property
    def splitter_details(self) -> CompoundAnswer | None:
        return self._source.details

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        if self._chunks is None:
            self._chunks = iterate_sync(self._source)
        return self._chunks

    def __next__(self) -> ChatCompletionChunk:
        return next(iter(self))

    def __enter__(self) -> SplitStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop early: the questions still running are cancelled."""
        if isinstance(self._chunks, Generator):
            self._chunks.close()
