"""What the service will accept now, learned from any limiter: pure state, no I/O.

One :class:`Account` per endpoint holds, for requests and for tokens, a :class:`Limit`:

* **The service's own word** (``x-ratelimit-{limit,remaining,reset}-*``), taken as what it
  says whatever the window's length: ``remaining`` can go now, and capacity is back at
  ``reset``. Responses overtake each other, so inside a window the lowest reading is the
  service's latest state, and requests still on their way are kept off the room until
  their own answer comes. What comes back at a reset is learned, not assumed: a reset that
  moves later as we spend is a token bucket (OpenAI), refilled continuously at the rate
  its resets imply; a service whole again after a reset is a fixed window; for anything
  else a reset lets one request through to read the new state (a sliding log frees one
  slot at a time).
* **A pacer** (a GCRA bucket) at a stated limit (``Limits(rpm=...)``) or at a rate
  learned from 429s. Without any rate headers (nginx ``limit_req``), or when a 429 comes
  while the headers said there was room (Azure's 10-second sub-windows), the request rate
  is found by a search between the slowest rate that drew a 429 and the fastest one
  sustained without one (see ``_probe``: slow start's first 429 bracketed by the rate
  accepted before it, then a climb from the floor as TCP CUBIC and the AWS SDKs' adaptive
  mode do). What the service accepted between two 429s bounds its rate from below, which
  a burst allowance cannot fake.
* **Slow start**: while nothing at all is known, sends open like TCP's slow start, in
  waves of 1, 2, 4, ... requests :data:`SLOW_START_STEP` apart, each spread over its
  step, so a cold process never sends a wave the service has not shown it can take and
  the first 429 holds the rest of its wave; the first rate headers, stated limit or 429
  ends it.

Times are seconds on one clock (the caller's); amounts are requests or tokens. The state is
plain data (:meth:`Account.dump` / :meth:`Account.load`) so a Redis budget can keep it for
many processes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._headers import parse_count, parse_duration
from ._limit import KINDS, LEARNED, LONGEST_RESET, Kind, Limit
from ._probe import Probe

__all__ = ["SLOW_START_STEP", "Account", "Kind", "Limit", "Ticket"]

SLOW_START_STEP = 0.1  # seconds between slow-start waves: a rejection comes back within it
_SLOW_START_END = 10  # waves; by then 1,023 requests could have gone: nothing left to slow
_HIDDEN_BACKOFF = 0.5  # first guess when a 429 shows a limit the headers do not


@dataclass(slots=True)
class Ticket:
    """What one request took: when, how much, and its name in each limit's count."""

    at: float
    tokens: float
    marks: dict[str, float]  # per kind: everything booked up to and including this request


