"""Per-minute rate limits: continuous token buckets in simulated time.

The requests bucket holds ``rpm`` and refills ``rpm / 60`` per simulated second; the tokens
bucket holds ``tpm`` and refills ``tpm / 60``. A request costs one request and its prompt
tokens plus its ``max_tokens`` (the caller decides what that is when the request names none).
As OpenAI documents, a rejected request still costs its one request, so a client hammering a
429 makes its own wait longer; the debt is capped at one bucketful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Admission", "RateLimiter", "SimLimits", "TokenBucket", "format_reset"]


class SimLimits(BaseModel):
    """Per-minute quotas the simulated service enforces; None leaves a dimension unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rpm: int | None = Field(default=None, ge=1, description="Requests per minute.")
    tpm: int | None = Field(
        default=None, ge=1, description="Tokens (prompt + max output) per minute."
    )


class TokenBucket:
    """A continuously refilling bucket; times are simulated seconds."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / 60.0
        self.level = float(capacity)
        self._last = now

    def refill(self, now: float) -> None:
        """Add what has dripped in since the last look."""
        if now > self._last:
            self.level = min(self.capacity, self.level + (now - self._last) * self.rate)
            self._last = now

    def wait_for(self, amount: float) -> float:
        """Simulated seconds until the bucket holds ``amount`` (inf if it never can)."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level) / self.rate)

    def take(self, amount: float) -> None:
        """Debit ``amount``, never below minus one bucketful."""
        self.level = max(-self.capacity, self.level - amount)

    def until_full(self) -> float:
        """Simulated seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) / self.rate)


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdict on one request: allowed, or which limit refused it and for how long."""

    allowed: bool
    limit: Literal["requests", "tokens"] | None = None
    retry_after: float = 0.0  # simulated seconds
    too_large: bool = False


class RateLimiter:
    """Both buckets of one service, plus the rate-limit headers they imply."""

    def __init__(self, limits: SimLimits, now: float) -> None:
        self.limits = limits
        self.requests = TokenBucket(limits.rpm, now) if limits.rpm else None
        self.tokens = TokenBucket(limits.tpm, now) if limits.tpm else None

    def admit(self, cost_tokens: int, now: float) -> Admission:
        """Charge one request of ``cost_tokens`` tokens, or refuse it (still charging 1 request)."""
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.refill(now)
        req_wait = self.requests.wait_for(1) if self.requests else 0.0
        tok_wait = self.tokens.wait_for(cost_tokens) if self.tokens else 0.0
        if req_wait <= 0 and tok_wait <= 0:
            if self.requests:
                self.requests.take(1)
            if self.tokens:
                self.tokens.take(cost_tokens)
            return Admission(allowed=True)
        if self.requests:
            self.requests.take(1)
        # Quoted after the refused request's own debit, so waiting that long is enough.
        req_after = self.requests.wait_for(1) if self.requests else 0.0
        if req_wait > 0:
            return Admission(allowed=False, limit="requests", retry_after=req_after)
        too_large = math.isinf(tok_wait)
        wait = self.tokens.until_full() if self.tokens and too_large else tok_wait
        return Admission(
            allowed=False, limit="tokens", retry_after=max(wait, req_after), too_large=too_large
        )

    def headers(self, time_scale: float) -> list[tuple[str, str]]:
        """The six ``x-ratelimit-*`` headers for the limits that are set (resets in real time)."""
        out: list[tuple[str, str]] = []
        for kind, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is None:
                continue
            out += [
                (f"x-ratelimit-limit-{kind}", str(int(bucket.capacity))),
                (f"x-ratelimit-remaining-{kind}", str(max(0, math.floor(bucket.level)))),
                (f"x-ratelimit-reset-{kind}", format_reset(bucket.until_full() * time_scale)),
            ]
        return sorted(out)


def format_reset(seconds: float) -> str:
    """A duration as OpenAI's reset headers put it: ``12ms``, ``1s``, ``1m30.5s``, ``6m0s``."""
    ms = max(0, round(seconds * 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
