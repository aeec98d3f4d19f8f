"""OpenTelemetry spans for splitter's batches and requests (``pip install 'splitter-llm[otel]'``).

:class:`SpanHook` is an ``on_event`` hook that turns splitter's events into spans following
the OpenTelemetry GenAI semantic conventions::

    from splitter.otel import SpanHook

    result = await splitter.aask_many(questions, model="gpt-4o-mini", on_event=SpanHook())

Each batch is one span (``splitter.batch``, a child of whatever span is current when the
batch starts) carrying the plan: strategy, requests, questions per request, the predicted
latency, one ``splitter.plan`` span event per wave. Each logical request is a child span
(``chat {model}``, kind CLIENT) with ``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``, ``error.type`` and
``http.response.status_code`` when it failed, and ``splitter.request.retries`` (its retries
stay in the same span, as ``splitter.retry`` span events).

No prompt or answer text is ever recorded: splitter's events do not carry any (see
docs/events.md), so there is nothing to leak. Spans end with the batch at the latest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from . import __version__
from ._events import (
    BatchFinished,
    BatchPlanned,
    BatchStarted,
    Event,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
)

__all__ = ["SpanHook"]


@dataclass(slots=True)
class _Request:
    span: Span
    retries: int = 0
    failed_at: int | None = None  # time_ns of a failed attempt not (yet) followed by a retry


@dataclass(slots=True)
class _Batch:
    span: Span
    model: str
    requests: dict[int, _Request] = field(default_factory=dict)


class SpanHook:
    """An ``on_event`` hook emitting GenAI-convention spans (see the module docstring).

    ``tracer_provider`` defaults to the global one; ``provider_name`` is the
    ``gen_ai.provider.name`` (and, for older backends, ``gen_ai.system``) every span carries.
    One hook may serve concurrent batches: they are told apart by their batch number.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, provider_name: str = "openai"
    ) -> None:
        self._tracer = trace.get_tracer("splitter", __version__, tracer_provider)
        self._provider = provider_name
        self._batches: dict[int, _Batch] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, BatchStarted):
            self._start_batch(event)
            return
        batch = self._batches.get(event.batch)
        if batch is None:  # the hook was attached mid-batch
            return
        if isinstance(event, BatchPlanned):
            sizes = [len(group) for group in event.groups]
            plan: dict[str, AttributeValue] = {
                "splitter.plan.wave": event.wave,
                "splitter.plan.strategy": event.strategy,
                "splitter.plan.requests": len(sizes),
                "splitter.plan.questions_per_request": sizes,
                "splitter.plan.predicted_latency_s": event.predicted_latency,
            }
            batch.span.add_event("splitter.plan", plan)
            batch.span.set_attributes(plan)  # the latest wave's plan
        elif isinstance(event, RequestStarted):
            self._start_request(batch, event)
        elif isinstance(event, RequestFinished):
            self._finish_request(batch, event)
        elif isinstance(event, RetryScheduled):
            request = batch.requests.get(event.request)
            if request is not None:
                request.retries += 1
                request.failed_at = None
                request.span.set_attribute("splitter.request.retries", request.retries)
                request.span.add_event(
                    "splitter.retry",
                    {"attempt": event.attempt, "error.type": event.error, "wait_s": event.wait},
                )
        elif isinstance(event, RateLimitWait):
            target = batch.requests.get(event.request)
            span = target.span if target is not None else batch.span
            span.add_event(
                "splitter.rate_limit_wait", {"limit": event.limit, "seconds": event.seconds}
            )
        elif isinstance(event, BatchFinished):
            self._finish_batch(batch, event)

    def _common(self, model: str) -> dict[str, str]:
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.system": self._provider,
            "gen_ai.request.model": model,
        }

    def _start_batch(self, event: BatchStarted) -> None:
        span = self._tracer.start_span("splitter.batch", attributes=self._common(event.model))
        span.set_attribute("splitter.batch.questions", event.questions)
        self._batches[event.batch] = _Batch(span, event.model)

    def _start_request(self, batch: _Batch, event: RequestStarted) -> None:
        request = batch.requests.get(event.request)
        if request is None:
            span = self._tracer.start_span(
                f"chat {batch.model}",
                context=trace.set_span_in_context(batch.span),
                kind=SpanKind.CLIENT,
                attributes=self._common(batch.model),
            )
            span.set_attributes(
                {
                    "splitter.request.questions": len(event.indexes),
                    "splitter.request.indexes": list(event.indexes),
                    "splitter.request.retries": 0,
                }
            )
            batch.requests[event.request] = request = _Request(span)
        request.failed_at = None
        request.span.set_attribute("splitter.request.attempts", event.attempt)

    def _finish_request(self, batch: _Batch, event: RequestFinished) -> None:
        request = batch.requests.get(event.request)
        if request is None:
            return
        span = request.span
        if event.ok:
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": event.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": event.usage.completion_tokens,
                }
            )
            span.set_status(Status(StatusCode.OK))
            span.end()
            del batch.requests[event.request]
            return
        span.set_attribute("error.type", event.error or "error")
        if event.status_code is not None:
            span.set_attribute("http.response.status_code", event.status_code)
        request.failed_at = time.time_ns()  # ends here unless a retry follows

    def _finish_batch(self, batch: _Batch, event: BatchFinished) -> None:
        for request in batch.requests.values():  # failed for good (or cut off)
            request.span.set_status(Status(StatusCode.ERROR))
            request.span.end(end_time=request.failed_at)
        batch.span.set_attributes(
            {
                "splitter.batch.answered": event.answered,
                "splitter.batch.failed": event.failed,
                "splitter.batch.requests": event.requests,
                "splitter.batch.retries": event.retries,
                "splitter.batch.rate_limited": event.rate_limited,
                "gen_ai.usage.input_tokens": event.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": event.usage.completion_tokens,
            }
        )
        if event.failed:
            batch.span.set_status(Status(StatusCode.ERROR, f"{event.failed} questions failed"))
        batch.span.end()
        del self._batches[event.batch]
