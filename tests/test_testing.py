"""splitter.testing: the simulated service on virtual time, for users' own tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

from splitter import Limits, Policy, Splitter, _clock
from splitter.sim import PROFILES, SimService
from splitter.testing import assert_answers_match, open_sim_client, run_virtual, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every async test here runs on virtual time, on both backends (as docs/testing.md
    tells users to write it)."""
    with virtual_time(request.param) as backend:
        yield backend


async def test_an_hour_of_sleeps_passes_at_once_and_exactly() -> None:
    """Sleeps and timeouts move the loop's clock and splitter's by exactly what they ask."""
    real = time.perf_counter()
    loop_start, clock_start = anyio.current_time(), _clock.now()
    await anyio.sleep(3600)
    with anyio.move_on_after(30):
        await anyio.sleep(100)
    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(anyio.sleep, i * 0.5)
    assert anyio.current_time() - loop_start == pytest.approx(3654.5, abs=1e-6)
    assert _clock.now() - clock_start == pytest.approx(3654.5, abs=1e-6)
    assert time.perf_counter() - real < 60


async def test_ask_many_takes_exactly_the_profiles_latency() -> None:
    """Five answers fanned out take rtt + prefill + 40 decode steps at a batch of five, on
    the simulator's clock and the caller's alike."""
    profile = PROFILES["gpt-4o-mini"]
    service = SimService(profile, time_scale=1)
    async with open_sim_client(service, max_retries=0) as client:
        splitter = Splitter(
            client, model="sim", policy=Policy(strategy="fanout", limits=Limits(slow_start=False))
        )
        start = anyio.current_time()
        result = await splitter.aask_many([f"Question {i}: about {i}? [len=40]" for i in range(5)])
        wall = anyio.current_time() - start
    assert_answers_match(result)
    prompt = service.log[0].prompt_tokens
    expected = profile.rtt + profile.prefill_seconds(prompt) + 40 * profile.step_seconds(5)
    assert {r.prompt_tokens for r in service.log} == {prompt}
    assert [r.finished - r.arrived for r in service.log] == pytest.approx([expected] * 5, abs=1e-6)
    assert wall == pytest.approx(expected, abs=1e-6)


async def test_threads_take_no_virtual_time() -> None:
    """Work handed to a thread finishes before a sleeper's timer, however slow it is."""
    order: list[str] = []

    async def sleeper() -> None:
        await anyio.sleep(0.001)
        order.append("sleeper")

    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await anyio.to_thread.run_sync(time.sleep, 0.05)
        order.append("thread")
        assert anyio.current_time() == start
    assert order == ["thread", "sleeper"]


async def test_a_service_made_before_the_run_carries_on() -> None:
    """The virtual clock starts where the real one stood, so a service made earlier (its
    origin read from the real clock) answers with the profile's latency too."""
    service = _SERVICE_MADE_AT_IMPORT
    async with open_sim_client(service, max_retries=0) as client:
        start = anyio.current_time()
        await client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "Hi? [len=10]"}]
        )
        wall = anyio.current_time() - start
    profile = service.profile
    tokens = service.log[-1].prompt_tokens
    expected = profile.rtt + profile.prefill_seconds(tokens) + 10 * profile.step_seconds(1)
    assert wall == pytest.approx(expected, abs=1e-6)


_SERVICE_MADE_AT_IMPORT = SimService("llama-cpp-cpu")


async def test_the_loopback_server_is_refused_on_virtual_time() -> None:
    """The real-socket door cannot run on virtual time: it says so instead of timing out."""
    with pytest.raises(RuntimeError, match="real time"):
        async with open_sim_client(door="server"):
            pass


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_virtual_returns_the_result(backend: str) -> None:
    """run_virtual runs a coroutine function on virtual time and hands back its result."""

    async def nap(seconds: float) -> float:
        start = anyio.current_time()
        await anyio.sleep(seconds)
        return anyio.current_time() - start

    elapsed = run_virtual(nap, 86_400.0, backend=backend)  # type: ignore[arg-type]
    assert elapsed == pytest.approx(86_400.0, abs=1e-6)


def test_an_unknown_backend_is_refused() -> None:
    """Only asyncio and trio have virtual time."""
    with pytest.raises(ValueError, match="asyncio"), virtual_time("curio"):  # type: ignore[arg-type]
        pass


def test_the_clock_never_goes_back_after_a_block() -> None:
    """Leaving a block that ran an hour ahead, splitter's clock goes on from there at the
    real clock's pace."""
    before = _clock.now()
    run_virtual(anyio.sleep, 3600.0)
    real_before, after, real_after = time.monotonic(), _clock.now(), time.monotonic()
    assert after - before >= 3600
    time.sleep(0.01)
    # Each reading of splitter's clock is bracketed by two of the real clock, so however
    # long the process is preempted between them, its pace is the real one's.
    real_start, later, real_end = time.monotonic(), _clock.now(), time.monotonic()
    assert real_start - real_after <= later - after <= real_end - real_before


def test_virtual_time_works_however_far_the_clock_has_run() -> None:
    """At a clock reading of 5e7 s (1 ns is below its last place) timers still fire and the
    simulator still reaches its events, on both backends. In a child process: the reading
    stays there for the rest of the process."""
    code = """
from splitter import Policy, Splitter, _clock
from splitter.sim import SimService
from splitter.testing import run_virtual
async def main():
    service = SimService("gpt-4o-mini", time_scale=0.01)
    async with service.async_client(max_retries=0) as client:
        splitter = Splitter(client, model="m", policy=Policy(strategy="merge"))
        return (await splitter.aask_many(["One?", "Two?", "Three?"])).ok
with _clock.use_clock(lambda: 5e7):
    pass
print(run_virtual(main, backend="asyncio"), run_virtual(main, backend="trio"))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["True", "True"], done.stderr
