"""The tokenizer is made off the event loop: parsing a vocabulary takes ~0.4 s (a fetch up
to 10 s on a machine without internet), and done in the first batch's plan on the loop it
stalled every other task of the process (an app's other requests too)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from splitter import Policy, Splitter, _estimate
from splitter.sim import SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def made_on() -> Iterator[list[str]]:
    """The threads ``encoder_for`` made an encoder on, from a cold cache."""
    threads: list[str] = []
    real = _estimate.encoder_for.__wrapped__

    def recording(model: str) -> Callable[[str], list[int]]:
        threads.append(threading.current_thread().name)
        return real(model)

    cached = _estimate.functools.lru_cache(maxsize=64)(recording)
    saved, loaded = _estimate.encoder_for, set(getattr(_estimate, "_loaded", ()))
    _estimate.encoder_for = cached
    _estimate._loaded = set()
    try:
        yield threads
    finally:
        _estimate.encoder_for, _estimate._loaded = saved, loaded


async def test_the_first_batch_makes_its_encoder_in_a_worker_thread(made_on: list[str]) -> None:
    loop_thread = threading.current_thread().name
    service = SimService("instant", default_answer_tokens=3)
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=Policy(strategy="fanout"))
        first = await splitter.aask_many(["What is 1 + 1?", "What is 2 + 2?"], model="m")
        second = await splitter.aask_many(["What is 3 + 3?"], model="m")
    assert first.ok
    assert second.ok
    assert len(made_on) == 1, made_on  # once per process and model
    assert made_on[0] != loop_thread
