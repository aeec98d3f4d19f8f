"""Planning pauses the garbage collector: no collection runs while a wave is planned, and
the collector is left as it was found."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from splitter import Policy
from splitter._budget import BudgetSnapshot
from splitter._cost_model import ServiceEstimate
from splitter._gc_pause import gc_paused
from splitter._planner import PlanItem, plan_wave

GPU = ServiceEstimate(rtt=0.06, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        yield started
    finally:
        gc.callbacks.remove(note)


def test_no_collection_runs_while_a_wave_is_planned(collections: list[int]) -> None:
    """5,000 questions (four candidates, tens of thousands of groups and tuples): no
    collection starts while they are planned, only the one young collection put off till
    the collector is on again, as ``plan_wave`` returns (unpaused: about 40, older
    generations among them)."""
    wave = [PlanItem(i, 20 + i % 50, 20 + (i * 37) % 400) for i in range(5000)]
    gc.collect()
    collections.clear()
    plan = plan_wave(wave, estimate=GPU, budget=BudgetSnapshot(), concurrency=64, policy=Policy())
    assert (len(plan.candidates), collections) == (4, [0])
    assert gc.isenabled()


@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "disabled"])
def test_the_collector_is_left_as_found(enabled: bool) -> None:
    """Paused, nested, and after an error inside: the collector is as the caller left it."""
    (gc.enable if enabled else gc.disable)()
    try:
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError), gc_paused():
            raise KeyError("inside")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
