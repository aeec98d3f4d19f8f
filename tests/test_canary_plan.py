"""Canaries priced in the plan (issue #19): a merged request's canary is a real request, so
the predicted wall time includes it, and it goes where it costs least: beside its merged
request, or once the merged reply is back where the engine's cache then serves the shared
context. On the simulator on virtual time, with a service model that knows the engine."""

from __future__ import annotations

import copy

import pytest

from splitter import BatchResult, Limits, MergePolicy, Policy, Question, ServicePrior, Splitter
from splitter._budget import BudgetSnapshot
from splitter._canary import CanaryRecord
from splitter._cost_model import ServiceEstimate
from splitter._planner import PlanItem, plan_wave
from splitter.sim import Profile, SimService, answer_tag
from splitter.testing import open_sim_client

DOC = "the cat sat " * 800  # 2,400 prompt tokens of shared context, as both count them
ENGINE = dict(rtt=0.004, ttft0=0.02, prefill_rate=1_000.0, tpot1=0.01, beta=0.05, slots=8)


def _questions(n: int, answer: int) -> list[Question]:
    return [Question(text=f"Item {i}? [len={answer}]", expected_tokens=answer) for i in range(n)]


async def _batch(
    cache: str,
    *,
    canaries: bool = True,
    cached_rate: float | None = None,
    off_topic: bool = False,
    placement: str = "auto",
) -> tuple[BatchResult, SimService]:
    """Five 8-token questions about DOC, auto with a prior that knows the engine."""
    profile = Profile(
        name="doc",
        context_window=200_000,
        prefix_cache=cache,  # type: ignore[arg-type]
        shared_prefill=True,
        merge_good_items=1 if off_topic else None,
        **ENGINE,  # type: ignore[arg-type]
    )
    prior = ServicePrior(prefill_share=1.0, cached_rate=cached_rate, weight=1e6, **ENGINE)  # type: ignore[arg-type]
    merge = MergePolicy(max_per_request=5, canaries=canaries, canary_placement=placement)  # type: ignore[arg-type]
    policy = Policy(prior=prior, merge=merge, limits=Limits(slow_start=False))
    service = SimService(profile)
    async with open_sim_client(service) as client:
        asker = Splitter(client, policy=policy, model="m")
        if cache == "slot":
            # A primed batch on another document first: its followers, sent beside the
            # first request, miss the prefix its slot holds, so the cache is learned per slot
            # (and primed fan-out priced as gaining nothing from it).
            asker.policy = policy.model_copy(update={"strategy": "primed"})
            await asker.aask_many(_questions(3, 8), context="the dog sat " * 800)
            asker.policy = policy
            service.log.clear()
        result = await asker.aask_many(_questions(5, 8), context=DOC)
    assert result.plan is not None
    return result, service


def test_due_count_is_what_due_would_send() -> None:
    """The planner's preview of the canaries a batch's merged requests would carry equals
    what the executor's ``due`` then sends, before and after the endpoint settles."""
    policy = MergePolicy(canary_first=3, canary_share=0.05)
    record = CanaryRecord()
    for merged, requests in [(2, 2), (4, 4), (1, 10), (3, 30), (5, 5), (2, 60)]:
        counts = (record.sent, record.sent_since, record.requests_since)
        preview = record.due_count(policy, merged, requests)
        assert (record.sent, record.sent_since, record.requests_since) == counts  # a preview
        trial = copy.deepcopy(record)
        assert preview == sum(trial.due(policy, requests) for _ in range(merged))
        for _ in range(merged):
            record.due(policy, requests)
        record.count_requests(requests + preview, policy)
    assert record.sent > policy.canary_first  # the settled phase was reached and previewed
    assert CanaryRecord().due_count(MergePolicy(canaries=False), 3, 3) == 0


