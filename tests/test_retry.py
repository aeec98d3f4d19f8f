"""The retry layer's decisions: what is retried, and how long it waits."""

from __future__ import annotations

import pytest

from splitter import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    InvalidResponseError,
    QuotaExceededError,
    RateLimitError,
    RetryPolicy,
    ServerError,
)
from splitter._retry import call_with_retries, is_retryable

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("exc", "retry"),
    [
        pytest.param(RateLimitError("x", status_code=429), True, id="429"),
        pytest.param(QuotaExceededError("x", status_code=429), False, id="insufficient_quota"),
        pytest.param(ServerError("x", status_code=503), True, id="503"),
        pytest.param(APIStatusError("x", status_code=408), True, id="408"),
        pytest.param(APIStatusError("x", status_code=409), True, id="409"),
        pytest.param(APIStatusError("x", status_code=400), False, id="400"),
        pytest.param(APIStatusError("x", status_code=401), False, id="401"),
        pytest.param(APIStatusError("x", status_code=403), False, id="403"),
        pytest.param(APIStatusError("x", status_code=404), False, id="404"),
        pytest.param(APIStatusError("x", status_code=422), False, id="422"),
        pytest.param(APIConnectionError("x"), True, id="connection"),
        pytest.param(APITimeoutError("x"), True, id="timeout"),
        pytest.param(InvalidResponseError("x"), True, id="empty-body"),
        pytest.param(ValueError("x"), False, id="foreign"),
    ],
)
def test_is_retryable(exc: BaseException, retry: bool) -> None:
    """Transient failures are retried; doomed ones (4xx, empty quota) are not."""
    assert is_retryable(exc) is retry


async def _run(errors: list[BaseException], policy: RetryPolicy) -> tuple[int, list[float]]:
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        if errors:
            raise errors.pop(0)

    await call_with_retries(call, policy, sleep=fake_sleep)
    return calls, slept


async def test_retry_after_is_obeyed_exactly() -> None:
    """A service-sent retry-after is the wait, not the backoff's guess."""
    errors: list[BaseException] = [RateLimitError("x", status_code=429, retry_after=7.5)]
    calls, slept = await _run(errors, RetryPolicy(jitter=0))
    assert (calls, slept) == (2, [7.5])


async def test_backoff_doubles_up_to_the_cap() -> None:
    """Without retry-after the wait is exponential and capped."""
    errors: list[BaseException] = [ServerError("x", status_code=500) for _ in range(4)]
    policy = RetryPolicy(max_attempts=5, initial_wait=1, max_wait=3, jitter=0)
    calls, slept = await _run(errors, policy)
    assert (calls, slept) == (5, [1, 2, 3, 3])


async def test_gives_up_after_max_attempts() -> None:
    """The last error is raised once the attempts are spent."""
    errors: list[BaseException] = [ServerError(str(i), status_code=500) for i in range(3)]
    with pytest.raises(ServerError, match="2"):
        await _run(errors, RetryPolicy(max_attempts=3, initial_wait=0, jitter=0))


async def test_too_long_retry_after_fails_instead_of_waiting() -> None:
    """A retry-after over max_retry_after ends the retries at once."""
    errors: list[BaseException] = [RateLimitError("x", status_code=429, retry_after=600)]
    with pytest.raises(RateLimitError):
        await _run(errors, RetryPolicy(max_retry_after=60))


async def test_quota_error_is_not_retried() -> None:
    """insufficient_quota fails on the first attempt: retrying only sends doomed requests."""
    errors: list[BaseException] = [QuotaExceededError("x", status_code=429, retry_after=1)]
    with pytest.raises(QuotaExceededError):
        await _run(errors, RetryPolicy())
    assert errors == []
