"""A request that waits at the server for an engine slot finds its siblings' shared prefix
in the cache, and the cost model says so (issue #19 item 2): on llama-server's per-slot
cache, 8 questions about one document on 5 slots had their 3 queued requests served the
document from the cache (4,720 of 12,500 prompt tokens on the real engine), which the
planner priced as uncached (fan-out predicted 1.4-2x its wall). Also: the cache's cost
learned as a slope (a system prompt's few cached tokens cannot drag it down), what the
engine's timings say of a reused prefix, and the cache's scope learned from followers
(a primed fan-out's others), so primed fan-out is not priced as cached where each slot keeps
its own cache.

The end-to-end tests run the simulator's llama-server-like engine on virtual time."""

from __future__ import annotations

import json

import pytest

from splitter import Limits, MergePolicy, Policy, Question, ServicePrior, Splitter
from splitter._cost_model import CACHE_SPEEDUP, ServiceEstimate, simulate
from splitter._engine_readings import EngineReadings, EngineTimings
from splitter._planner import _queued_inputs
from splitter._primed import primed_schedule
from splitter._service_model import Observation, ServiceModel
from splitter.sim import Profile, SimService
from splitter.testing import open_sim_client

ENGINE = dict(rtt=0.002, ttft0=0.02, prefill_rate=400.0, tpot1=0.027, beta=0.4, slots=5)
ESTIMATE = ServiceEstimate(**ENGINE, prefill_share=1.0, cached_rate=400_000.0)  # type: ignore[arg-type]


def test_a_queued_request_pays_its_shared_prefix_at_the_cache_s_rate() -> None:
    """Eight 1,600-token prompts sharing 1,500 on five slots: the three that wait for a slot
    prefill 100 fresh tokens each, and the batch ends sooner than with every prompt whole."""
    inputs = [1600.0] * 8
    queued = _queued_inputs(inputs, ESTIMATE, shared=1500)
    assert queued is not None
    assert queued == pytest.approx([100 + 1500 / 1000] * 8)
    ready = [0.0] * 8
    _, whole = simulate(inputs, [16] * 8, ready, ESTIMATE, 64)
    _, cached = simulate(inputs, [16] * 8, ready, ESTIMATE, 64, queued)
    assert max(cached) < max(whole)
    assert sorted(cached)[:5] == pytest.approx(sorted(whole)[:5])  # the first five: the same


@pytest.mark.parametrize(
    ("estimate", "n", "shared"),
    [
        (ESTIMATE, 5, 1500),  # no more requests than slots: none waits
        (ESTIMATE, 8, 0),  # nothing shared
        (ServiceEstimate(**ENGINE), 8, 1500),  # no cache seen  # type: ignore[arg-type]
        (ServiceEstimate(**{**ENGINE, "slots": None}, cached_rate=4e5), 8, 1500),  # type: ignore[arg-type]
    ],
)
def test_no_queued_price_where_no_request_can_wait_or_no_cache_is_seen(
    estimate: ServiceEstimate, n: int, shared: int
) -> None:
    assert _queued_inputs([1600.0] * n, estimate, shared) is None


def test_on_a_per_slot_cache_primed_followers_pay_their_whole_prompt() -> None:
    per_slot = ServiceEstimate(**ENGINE, cached_rate=400_000.0, cache_per_slot=True)  # type: ignore[arg-type]
    shared = ServiceEstimate(**ENGINE, cached_rate=400_000.0)  # type: ignore[arg-type]
    work, ready = primed_schedule([1600.0] * 3, [0.0] * 3, per_slot, 1500)
    assert work == [1600.0] * 3
    assert ready[1] == ready[2] > 0  # they still wait for the first's first token
    cheap, _ = primed_schedule([1600.0] * 3, [0.0] * 3, shared, 1500)
    assert cheap[1] < 200


