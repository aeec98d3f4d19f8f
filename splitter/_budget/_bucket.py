"""A continuously refilling token bucket, corrected by what the service reports."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .._headers import parse_count, parse_duration

__all__ = ["HEADROOM", "RESERVE", "Bucket"]

HEADROOM = 0.97  # we spend at this fraction of the service's refill rate
RESERVE = 0.1  # after a 429, leave this fraction of the limit in the service's bucket
_RESET_ROUNDING = 0.0005  # reset headers are given to the millisecond


@dataclass(slots=True)
class Bucket:
    """One limit (requests or tokens). Unknown until a limit is given or read from headers.

    ``level`` may go below zero: a 429 or an oversized request leaves a debt that refills.
    The bucket holds at most ``burst`` of the window's ``limit``, so a fresh budget is spent
    at a pace rather than all at once (providers such as Azure enforce per-minute limits on
    ~10 s sub-windows).
    """

    limit: float | None = None  # per window
    rate: float | None = None  # refill per second
    level: float = 0.0
    at: float = 0.0  # when level was last computed
    burst: float = 1.0  # fraction of the limit the bucket holds
    share: float = 1.0  # fraction of the limit this process may use (a shared budget's fallback)
    blocked_until: float = 0.0
    last_shift: float = -math.inf
    measured_from: float = 0.0  # the largest deficit a rate was read from (0: assumed)
    rate_low: float = 0.0  # what the readings so far allow the refill rate to be
    rate_high: float = math.inf

    @classmethod
    def per_minute(cls, limit: int | None, *, burst: float, now: float) -> Bucket:
        if limit is None:
            return cls(burst=burst, at=now)
        return cls(float(limit), limit / 60, limit * burst, now, burst)

    @property
    def known(self) -> bool:
        return self.limit is not None and self.rate is not None

    @property
    def capacity(self) -> float:
        return max(1.0, (self.limit or math.inf) * self.burst * self.share)

    @property
    def reserve(self) -> float:
        """What a 429 makes us leave in the service's bucket (see :meth:`block`)."""
        return max(1.0, (self.limit or 0.0) * RESERVE)

    @property
    def pace(self) -> float:
        """The refill rate we spend at: a little under the service's, so its bucket keeps a
        margin for the jitter between our clock and its own."""
        return (self.rate or 0.0) * HEADROOM * self.share

    def level_at(self, now: float) -> float:
        if not self.known:
            return math.inf
        return min(self.capacity, self.level + max(0.0, now - self.at) * self.pace)

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` may be taken, counting debts already booked (an amount
        above capacity waits for a full bucket, then goes through once, leaving a debt)."""
        if not self.known:
            return 0.0
        blocked = max(0.0, self.blocked_until - now)
        short = min(amount, self.capacity) - self.level_at(now)
        return max(blocked, short / self.pace if short > 0 and self.rate else 0.0)

    def take(self, amount: float, now: float) -> None:
        if self.known:
            self.level, self.at = self.level_at(now) - amount, now

    def give(self, amount: float, now: float) -> None:
        if self.known:
            self.level, self.at = min(self.capacity, self.level_at(now) + amount), now

    def learn_rate(self, limit: float, remaining: float, reset: float) -> None:
        """Narrow the refill rate down with one reading.

        ``remaining`` is the service's level rounded down to a whole number and ``reset`` the
        time it needs to refill to ``limit``, rounded to the millisecond. The reading comes
        right after the service counted our request, so its level is at most ``limit - 1``:
        the true deficit lies in [max(1, d - 1), d] for the reported d (and is unbounded
        above at "remaining: 0", where the bucket may be in debt). Each reading bounds the
        rate; the bounds of all readings are intersected, and the budget spends at the
        lower one, so a rounded-down ``remaining`` can never make it overtake the service.
        Readings that contradict the bounds mean the limit changed: they start afresh.
        """
        deficit = limit - remaining
        if deficit < 1:
            return
        low = max(1.0, deficit - 1) / (reset + _RESET_ROUNDING)
        high = deficit / max(reset - _RESET_ROUNDING, 1e-9) if remaining >= 1 else math.inf
        if low > self.rate_high or high < self.rate_low:
            self.rate_low, self.rate_high = low, high
        else:
            self.rate_low, self.rate_high = max(self.rate_low, low), min(self.rate_high, high)
        self.rate = self.rate_low
        self.measured_from = max(self.measured_from, deficit)

    def window(self) -> float | None:
        """Seconds the service takes to refill this limit from empty, if measured."""
        measured = self.measured_from > 0
        return self.limit / self.rate if measured and self.limit and self.rate else None

    def assume_window(self, seconds: float) -> None:
        """Take the other limit's measured window (providers refill both over one window)."""
        if self.limit and not self.measured_from:
            self.rate = self.limit / seconds

    def block(self, seconds: float, now: float) -> float:
        """A 429: nothing more goes before ``seconds``, and every booking moves back.

        The service's bucket is empty and (as OpenAI counts failed requests) the rejected
        request was charged to it too. At an empty bucket, arrivals bunched by jitter draw
        more 429s, each charged again, which digs the hole deeper; so the schedule moves back
        by the time the service needs to refill that request and a reserve. Returns that
        shift in seconds (0 when a 429 of the same burst already moved it).
        """
        self.blocked_until = max(self.blocked_until, now + seconds)
        if not self.known or not self.pace:
            return 0.0
        shift = (1 + self.reserve) / self.pace
        if now < self.last_shift + shift:
            return 0.0
        self.last_shift = now
        self.level, self.at = self.level_at(now) - (1 + self.reserve), now
        return shift

    def read(self, headers: Mapping[str, str], kind: str, now: float) -> None:
        """Take the service's account of this limit from one response's headers."""
        limit = parse_count(headers.get(f"x-ratelimit-limit-{kind}"))
        remaining = parse_count(headers.get(f"x-ratelimit-remaining-{kind}"))
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
        if limit:
            first = self.limit is None
            self.limit = limit
            self.rate = self.rate or limit / 60
            if first:
                self.level, self.at = self.capacity, now
        # The reset is the time to refill to the limit: it tells the true rate, which
        # differs from limit/60 on services with other windows (or a simulator's time scale).
        if self.limit and remaining is not None and reset:
            self.learn_rate(self.limit, remaining, reset)
        if remaining is not None and self.known:
            # Never believe we have more than the service says (others share the key).
            self.level, self.at = min(self.level_at(now), remaining), now
