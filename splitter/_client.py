"""``wrap(client)``: the openai client as it was, except that a compound prompt is split.

The wrapped object is a real instance of the client's own class (a subclass made per
``wrap`` call), so ``isinstance``, type checkers and every attribute, method, resource,
``with_options``, ``with_raw_response``, ``with_streaming_response``, context manager and
``close`` behave as before. Only ``chat.completions.create`` looks at the request: when it
is one user message (with optional system/developer messages) holding several independent
sub-questions, and nothing in it must stay whole (tools or functions, ``n > 1``,
``response_format``, audio, non-text content, earlier turns, ``stream=True``), the parts are
planned and run by a ``Splitter`` on an unwrapped copy of the client, and the caller gets
one ``ChatCompletion`` with the answers in the prompt's own numbering, ``usage`` summed,
and splitter's ``CompoundAnswer`` as ``completion.splitter_details``. Everything else goes
to openai unchanged.
"""

from __future__ import annotations

import functools
import time
import uuid
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
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from ._decompose import decompose
from ._policy import Policy
from ._questions import CompoundAnswer
from ._splitter import Splitter

__all__ = ["DETAILS_ATTRIBUTE", "wrap"]

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
    """A subclass of ``base`` whose ``chat`` splits; ``policy`` rides on the class so that
    ``with_options``/``copy`` (which build ``self.__class__(...)``) keep splitting."""
    chat_cls = _AsyncSplittingChat if issubclass(base, openai.AsyncOpenAI) else _SplittingChat

    def chat(self: Any) -> Any:
        return chat_cls(self)

    namespace = {
        "_splitter_policy": policy,
        "chat": functools.cached_property(chat),
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
    if kwargs.get("stream") or _KEEP_WHOLE & kwargs.keys() or kwargs.get("n") not in (None, 1):
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
    params = {k: v for k, v in kwargs.items() if k not in ("messages", "model", "stream", "n")}
    return users[0], "\n\n".join(system) or None, params


def _completion(answer: CompoundAnswer, model: str) -> ChatCompletion:
    usage = answer.usage
    completion = ChatCompletion(
        id=f"splitter-{uuid.uuid4().hex}",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[
            Choice(
                index=0,
                finish_reason="stop" if answer.ok else "length",
                message=ChatCompletionMessage(role="assistant", content=answer.text),
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        ),
    )
    # Not a pydantic field: it stays out of model_dump() / to_json() and cannot collide.
    object.__setattr__(completion, DETAILS_ATTRIBUTE, answer)
    return completion


class _AsyncSplittingCompletions(AsyncCompletions):
    async def create(self, **kwargs: Any) -> Any:
        found = _compound(kwargs)
        if found is None or decompose(found[0]).single:
            return await super().create(**kwargs)
        prompt, system, params = found
        answer = await _splitter_for(self._client).aask(
            prompt, model=kwargs["model"], system=system, **params
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
        if found is None or decompose(found[0]).single:
            return super().create(**kwargs)
        prompt, system, params = found
        answer = _splitter_for(self._client).ask(
            prompt, model=kwargs["model"], system=system, **params
        )
        return _completion(answer, kwargs["model"])

    @functools.cached_property
    def with_raw_response(self) -> CompletionsWithRawResponse:
        return CompletionsWithRawResponse(Completions(self._client))

    @functools.cached_property
    def with_streaming_response(self) -> CompletionsWithStreamingResponse:
        return CompletionsWithStreamingResponse(Completions(self._client))


class _AsyncSplittingChat(AsyncChat):
    @functools.cached_property
    def completions(self) -> AsyncCompletions:
        return _AsyncSplittingCompletions(self._client)


class _SplittingChat(Chat):
    @functools.cached_property
    def completions(self) -> Completions:
        return _SplittingCompletions(self._client)
