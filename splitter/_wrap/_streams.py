"""Split answers streamed as openai chunks: ``SplitStream`` and ``AsyncSplitStream``."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionUsage

from .._decompose import Decomposition
from .._questions import CompoundAnswer
from .._splitter import Splitter, _Parts
from .._stream import AnswerStream
from .._sync import iterate_sync


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
        self._parts: _Parts | None = None
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
        return await self._events.__aexit__(*exc_info)

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self.chunks()

    async def chunks(self) -> AsyncGenerator[ChatCompletionChunk, None]:
        assert self._events is not None
        assert self._parts is not None
        parts, single = self._parts, self._parts.decomposition.single
        yield self._chunk(ChoiceDelta(role="assistant", content=""))
        opened: set[int] = set()
        async for event in self._events:
            text = event.delta
            answer = event.answer
            if answer is not None and not answer.ok:
                text += f"{' ' if event.index in opened else ''}[no answer: {answer.error}]"
            if not text:
                continue
            if event.index not in opened and not single:
                text = f"{chr(10) * 2 if opened else ''}{parts.label(event.index)} {text}"
            opened.add(event.index)
            yield self._chunk(ChoiceDelta(content=text))
        result = self._events.result
        self.details = parts.answer(result)
        finish = "stop" if result.ok else "length"
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


class AsyncSplitStream:
    """What ``create(..., stream=True)`` returns for a split prompt on an async client: like
    openai's ``AsyncStream``, iterate it for ``ChatCompletionChunk``s (inside ``async with``
    if you may stop early); ``splitter_details`` holds the ``CompoundAnswer`` at the end."""

    def __init__(self, source: _ChunkSource) -> None:
        self._source = source
        self._entered = False
        self._chunks: AsyncGenerator[ChatCompletionChunk, None] | None = None

    @property
    def splitter_details(self) -> CompoundAnswer | None:
        return self._source.details

    async def __aenter__(self) -> AsyncSplitStream:
        await self._source.__aenter__()
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        self._entered = False
        if self._chunks is not None:
            await self._chunks.aclose()  # left mid-way: finish our generator here, not in GC
        return await self._source.__aexit__(*exc_info)

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        if self._chunks is None:
            self._chunks = self._source.chunks() if self._entered else self._read_all()
        return self._chunks

    async def _read_all(self) -> AsyncGenerator[ChatCompletionChunk, None]:
        async with self._source as chunks:
            async for chunk in chunks:
                yield chunk

    async def close(self) -> None:
        """Stop early: the questions still running are cancelled."""
        if self._entered:
            await self.__aexit__(None, None, None)


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
