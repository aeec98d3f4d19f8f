"""The wrapper's own requests: what ``wrap(client)`` does not split still passes the gate.

Every request the wrapped client sends as it is (a single question, a conversation, tools,
embeddings, responses, a model listing) goes through the same two things as splitter's own
requests: it first takes its place in the rate-limit budget of its (base_url, model) — so
the application's other calls and its split prompts share one budget — and failures are
retried by splitter's one retry layer instead of openai's (``insufficient_quota`` is not
retried, a service's retry-after is obeyed exactly). The caller still gets openai's own
result types and, when it finally fails, openai's own exception.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import openai

from .._budget import Kind
from .._budget import _wire as wire
from .._endpoint import Endpoint
from .._estimate import count_tokens
from .._exceptions import APIStatusError, QuotaExceededError, RateLimitError, SplitterError
from .._openai import translate_error
from .._policy import RetryPolicy
from .._retry import call_with_retries

__all__ = ["remember_headers", "send"]

T = TypeVar("T")
_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# The response headers of the attempt running in this context (set from openai's response
# processing, read right after it returns, in the same task).
_headers: ContextVar[Mapping[str, str] | None] = ContextVar("splitter_headers", default=None)


def remember_headers(headers: Mapping[str, str]) -> None:
    _headers.set(headers)


async def send(
    call: Callable[[Any], Awaitable[T]],
    options: Any,
    *,
    endpoint: Callable[[str], Endpoint],
    retry: RetryPolicy,
) -> T:
    """``call(options)`` under the budget of the body's model and splitter's retry policy.

    ``options`` is openai's ``FinalRequestOptions``; each attempt gets a copy with openai's
    own retries off. ``endpoint(model)`` finds the budget; requests without a model in their
    body (a model listing, a file download) are retried but not budgeted; uploads are left
    to openai entirely.
    """
    if getattr(options, "files", None):
        # An upload's file objects may be read only once: a second attempt from here could
        # send them empty. openai rewinds them between its own retries, so it keeps those.
        return await call(options)
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    model = body.get("model")
    found = endpoint(model) if isinstance(model, str) and model else None
    reserve = _reserve(body, str(options.url), found, str(model)) if found is not None else 0
    try:
        return await call_with_retries(
            functools.partial(_attempt, call, options, found, reserve), retry
        )
    except SplitterError as exc:
        if not isinstance(exc.__cause__, openai.OpenAIError):
            raise
        failure = exc.__cause__
    # The caller wrote openai code: it gets openai's exception, as it would have (raised
    # out here so that it is not chained to splitter's translation of it).
    raise failure


async def _attempt(
    call: Callable[[Any], Awaitable[T]], options: Any, endpoint: Endpoint | None, reserve: int
) -> T:
    budget = endpoint.budget if endpoint is not None and endpoint.limits.enforce else None
    slots = endpoint.concurrency if endpoint is not None else None
    if slots is not None:
        await slots.acquire()
    try:
        reservation = await budget.acquire(reserve) if budget is not None else None
        once = options.model_copy()
        once.max_retries = 0
        _headers.set(None)
        try:
            with wire.departing(budget, reservation):
                result = await call(once)
        except openai.OpenAIError as exc:
            error = translate_error(exc)
            if isinstance(error, APIStatusError) and budget is not None and reservation:
                limited: Kind | None = None
                if isinstance(error, RateLimitError) and not isinstance(error, QuotaExceededError):
                    limited = "tokens" if error.type == "tokens" else "requests"
                await budget.settle(
                    reservation, error.rate_headers, limited=limited, retry_after=error.retry_after
                )
            raise error from exc
        except BaseException:
            if budget is not None and reservation is not None:
                with anyio.CancelScope(shield=True):
                    await budget.settle(reservation, {}, lost=True)
            raise
    finally:
        if slots is not None:
            slots.release()
    if budget is not None and reservation is not None:
        usage = getattr(result, "usage", None)
        used = getattr(usage, "total_tokens", None)
        # A stream's usage is not known yet: its whole reservation stays spent.
        headers = _headers.get() or {}
        await budget.settle(
            reservation, headers, used_tokens=used if isinstance(used, int) else None
        )
    return result


def _reserve(body: Mapping[str, Any], url: str, endpoint: Endpoint, model: str) -> int:
    """Tokens the request books, as for splitter's own: input + the output cap (or, without
    one, the answer length learned for this endpoint; nothing for embeddings)."""
    text = _text(body.get("messages", body.get("input", "")))
    cap = next((body[k] for k in _CAPS if isinstance(body.get(k), int)), None)
    if cap is None:
        cap = 0 if url.rstrip("/").endswith("embeddings") else endpoint.lengths.estimate(text)
    return count_tokens(text, model) + int(cap)


def _text(value: object) -> str:
    """The text in a request body's messages or input, however nested."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return " ".join(_text(v) for k, v in value.items() if k in ("content", "text", "input"))
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return ""
