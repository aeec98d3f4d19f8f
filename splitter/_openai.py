"""Talking to the user's openai client: one chat completion, its headers, and our errors.

This is the one place where openai's exceptions become splitter's. The client is used
with ``max_retries=0``: retries live in splitter's own retry layer, or the two multiply.
A sync ``OpenAI`` client is driven from worker threads so the async core can run it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.from_thread
import anyio.to_thread
import openai

from . import _clock
from ._compat import http_module
from ._engine_readings import EngineReadings, EngineTimings, slots_of, timings_of
from ._estimate import count_tokens
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
from ._responses_api import ResponsesCollected, reply_of, request_of
from ._sse import event_of

__all__ = ["Completion", "OpenAIBackend", "translate_error"]

AnyOpenAI = openai.OpenAI | openai.AsyncOpenAI
Api = Literal["chat", "responses"]
_TRANSPORT_ERROR: type[Exception] = http_module().TransportError
_CONNECT_TIMEOUT: type[Exception] = http_module().ConnectTimeout


@dataclass(frozen=True, slots=True)
class Completion:
    """One successful chat completion, reduced to what splitter uses."""

    text: str
    finish_reason: str | None
    usage: Usage
    request_id: str | None
    headers: Mapping[str, str]
    elapsed: float
    # Streamed: seconds from sending to the response's headers, which came before the body
    # (a service's processing time in them is its time to the first byte, not the whole).
    headers_after: float | None = None


class OpenAIBackend:
    """Sends chat completions through the user's client (sync or async); with
    ``api="responses"`` each is sent to the Responses API and read back as one. What an
    engine tells about its work (llama-server's ``timings``) goes to ``readings``; the first
    time it does, the server's ``GET /props`` is read too (its ``total_slots``)."""

    def __init__(
        self,
        client: AnyOpenAI,
        *,
        max_threads: int = 64,
        api: Api = "chat",
        readings: EngineReadings | None = None,
    ) -> None:
        self._client = client.with_options(max_retries=0)
        self._is_async = isinstance(self._client, openai.AsyncOpenAI)
        _share_platform(client, self._client)
        self._threads = anyio.CapacityLimiter(max_threads)
        self._api = api
        self._readings = readings

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    async def chat(
        self, *, model: str, messages: list[dict[str, Any]], **params: Any
    ) -> Completion:
        """One chat completion; raises splitter's ``APIError`` family on failure."""
        started = _clock.now()
        responses = self._api == "responses"
        params = in_body(params)
        kwargs = request_of(model, messages, params) if responses else None
        try:
            if kwargs is not None:
                raw = await self._create(self._resource().with_raw_response.create, **kwargs)
            else:
                create: Callable[..., Any] = self._client.chat.completions.with_raw_response.create
                if self._is_async:  # no coroutine of its own in between (issue #21)
                    raw = await create(model=model, messages=messages, **params)
                else:
                    raw = await self._create(create, model=model, messages=messages, **params)
            completion = raw.parse()
        except openai.OpenAIError as exc:
            raise translate_error(exc) from exc
        except _TRANSPORT_ERROR as exc:  # a body read that openai did not wrap (openai 2.x)
            raise APIConnectionError(f"connection failed: {exc}") from exc
        elapsed = _clock.now() - started
        if _PLATFORM is None:
            _remember_platform(self._client)
        if kwargs is None:
            extra = getattr(completion, "model_extra", None) or {}
            timings = timings_of(extra.get("timings"))
            if timings is not None:  # llama-server's; no coroutine for the others
                await self._told(timings)
            return _reduce(completion, raw.headers, raw.request_id, elapsed)
        text, finish, usage = reply_of(completion, raw.request_id)
        return Completion(text, finish, usage, raw.request_id, raw.headers, elapsed)

    async def chat_stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        on_delta: Callable[[str], None],
        **params: Any,
    ) -> Completion:
        """One chat completion streamed: ``on_delta`` sees each piece of text as it arrives
        (from the calling event loop, also for a sync client), and the whole answer is
        returned at the end. A stream that ends without a finish reason is an
        ``InvalidResponseError``: the answer was cut off."""
        started = _clock.now()
        # Usage comes in a last chunk only when asked for; without it, the budget and the
        # service model would have to guess the tokens.
        kwargs: dict[str, Any]
        collected: _Collected | ResponsesCollected
        params = in_body(params)
        if self._api == "responses":
            kwargs = {**request_of(model, messages, params), "stream": True}
            collected, resource = ResponsesCollected(), self._resource()
        else:
            kwargs = {
                "stream_options": {"include_usage": True},
                **params,
                "model": model,
                "messages": messages,
                "stream": True,
            }
            collected, resource = _Collected(), self._client.chat.completions
        create = resource.with_streaming_response.create
        try:
            if isinstance(self._client, openai.AsyncOpenAI):
                # The raw lines, read to the end of the body: openai's own stream object
                # leaves an event generator unfinished at [DONE] (trio warns about it).
                async with create(**kwargs) as response:
                    headers, request_id = response.headers, response.request_id
                    headers_at = _clock.now()
                    async for line in response.iter_lines():
                        piece = collected.line(line)
                        if piece:
                            on_delta(piece)
            else:
                headers, request_id, headers_at = await anyio.to_thread.run_sync(
                    functools.partial(self._read_sync, create, kwargs, collected, on_delta),
                    abandon_on_cancel=True,
                    limiter=self._threads,
                )
        except openai.OpenAIError as exc:
            raise translate_error(exc) from exc
        except _TRANSPORT_ERROR as exc:
            raise APIConnectionError(f"connection failed: {exc}") from exc
        if collected.finish_reason is None:
            raise InvalidResponseError(
                "the stream ended before the answer did (no finish reason)", request_id=request_id
            )
        text = "".join(collected.text)
        elapsed = _clock.now() - started
        if isinstance(collected, _Collected):
            await self._told(collected.timings)
        return Completion(
            text=text,
            finish_reason=collected.finish_reason,
            usage=collected.usage or _estimated_usage(model, messages, text),
            request_id=request_id,
            headers=headers,
            elapsed=elapsed,
            headers_after=headers_at - started,
        )

    def _read_sync(
        self,
        create: Callable[..., Any],
        kwargs: dict[str, Any],
        collected: _Collected | ResponsesCollected,
        on_delta: Callable[[str], None],
    ) -> tuple[Mapping[str, str], str | None, float]:
        with create(**kwargs) as response:
            headers_at = _clock.now()
            for line in response.iter_lines():
                piece = collected.line(line)
                if piece:
                    anyio.from_thread.run_sync(on_delta, piece)
            return response.headers, response.request_id, headers_at

    async def _told(self, timings: EngineTimings | None) -> None:
        """A response's engine timings to the readings; the first time, ``GET /props``."""
        readings = self._readings
        if readings is None or timings is None:
            return
        readings.told(timings)
        if readings.props_asked:
            return
        readings.props_asked = True
        get = functools.partial(
            self._client.get,
            _props_url(self.base_url),
            cast_to=http_module().Response,
            options={"timeout": 5.0},
        )
        try:
            if isinstance(self._client, openai.AsyncOpenAI):
                response = await get()
            else:
                response = await anyio.to_thread.run_sync(
                    get, abandon_on_cancel=True, limiter=self._threads
                )
            slots = slots_of(response.json())
        except (openai.OpenAIError, _TRANSPORT_ERROR, ValueError):
            return  # not llama-server after all, or no /props: the slot count stays learned
        if slots is not None:
            readings.told_slots(slots)

    def _resource(self) -> Any:
        return self._client.responses

    async def _create(self, create: Callable[..., Any], **kwargs: Any) -> Any:
        if isinstance(self._client, openai.AsyncOpenAI):
            return await create(**kwargs)
        # A thread cannot be interrupted: on cancellation the caller moves on and the
        # thread's request finishes (or times out) on its own.
        call = functools.partial(create, **kwargs)
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=self._threads)


