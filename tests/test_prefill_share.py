"""The prefill share (how much concurrent prefills slow each other) is learned from the wall
time of responses, like decode's beta, on any service: no engine timings needed (issue #19
item 2). llama-server's own ``prompt_ms`` reads it low (a request's timing starts only once
its first tokens enter the shared batch), so the latency fit is where it is learned. On the
simulator, on virtual time."""

from __future__ import annotations

import json

import pytest

from splitter import (
    Limits,
    MergePolicy,
    Observation,
    Policy,
    Question,
    ServiceModel,
    ServicePrior,
    Splitter,
)
from splitter.sim import Profile, SimService
from splitter.testing import open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

ENGINE = dict(rtt=0.004, ttft0=0.02, prefill_rate=1_000.0, tpot1=0.01, beta=0.05, slots=8)


def _questions(first: int, n: int, answer: int) -> list[Question]:
    return [
        Question(text=f"Item {first + i}? [len={answer}]", expected_tokens=answer) for i in range(n)
    ]


async def _learn_then_plan(
    shared_prefill: bool, settled_first: int = 0
) -> tuple[float, float, str]:
    """(the share before, the share learned, auto's plan for 5 short questions on a new
    document) after fan-out batches on documents: one alone, then four at once, twice;
    ``settled_first``: short questions with no document answered before them."""
    profile = Profile(name="doc", context_window=200_000, shared_prefill=shared_prefill, **ENGINE)  # type: ignore[arg-type]
    policy = Policy(
        prior=ServicePrior(**ENGINE),  # type: ignore[arg-type]  # no prefill share in it
        merge=MergePolicy(max_per_request=5, canaries=False),
        limits=Limits(slow_start=False),
    )
    fanout = policy.model_copy(update={"strategy": "fanout"})
    async with open_sim_client(SimService(profile)) as client:
        splitter_ = Splitter(client, policy=fanout, model="m")
        for first in range(0, settled_first, 8):
            await splitter_.aask_many(_questions(1000 + first, 8, 8))
        before = splitter_.service_model("m").estimate().prefill_share
        for n, word in enumerate(("dog", "cow", "hen", "pig")):
            doc = f"the {word} sat " * 600
            await splitter_.aask_many(_questions(10 * n, 1 + 3 * (n % 2), 8), context=doc)
        learned = splitter_.service_model("m").estimate().prefill_share
        splitter_.policy = policy
        result = await splitter_.aask_many(_questions(100, 5, 8), context="the ox sat " * 600)
    assert result.stats.failed == 0
    assert result.plan is not None
    return before, learned, result.plan.chosen.label


async def test_a_compute_bound_prefill_is_learned_from_the_wall_and_merging_wins() -> None:
    """Four 1,800-token prompts at once take ~4x one alone: the share is learned near 1 with
    no timings in any response, and auto then merges five questions about one document."""
    before, learned, label = await _learn_then_plan(shared_prefill=True)
    assert before == 0.0
    assert learned > 0.6
    assert label == "merge"


async def test_a_settled_model_learns_the_share_from_a_new_kind_of_request() -> None:
    """After 96 short questions the fits take one response in four; the first requests
    carrying a long document are each taken all the same (a kind the fits had not seen).
    Sampled like the others, the few document requests fitted left the share at 0.41."""
    before, learned, label = await _learn_then_plan(shared_prefill=True, settled_first=96)
    assert before == 0.0
    assert learned > 0.6
    assert label == "merge"


async def test_independent_prefills_learn_no_share_and_fan_out() -> None:
    """Where concurrent prefills do not slow each other (a hosted API, as one client sees
    it) the share stays 0, and the five short questions fan out."""
    before, learned, label = await _learn_then_plan(shared_prefill=False)
    assert before == learned == 0.0
    assert label == "fan-out"


def test_a_model_saved_with_four_terms_loads_with_the_share_unlearned() -> None:
    """A service model saved before the fifth term existed loads: its four terms' sums kept,
    the fifth empty (the prior's share), and it goes on learning."""
    model = ServiceModel()
    for i in range(20):
        model.observe(Observation(input_tokens=300 + 50 * i, output_tokens=40, latency=
                                  0.2 + 0.001 * i, concurrency=1.0 + i % 3))  # fmt: skip
    data = json.loads(model.dumps())
    for fit in data["fits"]:
        fit["xtx"] = [row[:4] for row in fit["xtx"][:4]]
        fit["xty"] = fit["xty"][:4]
    old = ServiceModel.loads(json.dumps(data))
    assert old.estimate().prefill_share == 0.0
    assert [row[:4] for row in old._fits[-1].xtx[:4]] == [
        row[:4] for row in model._fits[-1].xtx[:4]
    ]
    assert old._fits[-1].xtx[4] == [0.0] * 5
    old.observe(Observation(input_tokens=900, output_tokens=40, latency=0.4, concurrency=3.0))
    assert old._fits[-1].xtx[4][4] > 0
