"""Talking to the user's openai client: one chat completion, its headers, and our errors.

This is the one place where openai's exceptions become splitter's. The client is used
with ``max_retries=0``: retries live in splitter's own retry layer, or the two multiply.
A sync ``OpenAI`` client is driven from worker threads so the async core can run it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import openai

from ._compat import http_module
from ._exceptions import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    InvalidResponseError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
)
from ._headers import parse_retry_after
from ._questions import Usage

__all__ = ["Completion", "OpenAIBackend", "translate_error"]

AnyOpenAI = openai.OpenAI | openai.AsyncOpenAI
_TRANSPORT_ERROR: type[Exception] = http_module().TransportError


@dataclass(frozen=True, slots=True)
class Completion:
    """One successful chat completion, reduced to what splitter uses."""

    text: str
    finish_reason: str | None
    usage: Usage
    request_id: str | None
    headers: Mapping[str, str]
    elapsed: float


class OpenAIBackend:
    """Sends chat completions through the user's client (sync or async)."""

    def __init__(self, client: AnyOpenAI, *, max_threads: int = 64) -> None:
        self._client = client.with_options(max_retries=0)
        self._threads = anyio.CapacityLimiter(max_threads)

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def chat(
        self, *, model: str, messages: list[dict[str, Any]], **params: Any
    ) -> Completion:
        """One chat completion; raises splitter's ``APIError`` family on failure."""
        started = time.perf_counter()
        try:
            raw = await self._create(model=model, messages=messages, **params)
            completion = raw.parse()
        except openai.OpenAIError as exc:
            raise translate_error(exc) from exc
        except _TRANSPORT_ERROR as exc:  # a body read that openai did not wrap (openai 2.x)
            raise APIConnectionError(f"connection failed: {exc}") from exc
        return _reduce(completion, raw.headers, raw.request_id, time.perf_counter() - started)

    async def _create(self, **kwargs: Any) -> Any:
        if isinstance(self._client, openai.AsyncOpenAI):
            return await self._client.chat.completions.with_raw_response.create(**kwargs)
        create = functools.partial(self._client.chat.completions.with_raw_response.create, **kwargs)
        # A thread cannot be interrupted: on cancellation the caller moves on and the
        # thread's request finishes (or times out) on its own.
        return await anyio.to_thread.run_sync(create, abandon_on_cancel=True, limiter=self._threads)


def _reduce(
    completion: Any, headers: Mapping[str, str], request_id: str | None, elapsed: float
) -> Completion:
    choices = getattr(completion, "choices", None)
    if not choices or choices[0].message is None or choices[0].message.content is None:
        raise InvalidResponseError("the response holds no answer text", request_id=request_id)
    usage = completion.usage
    return Completion(
        text=choices[0].message.content,
        finish_reason=choices[0].finish_reason,
        usage=Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(),
        request_id=request_id,
        headers=headers,
        elapsed=elapsed,
    )


def translate_error(exc: openai.OpenAIError) -> APIError:
    """Map an openai exception to splitter's tree (the caller chains it with ``from``)."""
    if isinstance(exc, openai.APITimeoutError):
        return APITimeoutError(f"request timed out: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return APIConnectionError(f"connection failed: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc)
    return APIError(f"{type(exc).__name__}: {exc}")


def _status_error(exc: openai.APIStatusError) -> APIStatusError:
    status, code = exc.status_code, exc.code if isinstance(exc.code, str) else None
    kwargs: dict[str, Any] = {
        "status_code": status,
        "request_id": exc.request_id,
        "code": code,
        "type": exc.type if isinstance(exc.type, str) else None,
        "retry_after": parse_retry_after(exc.response.headers),
    }
    message = f"{status} from the service: {exc.message}"
    if status == 429:
        is_quota = code == "insufficient_quota" or exc.type == "insufficient_quota"
        return (QuotaExceededError if is_quota else RateLimitError)(message, **kwargs)
    if status >= 500:
        return ServerError(message, **kwargs)
    return APIStatusError(message, **kwargs)
