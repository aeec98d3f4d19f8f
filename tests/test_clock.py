"""The one clock: splitter, the event loop and the simulator agree on one (virtual) timeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from clock_support import needs_one_clock

from splitter import Answer, Limits, Policy, Splitter, _clock
from splitter.sim import SimLimits, SimService
from splitter.testing import virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every test here runs on virtual time, on both backends."""
    with virtual_time(request.param) as backend:
        yield backend


def test_now_reads_the_injected_source() -> None:
    """Inside use_clock, now() is the source; outside, the real clock again, never behind
    what the block read."""
    ahead = _clock.now() + 1000
    with _clock.use_clock(lambda: ahead):
        assert _clock.now() == ahead
    assert _clock.now() >= ahead
    with _clock.use_clock(lambda: 42.0):  # behind: the real clock stays where it is
        assert _clock.now() == 42.0
    assert _clock.now() - ahead < 1.0


@needs_one_clock
async def test_a_minute_of_rpm_a_deadline_and_a_window_take_no_real_time() -> None:
    """A 60 s RPM window, a 30 s deadline and a 10 s aggregation window pass exactly, in
    virtual time, while far less real time goes by."""
    real = time.perf_counter()
    began = _clock.now()

    # RPM: 7 requests at rpm=6 (burst 1/6: one at once, then about one per 10 s): the last
    # goes out a minute or more after the first, the budget spacing them, none refused.
    service = SimService("gpt-4o-mini", limits=SimLimits(rpm=6), default_answer_tokens=5)
    async with service.async_client(max_retries=0) as client:
        splitter = Splitter(
            client, model="sim", policy=Policy(strategy="fanout", limits=Limits(rpm=6))
        )
        result = await splitter.aask_many([f"Question {i}? [len=5]" for i in range(7)])
    assert result.ok
    arrivals = sorted(r.arrived for r in service.log)
    assert [r.status for r in service.log] == [200] * 7
    assert 60 <= arrivals[-1] - arrivals[0] <= 70

    # Deadline: an answer that needs 60 s of decoding is cut off at exactly 30 s.
    service = SimService("gpt-4o-mini")
    async with service.async_client(max_retries=0) as client:
        splitter = Splitter(client, model="sim", policy=Policy(deadline=30))
        start = anyio.current_time()
        result = await splitter.aask_many(["One long answer, please. [len=5000]"])
        assert anyio.current_time() - start == pytest.approx(30, abs=1e-6)
    assert not result.ok

    # Aggregation: a call 4 s after the first joins its 10 s window: both are sent at 10 s.
    service = SimService("gpt-4o-mini", default_answer_tokens=5)
    async with service.async_client(max_retries=0) as client:
        policy = Policy(aggregate_window_ms=10_000, limits=Limits(slow_start=False))
        splitter = Splitter(client, model="sim", policy=policy)
        start = anyio.current_time()

        async def ask(question: str, after: float) -> None:
            await anyio.sleep(after)
            answers.append(await splitter.aask_one(question, isolation_key="user-1"))

        answers: list[Answer] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "First question? [len=5]", 0)
            tg.start_soon(ask, "Second question? [len=5]", 4)
    assert [a.ok for a in answers] == [True, True]
    assert [r.arrived - start for r in service.log] == pytest.approx([10, 10], abs=1e-6)

    virtual = _clock.now() - began
    assert virtual > 100
    assert time.perf_counter() - real < virtual / 10
