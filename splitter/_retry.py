"""The single retry layer: which failures are worth another attempt, and how long to wait.

tenacity does the looping; this module decides. A service-sent retry-after is obeyed
exactly (no request goes out before it expires); otherwise the wait is jittered
exponential backoff with a cap.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
)
from tenacity.stop import stop_base

from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    InvalidResponseError,
    QuotaExceededError,
)
from ._policy import RetryPolicy

__all__ = ["fails_every_request", "is_retryable", "retrying"]

T = TypeVar("T")
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_EVERY_REQUEST_STATUS = frozenset({401, 403, 404})  # as the executor's batch-wide stop


def is_retryable(exc: BaseException) -> bool:
    """True for failures another attempt may fix; never a plain 4xx or an empty quota."""
    if isinstance(exc, QuotaExceededError):
        return False
    if isinstance(exc, APIStatusError):
        return exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    return isinstance(exc, APIConnectionError | InvalidResponseError)


def fails_every_request(error: BaseException | None, attempts: int) -> bool:
    """Whether an answer's ``error`` is one every request to its endpoint would meet, so
    that asking more questions there is pointless: a refused key (401, 403), an unknown
    model or path (404), an empty quota, or a connection never made that was not retried
    (``attempts`` at most 1: connection errors are retried once an endpoint has answered,
    so one that was not means the endpoint never answered)."""
    if isinstance(error, QuotaExceededError):
        return True
    if isinstance(error, APIStatusError):
        return error.status_code in _EVERY_REQUEST_STATUS
    connection = isinstance(error, APIConnectionError) and not isinstance(error, APITimeoutError)
    return connection and attempts <= 1


def _retry_after(state: RetryCallState) -> float | None:
    exc = state.outcome.exception() if state.outcome else None
    return exc.retry_after if isinstance(exc, APIStatusError) else None


class _Wait:
    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, state: RetryCallState) -> float:
        told = _retry_after(state)
        if told is not None:
            return told
        p = self._policy
        backoff = p.initial_wait * 2 ** (state.attempt_number - 1)
        return float(min(p.max_wait, backoff) + random.uniform(0, p.jitter))


class _StopIfToldToWaitTooLong(stop_base):
    def __init__(self, limit: float) -> None:
        self._limit = limit

    def __call__(self, state: RetryCallState) -> bool:
        told = _retry_after(state)
        return told is not None and told > self._limit


def retrying(
    policy: RetryPolicy,
    *,
    before_sleep: Callable[[RetryCallState], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> AsyncRetrying:
    """An ``async for attempt in retrying(...)`` loop built from ``policy``."""
    stop, wait, retry = _strategies(policy)
    return AsyncRetrying(
        stop=stop,
        wait=wait,
        retry=retry,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


@functools.lru_cache(maxsize=64)
def _strategies(policy: RetryPolicy) -> tuple[stop_base, _Wait, retry_if_exception]:
    """``policy``'s stop, wait and retry rules: stateless, so built once per policy rather
    than once per request (issue #21)."""
    stop = stop_after_attempt(policy.max_attempts) | _StopIfToldToWaitTooLong(
        policy.max_retry_after
    )
    return stop, _Wait(policy), retry_if_exception(is_retryable)
