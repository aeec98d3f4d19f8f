"""Canaries in a plan: the solo requests a candidate's merged requests carry (``_canary``),
priced on the cost model, and where they go.

A canary is a real request: on an engine whose prefills share its compute, one sent beside
a merged request with a long shared context doubles that request's prefill (the simulator's
llama-server-like engine, a 1,500-token document, 16-token answers: two questions merged
took 8.9 s with their canary beside against 5.1 s without). Sent once its merged reply is
back instead, it finds the shared prefix in the engine's cache (the slot the merged request
freed, or a shared cache) and costs a short prefill and its own answer; where decoding
dominates it costs a whole answer's wait, and beside is cheaper. Each candidate is priced
both ways and keeps the faster, but after only where merged replies are read back
reliably: a reply that gives answers back unread is re-asked alone, and the re-asks then
land on slots that never held the shared context, where a canary sent beside would have
warmed one and served as one of them (``bench/canary_placement.py`` on llama-server with
SmolLM2, whose merged replies need re-asks: a canary after its reply read 1,543 of ~1,567
prompt tokens from the merged request's slot and took 0.4 s against 11.9 s beside, the
check done at 7.7 s against 12.7 s; but those batches ended at 17.2 s against 13.1 s).
``MergePolicy.canary_placement`` pins either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from ._cost_model import ServiceEstimate, simulate
from ._groups import PlanItem, Requests

__all__ = ["Canaries", "CanaryPricing", "with_canaries"]

_AFTER_NEEDS = 0.9  # the share of merged answers read back that a canary after needs


@dataclass(frozen=True)
class Canaries:
    """What a plan's canaries are priced on: how many of a candidate's merged requests (in
    send order) would carry one, given their count and the candidate's requests."""

    due: Callable[[int, int], int]  # (merged requests, requests) -> canaries
    items: Sequence[PlanItem]
    preamble: int  # the system prompt and context every request begins with
    merge_success: float = 1.0  # the share of merged answers read back (``_merge``)
    placement: Literal["auto", "beside", "after"] = "auto"  # ``MergePolicy.canary_placement``

    @cached_property
    def by_index(self) -> dict[int, PlanItem]:
        """The items by question index: made only for a plan that prices a canary (most
        plans price none, and this is a pass over every question)."""
        return {it.index: it for it in self.items}


@dataclass(frozen=True, slots=True)
class CanaryPricing:
    """A candidate's canaries: how many, where they go, the makespan with them and their
    tokens."""

    count: int
    after: bool
    latency: float
    tokens: int


def with_canaries(
    order: Requests,
    inputs: Sequence[float],
    ready: Sequence[float],
    estimate: ServiceEstimate,
    concurrency: int,
    queued: Sequence[float] | None,
    canaries: Canaries,
    finished: Sequence[float],
) -> CanaryPricing | None:
    """``order`` (the plan's requests as sent, ``inputs`` their prefill work) priced with the
    canaries its merged requests would carry, beside them and after their replies, the
    faster kept; ``finished``: its requests' finishes without them. None: none is due."""
    merged = [i for i, members in enumerate(order.indexes) if len(members) > 1]
    count = canaries.due(len(merged), len(order)) if merged else 0
    if count <= 0:
        return None
    checked = merged[:count]
    solo_in: list[float] = []
    solo_out: list[int] = []
    for i in checked:
        items = canaries.by_index
        members = [items[j] for j in order.indexes[i] if j in items]
        own = members[0].preamble if members else None
        head = canaries.preamble if own is None else own
        n = max(1, len(members))
        solo_in.append(head + sum(m.input_tokens for m in members) / n)
        solo_out.append(round(sum(m.output_tokens for m in members) / n))
    outputs = list(order.output_tokens)
    tokens = round(sum(solo_in)) + sum(solo_out)
    # Beside: each canary sent right after its merged request, priced as the plan's own
    # requests are (one waiting at the server for a slot finds the prefix cached).
    canary_of = {i: k for k, i in enumerate(checked)}
    b_in: list[float] = []
    b_out: list[int] = []
    b_ready: list[float] = []
    b_queued: list[float] = []
    for i in range(len(order)):
        b_in.append(inputs[i])
        b_out.append(outputs[i])
        b_ready.append(ready[i])
        b_queued.append(queued[i] if queued is not None else inputs[i])
        if i in canary_of:
            k = canary_of[i]
            b_in.append(solo_in[k])
            b_out.append(solo_out[k])
            b_ready.append(ready[i])
            shared = estimate.prefill_work(solo_in[k], canaries.preamble)
            b_queued.append(shared if queued is not None else solo_in[k])
    _, b_finishes = simulate(
        b_in, b_out, b_ready, estimate, concurrency, b_queued if queued is not None else None
    )
    beside = max(b_finishes)
    placement = canaries.placement
    if placement == "beside" or (placement == "auto" and canaries.merge_success < _AFTER_NEEDS):
        return CanaryPricing(count, False, beside, tokens)
    # After: each canary sent once its merged reply is back, its shared prefix read from the
    # cache where one has been seen (the merged request's slot is free again).
    late = sorted(range(count), key=lambda k: finished[checked[k]])
    cached = canaries.preamble if estimate.cached_rate is not None else 0
    a_in = [*inputs, *(estimate.prefill_work(solo_in[k], cached) for k in late)]
    a_out = [*outputs, *(solo_out[k] for k in late)]
    a_ready = [*ready, *(finished[checked[k]] for k in late)]
    a_queued = None if queued is None else [*queued, *a_in[len(order) :]]
    _, a_finishes = simulate(a_in, a_out, a_ready, estimate, concurrency, a_queued)
    after = max(a_finishes)
    if placement == "after" or after < beside:
        return CanaryPricing(count, True, after, tokens)
    return CanaryPricing(count, False, beside, tokens)
