"""Choosing how to send one wave of independent questions: merged, fanned out, or k groups.

A pure function of (questions' token estimates, service estimate, budget snapshot, policy).
Each candidate splits the questions into k groups balanced by expected output (longest
first onto the lightest group, as LPT scheduling does), then its makespan is predicted by
list-scheduling the requests against the concurrency limit and the rate-limit budget: a
request starts when a slot is free, a request token is left (RPM) and its input plus
max_tokens fit in the token budget (TPM). The objective picks among the candidates.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._budget import BudgetSnapshot
from ._canary import Agreement
from ._canary_plan import Canaries, CanaryPricing, with_canaries
from ._cost_model import ServiceEstimate, simulate
from ._explain import explain_plan
from ._groups import Group, PlanItem, Repair, Requests, group_of, groupings
from ._policy import Policy, Strategy, Weighted
from ._primed import primed_candidates, primed_schedule

__all__ = ["Candidate", "Group", "Plan", "PlanItem", "Requests", "plan_wave"]

# A plan's wait for the rate limit is named in the explanation once it is this share of the
# plan's latency: below it the wait does not explain why the plan lost.
_WAIT_WORTH_NAMING = 0.05
_LATENCY_TIE = 0.02  # candidates within 2% of the fastest count as equally fast
# Past this many requests the batch is full nearly all the time, and a constant batch size
# predicts as well as the event simulation at a fraction of the cost.
_FLUID_UP_TO = 128


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to send the wave, with its predicted makespan and billed tokens.

    ``groups`` are in the order they are sent (longest first); ``starts``/``finishes`` hold
    each one's predicted times, in seconds from now.
    """

    requests: Requests  # the groups as columns: what pricing reads
    starts: tuple[float, ...]
    finishes: tuple[float, ...]
    latency: float
    cost: int
    budget_wait: float  # the longest any request waits for the rate-limit budget
    primed: bool = False  # the first request goes alone; the rest at its first token
    # Merged requests that carry a canary, and whether each goes once its merged reply is
    # back rather than beside it; the makespan with them and their tokens. Candidates are
    # chosen without them: a canary is what merging costs while its answers are checked,
    # and priced in, a merge that pays off once checked would never be checked.
    canaries: int = 0
    canary_after: bool = False
    checked_latency: float | None = None
    canary_tokens: int = 0
    # The Groups, made when first read: a plan prices several candidates and sends one.
    _made: list[tuple[Group, ...]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    @property
    def groups(self) -> tuple[Group, ...]:
        made = self._made
        if not made:
            made.append(self.requests.groups())
        return made[0]

    @property
    def k(self) -> int:
        return len(self.requests)

    @property
    def label(self) -> str:
        if self.primed:
            return "primed fan-out"
        if self.k == 1 and len(self.requests.indexes[0]) > 1:
            return "merge"
        if max(map(len, self.requests.indexes), default=1) == 1:  # none merged
            return "fan-out"
        return f"{self.k} groups"


@dataclass(frozen=True, slots=True)
class Plan:
    """The chosen candidate, every candidate priced, and why."""

    chosen: Candidate
    candidates: tuple[Candidate, ...]
    strategy: Strategy
    reason: str
    estimate: ServiceEstimate
    budget: BudgetSnapshot
    items: tuple[PlanItem, ...] = ()
    agreement: Agreement | None = None  # merged answers vs their canaries, when measured
    min_agreement: float = 0.0
    # The batch's system message (system prompt and shared context) in tokens: what every
    # request reads before its question unless the question brings its own.
    preamble_tokens: int = 0

    @property
    def predicted_latency(self) -> float:
        """The chosen plan's predicted makespan, its canaries included."""
        chosen = self.chosen
        return chosen.latency if chosen.checked_latency is None else chosen.checked_latency

    def explain(self) -> str:
        """A small table of the candidates, the chosen one marked, and the reason."""
        return explain_plan(self)


def plan_wave(
    items: Sequence[PlanItem],
    *,
    estimate: ServiceEstimate,
    budget: BudgetSnapshot,
    concurrency: int,
    policy: Policy,
    preamble_tokens: int = 0,
    alone: int | None = None,
    merge_success: float = 1.0,
    agreement: Agreement | None = None,
    canaries: Callable[[int, int], int] | None = None,
) -> Plan:
    """Price the candidate plans for ``items`` and choose one by the policy's objective.

    ``alone`` is an item index that must have a request of its own in every candidate (the
    answer streamed live first: in a merged request it could only arrive whole, at the end).
    ``merge_success`` is the share of merged answers this model gets read back; the rest
    are re-asked alone after their merged request, which a merged group is charged for.
    ``agreement`` is how often merged answers agreed with their canaries: under
    ``strategy="auto"`` with canaries on, below ``MergePolicy.min_agreement`` only fan-out
    is priced. ``canaries(merged, requests)``: how many of a candidate's ``merged`` requests
    (of ``requests``) the executor would send a canary for; each candidate is priced
    with them (``_canary_plan``).
    """
    if not items:
        raise ValueError("nothing to plan")
    apart = [it for it in items if it.index == alone] if alone is not None else []
    rest = [it for it in items if it.index != alone] if apart else list(items)
    distrusted = _distrusted(agreement, policy)
    ahead = [Requests.of([group_of(apart, 0, 1.0, preamble_tokens)])] if apart else []
    # A re-ask costs a round trip and a first token before its own answer: in tokens of
    # decode time, that lead is (rtt + ttft0) / tpot1.
    repair = Repair(merge_success, (estimate.rtt + estimate.ttft0) / max(estimate.tpot1, 1e-6))
    # Every request begins with the batch's system prompt and context unless a question
    # brings its own: then a request queued at the server finds that prefix cached.
    shared = preamble_tokens if len({it.shape for it in items}) == 1 else 0
    checks = None
    if canaries is not None and policy.strategy == "auto" and policy.merge.canaries:
        checks = Canaries(
            canaries,
            items,
            preamble_tokens,
            merge_success,
            policy.merge.canary_placement,
        )
    candidates = tuple(
        _price(
            Requests.joined([*ahead, requests]),
            estimate,
            budget,
            concurrency,
            shared_prefix=shared,
            canaries=checks,
        )
        for requests in groupings(rest, policy, preamble_tokens, repair, distrusted)
    ) or (_price(Requests.joined(ahead), estimate, budget, concurrency, shared_prefix=shared),)
    candidates = primed_candidates(
        candidates, items, policy, preamble_tokens, estimate,
        lambda requests, shared: _price(
            requests, estimate, budget, concurrency, shared, shared_prefix=shared
        ),
    )  # fmt: skip
    # A merged request that can never fit the token budget or the context is not a plan.
    limit = _request_limit(budget, policy)
    fitting = tuple(c for c in candidates if not _overflows(c, limit)) or candidates
    chosen, reason = _choose(fitting, policy)
    if distrusted and agreement is not None:
        reason = (
            f"fan-out only: merged answers agreed with {agreement.share:.0%} of "
            f"{agreement.checked} canaries, under MergePolicy.min_agreement "
            f"{policy.merge.min_agreement:.0%}"
        )
    shown = agreement if policy.merge.canaries and policy.strategy == "auto" else None
    return Plan(
        chosen,
        fitting,
        policy.strategy,
        reason,
        estimate,
        budget,
        tuple(items),
        shown,
        policy.merge.min_agreement,
        preamble_tokens,
    )


def _distrusted(agreement: Agreement | None, policy: Policy) -> bool:
    """Whether canaries have shown merged answers to be below the policy's trust."""
    return (
        agreement is not None
        and policy.strategy == "auto"
        and policy.merge.canaries
        and agreement.share < policy.merge.min_agreement
    )


def _request_limit(budget: BudgetSnapshot, policy: Policy) -> float | None:
    limits = [x for x in (budget.token_capacity, policy.merge.context_window) if x is not None]
    return min(limits) if limits else None


def _overflows(candidate: Candidate, cap: float | None) -> bool:
    r = candidate.requests
    return cap is not None and any(
        len(members) > 1 and tokens_in + (most or out) > cap
        for members, tokens_in, out, most in zip(
            r.indexes, r.input_tokens, r.output_tokens, r.max_tokens, strict=True
        )
    )


def _price(
    requests: Requests,
    estimate: ServiceEstimate,
    budget: BudgetSnapshot,
    concurrency: int,
    primed: int | None = None,
    *,
    shared_prefix: int = 0,
    canaries: Canaries | None = None,
) -> Candidate:
    """Predict the schedule: longest request first, each started when a slot and the budget
    allow, decoding in a shared batch whose per-token time grows with its size. ``primed``:
    the shared prefix's tokens, when the rest wait for the first's first token (``_primed``).
    ``shared_prefix``: the tokens every request begins with, served from the engine's cache
    to a request that waits for an engine slot (one the plan's own requests held).
    ``canaries``: the merged requests' canaries, priced in (``_canary_plan``)."""
    order = _longest_first(requests)
    ready = _budget_ready(order, budget)
    waited = max(ready)  # for the budget (a primed plan's followers wait for the first too)
    checked: CanaryPricing | None = None
    if primed is not None or estimate.prefill_share or len(order) <= _FLUID_UP_TO:
        inputs: list[float] = list(order.input_tokens)
        outputs = list(order.output_tokens)
        queued = _queued_inputs(inputs, estimate, shared_prefix)
        if primed is not None:
            inputs, ready = primed_schedule(inputs, ready, estimate, primed)
        starts, finishes = simulate(inputs, outputs, ready, estimate, concurrency, queued)
        if canaries is not None and primed is None:
            checked = with_canaries(
                order, inputs, ready, estimate, concurrency, queued, canaries, finishes
            )
    else:
        # Past _FLUID_UP_TO requests a canary or two moves nothing the steady state shows.
        starts, finishes = _steady(order, ready, estimate, concurrency)
    return Candidate(
        requests=order,
        starts=tuple(starts),
        finishes=tuple(finishes),
        latency=max(finishes),
        cost=sum(order.input_tokens) + sum(order.output_tokens),
        budget_wait=waited,
        primed=primed is not None,
        canaries=0 if checked is None else checked.count,
        canary_after=checked is not None and checked.after,
        checked_latency=None if checked is None else checked.latency,
        canary_tokens=0 if checked is None else checked.tokens,
    )


def _queued_inputs(
    inputs: list[float], estimate: ServiceEstimate, shared: int
) -> list[float] | None:
    """What each request's prefill costs, in tokens at the uncached rate, if it waits at
    the server for a slot: its ``shared`` prefix read from the cache. None where no request
    can wait (no slot count learned, or no more requests than slots) or no cache was seen."""
    slots = estimate.slots
    if shared <= 0 or estimate.cached_rate is None or slots is None or len(inputs) <= slots:
        return None
    return [estimate.prefill_work(t, shared) for t in inputs]


def _longest_first(requests: Requests) -> Requests:
    """``requests`` by expected output, longest first, then by first question: sorted on one
    integer, ``first - output * span``, which orders as the pair (-output, first) does.
    Fan-out's come in that order already (from questions sorted so)."""
    if requests.longest_first:
        return requests
    firsts = [members[0] for members in requests.indexes]
    span = 1 + max(firsts) - min(firsts)
    keys = [first - out * span for first, out in zip(firsts, requests.output_tokens, strict=True)]
    return requests.reordered(sorted(range(len(keys)), key=keys.__getitem__))


def _budget_ready(order: Requests, budget: BudgetSnapshot) -> list[float]:
    """Seconds until the budget admits each request, sent in ``order``."""
    if budget.remaining_requests is None and budget.remaining_tokens is None:
        return [0.0] * len(order)
    booked = [
        tokens_in + (most or out)
        for tokens_in, out, most in zip(
            order.input_tokens, order.output_tokens, order.max_tokens, strict=True
        )
    ]
    return budget.ready_each(booked)


def _steady(
    order: Requests, ready: list[float], estimate: ServiceEstimate, concurrency: int
) -> tuple[list[float], list[float]]:
    """List scheduling with every request decoding in a full batch: as many as the client
    sends at once, or as the server runs at once if that is fewer."""
    width = min(len(order), concurrency, estimate.slots or len(order))
    tpot = estimate.tpot(width)
    fixed = estimate.rtt + estimate.ttft0
    prefill_rate = estimate.prefill_rate
    free_at = [0.0] * width  # a heap: when each slot is next free
    replace = heapq.heapreplace
    starts: list[float] = []
    finishes: list[float] = []
    columns = zip(order.input_tokens, order.output_tokens, strict=True)
    if not any(ready):  # nothing waits for the budget: each starts once a slot is free
        for tokens_in, out in columns:
            start = free_at[0]
            finish = start + fixed + tokens_in / prefill_rate + out * tpot
            replace(free_at, finish)
            starts.append(start)
            finishes.append(finish)
        return starts, finishes
    for (tokens_in, out), allowed in zip(columns, ready, strict=True):
        start = max(free_at[0], allowed)
        finish = start + fixed + tokens_in / prefill_rate + out * tpot
        replace(free_at, finish)
        starts.append(start)
        finishes.append(finish)
    return starts, finishes


def _choose(candidates: Sequence[Candidate], policy: Policy) -> tuple[Candidate, str]:
    objective = policy.objective
    if len(candidates) == 1:
        only = candidates[0]
        return only, f"strategy={policy.strategy!r} forces {only.label}"
    if objective == "cost":
        chosen = min(candidates, key=lambda c: (c.cost, c.latency))
        return chosen, _compare(chosen, candidates, "fewest billed tokens")
    if isinstance(objective, Weighted):
        w = objective.seconds_per_1k_tokens
        chosen = min(candidates, key=lambda c: c.latency + c.cost / 1000 * w)
        return chosen, _compare(chosen, candidates, f"best latency + {w:g}s per 1k tokens")
    fastest = min(c.latency for c in candidates)
    near = [c for c in candidates if c.latency <= fastest * (1 + _LATENCY_TIE)]
    chosen = min(near, key=lambda c: (c.cost, c.latency))
    return chosen, _compare(chosen, candidates, "lowest predicted latency")


def _compare(chosen: Candidate, candidates: Sequence[Candidate], goal: str) -> str:
    merge = min(candidates, key=lambda c: c.k)
    fanout = max(candidates, key=lambda c: c.k)
    parts = [
        f"{chosen.label} ({chosen.k} requests) has the {goal}: {chosen.latency:.2f}s, "
        f"{chosen.cost} tokens"
    ]
    for other in (merge, fanout):
        if other is not chosen:
            note = f"; {other.label} {other.latency:.2f}s, {other.cost} tokens"
            if other.budget_wait > _WAIT_WORTH_NAMING * max(other.latency, 1e-9):
                note += f" (waits {other.budget_wait:.2f}s for the rate limit)"
            parts.append(note)
    return "".join(parts)
