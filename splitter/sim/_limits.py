"""Rate limits in simulated time: a zoo of limiter kinds, each with its own wire dialect.

``SimLimits(kind=...)`` picks how requests (and, where the kind has them, tokens) are counted;
``RateLimiter`` applies it. All times are simulated seconds from the service's start.

* ``token_bucket`` (the default, OpenAI's): the requests bucket holds ``rpm`` and refills
  ``rpm / 60`` per second, the tokens bucket likewise with ``tpm``. A request costs one request
  and its prompt tokens plus its ``max_tokens``. As OpenAI documents, a rejected request still
  costs its one request (``count_rejected``), the debt capped at one bucketful. Headers:
  ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; 429 with ``retry-after(-ms)``.
* ``fixed_window``: ``limit`` requests per ``window`` seconds, the windows aligned to the
  service's start. Headers: the window's limit, what is left of it, the time to its end.
* ``sliding_log``: at most ``limit`` requests in any trailing ``window`` seconds (a request at
  ``t`` leaves the log at ``t + window``). Headers: limit, what is left, the time until the
  oldest logged request leaves.
* ``azure`` (Azure OpenAI's): ``rpm / 6`` requests per 10-second sub-window, and a per-minute
  tokens bucket as OpenAI's. Headers as Azure sends them: ``x-ratelimit-limit-requests`` (the
  sub-window's limit, not the minute's), ``x-ratelimit-remaining-requests``, and the tokens'
  limit and remaining; no reset headers. 429 with ``retry-after(-ms)``.
* ``leaky_bucket``: nginx's ``limit_req`` with ``nodelay``, to the millisecond: a request
  arriving ``ms`` after the last accepted one makes ``excess = max(0, excess - rate * ms +
  1000)`` (in thousandths of a request; the first request sets 0), and is refused, leaving the
  state alone, when that exceeds ``burst * 1000``. No rate-limit headers, and a 429 without
  ``retry-after`` (nginx sends 503 unless ``limit_req_status 429``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "Admission",
    "LimiterKind",
    "RateLimiter",
    "SimLimits",
    "TokenBucket",
    "format_reset",
]

LimiterKind = Literal["token_bucket", "fixed_window", "sliding_log", "azure", "leaky_bucket"]
AZURE_SUB_WINDOW = 10.0  # seconds: Azure OpenAI enforces RPM as rpm / 6 per 10 s
_FIELDS: dict[str, tuple[str, ...]] = {
    # The fields each kind reads; setting another one is an error, not a silent no-op.
    "token_bucket": ("rpm", "tpm"),
    "fixed_window": ("limit", "window"),
    "sliding_log": ("limit", "window"),
    "azure": ("rpm", "tpm"),
    "leaky_bucket": ("rate", "burst"),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "fixed_window": ("limit", "window"),
    "sliding_log": ("limit", "window"),
    "leaky_bucket": ("rate",),
}


class SimLimits(BaseModel):
    """The rate limits the simulated service enforces; the default kind is OpenAI's.

    ``SimLimits()`` limits nothing; ``SimLimits(rpm=60)`` is OpenAI's per-minute bucket.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LimiterKind = Field(
        "token_bucket",
        description="How requests are counted: token_bucket (OpenAI), fixed_window, "
        "sliding_log, azure (10 s sub-windows) or leaky_bucket (nginx limit_req).",
    )
    rpm: int | None = Field(
        default=None, ge=1, description="token_bucket, azure: requests per minute."
    )
    tpm: int | None = Field(
        default=None,
        ge=1,
        description="token_bucket, azure: tokens (prompt + max output) per minute.",
    )
    limit: int | None = Field(
        default=None, ge=1, description="fixed_window, sliding_log: requests per window."
    )
    window: float | None = Field(
        default=None, gt=0, description="fixed_window, sliding_log: the window, seconds."
    )
    rate: float | None = Field(
        default=None,
        ge=0.001,
        description="leaky_bucket: requests per second (nginx's rate=5r/s is 5).",
    )
    burst: int | None = Field(
        default=None,
        ge=0,
        description="leaky_bucket: requests beyond the rate let through at once (nginx's "
        "burst=; default 0).",
    )
    headers: bool | None = Field(
        default=None,
        description="Send the kind's x-ratelimit-* headers; None: yes, except leaky_bucket, "
        "which has none.",
    )
    retry_after: bool | None = Field(
        default=None,
        description="Put retry-after and retry-after-ms on a 429; None: yes, except "
        "leaky_bucket (nginx sends neither).",
    )
    count_rejected: bool | None = Field(
        default=None,
        description="A refused request still counts against the limit; None: yes for "
        "token_bucket (as OpenAI documents), no for the other kinds.",
    )

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> SimLimits:
        used = _FIELDS[self.kind]
        for name in ("rpm", "tpm", "limit", "window", "rate", "burst"):
            if getattr(self, name) is not None and name not in used:
                raise ValueError(
                    f"{name} does not apply to kind={self.kind!r}, which reads {', '.join(used)}"
                )
        missing = [name for name in _REQUIRED.get(self.kind, ()) if getattr(self, name) is None]
        if missing:
            raise ValueError(f"kind={self.kind!r} needs {' and '.join(missing)}")
        if self.kind == "leaky_bucket" and self.headers:
            raise ValueError("leaky_bucket has no rate-limit headers (nginx sends none)")
        return self

    @property
    def sends_headers(self) -> bool:
        """Whether responses carry this kind's ``x-ratelimit-*`` headers."""
        return self.kind != "leaky_bucket" if self.headers is None else self.headers

    @property
    def sends_retry_after(self) -> bool:
        """Whether a 429 says how long to wait."""
        return self.kind != "leaky_bucket" if self.retry_after is None else self.retry_after

    @property
    def counts_rejected(self) -> bool:
        """Whether a refused request is charged like an accepted one."""
        if self.count_rejected is None:
            return self.kind == "token_bucket"
        return self.count_rejected


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdict on one request: allowed, or which limit refused it and for how long."""

    allowed: bool
    limit: Literal["requests", "tokens"] | None = None
    retry_after: float = 0.0  # simulated seconds
    too_large: bool = False


class _Meter(Protocol):
    """One counted dimension (requests or tokens) of one limiter kind."""

    capacity: int

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` would be let through (0: now; inf: never)."""

    def take(self, amount: float, now: float) -> None:
        """Charge ``amount`` (accepted, or refused under count_rejected)."""

    def remaining(self, now: float) -> int:
        """What could still be let through at ``now``."""

    def reset(self, now: float) -> float:
        """Seconds until the meter is back to its initial state (the reset header)."""


