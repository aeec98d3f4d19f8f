"""splitter.otel: a batch span with the plan and one child span per request, from the real
simulator over loopback HTTP, read back with the SDK's in-memory exporter."""

from __future__ import annotations

import os

import pytest

from splitter import MergePolicy, Policy, RetryPolicy, Splitter
from splitter.sim import Faults, SimService
from splitter.testing import open_sim_client

if os.environ.get("CI") is None:  # .ci/run installs the extra; elsewhere it is optional
    pytest.importorskip("opentelemetry.sdk", reason="needs pip install 'splitter-llm[otel]'")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from splitter.otel import SpanHook

pytestmark = pytest.mark.anyio

QUESTIONS = [f"Question number {i}: what is {i} + {i}?" for i in range(6)]


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.mark.parametrize("strategy", ["fanout", "merge"])
async def test_one_batch_span_and_one_child_span_per_request(strategy: str) -> None:
    provider, exporter = _provider()
    policy = Policy(strategy=strategy, merge=MergePolicy(max_per_request=4))  # type: ignore[arg-type]
    async with open_sim_client(SimService("instant")) as client:
        result = await Splitter(client, policy=policy).aask_many(
            QUESTIONS, model="gpt-4o-mini", on_event=SpanHook(provider)
        )
    spans = exporter.get_finished_spans()
    (batch,) = [s for s in spans if s.name == "splitter.batch"]
    requests = [s for s in spans if s is not batch]
    assert len(requests) == result.stats.requests
    assert batch.attributes is not None
    assert batch.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert batch.attributes["splitter.batch.questions"] == len(QUESTIONS)
    assert batch.attributes["splitter.plan.requests"] == len(requests)
    assert batch.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens
    covered: list[int] = []
    for span in requests:
        attrs = span.attributes
        assert attrs is not None
        assert span.name == "chat gpt-4o-mini"
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == batch.context.span_id
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "gpt-4o-mini"
        assert attrs["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
        assert attrs["splitter.request.retries"] == 0
        assert span.status.status_code is StatusCode.OK
        covered.extend(attrs["splitter.request.indexes"])  # type: ignore[arg-type]
    assert sorted(covered) == list(range(len(QUESTIONS)))
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in requests) == (  # type: ignore[index,misc]
        result.usage.completion_tokens
    )
    if strategy == "merge":
        assert len(requests) < len(QUESTIONS)
    else:
        assert len(requests) == len(QUESTIONS)
    # No prompt text anywhere.
    for span in spans:
        for value in (span.attributes or {}).values():
            assert "Question number" not in str(value)


async def test_retries_stay_in_the_requests_span_and_failures_are_errors() -> None:
    provider, exporter = _provider()
    fast = RetryPolicy(max_attempts=6, initial_wait=0.005, max_wait=0.02, jitter=0.005)
    service = SimService("instant", faults=Faults(rate_500=0.4), seed=3)
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=Policy(strategy="fanout", retry=fast)).aask_many(
            QUESTIONS * 3, model="m", on_event=SpanHook(provider)
        )
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.name != "splitter.batch"]
    assert len(requests) == len(QUESTIONS) * 3  # one span per request, retries included
    retries = sum(s.attributes["splitter.request.retries"] for s in requests)  # type: ignore[index,misc]
    assert retries == result.stats.retries
    assert retries > 0
    failed = [s for s in requests if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == sum(not a.ok for a in result)
    for span in failed:
        assert span.attributes is not None
        assert span.attributes["error.type"]
