"""The planner as a pure function: each regime the cost model must get right."""

from __future__ import annotations

import dataclasses

import pytest

from splitter import MergePolicy, Policy, Weighted
from splitter._budget import BudgetSnapshot
from splitter._cost_model import ServiceEstimate
from splitter._merge import MergeRecord
from splitter._planner import Plan, PlanItem, plan_wave

GPU = ServiceEstimate(rtt=0.06, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)
CPU = ServiceEstimate(rtt=0.001, ttft0=0.05, prefill_rate=400, tpot1=0.027, beta=0.42)
SERIAL = ServiceEstimate(rtt=0.01, ttft0=0.05, prefill_rate=5000, tpot1=0.02, beta=1.0)
FAR = ServiceEstimate(rtt=2.0, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)
AMPLE = BudgetSnapshot()


def _items(*outputs: int, input_tokens: int = 20) -> list[PlanItem]:
    return [PlanItem(i, input_tokens, out) for i, out in enumerate(outputs)]


def test_generation_dominated_fans_out() -> None:
    """5 x 200 tokens on a batching server: one request each, ~5x faster than merging."""
    plan = plan_wave(
        _items(*[200] * 5),
        estimate=GPU,
        budget=AMPLE,
        concurrency=64,
        policy=Policy(merge=MergePolicy(max_per_request=5)),
    )
    assert plan.chosen.label == "fan-out"
    merged = next(c for c in plan.candidates if c.k == 1)
    assert merged.latency > 4 * plan.chosen.latency


def test_tight_rpm_with_a_long_reset_merges() -> None:
    """One request left and a minute per request: fewer, merged requests win."""
    budget = BudgetSnapshot(remaining_requests=1, requests_per_second=1 / 60)
    plan = plan_wave(
        _items(*[200] * 5),
        estimate=GPU,
        budget=budget,
        concurrency=64,
        policy=Policy(merge=MergePolicy(max_per_request=5)),
    )
    assert plan.chosen.k == 1
    fanout = max(plan.candidates, key=lambda c: c.k)
    assert fanout.budget_wait == pytest.approx(240)
    assert "rate limit" in plan.reason


def test_tight_tpm_counts_input_plus_max_tokens() -> None:
    """The token budget reserves input + max_tokens per request, so it can force waits too."""
    budget = BudgetSnapshot(remaining_tokens=300, tokens_per_second=10)
    items = [PlanItem(i, 20, 100, max_tokens=100) for i in range(3)]
    plan = plan_wave(items, estimate=GPU, budget=budget, concurrency=64, policy=Policy())
    fanout = max(plan.candidates, key=lambda c: c.k)
    assert fanout.budget_wait == pytest.approx((3 * 120 - 300) / 10)


def test_long_rtt_and_short_answers_merge_under_a_concurrency_limit() -> None:
    """RTT >> generation, one-word answers, 2 connections: pay the round trip fewer times."""
    plan = plan_wave(_items(*[5] * 8), estimate=FAR, budget=AMPLE, concurrency=2, policy=Policy())
    assert plan.chosen.k == 2
    fanout = max(plan.candidates, key=lambda c: c.k)
    assert fanout.latency > 3 * plan.chosen.latency


def test_a_model_that_garbles_merged_replies_is_not_merged_for() -> None:
    """Eight 50-token answers over 4 connections, 300 ms away: pairs in one wave beat two
    waves of singles, until merged answers are seldom read back; then each pair would be
    followed by its re-asks, and fan-out wins."""
    near = dataclasses.replace(GPU, rtt=0.3)

    def plan(success: float) -> Plan:
        return plan_wave(
            _items(*[50] * 8),
            estimate=near,
            budget=AMPLE,
            concurrency=4,
            policy=Policy(),
            merge_success=success,
        )

    trusted, garbled = plan(1.0), plan(0.5)
    assert trusted.chosen.k == 4
    assert garbled.chosen.k == 8
    # The pairs are priced with their likely re-asks, not just made more expensive.
    pairs = next(c for c in garbled.candidates if c.k == 4)
    assert pairs.latency > next(c for c in trusted.candidates if c.k == 4).latency


def test_merge_record_starts_trusting_and_follows_recent_replies() -> None:
    record = MergeRecord()
    assert record.success == 1.0
    for _ in range(3):
        record.observe(asked=4, read=0)
    assert record.success < 0.4
    for _ in range(30):
        record.observe(asked=4, read=4)
    assert record.success > 0.9


def test_mixed_lengths_under_a_concurrency_limit_balance_k_groups() -> None:
    """One long and seven short answers over 2 connections: the long one alone, the short
    ones merged into balanced groups beside it, beat both merging all and fanning out."""
    plan = plan_wave(
        _items(400, 50, 50, 50, 50, 50, 50, 50),
        estimate=GPU,
        budget=AMPLE,
        concurrency=2,
        policy=Policy(),
    )
    assert 1 < plan.chosen.k < 8
    long_group = next(g for g in plan.chosen.groups if 0 in g.indexes)
    assert long_group.indexes == (0,)  # LPT keeps the long answer alone
    fanout = max(plan.candidates, key=lambda c: c.k)
    assert plan.chosen.latency < 0.9 * fanout.latency