def _observation(cached: int, latency: float, follows: int = 0) -> Observation:
    return Observation(
        input_tokens=1600,
        output_tokens=16,
        latency=latency,
        concurrency=1.0,
        cached_tokens=cached,
        follows=follows,
    )


def test_a_system_prompt_s_few_cached_tokens_do_not_make_the_cache_slow() -> None:
    """Responses with 14 cached tokens and a second each the model cannot explain, beside
    responses whose 1,500-token cached prefix cost nothing: fitted as a slope, the cache is
    fast; as a ratio of sums it came out at ~10 tokens a second, slower than no cache."""
    prior = ServicePrior(weight=1e6, **ENGINE)  # type: ignore[arg-type]
    model = ServiceModel(prior)
    explained = 0.02 + 1600 / 400 + 16 * 0.027  # ttft0, prefill, decode: alone
    for _ in range(20):
        model.observe(_observation(14, explained + 1.0))
        model.observe(_observation(1500, explained - 1500 / 400))
    rate = model.estimate().cached_rate
    assert rate is not None
    assert rate > 100 * 400


def test_a_system_prompt_alone_does_not_time_the_cache() -> None:
    """Only a system prompt's 14 cached tokens served, with a second a response the model
    cannot explain: the slope through them made the cache 330 tokens a second, no faster
    than the uncached prefill learned beside it (324), so a document it would hold was
    priced as if it held none. Now
    such responses are not fitted: the cache is taken to cost what engines make it cost,
    and, its scope unseen, as per slot (primed fan-out's followers priced uncached). A
    follower served its prefix then says the cache is shared; the flag survives a save."""
    model = ServiceModel(ServicePrior(weight=1e6, **ENGINE))  # type: ignore[arg-type]
    assert model.estimate().cached_rate is None  # no cache seen
    explained = 0.02 + 1600 / 400 + 16 * 0.027
    for _ in range(20):
        model.observe(_observation(14, explained + 1.0))
    learned = model.estimate()
    assert learned.cached_rate == pytest.approx(learned.prefill_rate * CACHE_SPEEDUP)
    assert learned.cache_per_slot is True
    saved = ServiceModel.loads(model.dumps()).estimate()
    assert (saved.cached_rate, saved.cache_per_slot) == (learned.cached_rate, True)
    for _ in range(4):
        model.observe(_observation(1500, 5.0, follows=1500))
    assert model.estimate().cache_per_slot is False


def test_a_reused_prefix_in_the_engine_s_timings_costs_nothing() -> None:
    readings = EngineReadings()
    base = ServiceEstimate(**ENGINE)  # type: ignore[arg-type]
    readings.told(EngineTimings(14, 1586, 4000.0, 16, 430.0, 27.0))  # a system prompt's reuse
    readings.observed(1600, 16, 1.0)
    assert readings.applied(base).cached_rate is None
    readings.told(EngineTimings(1500, 100, 250.0, 16, 430.0, 27.0))
    readings.observed(1600, 16, 1.0)
    told = readings.applied(base)
    assert told.cached_rate == pytest.approx(told.prefill_rate * CACHE_SPEEDUP)


@pytest.mark.parametrize(("served", "per_slot"), [(1500, False), (14, True)])
def test_the_cache_s_scope_is_learned_from_the_followers(served: int, per_slot: bool) -> None:
    model = ServiceModel(ServicePrior(weight=1e6, **ENGINE))  # type: ignore[arg-type]
    assert model.estimate().cache_per_slot is False  # until followers say otherwise
    for _ in range(4):
        model.observe(_observation(served, 5.0, follows=1500))
    assert model.estimate().cache_per_slot is per_slot
    assert ServiceModel.loads(model.dumps()).estimate().cache_per_slot is per_slot


def test_a_short_shared_prefix_says_nothing_of_the_cache_s_scope() -> None:
    model = ServiceModel(ServicePrior(weight=1e6, **ENGINE))  # type: ignore[arg-type]
    for _ in range(4):
        model.observe(_observation(0, 5.0, follows=14))
    assert model.estimate().cache_per_slot is False


