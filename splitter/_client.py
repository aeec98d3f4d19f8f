"""``wrap(client)``: the openai client as it was, except that a compound prompt is split.

The wrapped object is a real instance of the client's own class (a subclass made per
``wrap`` call), so ``isinstance``, type checkers and every attribute, method, resource,
``with_options``, ``with_raw_response``, ``with_streaming_response``, context manager and
``close`` behave as before. ``chat.completions.create`` looks at the request: when it
is one user message (with optional system/developer messages) holding several independent
sub-questions, and nothing in it must stay whole (tools or functions, ``n > 1``,
``response_format``, audio, non-text content, earlier turns), the parts are planned and run
by a ``Splitter`` on an unwrapped copy of the client, and the caller gets one
``ChatCompletion`` with the answers in the prompt's own numbering, ``usage`` summed, and
splitter's ``CompoundAnswer`` as ``completion.splitter_details``. With ``stream=True`` the
answer comes as ``ChatCompletionChunk``s in the same numbering: the first part live, token
by token, the later ones as their turn comes. ``responses.create`` splits the same way
when its ``input`` is one text (or one user message) and it asks for nothing beyond
``instructions``, ``temperature``, ``top_p`` and ``max_output_tokens``; it returns one
``Response``. Everything else goes to openai as it is, but through the rate-limit budget
and splitter's one retry layer (``_gate``).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any, TypeVar, cast

import openai
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
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import Response

from . import _gate as gate
from ._decompose import Decomposition, decompose
from ._policy import Policy
from ._questions import Answer, CompoundAnswer, Usage
from ._splitter import Splitter, _Parts
from ._stream import AnswerStream
from ._sync import iterate_sync, run_sync

__all__ = ["DETAILS_ATTRIBUTE", "AsyncSplitStream", "SplitStream", "wrap"]

ClientT = TypeVar("ClientT", openai.OpenAI, openai.AsyncOpenAI)

#: The attribute of a split request's ``ChatCompletion`` holding splitter's ``CompoundAnswer``.
DETAILS_ATTRIBUTE = "splitter_details"
# Requests with any of these are answered as one: splitting would change what they mean.
_KEEP_WHOLE = frozenset(
    {
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "audio",
        "modalities",
        "prediction",
        "parallel_tool_calls",
    }
)


def wrap(client: ClientT, *, policy: Policy | None = None) -> ClientT:
    """``client`` with compound prompts split, planned and run by splitter.

    Works for ``openai.OpenAI``, ``AsyncOpenAI``, ``AzureOpenAI`` and ``AsyncAzureOpenAI``;
    the result is an instance of the same class, sharing the client's HTTP connections.
    """
    if not isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
        raise TypeError(
            f"wrap() takes an openai.OpenAI or openai.AsyncOpenAI client, "
            f"not {type(client).__name__}"
        )
    base = _unwrapped_class(type(client))
    wrapped = client.copy()
    wrapped.__class__ = _splitting_class(base, policy if policy is not None else Policy())
    return wrapped


def _unwrapped_class(cls: type[Any]) -> type[Any]:
    while getattr(cls, "_splitter_policy", None) is not None:
        cls = cls.__mro__[1]
    return cls


def _splitting_class(base: type[Any], policy: Policy) -> type[Any]:
    """A subclass of ``base`` whose ``chat`` and ``responses`` split and whose every other
    request passes the gate (budget, retries); ``policy`` rides on the class so that
    ``with_options``/``copy`` (which build ``self.__class__(...)``) keep splitting."""
    is_async = issubclass(base, openai.AsyncOpenAI)
    chat_cls = _AsyncSplittingChat if is_async else _SplittingChat
    responses_cls = _AsyncSplittingResponses if is_async else _SplittingResponses

    def chat(self: Any) -> Any:
        return chat_cls(self)

    def responses(self: Any) -> Any:
        return responses_cls(self)

    def gate_options(self: Any, options: Any) -> dict[str, Any]:
        if options.idempotency_key is None and options.method.lower() != "get":
            # One key for every attempt, as openai keeps it across its own retries.
            options = options.model_copy()
            options.idempotency_key = self._idempotency_key()
        splitter = _splitter_for(self)
        plain = splitter._client
        return {
            "options": options,
            "endpoint": lambda model: splitter._endpoint(plain, model),
            "retry": policy.retry,
        }

    async def async_request(
        self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
    ) -> Any:
        async def call(once: Any) -> Any:
            return await base.request(self, cast_to, once, stream=stream, stream_cls=stream_cls)

        return await gate.send(call, **gate_options(self, options))

    def sync_request(
        self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
    ) -> Any:
        async def call(once: Any) -> Any:
            return base.request(self, cast_to, once, stream=stream, stream_cls=stream_cls)

        kwargs = gate_options(self, options)
        return run_sync(lambda: gate.send(call, **kwargs))

    async def async_process_response(self: Any, **kwargs: Any) -> Any:
        gate.remember_headers(kwargs["response"].headers)
        return await base._process_response(self, **kwargs)

    def sync_process_response(self: Any, **kwargs: Any) -> Any:
        gate.remember_headers(kwargs["response"].headers)
        return base._process_response(self, **kwargs)

    namespace = {
        "_splitter_policy": policy,
        "chat": functools.cached_property(chat),
        "responses": functools.cached_property(responses),
        "request": async_request if is_async else sync_request,
        "_process_response": async_process_response if is_async else sync_process_response,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    }
    return type(base.__name__, (base,), namespace)


def _splitter_for(client: Any) -> Splitter:
    """The wrapped client's Splitter, built once, on an unwrapped copy of the client (so
    its own requests are never split again)."""
    found = client.__dict__.get("_splitter_instance")
    if found is None:
        plain = client.copy()
        plain.__class__ = _unwrapped_class(type(client))
        found = Splitter(plain, policy=type(client)._splitter_policy)
        client.__dict__["_splitter_instance"] = found
    return cast(Splitter, found)


def _compound(kwargs: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | None:
    """(prompt, system, params) when the request may be split; None to pass it through."""
    if _KEEP_WHOLE & kwargs.keys() or kwargs.get("n") not in (None, 1):
        return None
    messages, model = kwargs.get("messages"), kwargs.get("model")
    if not isinstance(messages, list) or not isinstance(model, str):
        return None
    system: list[str] = []
    users: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return None  # images, audio or content parts: not ours to take apart
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(message["content"])
        elif role == "user" and not users:
            users.append(message["content"])
        else:
            return None  # earlier turns or several user messages: a conversation
    if not users:
        return None
    dropped = ("messages", "model", "stream", "stream_options", "n")
    params = {k: v for k, v in kwargs.items() if k not in dropped}
    return users[0], "\n\n".join(system) or None, params


# What a Responses API request may carry and still be split; anything else (tools, text
# formats, reasoning, stored conversations, background runs, stream) keeps it whole.
_RESPONSES_SPLITTABLE = frozenset({"model", "input", "instructions", "temperature", "top_p"})


def _compound_response(kwargs: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | None:
    """(prompt, instructions, chat params) when a ``responses.create`` may be split."""
    if not kwargs.keys() <= _RESPONSES_SPLITTABLE | {"max_output_tokens"}:
        return None
    if not isinstance(kwargs.get("model"), str):
        return None
    given = kwargs.get("input")
    if isinstance(given, list) and len(given) == 1 and isinstance(given[0], dict):
        message = given[0]
        if message.get("role") == "user" and message.keys() <= {"role", "content", "type"}:
            given = message.get("content")
    instructions = kwargs.get("instructions")
    if not isinstance(given, str) or not isinstance(instructions, str | None):
        return None
    params: dict[str, Any] = {k: kwargs[k] for k in ("temperature", "top_p") if k in kwargs}
    if isinstance(kwargs.get("max_output_tokens"), int):
        params["max_tokens"] = kwargs["max_output_tokens"]  # per part, as it was for the whole
    return given, instructions, params


def _response(answer: CompoundAnswer, model: str, kwargs: dict[str, Any]) -> Response:
    usage = answer.usage
    key = uuid.uuid4().hex
    status = "completed" if answer.ok else "incomplete"
    response = Response.model_validate(
        {
            "id": f"resp_splitter{key}",
            "object": "response",
            "created_at": time.time(),
            "model": model,
            "status": status,
            "incomplete_details": None if answer.ok else {"reason": "max_output_tokens"},
            "error": None,
            "instructions": kwargs.get("instructions"),
            "max_output_tokens": kwargs.get("max_output_tokens"),
            "temperature": kwargs.get("temperature"),
            "top_p": kwargs.get("top_p"),
            "output": [
                {
                    "type": "message",
                    "id": f"msg_splitter{key}",
                    "status": status,
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            },
        }
    )
    object.__setattr__(response, DETAILS_ATTRIBUTE, answer)
    return response


def _isolation_key(kwargs: dict[str, Any], policy: Policy) -> str | None:
    """The key a single question may be aggregated under: the request's own end-user id
    (``safety_identifier``, or the older ``user``), when the policy aggregates at all."""
    if policy.aggregate_window_ms is None or kwargs.get("stream"):
        return None
    for field in ("safety_identifier", "user"):
        key = kwargs.get(field)
        if isinstance(key, str) and key:
            return f"{field}:{key}"
    return None


def _single_completion(answer: Answer, model: str) -> ChatCompletion:
    """An aggregated single question's answer as the ``ChatCompletion`` it replaces; a
    failure raises what openai would have raised."""
    if answer.error is not None:
        cause = answer.error.__cause__
        raise cause if isinstance(cause, openai.OpenAIError) else answer.error
    finish = "stop" if answer.via == "merged" else (answer.finish_reason or "stop")
    return _chat_completion(answer, answer.text, answer.usage, finish, model)


def _completion(answer: CompoundAnswer, model: str) -> ChatCompletion:
    finish = "stop" if answer.ok else "length"
    return _chat_completion(answer, answer.text, answer.usage, finish, model)


def _chat_completion(
    details: Answer | CompoundAnswer, text: str | None, usage: Usage, finish: str, model: str
) -> ChatCompletion:
    """One assistant message as a ``ChatCompletion``, with splitter's ``details`` on it."""
    completion = ChatCompletion(
        id=f"splitter-{uuid.uuid4().hex}",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[
            Choice(
                index=0,
                finish_reason=finish,  # type: ignore[arg-type]
                message=ChatCompletionMessage(role="assistant", content=text),
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        ),
    )
    # Not a pydantic field: it stays out of model_dump() / to_json() and cannot collide.
    object.__setattr__(completion, DETAILS_ATTRIBUTE, details)
    return completion


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
