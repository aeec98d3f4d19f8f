"""Primed fan-out: one request of a batch that shares a prefix (the system prompt and the
context) goes first, and the others are sent once its first token arrives, so that the
engine's prefix cache holds the shared part when they reach it.

A request sent before the first one's prefill is done cannot hit the cache; one sent after
it reads the cached prefix at the cache's rate (``ServiceEstimate.cached_rate``). The price
is one prefill's wait for everyone but the first; the gain, on an engine with a prefix
cache and compute-bound prefill, is every follower's shared prefill. The planner prices it
beside merged, fan-out and k groups when the service model has seen the cache serve; it
can be pinned with ``Policy(strategy="primed")``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._cost_model import ServiceEstimate
from ._exceptions import InvalidInputError

if TYPE_CHECKING:
    from ._groups import Requests
    from ._planner import Candidate, PlanItem
    from ._policy import Policy

__all__ = ["primed_candidates", "primed_schedule"]


def primed_schedule(
    inputs: Sequence[float], ready: Sequence[float], estimate: ServiceEstimate, shared: int
) -> tuple[list[float], list[float]]:
    """The requests' prefill work and ready times when the first goes alone and the rest
    at its first token: each follower's ``shared`` prefix tokens priced at the cache's rate,
    converted to tokens at the engine's uncached rate (what :func:`simulate` reads). On a
    per-slot cache (``ServiceEstimate.cache_per_slot``) a follower pays its whole prompt:
    the slot holding the prefix is the first request's, busy decoding."""
    first = ready[0] + estimate.rtt + estimate.prefill(inputs[0])
    cached = 0 if estimate.cache_per_slot else shared
    work = [float(inputs[0]), *(estimate.prefill_work(t, cached) for t in inputs[1:])]
    return work, [ready[0], *(max(r, first) for r in ready[1:])]


def primed_candidates(
    candidates: tuple[Candidate, ...],
    items: Sequence[PlanItem],
    policy: Policy,
    shared: int,
    estimate: ServiceEstimate,
    price: Callable[[Requests, int], Candidate],
) -> tuple[Candidate, ...]:
    """``candidates`` with primed fan-out added where it may pay (under ``auto``, with a
    shared prefix and a prefix cache seen), or in place of fan-out where it is pinned.
    ``price(requests, shared)`` prices a primed plan."""
    pinned = policy.strategy == "primed"
    if not pinned and (policy.strategy != "auto" or estimate.cached_rate is None):
        return candidates
    one_prefix = len({it.shape for it in items}) == 1 and shared > 0
    if pinned and not one_prefix:
        raise InvalidInputError(
            'strategy="primed" needs questions that share one prefix: the batch\'s system '
            "prompt or context, and no question with its own system prompt, context or "
            "history; use strategy='fanout' (or 'auto') for these"
        )
    fanout = next((c for c in candidates if c.k == len(items) and c.k > 1), None)
    if fanout is None or not one_prefix:
        return candidates
    primed = price(fanout.requests, shared)
    return (primed,) if pinned else (*candidates, primed)