DOC = "the cat sat " * 500  # 1,500 prompt tokens, as splitter and the simulator both count


def _engine() -> SimService:
    """llama.cpp on 5 slots: a per-slot prefix cache (each slot reuses only the prompt it
    last served) and compute-bound prefill, as the real engine of the figures above."""
    profile = Profile(
        name="m", context_window=20_000, prefix_cache="slot", shared_prefill=True,
        **ENGINE,  # type: ignore[arg-type]
    )  # fmt: skip
    return SimService(profile)


def _policy(strategy: str) -> Policy:
    """The engine's terms known (the prior, held), the cache's rate among them: what is
    under test is how the plan's requests are priced, not how the terms are learned."""
    prior = ServicePrior(prefill_share=1.0, cached_rate=400_000.0, weight=1e6, **ENGINE)  # type: ignore[arg-type]
    return Policy(
        strategy=strategy,  # type: ignore[arg-type]
        prior=prior,
        merge=MergePolicy(canaries=False),
        limits=Limits(slow_start=False),
    )


def _batch(n: int, tag: str) -> list[Question]:
    return [Question(text=f"{tag} fact {i}? [len=16]", expected_tokens=16) for i in range(n)]


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_fan_out_past_the_slots_is_predicted_with_the_queued_requests_cached() -> None:
    """Eight questions about one document on five slots: fan-out's predicted wall is
    within 10% of the simulated one (priced without the queued requests' cache, 1.3x it),
    and the three queued requests were served the document."""
    async with open_sim_client(_engine()) as client:
        splitter = Splitter(client, policy=_policy("fanout"), model="m")
        result = await splitter.aask_many(_batch(8, "measured"), context=DOC)
    assert result.stats.failed == 0
    assert result.usage.cached_tokens >= 3 * 1_400
    assert result.stats.predicted_wall_time is not None
    assert result.stats.predicted_wall_time == pytest.approx(result.stats.wall_time, rel=0.10)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_after_a_primed_batch_on_slot_caches_primed_is_priced_uncached() -> None:
    """A primed batch's followers land on other slots than the first's and are served none
    of the document: the model learns a per-slot cache, and auto then prices primed fan-out
    without the cache: about as fast as fan-out (on compute-bound prefill its first request
    prefills alone, the rest together), where priced as cached it was auto's choice for a
    mere wait (``before`` here)."""
    async with open_sim_client(_engine()) as client:
        splitter = Splitter(client, policy=_policy("auto"), model="m")
        before = splitter.plan(_batch(4, "before"), context="Zero. " + DOC)
        splitter.policy = _policy("primed")
        await splitter.aask_many(_batch(4, "primed"), context="First. " + DOC)
        learned = splitter.service_model("m").estimate()
        splitter.policy = _policy("auto")
        plan = splitter.plan(_batch(4, "next"), context="Second. " + DOC)
    assert before.chosen.label == "primed fan-out"  # the prior's cache, taken as shared
    assert learned.cache_per_slot is True
    primed = next(c for c in plan.candidates if c.primed)
    fanout = next(c for c in plan.candidates if c.label == "fan-out")
    assert primed.latency >= 0.95 * fanout.latency


def test_a_model_saved_before_the_slope_keeps_its_cached_cost() -> None:
    """A saved model's old (seconds, tokens) sums load as the same cost per cached token."""
    model = ServiceModel(ServicePrior(weight=1e6, **ENGINE))  # type: ignore[arg-type]
    saved = json.loads(model.dumps())
    del saved["cached_fit"], saved["followers"]
    saved["cached_time"] = [2.0, 8000.0]  # 4,000 cached tokens a second
    loaded = ServiceModel.loads(json.dumps(saved))
    assert loaded.estimate().cached_rate == pytest.approx(4000.0)
    assert loaded.estimate().cache_per_slot is False
