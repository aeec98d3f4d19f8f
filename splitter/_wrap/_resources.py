"""The wrapped client's ``chat.completions`` and ``responses`` resources."""

from __future__ import annotations

import functools
from typing import Any

from openai.resources.chat import AsyncChat, Chat
from openai.resources.chat.completions import (
    AsyncCompletions,
    AsyncCompletionsWithRawResponse,
    AsyncCompletionsWithStreamingResponse,
    Completions,
    CompletionsWithRawResponse,
    CompletionsWithStreamingResponse,
)
from openai.resources.responses import (
    AsyncResponses,
    AsyncResponsesWithRawResponse,
    AsyncResponsesWithStreamingResponse,
    Responses,
    ResponsesWithRawResponse,
    ResponsesWithStreamingResponse,
)

from .._decompose import decompose
from .._sync import run_sync
from ._owner import _splitter_for
from ._reply import _completion, _response, _single_completion
from ._route import _compound, _compound_response, _isolation_key
from ._streams import AsyncSplitStream, SplitStream, _ChunkSource


class _AsyncSplittingCompletions(AsyncCompletions):
    async def create(self, **kwargs: Any) -> Any:
        found = _compound(kwargs)
        if found is None:
            return await super().create(**kwargs)
        prompt, system, params = found
        splitter = _splitter_for(self._client)
        decomposition = decompose(prompt)
        if decomposition.single:
            key = _isolation_key(kwargs, splitter.policy)
            if key is None:
                return await super().create(**kwargs)
            one = await splitter.aask_one(
                prompt, isolation_key=key, model=kwargs["model"], system=system, **params
            )
            return _single_completion(one, kwargs["model"])
        if kwargs.get("stream"):
            source = _ChunkSource(splitter, prompt, decomposition, system, params, kwargs)
            return AsyncSplitStream(source)
        answer = await splitter._answer_prompt(
            prompt, decomposition, kwargs["model"], system, False, params
        )
        return _completion(answer, kwargs["model"])

    @functools.cached_property
    def with_raw_response(self) -> AsyncCompletionsWithRawResponse:
        return AsyncCompletionsWithRawResponse(AsyncCompletions(self._client))

    @functools.cached_property
    def with_streaming_response(self) -> AsyncCompletionsWithStreamingResponse:
        return AsyncCompletionsWithStreamingResponse(AsyncCompletions(self._client))


class _SplittingCompletions(Completions):
    def create(self, **kwargs: Any) -> Any:
        found = _compound(kwargs)
        if found is None:
            return super().create(**kwargs)
        prompt, system, params = found
        splitter = _splitter_for(self._client)
        decomposition = decompose(prompt)
        if decomposition.single:
            key = _isolation_key(kwargs, splitter.policy)
            if key is None:
                return super().create(**kwargs)
            one = splitter.ask_one(
                prompt, isolation_key=key, model=kwargs["model"], system=system, **params
            )
            return _single_completion(one, kwargs["model"])
        if kwargs.get("stream"):
            source = _ChunkSource(splitter, prompt, decomposition, system, params, kwargs)
            return SplitStream(source)
        answer = run_sync(
            lambda: splitter._answer_prompt(
                prompt, decomposition, kwargs["model"], system, False, params
            )
        )
        return _completion(answer, kwargs["model"])

    @functools.cached_property
    def with_raw_response(self) -> CompletionsWithRawResponse:
        return CompletionsWithRawResponse(Completions(self._client))

    @functools.cached_property
    def with_streaming_response(self) -> CompletionsWithStreamingResponse:
        return CompletionsWithStreamingResponse(Completions(self._client))


class _AsyncSplittingResponses(AsyncResponses):
    async def create(self, **kwargs: Any) -> Any:
        found = _compound_response(kwargs)
        decomposition = decompose(found[0]) if found is not None else None
        if found is None or decomposition is None or decomposition.single:
            return await super().create(**kwargs)
        prompt, instructions, params = found
        splitter = _splitter_for(self._client)
        answer = await splitter._answer_prompt(
            prompt, decomposition, kwargs["model"], instructions, False, params
        )
        return _response(answer, kwargs["model"], kwargs)

    @functools.cached_property
    def with_raw_response(self) -> AsyncResponsesWithRawResponse:
        return AsyncResponsesWithRawResponse(AsyncResponses(self._client))

    @functools.cached_property
    def with_streaming_response(self) -> AsyncResponsesWithStreamingResponse:
        return AsyncResponsesWithStreamingResponse(AsyncResponses(self._client))


class _SplittingResponses(Responses):
    def create(self, **kwargs: Any) -> Any:
        found = _compound_response(kwargs)
        decomposition = decompose(found[0]) if found is not None else None
        if found is None or decomposition is None or decomposition.single:
            return super().create(**kwargs)
        prompt, instructions, params = found
        splitter = _splitter_for(self._client)
        answer = run_sync(
            lambda: splitter._answer_prompt(
                prompt, decomposition, kwargs["model"], instructions, False, params
            )
        )
        return _response(answer, kwargs["model"], kwargs)

    @functools.cached_property
    def with_raw_response(self) -> ResponsesWithRawResponse:
        return ResponsesWithRawResponse(Responses(self._client))

    @functools.cached_property
    def with_streaming_response(self) -> ResponsesWithStreamingResponse:
        return ResponsesWithStreamingResponse(Responses(self._client))


class _AsyncSplittingChat(AsyncChat):
    @functools.cached_property
    def completions(self) -> AsyncCompletions:
        return _AsyncSplittingCompletions(self._client)


class _SplittingChat(Chat):
    @functools.cached_property
    def completions(self) -> Completions:
        return _SplittingCompletions(self._client)
