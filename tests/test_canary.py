"""Canaries: merged items also asked alone, the agreement learned, and merged plans gated by it."""

from __future__ import annotations

import pytest

from splitter import BatchResult, Limits, MergePolicy, Policy, Splitter
from splitter._budget import BudgetSnapshot
from splitter._canary import Agreement, CanaryRecord, agrees, overlap
from splitter._cost_model import ServiceEstimate
from splitter._planner import Plan, PlanItem, plan_wave
from splitter.sim import PROFILES, SimLimits, SimService, answer_text
from splitter.sim._quality import NON_ANSWER
from splitter.testing import assert_answers_match, open_sim_client

FAR = ServiceEstimate(rtt=2.0, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)
# One connection, 300 ms away, short answers: two merged requests of four beat eight singles.
ONE_AT_A_TIME = Policy(limits=Limits(max_concurrency=1))
BATCHES = 30


@pytest.mark.parametrize(
    ("merged", "alone", "share"),
    [
        pytest.param("Madrid.", "madrid", 1.0, id="case-and-punctuation"),
        pytest.param("The capital is Madrid", "Madrid is the capital", 1.0, id="word-order"),
        pytest.param("a b c d", "a b c e", 3 / 5, id="one-word-swapped"),
        pytest.param(NON_ANSWER, "The capital of Spain is Madrid", 0.0, id="non-answer"),
        pytest.param("", "", 1.0, id="both-empty"),
        pytest.param('{"answer": ""}', '{\n  "answer": "Paris"\n}', 0.0, id="json-empty"),
        pytest.param(
            '{"answer": "Paris", "n": 2}', '{"n": 2, "answer": "paris."}', 1.0, id="json-values"
        ),
        pytest.param('[{"a": "x y"}]', '{"b": ["x", null, "z"]}', 1 / 3, id="json-nested"),
        pytest.param("{not json} Paris", "{not json} Lyon", 1 / 2, id="not-json-is-text"),
    ],
)
def test_overlap_is_jaccard_of_normalised_words(merged: str, alone: str, share: float) -> None:
    """The agreement measure: the share of words in common, case and punctuation ignored."""
    assert overlap(merged, alone) == pytest.approx(share)


def test_agreement_needs_the_threshold() -> None:
    """Three of five words shared agrees at a threshold of 0.6, not at 0.7."""
    assert agrees("a b c d", "a b c e", 0.6)
    assert not agrees("a b c d", "a b c e", 0.7)


def test_canaries_are_due_on_the_first_merged_requests_then_within_the_share() -> None:
    """Every one of the first canary_first merged requests checks one item; after that, at
    most canary_share of the requests sent since are canaries."""
    policy = MergePolicy(canary_first=3, canary_share=0.02)
    record = CanaryRecord()
    assert [record.due(policy) for _ in range(4)] == [True, True, True, False]
    record.count_requests(49, policy)
    assert not record.due(policy)  # one canary among 49 requests would be over 2%
    assert record.due(policy, pending_requests=1)  # among 50, it is within them
    record.count_requests(1, policy)
    assert not record.due(policy)  # a second among 50 is not
    assert not CanaryRecord().due(MergePolicy(canaries=False))


def test_agreement_starts_trusting_and_a_disagreement_halves_it() -> None:
    """A prior of one agreeing canary: the first disagreement leaves 50%; agreements raise it."""
    record = CanaryRecord()
    assert record.agreement == Agreement(1.0, 0)
    record.observe(False)
    assert record.agreement.share == pytest.approx(0.5)
    for _ in range(20):
        record.observe(True)
    assert record.agreement.share > 0.8
    assert record.agreement.checked == 21


def _plan(policy: Policy, agreement: Agreement | None) -> Plan:
    items = [PlanItem(i, 20, 5) for i in range(8)]
    budget = BudgetSnapshot()
    return plan_wave(
        items, estimate=FAR, budget=budget, concurrency=2, policy=policy, agreement=agreement
    )


def test_low_agreement_leaves_only_fan_out_and_says_why() -> None:
    """Where merging is otherwise the fast plan, agreement under min_agreement prices only
    fan-out; the reason and explain() give the figure."""
    trusted = _plan(Policy(), Agreement(0.9, 5))
    assert trusted.chosen.k == 2
    distrusted = _plan(Policy(), Agreement(0.5, 1))
    assert [c.label for c in distrusted.candidates] == ["fan-out"]
    assert "50% of 1 canaries" in distrusted.reason
    assert "min_agreement 80%" in distrusted.reason
    assert "merged answers agreed with 50% of 1 canaries" in distrusted.explain()


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(Policy(strategy="merge"), id="pinned-merge"),
        pytest.param(Policy(merge=MergePolicy(canaries=False)), id="canaries-off"),
        pytest.param(Policy(merge=MergePolicy(min_agreement=0.4)), id="lower-threshold"),
    ],
)
def test_a_pinned_strategy_or_canaries_off_or_a_lower_bar_still_merge(policy: Policy) -> None:
    """The gate applies to auto with canaries on, at the policy's own threshold."""
    plan = _plan(policy, Agreement(0.5, 1))
    assert plan.chosen.k == 2


