"""A frozen view of the rate-limit budget, which the planner prices schedules against."""

from __future__ import annotations

from dataclasses import dataclass

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


def _ready(remaining: float | None, rate: float | None, needed: float) -> float:
    if remaining is None or needed <= remaining:
        return 0.0
    return (needed - remaining) / rate if rate else float("inf")