@pytest.mark.parametrize(("merge_success", "after"), [(1.0, True), (0.95, True), (0.5, False)])
def test_a_canary_goes_after_only_where_merged_replies_are_read_back(
    merge_success: float, after: bool
) -> None:
    """On a per-slot cache a canary after a reply that parsed reads the context from the
    freed slot; a reply that fails is re-asked alone on cold slots, where a canary beside
    would have warmed one and been one of the re-asks: after only where replies read back."""
    estimate = ServiceEstimate(
        **ENGINE,  # type: ignore[arg-type]
        prefill_share=1.0,
        cached_rate=1e6,
        cache_per_slot=True,
    )
    plan = plan_wave(
        [PlanItem(i, 10, 8) for i in range(5)],
        estimate=estimate,
        budget=BudgetSnapshot(),
        concurrency=16,
        policy=Policy(merge=MergePolicy(max_per_request=5)),
        preamble_tokens=2_400,
        merge_success=merge_success,
        canaries=lambda merged, requests: min(merged, 1),
    )
    assert plan.chosen.label == "merge"
    assert plan.chosen.canaries == 1
    assert plan.chosen.canary_after is after
    assert plan.chosen.checked_latency is not None
    assert plan.chosen.checked_latency > plan.chosen.latency


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_canary_beside_its_merged_request_is_in_the_predicted_wall() -> None:
    """No cache: the canary's prefill of the document shares the engine with the merged
    request's, and the prediction counts it (without it, the batch took ~2x its plan)."""
    result, service = await _batch("none")
    plan = result.plan
    assert plan is not None
    assert plan.chosen.label == "merge"
    assert result.stats.canaries == 1
    assert len(service.log) == 2
    assert not plan.chosen.canary_after
    assert plan.predicted_latency > 1.5 * plan.chosen.latency  # the canary priced in
    assert plan.predicted_latency == pytest.approx(result.stats.wall_time, rel=0.10)
    assert "canaries: 1 merged request(s)" in plan.explain()


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_canary_goes_after_the_reply_where_the_cache_then_serves_it() -> None:
    """A per-slot cache known to be fast: the canary waits for the merged reply, takes the
    slot the merged request freed and reads the document from it, so checking costs a
    short request, not a second prefill of the document."""
    result, service = await _batch("slot", cached_rate=1e6)
    unchecked, _ = await _batch("slot", cached_rate=1e6, canaries=False)
    plan = result.plan
    assert plan is not None
    assert plan.chosen.label == "merge"
    assert plan.chosen.canary_after
    assert result.stats.canaries == 1
    (merged,) = [r for r in service.log if len(r.questions) > 1]
    (canary,) = [r for r in service.log if len(r.questions) == 1]
    assert canary.arrived >= merged.finished  # sent once the merged reply was back
    # The document, read from the merged request's slot: all but the system prompt's few
    # tokens of both requests are the canary's (unchecked, the merged one had ~30).
    assert result.usage.cached_tokens - unchecked.usage.cached_tokens >= 2_400
    assert result.stats.wall_time < 1.2 * unchecked.stats.wall_time
    assert plan.predicted_latency == pytest.approx(result.stats.wall_time, rel=0.10)
    assert "once its reply is back" in plan.explain()


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_canary_after_the_reply_that_disagrees_still_replaces_the_merged_answers() -> None:
    """Merged answers off-topic past the first item, the canary sent after the reply: it
    disagrees, and every merged answer it makes untrusted is asked again alone, so each
    question gets its own answer and none twice."""
    result, _ = await _batch("slot", cached_rate=1e6, off_topic=True)
    plan = result.plan
    assert plan is not None
    assert plan.chosen.canary_after
    assert result.stats.canary_disagreements == result.stats.canaries == 1
    assert result.ok
    assert [a.index for a in result] == list(range(5))
    assert all(
        a.text is not None and a.text.startswith(answer_tag(a.question.text)) for a in result
    )


@pytest.mark.anyio
@pytest.mark.virtual_time
@pytest.mark.parametrize(("cache", "placement"), [("slot", "beside"), ("none", "after")])
async def test_the_placement_can_be_pinned_and_is_priced_as_sent(
    cache: str, placement: str
) -> None:
    """``MergePolicy(canary_placement=...)`` sends the canary where it says, against the
    plan's own preference, and the prediction prices it there."""
    rate = 1e6 if cache == "slot" else None
    result, service = await _batch(cache, cached_rate=rate, placement=placement)
    plan = result.plan
    assert plan is not None
    assert plan.chosen.label == "merge"
    assert plan.chosen.canary_after is (placement == "after")
    (merged,) = [r for r in service.log if len(r.questions) > 1]
    (canary,) = [r for r in service.log if len(r.questions) == 1]
    assert (canary.arrived >= merged.finished) is (placement == "after")
    assert plan.predicted_latency == pytest.approx(result.stats.wall_time, rel=0.10)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_canary_after_its_reply_is_priced_cached_once_any_prefix_was_served() -> None:
    """llama-server's per-slot cache, learned from the service alone (no cached rate in the
    prior): two fan-out batches with a system prompt, whose 13 tokens each slot serves
    again, then five questions about DOC merged. The canary goes once the merged reply is
    back and reads DOC from the slot it freed, and is priced so: the system prompt's cached
    tokens had been fitted as a cache slower than no cache, and the canary priced at 3.3 s
    for the 0.1 s it took. (Taken as fast but shared before a follower showed its scope,
    the cache made primed fan-out the plan here.)"""
    profile = Profile(
        name="doc",
        context_window=200_000,
        prefix_cache="slot",
        shared_prefill=True,
        **ENGINE,  # type: ignore[arg-type]
    )
    prior = ServicePrior(prefill_share=1.0, weight=1e6, **ENGINE)  # type: ignore[arg-type]
    policy = Policy(
        prior=prior, merge=MergePolicy(max_per_request=5), limits=Limits(slow_start=False)
    )
    system = "You are a helpful assistant."
    service = SimService(profile)
    async with open_sim_client(service) as client:
        asker = Splitter(client, policy=policy.model_copy(update={"strategy": "fanout"}), model="m")
        served = 0
        for k in range(2):
            warm = await asker.aask_many(_questions(5, 8), system=system, context=f"batch {k}")
            served += sum(a.usage.cached_tokens or 0 for a in warm if a.usage is not None)
        assert 0 < served < 32 * 10  # only the system prompt's few tokens, again and again
        asker.policy = policy
        service.log.clear()
        result = await asker.aask_many(_questions(5, 8), system=system, context=DOC)
    plan = result.plan
    assert plan is not None
    chosen = plan.chosen
    assert (chosen.label, chosen.canary_after) == ("merge", True)
    (merged,) = [r for r in service.log if len(r.questions) > 1]
    (canary,) = [r for r in service.log if len(r.questions) == 1]
    assert canary.arrived >= merged.finished
    assert canary.finished - canary.arrived < 0.5  # DOC read from the freed slot
    assert chosen.checked_latency is not None
    assert chosen.checked_latency - chosen.latency < 0.5
