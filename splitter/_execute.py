"""Running requests: concurrency slots, the retry loop, timeouts, the deadline, cancellation.

Each question's answer is written into the slot of its own index, so responses that finish
out of order, retries and failures can never move an answer to another question. Anything
not answered when the deadline passes is marked with ``DeadlineExceededError``: no
question is dropped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from tenacity import RetryCallState

from ._exceptions import APITimeoutError, DeadlineExceededError, RateLimitError, SplitterError
from ._openai import Completion, OpenAIBackend
from ._policy import Policy
from ._questions import Answer, BatchResult, Question, RunStats
from ._retry import retrying

__all__ = ["Executor", "RequestSpec"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """Everything one chat request for one question is sent with."""

    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any]


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0

    def on_retry(self, _: RetryCallState) -> None:
        self.retries += 1


class Executor:
    """Runs one request per question under a policy and collects answers in input order."""

    def __init__(self, backend: OpenAIBackend, policy: Policy) -> None:
        self._backend = backend
        self._policy = policy

    async def run(self, questions: Sequence[Question], specs: Sequence[RequestSpec]) -> BatchResult:
        started = time.perf_counter()
        slots: list[Answer | None] = [None] * len(questions)
        limiter = anyio.CapacityLimiter(self._policy.limits.max_concurrency)
        counters = _Counters()
        deadline = self._policy.deadline if self._policy.deadline is not None else math.inf
        with anyio.move_on_after(deadline):
            async with anyio.create_task_group() as tg:
                for index, (question, spec) in enumerate(zip(questions, specs, strict=True)):
                    tg.start_soon(self._answer, index, question, spec, slots, limiter, counters)
        answers = tuple(
            answer or Answer(i, questions[i], None, error=_deadline_error(self._policy))
            for i, answer in enumerate(slots)
        )
        stats = RunStats(
            wall_time=time.perf_counter() - started,
            requests=counters.requests,
            retries=counters.retries,
            rate_limited=counters.rate_limited,
            failed=sum(not a.ok for a in answers),
        )
        return BatchResult(answers, stats)

    async def _answer(
        self,
        index: int,
        question: Question,
        spec: RequestSpec,
        slots: list[Answer | None],
        limiter: anyio.CapacityLimiter,
        counters: _Counters,
    ) -> None:
        attempts = 0
        try:
            async for attempt in retrying(self._policy.retry, before_sleep=counters.on_retry):
                with attempt:
                    attempts += 1
                    completion = await self._attempt(spec, limiter, counters)
        except SplitterError as exc:
            slots[index] = Answer(index, question, None, error=exc, attempts=attempts)
            return
        slots[index] = Answer(
            index,
            question,
            completion.text,
            usage=completion.usage,
            attempts=attempts,
            request_id=completion.request_id,
            finish_reason=completion.finish_reason,
        )

    async def _attempt(
        self, spec: RequestSpec, limiter: anyio.CapacityLimiter, counters: _Counters
    ) -> Completion:
        timeout = self._policy.timeout if self._policy.timeout is not None else math.inf
        # The slot is held only while a request is out, never across a backoff sleep.
        async with limiter:
            counters.requests += 1
            try:
                with anyio.fail_after(timeout):
                    return await self._backend.chat(
                        model=spec.model, messages=spec.messages, **spec.params
                    )
            except TimeoutError as exc:
                raise APITimeoutError(f"no answer within the {timeout:g}s timeout") from exc
            except RateLimitError:
                counters.rate_limited += 1
                raise


def _deadline_error(policy: Policy) -> DeadlineExceededError:
    return DeadlineExceededError(f"not answered within the batch deadline of {policy.deadline:g}s")
