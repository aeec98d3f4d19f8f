"""The wrapped client's ``chat.completions`` and ``responses`` resources.

Every ``create`` (sync or async, plain or through ``with_raw_response`` /
``with_streaming_response``) asks one routing function what to do: ``_chat_plan`` /
``_responses_plan`` return None to send the request whole through openai, or a ``_Plan``
saying how splitter answers it; the resource then only builds the reply for its door.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from .._decompose import decompose
from .._sync import run_sync
from ._owner import _splitter_for
from ._raw import door_of, through_door
from ._reply import _completion, _response, _single_completion
from ._route import _compound, _compound_response, _isolation_key
from ._streams import AsyncSplitStream, SplitStream, _ChunkSource


@dataclass(frozen=True)
class _Plan:
    """How splitter answers a request it takes: ``answer`` (async) or ``answer_sync`` build
    the reply, unless it is a stream (``stream``); ``door`` is the raw door it came through."""

    answer: Callable[[], Awaitable[Any]]
    answer_sync: Callable[[], Any]
    door: str | None
    stream: _ChunkSource | None = None


def _chat_plan(client: Any, kwargs: dict[str, Any]) -> _Plan | None:
    """A chat request splitter answers (split, or aggregated under its end user's id), or
    None to send it whole."""
    given, door = door_of(kwargs)
    found = _compound(given)
    if found is None:
        return None
    prompt, system, params = found
    splitter = _splitter_for(client)
    model = given["model"]
    decomposition = decompose(prompt)
    if decomposition.single:
        key = _isolation_key(given, splitter.policy)
        if key is None:
            return None

        async def one() -> ChatCompletion:
            answer = await splitter.aask_one(
                prompt, isolation_key=key, model=model, system=system, **params
            )
            return _single_completion(answer, model)

        def one_sync() -> ChatCompletion:
            # Not run_sync(one): sync callers in several threads aggregate through the
            # Splitter's sync batches, never through one event loop each.
            answer = splitter.ask_one(
                prompt, isolation_key=key, model=model, system=system, **params
            )
            return _single_completion(answer, model)

        return _Plan(one, one_sync, door)

    async def split() -> ChatCompletion:
        answer = await splitter._answer_prompt(prompt, decomposition, model, system, False, params)
        return _completion(answer, model)

    stream = None
    if given.get("stream"):
        stream = _ChunkSource(splitter, prompt, decomposition, system, params, given)
    return _Plan(split, lambda: run_sync(split), door, stream)


def _responses_plan(client: Any, kwargs: dict[str, Any]) -> _Plan | None:
    """A ``responses.create`` splitter splits, or None to send it whole."""
    given, door = door_of(kwargs)
    found = _compound_response(given)
    decomposition = decompose(found[0]) if found is not None else None
    if found is None or decomposition is None or decomposition.single:
        return None
    prompt, instructions, params = found
    splitter = _splitter_for(client)
    model = given["model"]

    async def split() -> Response:
        answer = await splitter._answer_prompt(
            prompt, decomposition, model, instructions, False, params
        )
        return _response(answer, model, given)

    return _Plan(split, lambda: run_sync(split), door)


class _AsyncSplittingCompletions(AsyncCompletions):
    async def create(self, **kwargs: Any) -> Any:
        plan = _chat_plan(self._client, kwargs)
        if plan is None:
            return await super().create(**kwargs)
        reply = AsyncSplitStream(plan.stream) if plan.stream else await plan.answer()
        return through_door(
            self._client, plan.door, reply, ChatCompletion, "chat/completions", is_async=True
        )

    @functools.cached_property
    def with_raw_response(self) -> AsyncCompletionsWithRawResponse:
        return AsyncCompletionsWithRawResponse(self)

    @functools.cached_property
    def with_streaming_response(self) -> AsyncCompletionsWithStreamingResponse:
        return AsyncCompletionsWithStreamingResponse(self)


class _SplittingCompletions(Completions):
    def create(self, **kwargs: Any) -> Any:
        plan = _chat_plan(self._client, kwargs)
        if plan is None:
            return super().create(**kwargs)
        reply = SplitStream(plan.stream) if plan.stream else plan.answer_sync()
        return through_door(
            self._client, plan.door, reply, ChatCompletion, "chat/completions", is_async=False
        )

    @functools.cached_property
    def with_raw_response(self) -> CompletionsWithRawResponse:
        return CompletionsWithRawResponse(self)

    @functools.cached_property
    def with_streaming_response(self) -> CompletionsWithStreamingResponse:
        return CompletionsWithStreamingResponse(self)


class _AsyncSplittingResponses(AsyncResponses):
    async def create(self, **kwargs: Any) -> Any:
        plan = _responses_plan(self._client, kwargs)
        if plan is None:
            return await super().create(**kwargs)
        reply = await plan.answer()
        return through_door(self._client, plan.door, reply, Response, "responses", is_async=True)

    @functools.cached_property
    def with_raw_response(self) -> AsyncResponsesWithRawResponse:
        return AsyncResponsesWithRawResponse(self)

    @functools.cached_property
    def with_streaming_response(self) -> AsyncResponsesWithStreamingResponse:
        return AsyncResponsesWithStreamingResponse(self)


class _SplittingResponses(Responses):
    def create(self, **kwargs: Any) -> Any:
        plan = _responses_plan(self._client, kwargs)
        if plan is None:
            return super().create(**kwargs)
        reply = plan.answer_sync()
        return through_door(self._client, plan.door, reply, Response, "responses", is_async=False)

    @functools.cached_property
    def with_raw_response(self) -> ResponsesWithRawResponse:
        return ResponsesWithRawResponse(self)

    @functools.cached_property
    def with_streaming_response(self) -> ResponsesWithStreamingResponse:
        return ResponsesWithStreamingResponse(self)


class _AsyncSplittingChat(AsyncChat):
    @functools.cached_property
    def completions(self) -> AsyncCompletions:
        return _AsyncSplittingCompletions(self._client)


class _SplittingChat(Chat):
    @functools.cached_property
    def completions(self) -> Completions:
        return _SplittingCompletions(self._client)
