"""The single retry layer: which failures are worth another attempt, and how long to wait.

:func:`call_with_retries` is the loop; :func:`next_wait` decides, with tenacity's
composable rules built once per policy (stop after ``max_attempts`` or when told to wait
longer than ``max_retry_after``; retry what :func:`is_retryable` accepts). A service-sent
retry-after is obeyed exactly (no request goes out before it expires); otherwise the wait
is jittered exponential backoff with a cap.

The loop is a plain ``while``, not tenacity's ``AsyncRetrying`` (used before issue #21):
that builds a retrying object, a call state and a future per request that refer to each
other, so every request of a batch left a reference cycle (holding whatever its closures
held, the batch's answers included) for the garbage collector's full collections to find.
Here a call state is made only for a failed attempt, for the rules to read, and dropped.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.retry import retry_base
from tenacity.stop import stop_base

from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    InvalidResponseError,
    QuotaExceededError,
)
from ._policy import RetryPolicy

__all__ = ["Retry", "call_with_retries", "fails_every_request", "is_retryable", "next_wait"]

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
    """The told retry-after, else jittered exponential backoff capped at ``max_wait``."""

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


@functools.lru_cache(maxsize=64)
def _rules(policy: RetryPolicy) -> tuple[stop_base, _Wait, retry_base]:
    """``policy``'s stop, wait and retry rules: stateless, so built once per policy."""
    stop = stop_after_attempt(policy.max_attempts) | _StopIfToldToWaitTooLong(
        policy.max_retry_after
    )
    return stop, _Wait(policy), retry_if_exception(is_retryable)


def next_wait(policy: RetryPolicy, attempt: int, exc: BaseException) -> float | None:
    """Seconds to wait before the attempt after ``attempt`` (counted from 1), which failed
    with ``exc``; None to give up: ``exc`` is not worth another attempt, the attempts are
    spent, or the service asks for a wait over ``max_retry_after``."""
    stop, wait, retry = _rules(policy)
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # no retrying object
    state.attempt_number = attempt
    state.set_exception((type(exc), exc, exc.__traceback__))
    if not retry(state) or stop(state):
        return None
    return wait(state)


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry about to wait: the ``attempt`` that failed (from 1), its ``error`` and the
    ``wait`` in seconds before the next."""

    attempt: int
    error: BaseException
    wait: float


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    before_sleep: Callable[[Retry], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> T:
    """``await call()`` until it returns; a failure ``policy`` retries is followed by
    ``before_sleep`` and the wait, any other (or the last) is raised as it is."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except BaseException as exc:
            wait = next_wait(policy, attempt, exc)
            if wait is None:
                raise
            if before_sleep is not None:
                before_sleep(Retry(attempt, exc, wait))
        await sleep(wait)
