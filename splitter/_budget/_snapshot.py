"""A frozen view of the rate-limit budget, which the planner prices schedules against."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

__all__ = ["BudgetSnapshot"]


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """What remains of each budget now and how fast it refills; None where no limit is known."""

    remaining_requests: float | None = None
    remaining_tokens: float | None = None
    requests_per_second: float | None = None  # refill rate
    tokens_per_second: float | None = None
    token_capacity: float | None = None  # the most one request may reserve without debt

    def request_ready(self, nth: int) -> float:
        """Seconds from now until the ``nth`` request (0-based) may be sent."""
        return _ready(self.remaining_requests, self.requests_per_second, nth + 1)

    def tokens_ready(self, cumulative: float) -> float:
        """Seconds from now until ``cumulative`` tokens in all may have been reserved."""
        return _ready(self.remaining_tokens, self.tokens_per_second, cumulative)

    def ready_each(self, booked: Iterable[float]) -> list[float]:
        """``request_ready`` and ``tokens_ready`` for requests sent in turn, each booking
        ``booked`` tokens: the later of the two for each (what a planner prices per
        request, in one pass)."""
        cumulative = list(accumulate(booked))
        by_tokens = _ready_each(self.remaining_tokens, self.tokens_per_second, cumulative)
        count = range(1, len(cumulative) + 1)
        by_requests = _ready_each(self.remaining_requests, self.requests_per_second, count)
        return list(map(max, by_requests, by_tokens))


def _ready(remaining: float | None, rate: float | None, needed: float) -> float:
    if remaining is None or needed <= remaining:
        return 0.0
    return (needed - remaining) / rate if rate else float("inf")


def _ready_each(
    remaining: float | None, rate: float | None, needed: Iterable[float]
) -> list[float]:
    """``_ready`` of each of ``needed``."""
    if remaining is None:
        return [0.0 for _ in needed]
    if not rate:
        return [0.0 if x <= remaining else float("inf") for x in needed]
    return [0.0 if x <= remaining else (x - remaining) / rate for x in needed]