async def _batches(service: SimService, policy: Policy, count: int = BATCHES) -> list[BatchResult]:
    """``count`` batches of 8 short questions, one after another; their results."""
    results: list[BatchResult] = []
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=policy)
        for b in range(count):
            questions = [f"Batch {b} question {i}?" for i in range(8)]
            results.append(await asker.aask_many(questions))
    return results


@pytest.mark.anyio
@pytest.mark.virtual_time
@pytest.mark.parametrize("knob", [{"merge_non_answer_rate": 1.0}, {"merge_good_items": 1}])
async def test_bad_merges_stop_after_their_canaries_and_none_is_returned(
    knob: dict[str, object],
) -> None:
    """Merged replies that are non-answers (or off-topic past the first item): the first
    batch's canaries disagree, every merged answer of those replies is asked again alone,
    and from then on auto fans out; no answer returned is a non-answer or off-topic."""
    profile = PROFILES["gpt-4o-mini"].model_copy(update=knob)
    service = SimService(profile, default_answer_tokens=4)
    results = await _batches(service, ONE_AT_A_TIME, count=6)
    first = results[0]
    assert first.plan.chosen.label != "fan-out"  # merging looked fast before any canary
    assert first.stats.canary_disagreements == first.stats.canaries > 0
    for result in results[1:]:
        assert result.plan.chosen.label == "fan-out"
        assert "fan-out only: merged answers agreed with" in result.plan.reason
    for result in results:
        assert result.ok
        assert_answers_match(result)
        assert all(a.text == answer_text(a.question.text, 4) for a in result)
    merged_requests = [r for r in service.log if len(r.questions) > 1]
    assert len(merged_requests) == first.plan.chosen.k


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_good_merges_keep_merging_with_canaries_within_two_percent() -> None:
    """A profile whose merged answers equal its solo ones keeps merging; once the first
    canary_first merged requests are checked, canaries are at most 2% of the requests
    (counted from the simulator's log: single-question requests among merged plans)."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    results = await _batches(service, ONE_AT_A_TIME)
    assert all(r.plan.chosen.label == "2 groups" for r in results)
    assert all(r.stats.canary_disagreements == 0 for r in results)
    settled_at = 4  # 2 merged requests a batch, canary_first = 8
    assert sum(r.stats.canaries for r in results[:settled_at]) == 8
    steady = service.log[sum(r.stats.requests for r in results[:settled_at]) :]
    extra = [r for r in steady if len(r.questions) == 1]
    assert 0 < len(extra) <= 0.02 * len(steady), (len(extra), len(steady))
    assert sum(r.stats.canaries for r in results[settled_at:]) == len(extra)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_canaries_off_sends_no_extra_request() -> None:
    """canaries=False: every request in the log is a merged one; nothing is checked."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    policy = ONE_AT_A_TIME.model_copy(update={"merge": MergePolicy(canaries=False)})
    results = await _batches(service, policy, count=5)
    assert [len(r.questions) for r in service.log] == [4] * 10
    assert all(r.stats.canaries == 0 for r in results)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_an_agreeing_canary_bills_its_tokens_to_the_checked_answer() -> None:
    """The canary's usage is kept: the batch's usage is everything the service billed."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    (result,) = await _batches(service, ONE_AT_A_TIME, count=1)
    assert result.stats.canaries == 2
    billed = sum(r.prompt_tokens + r.completion_tokens for r in service.log)
    assert result.usage.total_tokens == billed


@pytest.mark.anyio
@pytest.mark.virtual_time
@pytest.mark.parametrize(("window", "canaries"), [(3, 0), (4, 1), (6, 2)])
async def test_a_canary_goes_only_with_a_request_to_spare(window: int, canaries: int) -> None:
    """A window of ``window`` requests a minute, one spent on a warm-up: the plan's two
    merged requests take two, and canaries get only what is left, so none waits for the
    next window."""
    limits = SimLimits(kind="fixed_window", limit=window, window=60)
    service = SimService("gpt-4o-mini", limits=limits, default_answer_tokens=4)
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=ONE_AT_A_TIME)
        await asker.aask_one("warm-up")  # the window's headers are read
        result = await asker.aask_many([f"Question {i}?" for i in range(8)])
    assert result.plan is not None
    assert result.plan.chosen.k == 2
    assert result.stats.canaries == canaries
    assert len(service.log) == 1 + 2 + canaries
    assert service.log[-1].arrived - service.log[0].arrived < 60


@pytest.mark.anyio
@pytest.mark.virtual_time
@pytest.mark.parametrize("knob", [{}, {"merge_good_items": 1}], ids=["good", "off-topic"])
async def test_a_streamed_batch_shows_each_answer_once_and_never_a_replaced_one(
    knob: dict[str, object],
) -> None:
    """astream with merged groups checked by canaries: each question's streamed text is its
    final answer exactly, and no off-topic merged answer is shown."""
    profile = PROFILES["gpt-4o-mini"].model_copy(update=knob)
    service = SimService(profile, default_answer_tokens=4)
    questions = [f"Question {i}?" for i in range(9)]
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=ONE_AT_A_TIME)
        async with asker.astream(questions) as events:
            seen = [event async for event in events]
        result = events.result
    assert result.stats.canaries > 0
    joined: dict[int, str] = {}
    for event in seen:
        joined[event.index] = joined.get(event.index, "") + event.delta
    assert joined == {a.index: a.text for a in result}
    assert all(a.text == answer_text(a.question.text, 4) for a in result)