def test_groups_respect_the_merge_cap_and_cover_every_question_once() -> None:
    """Every candidate holds each question exactly once, no group above max_per_request."""
    plan = plan_wave(
        _items(*range(10, 200, 10)),
        estimate=CPU,
        budget=AMPLE,
        concurrency=8,
        policy=Policy(merge=MergePolicy(max_per_request=3)),
    )
    for candidate in plan.candidates:
        seen = sorted(i for g in candidate.groups for i in g.indexes)
        assert seen == list(range(19))
        assert max(len(g.indexes) for g in candidate.groups) <= 3


@pytest.mark.parametrize(("strategy", "k"), [("merge", 2), ("fanout", 6)])
def test_forced_strategies(strategy: str, k: int) -> None:
    """strategy='merge' sends the fewest requests the cap allows; 'fanout' one each."""
    plan = plan_wave(
        _items(*[50] * 6),
        estimate=GPU,
        budget=AMPLE,
        concurrency=64,
        policy=Policy(strategy=strategy),
    )  # type: ignore[arg-type]
    assert (plan.chosen.k, len(plan.candidates)) == (k, 1)
    assert "forces" in plan.reason


def test_the_answer_streamed_first_gets_a_request_of_its_own() -> None:
    """Merging is what wins here (one request left per minute), but the question streamed
    live first is set apart in every candidate; every question is still sent exactly once."""
    budget = BudgetSnapshot(remaining_requests=1, requests_per_second=1 / 60)
    items = _items(*[200] * 5)
    plan = plan_wave(items, estimate=GPU, budget=budget, concurrency=64, policy=Policy(), alone=0)
    for candidate in plan.candidates:
        assert (0,) in [g.indexes for g in candidate.groups]
        sent = sorted(i for g in candidate.groups for i in g.indexes)
        assert sent == [0, 1, 2, 3, 4]
    assert plan.chosen.k == 2  # the first alone, the other four merged


def test_cost_objective_prefers_fewer_tokens() -> None:
    """With a long shared preamble, merging saves billed tokens; 'cost' takes that."""
    plan = plan_wave(
        _items(*[50] * 4),
        estimate=GPU,
        budget=AMPLE,
        concurrency=64,
        policy=Policy(objective="cost"),
        preamble_tokens=2000,
    )
    assert plan.chosen.k == 1
    assert plan.chosen.cost == min(c.cost for c in plan.candidates)


def test_weighted_objective_sits_between() -> None:
    """A weight on tokens moves the choice from the fastest towards the cheapest."""
    common = {"estimate": GPU, "budget": AMPLE, "concurrency": 64, "preamble_tokens": 2000}
    fast = plan_wave(_items(*[50] * 4), policy=Policy(), **common)  # type: ignore[arg-type]
    cheap = plan_wave(
        _items(*[50] * 4), policy=Policy(objective=Weighted(seconds_per_1k_tokens=10)), **common
    )  # type: ignore[arg-type]
    assert fast.chosen.k > cheap.chosen.k


def test_merged_max_tokens_has_a_margin_and_respects_caps() -> None:
    """A merged group's max_tokens covers each item's cap, or its expected length x margin."""
    items = [PlanItem(0, 10, 100, max_tokens=30), PlanItem(1, 10, 100)]
    plan = plan_wave(
        items, estimate=GPU, budget=AMPLE, concurrency=64, policy=Policy(strategy="merge")
    )
    (group,) = plan.chosen.groups
    assert group.max_tokens == 30 + 200 + 2 * 5


def test_explain_lists_every_candidate_and_marks_the_choice() -> None:
    """explain() is a table: a row per candidate, the chosen one marked, then the reason."""
    plan = plan_wave(
        _items(*[200] * 5), estimate=GPU, budget=AMPLE, concurrency=64, policy=Policy()
    )
    text = plan.explain()
    rows = [line for line in text.splitlines() if line.startswith(("> ", "  ")) and "s" in line]
    assert len(
        [r for r in rows if r[2:].split()[0] in {"fan-out", "merge"} or "groups" in r]
    ) == len(plan.candidates)
    assert sum(line.startswith("> ") for line in text.splitlines()) == 1
    assert "why:" in text


def test_a_thousand_questions_plan_into_groups_holding_each_once() -> None:
    """1,000 questions are planned, each in exactly one group. (How fast is a claim about
    real time: bench/planner_speed.py measures it against its 10 ms target.)"""
    items = [PlanItem(i, 20, 50 + i % 200) for i in range(1000)]
    plan = plan_wave(items, estimate=GPU, budget=AMPLE, concurrency=64, policy=Policy())
    assert sorted(i for g in plan.chosen.groups for i in g.indexes) == list(range(1000))


@pytest.mark.parametrize(
    ("budget", "merge"),
    [
        pytest.param(
            BudgetSnapshot(remaining_tokens=900, tokens_per_second=1, token_capacity=900),
            MergePolicy(),
            id="token-bucket",
        ),
        pytest.param(AMPLE, MergePolicy(context_window=900), id="context-window"),
    ],
)
def test_no_merged_request_larger_than_the_budget_or_context(
    budget: BudgetSnapshot, merge: MergePolicy
) -> None:
    """Groups that could never fit one request's token limit are not candidates."""
    items = [PlanItem(i, 100, 200, max_tokens=300) for i in range(4)]
    plan = plan_wave(
        items,
        estimate=GPU,
        budget=budget,
        concurrency=64,
        policy=Policy(objective="cost", merge=merge),
    )
    for candidate in plan.candidates:
        for group in candidate.groups:
            if group.merged:
                assert group.input_tokens + (group.max_tokens or 0) <= 900
    assert plan.chosen.k >= 2