def _share_platform(client: AnyOpenAI, copy: AnyOpenAI) -> None:
    """Give ``copy`` (from ``with_options``) the platform ``client`` already read.

    openai reads the platform for its headers on a client's first request, in a worker
    thread, and a ``with_options`` copy starts without it: every Splitter's first burst of
    requests (256 at once in ``bench/overhead.py``) would each start a thread to read it
    again. The platform is the process's, so one read serves every copy."""
    global _PLATFORM
    known = getattr(client, "_platform", None) or _PLATFORM
    if known is None or getattr(copy, "_platform", known) is not None:
        return
    copy._platform = known
    _PLATFORM = known


_PLATFORM: Any = None  # the platform a client of this process has read, once one has


def _remember_platform(client: AnyOpenAI) -> None:
    global _PLATFORM
    _PLATFORM = getattr(client, "_platform", None)


def _props_url(base_url: str) -> str:
    """llama-server's ``/props``, beside (not under) its OpenAI-compatible ``/v1``."""
    root = base_url.rstrip("/")
    return f"{root.removesuffix('/v1')}/props"


def in_body(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with a ``prompt_cache_key`` moved into ``extra_body``: the same JSON body,
    from openai versions whose ``create`` has no such keyword too."""
    if "prompt_cache_key" not in params:
        return params
    rest = {k: v for k, v in params.items() if k != "prompt_cache_key"}
    extra = rest.get("extra_body")
    body = dict(extra) if isinstance(extra, Mapping) else {}
    body.setdefault("prompt_cache_key", params["prompt_cache_key"])
    return {**rest, "extra_body": body}


def _estimated_usage(model: str, messages: list[dict[str, Any]], text: str) -> Usage:
    """For servers that send no usage chunk: our own count, close enough to learn from."""
    prompt = sum(count_tokens(str(m.get("content", "")), model) for m in messages)
    return Usage(prompt, count_tokens(text, model))


class _Collected:
    """What a stream's server-sent events add up to."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.timings: EngineTimings | None = None  # llama-server's, in its last chunk

    def line(self, line: str) -> str:
        """Take one line of the event stream; return the new answer text in it, if any."""
        chunk = event_of(line)
        if chunk is None:
            return ""
        if chunk.get("error"):
            raise InvalidResponseError(
                f"the service reported an error mid-stream: {chunk['error']}"
            )
        if "timings" in chunk:
            self.timings = timings_of(chunk["timings"]) or self.timings
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt = _token_count(usage.get("prompt_tokens"))
            completion = _token_count(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details")
            cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
            # An unreadable count is no usage at all: the caller estimates it instead.
            if prompt is not None and completion is not None:
                self.usage = Usage(prompt, completion, min(cached or 0, prompt))
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(piece, str) and piece:
            self.text.append(piece)
            return piece
        return ""


def _token_count(value: object) -> int | None:
    """A usage field as a count: absent is 0; a negative, infinite or non-number value is
    unreadable (None)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) and value >= 0 else None


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
        usage=read_usage(usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details"),
        request_id=request_id,
        headers=headers,
        elapsed=elapsed,
    )


def read_usage(usage: Any, prompt: str, completion: str, details: str) -> Usage:
    """A response's usage object (chat's or the Responses API's names) as ``Usage``, its
    cached prompt tokens included where the service tells them."""
    if usage is None:
        return Usage()
    prompt_tokens = getattr(usage, prompt, 0) or 0
    cached = getattr(getattr(usage, details, None), "cached_tokens", None) or 0
    return Usage(prompt_tokens, getattr(usage, completion, 0) or 0, min(cached, prompt_tokens))


def rate_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of a response (all the budget reads)."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}


def translate_error(exc: openai.OpenAIError) -> APIError:
    """Map an openai exception to splitter's tree (the caller chains it with ``from``)."""
    if isinstance(exc, openai.APITimeoutError):
        if isinstance(exc.__cause__, _CONNECT_TIMEOUT):
            # No connection was ever made: a wrong or unroutable address, not a slow server.
            return APIConnectionError(
                f"connection failed: no connection within the connect timeout ({_reason(exc)})"
            )
        return APITimeoutError(f"request timed out: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return APIConnectionError(f"connection failed: {_reason(exc)}")
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc)
    return APIError(f"{type(exc).__name__}: {exc}")


def _reason(exc: openai.OpenAIError) -> str:
    """What the HTTP library said (openai's own text is only "Connection error.")."""
    cause = exc.__cause__
    said = str(cause) if cause is not None else ""
    return said or (f"{type(cause).__name__}" if cause is not None else str(exc))


def _status_error(exc: openai.APIStatusError) -> APIStatusError:
    status, code = exc.status_code, exc.code if isinstance(exc.code, str) else None
    kwargs: dict[str, Any] = {
        "status_code": status,
        "request_id": exc.request_id,
        "code": code,
        "type": exc.type if isinstance(exc.type, str) else None,
        "param": exc.param if isinstance(exc.param, str) else None,
        "retry_after": parse_retry_after(exc.response.headers),
        "rate_headers": rate_headers(exc.response.headers),
    }
    message = f"{status} from the service: {exc.message}"
    if status == 429:
        is_quota = code == "insufficient_quota" or exc.type == "insufficient_quota"
        return (QuotaExceededError if is_quota else RateLimitError)(message, **kwargs)
    if status >= 500:
        return ServerError(message, **kwargs)
    return APIStatusError(message, **kwargs)