class TokenBucket:
    """A continuously refilling bucket (per minute); times are simulated seconds."""

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.rate = capacity / 60.0
        self.level = float(capacity)
        self._last = now

    def refill(self, now: float) -> None:
        """Add what has dripped in since the last look."""
        if now > self._last:
            self.level = min(float(self.capacity), self.level + (now - self._last) * self.rate)
            self._last = now

    def wait_for(self, amount: float) -> float:
        """Simulated seconds until the bucket holds ``amount`` (inf if it never can)."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level) / self.rate)

    def until_full(self) -> float:
        """Simulated seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) / self.rate)

    def wait(self, amount: float, now: float) -> float:
        self.refill(now)
        return self.wait_for(amount)

    def take(self, amount: float, now: float) -> None:
        """Debit ``amount``, never below minus one bucketful."""
        self.refill(now)
        self.level = max(-float(self.capacity), self.level - amount)

    def remaining(self, now: float) -> int:
        # As of the last request: the headers report the state a request left behind.
        return max(0, math.floor(self.level))

    def reset(self, now: float) -> float:
        return self.until_full()


class FixedWindow:
    """``capacity`` per ``window`` seconds; windows start at ``origin`` + k * ``window``."""

    def __init__(self, capacity: int, window: float, origin: float) -> None:
        self.capacity = capacity
        self.window = window
        self._origin = origin
        self._index = 0
        self.count = 0.0

    def _roll(self, now: float) -> None:
        index = math.floor((now - self._origin) / self.window)
        if index > self._index:
            self._index, self.count = index, 0.0

    def _end(self, now: float) -> float:
        index = math.floor((now - self._origin) / self.window)
        return self._origin + (index + 1) * self.window

    def wait(self, amount: float, now: float) -> float:
        self._roll(now)
        if amount > self.capacity:
            return math.inf
        return 0.0 if self.count + amount <= self.capacity else self._end(now) - now

    def take(self, amount: float, now: float) -> None:
        self._roll(now)
        self.count += amount

    def remaining(self, now: float) -> int:
        self._roll(now)
        return max(0, math.floor(self.capacity - self.count))

    def reset(self, now: float) -> float:
        return self._end(now) - now


class SlidingLog:
    """At most ``capacity`` requests in any trailing ``window`` seconds."""

    def __init__(self, capacity: int, window: float) -> None:
        self.capacity = capacity
        self.window = window
        self.log: deque[float] = deque()

    def _evict(self, now: float) -> None:
        while self.log and self.log[0] + self.window <= now:
            self.log.popleft()

    def wait(self, amount: float, now: float) -> float:
        self._evict(now)
        excess = len(self.log) + 1 - self.capacity  # entries that must leave first
        return 0.0 if excess <= 0 else self.log[excess - 1] + self.window - now

    def take(self, amount: float, now: float) -> None:
        self._evict(now)
        self.log.append(now)

    def remaining(self, now: float) -> int:
        self._evict(now)
        return max(0, self.capacity - len(self.log))

    def reset(self, now: float) -> float:
        self._evict(now)
        return self.log[0] + self.window - now if self.log else 0.0


