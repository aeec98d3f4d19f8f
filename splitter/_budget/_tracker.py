"""Keeps the latest ``x-ratelimit-*`` readings and turns them into snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .._headers import parse_count, parse_duration
from ._snapshot import BudgetSnapshot

__all__ = ["HeaderTracker"]

_KINDS = ("requests", "tokens")


@dataclass(slots=True)
class _Bucket:
    limit: float | None = None
    rate: float | None = None  # refill per second
    remaining: float | None = None

    def read(self, headers: Mapping[str, str], kind: str) -> None:
        limit = parse_count(headers.get(f"x-ratelimit-limit-{kind}"))
        remaining = parse_count(headers.get(f"x-ratelimit-remaining-{kind}"))
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
        if limit:
            self.limit = limit
            self.rate = self.rate or limit / 60
        if remaining is not None:
            self.remaining = remaining
        # The reset is the time to refill to the limit: it tells the true rate, which
        # differs from limit/60 on services with other windows (or a simulator's time scale).
        if self.limit and remaining is not None and reset and self.limit - remaining >= 1:
            self.rate = (self.limit - remaining) / reset

    def now(self, elapsed: float) -> float | None:
        if self.remaining is None or self.limit is None or self.rate is None:
            return self.remaining
        return min(self.limit, self.remaining + elapsed * self.rate)


class HeaderTracker:
    """The service's own account of our budget, refilled between readings.

    Limits given in the policy (per minute) are used until the headers say otherwise.
    """

    def __init__(self, *, rpm: int | None = None, tpm: int | None = None) -> None:
        self._buckets = {
            "requests": _Bucket(rpm, rpm / 60 if rpm else None, rpm),
            "tokens": _Bucket(tpm, tpm / 60 if tpm else None, tpm),
        }
        self._read_at: float | None = None

    def sync(self, headers: Mapping[str, str], now: float) -> None:
        """Take the readings of one response's headers, received at ``now``."""
        for kind in _KINDS:
            self._buckets[kind].read(headers, kind)
        self._read_at = now

    def snapshot(self, now: float) -> BudgetSnapshot:
        """What remains at ``now``, assuming continuous refill since the last reading."""
        elapsed = 0.0 if self._read_at is None else max(0.0, now - self._read_at)
        requests, tokens = self._buckets["requests"], self._buckets["tokens"]
        return BudgetSnapshot(
            remaining_requests=requests.now(elapsed),
            remaining_tokens=tokens.now(elapsed),
            requests_per_second=requests.rate,
            tokens_per_second=tokens.rate,
        )