@dataclass(slots=True)
class Account:
    """Both limits of one endpoint, the 429 probe, and when a 429 said to hold off."""

    requests: Limit = field(default_factory=Limit)
    tokens: Limit = field(default_factory=Limit)
    probe: Probe = field(default_factory=Probe)
    blocked_until: float = 0.0
    started: float | None = None  # the first send (slow start counts from it)
    last_sent: float | None = None
    departed: float | None = None  # when the latest request really went out (see depart)
    sent: int = 0
    answers: int = 0  # responses that were not 429s
    evidence: bool = False  # any rate header, stated limit or 429 seen

    @classmethod
    def new(
        cls,
        *,
        rpm: int | None,
        tpm: int | None,
        burst: float,
        now: float,
        slow_start: bool = True,
        share: float = 1.0,
    ) -> Account:
        account = cls(evidence=not slow_start)
        account.requests.share = account.tokens.share = share
        account.state(rpm=rpm, tpm=tpm, burst=burst, now=now)
        return account

    def limit(self, kind: Kind) -> Limit:
        return self.requests if kind == "requests" else self.tokens

    def state(self, *, rpm: int | None, tpm: int | None, burst: float, now: float) -> None:
        """Stated limits (per minute): requests start with one request's room, then the
        pace, and tokens with a full ``burst`` share."""
        for limit, stated in ((self.requests, rpm), (self.tokens, tpm)):
            if stated is None or stated == limit.stated:
                continue
            first = limit.stated is None
            limit.stated, limit.burst = float(stated), burst
            if first:
                # A stated RPM is a long-run rate, not a promise that the service takes any
                # burst at once (a leaky bucket with no burst refuses two requests sent
                # together; a window may be a fraction of a second): requests open with
                # one, then the pace. A bucket the service does have shows in its headers.
                start = 1.0 if limit is self.requests else limit.capacity()
                limit.level, limit.at = min(start, limit.capacity()), now
        self.evidence = self.evidence or rpm is not None or tpm is not None

    # -- booking --------------------------------------------------------------------------

    def wait(self, tokens: float, now: float) -> tuple[float, Kind]:
        """Seconds until one request of ``tokens`` may go, and the limit that is short."""
        waits: list[tuple[float, Kind]] = [
            (max(0.0, self.blocked_until - now), "requests"),
            (self._slow_start_wait(now), "requests"),
            (self.probe.wait(now), "requests"),
            (self.requests.room_wait(1, now), "requests"),
            (self.requests.pacer_wait(1, now), "requests"),
            (self.tokens.room_wait(tokens, now), "tokens"),
            (self.tokens.pacer_wait(tokens, now), "tokens"),
        ]
        return max(waits, key=lambda w: w[0])

    def awaiting(self, kind: Kind, now: float) -> bool:
        """Whether a wait on ``kind`` may end at the next response (see Limit.awaiting)."""
        return self.limit(kind).awaiting(now)

    def take(self, tokens: float, now: float) -> Ticket:
        if self.started is None and self.requests.pace is not None:
            # A stated rate opens with one request from the first send, not with what its
            # pacer saved up since the limit was stated (a cold process plans for a while
            # first: 0.7 s at 20 r/s let 15 requests go at once into a leaky bucket).
            limit = self.requests
            limit.level, limit.at = min(limit.pacer_level(now), 1.0), now
        self.requests.take(1, now)
        self.tokens.take(tokens, now)
        self.probe.take(now)
        if self.started is None:
            self.started = now
        self.last_sent = now
        self.sent += 1
        marks = {"requests": self.requests.booked, "tokens": self.tokens.booked}
        return Ticket(now, tokens, marks)

    # -- the real send ---------------------------------------------------------------------

    def interval(self, now: float) -> float:
        """The least time between two real sends that the pace in force asks for (0: none).

        A booking keeps the pace between bookings, but a request may leave later than it
        was booked (a loaded event loop, a connection being opened), and two requests
        booked 60 ms apart can leave 10 ms apart, which a leaky bucket with no burst
        refuses. This spacing is kept at the wire as well (see :meth:`depart_wait`): the
        429 search's rate, a stated rate where no burst is carried, and slow start's
        spacing in its current wave before the first answer (a stated rate's saved-up
        burst is not held back).
        """
        gaps = [0.0]
        if self.probe.rate is not None:
            gaps.append(1 / self.probe.rate)
        pace = self.requests.pace
        if pace is not None and self.requests.pacer_level(now) < 1.0:
            gaps.append(1 / pace)  # at the pace, with no credit saved up for a burst
        if not self.evidence and self.started is not None and not self.answers:
            # Before the first answer, as the booking does (no catching up); after it, an
            # overdue wave goes at once at the booking, and the wire does not space it
            # either (a regression: 5 requests of a late wave left 12.5 ms apart).
            wave = max(0, math.ceil(math.log2(self.sent + 1)) - 1)
            if wave < _SLOW_START_END:
                gaps.append(SLOW_START_STEP / (1 << wave))
        return max(gaps)

    def depart_wait(self, now: float) -> float:
        """Seconds until a booked request may really go out."""
        if self.departed is None:
            return 0.0
        return max(0.0, self.departed + self.interval(now) - now)

    def depart(self, ticket: Ticket, now: float) -> None:
        """``ticket``'s request goes out now: later sends are spaced from this moment, and
        what is learned from its answer counts from it, not from its booking."""
        if self.departed is None and not self.evidence and self.started is not None:
            # Slow start counts from the first real send, not its booking: a first request
            # that left late (its connection opening) would otherwise have the second go
            # right behind it (91 ms at a real nginx, which drew a 429 and a cut to 5.5 r/s
            # against its 5 r/s).
            self.started = max(self.started, now)
        self.departed = now if self.departed is None else max(self.departed, now)
        sends = self.probe.sends
        for i in range(len(sends) - 1, -1, -1):
            if sends[i] == ticket.at:
                sends[i] = now
                sends.sort()
                break
        ticket.at = max(ticket.at, now)

    def give(self, ticket: Ticket, tokens: float, now: float) -> None:
        """Return ``tokens`` of a request's booking (what it did not use, or all of it)."""
        self.tokens.give(tokens, now)

    def lost(self, ticket: Ticket) -> None:
        """``ticket``'s request is no longer on its way (answered, or never will be)."""
        for kind in KINDS:
            self.limit(kind).answered(ticket.marks[kind])

    def _slow_start_wait(self, now: float) -> float:
        if self.evidence or self.started is None:
            return 0.0
        wave = max(0, math.ceil(math.log2(self.sent + 2)) - 1)  # request n goes in wave k
        if wave >= _SLOW_START_END:
            return 0.0
        # A wave is spread over its step, not sent at once: the first 429 comes back before
        # the rest of the wave has gone, so a limit is overshot by a request, not a wave.
        size = 1 << wave
        place = (self.sent - (size - 1)) / size
        due = self.started + (wave + place) * SLOW_START_STEP
        if self.last_sent is not None and not self.answers:
            # No catching up before the first answer: a process stalled past its schedule
            # (a loaded machine, a slow first connection) goes on at its wave's spacing,
            # not all at once (regression: 49 requests in 0.2 s after a 3 s stall, 47 of
            # them 429). Once answers come, a lull lets the next wave go as scheduled.
            due = max(due, self.last_sent + SLOW_START_STEP / size)
        return max(0.0, due - now)

    # -- what the service said ------------------------------------------------------------

    def accepted(self, ticket: Ticket, headers: Mapping[str, str], now: float) -> None:
        """A response that was not a 429, with its headers (maybe none)."""
        self.lost(ticket)
        self.answers += 1
        self._read(ticket, headers, now)
        self.probe.accepted(ticket.at, now)

    def rejected(
        self,
        ticket: Ticket,
        kind: Kind,
        retry_after: float | None,
        headers: Mapping[str, str],
        now: float,
    ) -> None:
        """A 429 for ``ticket``'s request."""
        self.lost(ticket)
        self.evidence = True
        if retry_after is not None:
            retry_after = min(retry_after, LONGEST_RESET)
            self.limit(kind).no_reset_wait = max(self.limit(kind).no_reset_wait, retry_after)
        self._read(ticket, headers, now)
        if retry_after is not None:
            self.blocked_until = max(self.blocked_until, now + retry_after)
        said = self.limit(kind).remaining
        need = 1.0 if kind == "requests" else ticket.tokens
        if retry_after is None and (said is None or said >= need):
            # No header explains it (nginx), or they still show room: a limit they do not
            # tell, to be found from the 429s. (A retry-after says when to come back: that
            # is obeyed, and a 429 that comes with one says nothing about our rate.)
            guess = 1 / _HIDDEN_BACKOFF if said is not None else 1 / SLOW_START_STEP
            pace = self.requests.pace
            guess = pace or guess  # a stated rate is the better first guess
            self.probe.rejected(ticket.at, now, first_guess=guess, told=pace)
            if self.requests.pace is not None:
                # At a stated pace, the burst it allows after a lull is what was refused.
                self.requests.level = min(self.requests.level, 0.0)
                self.requests.spaced = True

    def _read(self, ticket: Ticket, headers: Mapping[str, str], now: float) -> bool:
        """Take the ``x-ratelimit-*`` headers; True if they told anything."""
        told = False
        for kind in KINDS:
            remaining = parse_count(headers.get(f"x-ratelimit-remaining-{kind}"))
            if remaining is None:
                continue
            limit = parse_count(headers.get(f"x-ratelimit-limit-{kind}"))
            reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
            own = 1.0 if kind == "requests" else ticket.tokens
            self.limit(kind).read(limit, remaining, reset, ticket.at, now, own)
            told = self.evidence = True
        return told

    def snapshot_values(self, now: float) -> dict[str, float | None]:
        """Room now and refill per second of each limit, for the planner."""
        out: dict[str, float | None] = {}
        for kind in KINDS:
            limit = self.limit(kind)
            room = min(limit.room(now), limit.pacer_level(now))
            rate = limit.planning_rate()
            if kind == "requests" and self.probe.rate is not None:
                rate = min(rate or math.inf, self.probe.rate)
                room = min(room, 1.0)
            out[f"remaining_{kind}"] = None if math.isinf(room) else max(room, 0.0)
            out[f"{kind}_per_second"] = rate
        cap = self.tokens.limit or (self.tokens.capacity() if self.tokens.stated else None)
        out["token_capacity"] = cap
        return out

    # -- persistence --------------------------------------------------------------------

    def learned(self) -> dict[str, Any]:
        """What was learned about the service's limits, without any moment in it (so it
        holds in another process, on another clock): saved with the service model."""
        out: dict[str, Any] = {k: _plain(self.limit(k).learned()) for k in KINDS}
        out["probe"] = _plain(
            {"rate": self.probe.rate, "low": self.probe.low, "high": self.probe.high}
        )
        return out

    def teach(self, learned: Mapping[str, Any]) -> None:
        """Start from what :meth:`learned` gave (another process, an earlier run)."""
        for kind in KINDS:
            for name, value in learned.get(kind, {}).items():
                if name in LEARNED and value is not None:
                    setattr(self.limit(kind), name, _number(value))
        probe = learned.get("probe", {})
        if probe.get("rate") is not None:
            share = self.requests.share  # a rate found for the whole key, this part of it
            self.probe.rate = float(probe["rate"]) * share
            self.probe.low = float(_number(probe.get("low", 0.0))) * share
            self.probe.high = float(_number(probe.get("high", "inf"))) * share
        known = any(self.limit(k).limit is not None for k in KINDS) or self.probe.rate is not None
        self.evidence = self.evidence or known

    def dump(self) -> dict[str, Any]:
        plain: dict[str, Any] = _plain(dataclasses.asdict(self))
        return plain

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> Account:
        return cls(
            requests=Limit(**_floats(data["requests"])),
            tokens=Limit(**_floats(data["tokens"])),
            probe=Probe(**_floats(data["probe"])),
            **{k: _number(v) for k, v in data.items() if k not in ("requests", "tokens", "probe")},
        )


def _plain(value: Any) -> Any:
    """JSON-safe: infinities as strings."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _number(value: Any) -> Any:
    return float(value) if value in ("inf", "-inf") else value


def _floats(data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: [_number(x) for x in v] if isinstance(v, list) else _number(v) for k, v in data.items()
    }