class LeakyBucket:
    """nginx ``limit_req ... nodelay``: integer milliseconds and thousandths of a request."""

    def __init__(self, rate: float, burst: int) -> None:
        self.capacity = burst + 1  # what an idle bucket lets through at one instant
        self.rate = round(rate * 1000)  # nginx keeps rate in thousandths per second
        self.burst = burst * 1000
        self.excess = 0
        self.last: int | None = None  # ms of the last accepted request; None: no node yet

    def _excess(self, ms_now: int) -> int:
        """nginx's ``excess = lr->excess - ctx->rate * ms / 1000 + 1000``, floored at 0."""
        assert self.last is not None
        ms = max(0, ms_now - self.last)
        return max(0, self.excess - self.rate * ms // 1000 + 1000)

    def wait(self, amount: float, now: float) -> float:
        ms_now = math.floor(now * 1000)
        if self.last is None or self._excess(ms_now) <= self.burst:
            return 0.0
        # Smallest ms with excess - rate * ms // 1000 + 1000 <= burst.
        drain = self.excess + 1000 - self.burst
        ms = self.last + math.ceil(drain * 1000 / self.rate)
        return max(0.001, (ms - ms_now) / 1000)

    def take(self, amount: float, now: float) -> None:
        ms_now = math.floor(now * 1000)
        if self.last is None:  # nginx's new node: excess 0, last = now
            self.excess, self.last = 0, ms_now
            return
        # A refused request (count_rejected) fills the bucket at most one request past burst.
        self.excess = min(self._excess(ms_now), self.burst + 1000)
        if ms_now != self.last:  # nginx moves last only when a millisecond has passed
            self.last = ms_now

    def remaining(self, now: float) -> int:
        """How many requests arriving together at ``now`` would be let through."""
        if self.last is None:
            return self.capacity
        ms_now, excess, last, count = math.floor(now * 1000), self.excess, self.last, 0
        while count < self.capacity:
            excess = max(0, excess - self.rate * max(0, ms_now - last) // 1000 + 1000)
            if excess > self.burst:
                break
            last, count = ms_now, count + 1
        return count

    def reset(self, now: float) -> float:
        if self.last is None:
            return 0.0
        return max(0.0, self.last / 1000 + self.excess / self.rate - now)


class RateLimiter:
    """One service's limits: the kind's meters, its verdicts and the headers it sends."""

    def __init__(self, limits: SimLimits, now: float) -> None:
        self.limits = limits
        self._last_seen = now
        self.requests, self.tokens = _meters(limits, now)

    def admit(self, cost_tokens: int, now: float) -> Admission:
        """Charge one request of ``cost_tokens`` tokens, or refuse it (and say for how long)."""
        self._last_seen = max(self._last_seen, now)
        req_wait = self.requests.wait(1, now) if self.requests else 0.0
        tok_wait = self.tokens.wait(cost_tokens, now) if self.tokens else 0.0
        if req_wait <= 0 and tok_wait <= 0:
            if self.requests:
                self.requests.take(1, now)
            if self.tokens:
                self.tokens.take(cost_tokens, now)
            return Admission(allowed=True)
        if self.requests and self.limits.counts_rejected:
            self.requests.take(1, now)
        # Quoted after the refused request's own charge, so waiting that long is enough.
        req_after = self.requests.wait(1, now) if self.requests else 0.0
        if req_wait > 0:
            return Admission(allowed=False, limit="requests", retry_after=req_after)
        assert self.tokens is not None
        too_large = math.isinf(tok_wait)
        wait = self.tokens.reset(now) if too_large else tok_wait
        return Admission(
            allowed=False, limit="tokens", retry_after=max(wait, req_after), too_large=too_large
        )

    def headers(self, time_scale: float, now: float | None = None) -> list[tuple[str, str]]:
        """The kind's ``x-ratelimit-*`` headers at ``now`` (default: the latest request's
        time), durations in real time; none when the limits send none."""
        if not self.limits.sends_headers:
            return []
        at = self._last_seen if now is None else max(now, self._last_seen)
        out: list[tuple[str, str]] = []
        for name, meter in (("requests", self.requests), ("tokens", self.tokens)):
            if meter is None:
                continue
            out += [
                (f"x-ratelimit-limit-{name}", str(meter.capacity)),
                (f"x-ratelimit-remaining-{name}", str(meter.remaining(at))),
            ]
            if self.limits.kind != "azure":  # Azure sends no reset headers
                out.append(
                    (f"x-ratelimit-reset-{name}", format_reset(meter.reset(at) * time_scale))
                )
        return sorted(out)


def _meters(limits: SimLimits, now: float) -> tuple[_Meter | None, _Meter | None]:
    """The requests meter and the tokens meter of ``limits``' kind (None: not limited)."""
    tokens = TokenBucket(limits.tpm, now) if limits.tpm else None
    if limits.kind == "token_bucket":
        return (TokenBucket(limits.rpm, now) if limits.rpm else None), tokens
    if limits.kind == "azure":
        per_window = max(1, (limits.rpm or 0) // 6)
        return (FixedWindow(per_window, AZURE_SUB_WINDOW, now) if limits.rpm else None), tokens
    if limits.kind == "leaky_bucket":
        assert limits.rate is not None  # the validator saw to it
        return LeakyBucket(limits.rate, limits.burst or 0), None
    assert limits.limit is not None  # the validator saw to both
    assert limits.window is not None
    if limits.kind == "fixed_window":
        return FixedWindow(limits.limit, limits.window, now), None
    return SlidingLog(limits.limit, limits.window), None


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
