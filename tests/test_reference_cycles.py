"""A batch leaves no reference cycles per request (issue #21): what a batch made is freed
by reference counting when it ends, not kept for the garbage collector's full collections
(whose cost grows with the whole heap), so the number of objects only the collector can
free does not grow with the batch."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from splitter import Limits, Policy, Splitter
from splitter.sim import SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """The collector off, and what a collection finds unreachable kept in ``gc.garbage``
    (``DEBUG_SAVEALL``) rather than freed; restored afterwards."""
    enabled, flags = gc.isenabled(), gc.get_debug()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if enabled:
            gc.enable()


# A Splitter's session refers back to it: a Splitter dropped leaves these in a cycle, once
# per Splitter, however many questions it asked (its settings are read at each call).
_PER_SPLITTER = frozenset(
    {"Splitter", "Session", "Runner", "Policy", "Limits", "RetryPolicy", "MergePolicy"}
    | {"DecomposePolicy", "ServicePrior"}
)


def _left_by_batches(objects: list[object]) -> list[str]:
    """The names of splitter's own objects (the simulator's apart) among ``objects`` but
    for a Splitter's own handful."""
    return [
        type(o).__qualname__
        for o in objects
        if type(o).__module__.startswith("splitter")
        and not type(o).__module__.startswith("splitter.sim")
        and type(o).__qualname__ not in _PER_SPLITTER
    ]


async def test_a_batch_leaves_no_reference_cycle_per_request(
    saved_garbage: list[object],
) -> None:
    """Batches of 8 and of 64 questions leave none of splitter's objects in reference
    cycles but a Splitter's own handful, where each request's retry loop used to leave a
    cycle (tenacity's retrying object and call state) that held the whole batch: its
    questions, answers, plan and run state."""
    found: list[list[str]] = []
    async with open_sim_client(SimService("instant")) as client:
        for _ in range(2):  # warm: the tokenizer, lazy imports, the endpoint's first lessons
            await Splitter(client).aask_many(["What is 1 + 1?"], model="instant")
        for n in (8, 64):
            gc.collect()
            saved_garbage.clear()
            splitter = Splitter(client, policy=Policy(limits=Limits(max_concurrency=n)))
            questions = [f"What is {i} + {i}?" for i in range(n)]
            result = await splitter.aask_many(questions, model="instant")
            assert result.stats.failed == 0
            del splitter, result
            gc.collect()
            found.append(_left_by_batches(saved_garbage))
    assert found == [[], []]
