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
  sustained without one (a geometric bisection; the AWS SDKs' adaptive mode and TCP's
  congestion control do the same with other curves). What the service accepted between
  two 429s bounds its rate from below, which a burst allowance cannot fake.
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
from typing import Any, Literal

from .._headers import parse_count, parse_duration

__all__ = ["SLOW_START_STEP", "Account", "Limit", "Ticket"]

Kind = Literal["requests", "tokens"]
KINDS: tuple[Kind, Kind] = ("requests", "tokens")

HEADROOM = 0.97  # a stated or reset-implied rate is spent at this fraction
SLOW_START_STEP = 0.1  # seconds between slow-start waves: a rejection comes back within it
_SLOW_START_END = 10  # waves; by then 1,023 requests could have gone: nothing left to slow
_SUSTAIN_SECONDS = 0.5  # a rate held this long without a 429 is known to be sustainable
_SUSTAIN_REQUESTS = 8  # ... over at least this many requests
_CLOSE_ENOUGH = 1.12  # stop probing when the fastest good rate is this close to a bad one
_REPROBE_AFTER = 30.0  # seconds at a settled rate before probing a little higher again
_HIDDEN_BACKOFF = 0.5  # first guess when a 429 shows a limit the headers do not
_RESET_ROUNDING = 0.0005
_RECENT_SENDS = 8
_LEARNED = (
    "limit",
    "refill",
    "full_at_reset",
    "longest_reset",
    "no_reset_wait",
    "deficit_rate",
    "spaced",
)
_LONGEST_RESET = 86_400.0  # a reset read as further away than a day is read as a day
_OUTSTANDING_FOR = 120.0  # seconds a request without an answer is taken to be on its way
_OWN_MISCOUNT = 0.25  # how far under the service's count our token estimate may be
_SAME_RATE = 1.5  # two readings implying rates this close describe one bucket
_FIRST_CUT = 0.5  # with no good rate known, the search resumes at this part of a bad one
_TOLD_MARGIN = 0.8  # a first 429 at a stated rate searches from this fraction of it up
_FLOOR_REQUESTS = 3  # accepted between two 429s before they bound the rate from below


@dataclass(slots=True)
class Ticket:
    """What one request took: when, how much, and its name in each limit's count."""

    at: float
    tokens: float
    marks: dict[str, float]  # per kind: everything booked up to and including this request


@dataclass(slots=True)
class Limit:
    """One dimension (requests or tokens) of the service's limit."""

    stated: float | None = None  # per minute, as the user stated it
    burst: float = 1.0  # fraction of a stated minute that may go at once
    share: float = 1.0  # of what the service allows, the part this account may use
    booked: float = 0.0  # everything this account has sent, ever (names each request)
    # The service's last word: what remained when it read the limit for some request.
    limit: float | None = None
    remaining: float | None = None
    read_at: float = 0.0
    # The moment the reading describes, where a bucket's refill counts from: the request's
    # send, since services count a request (and write these headers) when it arrives; a
    # response that took 30 s to generate would otherwise waste 30 s of refill.
    counted_at: float = 0.0
    reset_at: float = 0.0  # when capacity is back, at the latest (read on receipt)
    reset_lo: float = 0.0  # ... at the earliest (read as if made when the request left)
    refill: float | None = None  # continuous refill seen (a token bucket), per second
    refill_low: float = 0.0
    refill_high: float = math.inf
    full_at_reset: bool = False  # after a reset the window was whole again (fixed window)
    no_reset_wait: float = 1.0  # a window's length, where the service tells no reset
    longest_reset: float = 0.0
    deficit_rate: float | None = None  # (limit - remaining) / reset of the latest reading
    rolled: bool = False  # the reset passed; this reading is our own assumption
    rolled_at: float = 0.0  # when that assumption was made
    probing: bool = False  # after a reset: one request may go, to read what came back
    # A stated limit's pacer: a GCRA bucket.
    spaced: bool = False  # a 429 no header explains came at our pace: no credit is carried
    level: float = 0.0
    at: float = 0.0
    # Requests sent and not answered yet: [name, amount, sent at]. A reading may not have
    # counted them (requests overtake each other on the way), so they are kept off the
    # room until their own answer comes.
    out: list[list[float]] = field(default_factory=list)

    # -- the service's word -------------------------------------------------------------

    def room(self, now: float) -> float:
        """What may go now by the service's last word (inf when it has said nothing)."""
        if self.remaining is None or self.limit is None:
            return math.inf
        self._roll(now)
        if self.probing:
            return math.inf
        return self._level(now) * self.share - self.pending()

    def _level(self, now: float) -> float:
        """The service's remaining as of its last word, refilled since where it refills."""
        if self.remaining is None or self.limit is None:
            return math.inf
        if self.refill is None:
            return self.remaining
        refilled = self.refill * HEADROOM * max(0.0, now - self.counted_at)
        return min(self.limit, self.remaining + refilled)

    def pending(self, since: float = -math.inf) -> float:
        return sum(amount for _, amount, sent in self.out if sent >= since)

    def room_wait(self, amount: float, now: float) -> float:
        """Seconds until the service's word lets ``amount`` go (0: now; inf: never alone)."""
        room = self.room(now)
        need = min(amount, self.limit or amount)  # larger than the whole limit: goes when full
        if room >= need:
            return 0.0
        if self.refill:
            return (need - room) / (self.refill * HEADROOM * self.share)
        return max(0.0, self.reset_at - now) if self.reset_at > now else math.inf

    def _roll(self, now: float) -> None:
        """The reset passed with no newer reading: what is back is what was learned."""
        if self.refill is not None or now < self.reset_at or self.limit is None:
            return
        # A response may never come (a dropped connection, a timeout): without a reading
        # by then, the next reset is assumed a window or the longest retry-after later.
        later = now + max(self.no_reset_wait, self.reset_at - self.read_at)
        if self.full_at_reset:
            # A whole window is back; its end is read from the next response.
            self.remaining, self.read_at, self.reset_at = self.limit, self.reset_at, later
            self.counted_at = self.read_at
        else:
            # One request, whatever its size, may go to read the new state (a sliding log
            # frees a slot at a time).
            self.probing, self.read_at, self.reset_at = True, now, later
            self.counted_at = now
        self.rolled, self.rolled_at = True, now

    def read(
        self,
        limit: float | None,
        remaining: float,
        reset: float | None,
        sent_at: float,
        now: float,
        own: float = 1.0,
    ) -> None:
        """Take one reading, made by the service between ``sent_at`` and ``now``, of
        a request of ``own`` (which the reading counts).

        Inside one window the service's remaining only falls, so the lowest reading is its
        latest state, whatever order the responses came back in: a reading is taken only
        if it leaves less room (where the service refills, the refill since is added to
        the reading taken). Requests still on their way are kept off the room either way.
        """
        limit = max(self.limit or 0.0, limit or remaining + 1)
        if reset is not None:
            reset = min(reset, _LONGEST_RESET)
        told = reset is not None
        if reset is None:
            # No reset header (Azure): capacity is taken to be back after the longest
            # retry-after seen, or a second at first, when one request goes to look.
            reset = self.no_reset_wait
        lo, hi = sent_at + reset, now + reset
        if told:
            self.longest_reset = max(self.longest_reset, reset)
            if limit - remaining >= 1 and reset > 0:
                self.deficit_rate = max(1.0, limit - remaining - 1) / (reset + _RESET_ROUNDING)
        if self.remaining is None or (not self.rolled and sent_at >= self.reset_lo):
            # The first reading, or one from a window after the last one's: all news.
            self._adopt(limit, remaining, now, sent_at)
            self.reset_lo, self.reset_at = lo, hi
        else:
            trusted = False
            if self.rolled:
                # After a probe only one request was out: its reading is the news. After a
                # whole window came back, many were, and responses overtake each other.
                trusted = not self.full_at_reset
                # Whole again, but for this request itself (our estimate of its tokens may
                # be a little under the service's count) and those still on their way: only
                # those sent since the reset, and this one only if it was (the others went
                # in the window before; counted as unread, they made a sliding log look
                # whole again at every reset).
                since = self.rolled_at
                mine = own if sent_at >= since else 0.0
                whole = remaining + self.pending(since=since) + mine
                self.full_at_reset = whole >= limit - mine * _OWN_MISCOUNT
                self.reset_lo, self.reset_at, self.rolled = lo, hi, False
            elif told and self.refill is None and self._refills_like(limit, remaining, reset, lo):
                # The reset moved later as we spent, at the rate the reading before implies:
                # a token bucket. That reading bounds its rate too.
                assert self.remaining is not None
                assert self.limit is not None
                self.refill = 0.0
                self._learn_refill(self.limit, self.remaining, self.reset_at - self.read_at)
            else:
                self.reset_lo, self.reset_at = max(self.reset_lo, lo), min(self.reset_at, hi)
            if trusted or self.remaining is None or remaining < self._level(now):
                self._adopt(limit, remaining, now, sent_at)
        if told and self.refill is not None and reset:
            self._learn_refill(limit, remaining, reset)

    def awaiting(self, now: float) -> bool:
        """True while our picture is an assumption made at a reset that only a response
        can confirm: a wait on it may end as soon as one comes, not at the time foreseen."""
        return self.rolled and not self.probing and self.reset_at > now

    def _adopt(self, limit: float, remaining: float, now: float, sent_at: float) -> None:
        self.limit, self.remaining, self.read_at = limit, remaining, now
        self.counted_at = min(sent_at, now)
        self.rolled = self.probing = False

    def _refills_like(self, limit: float, remaining: float, reset: float, lo: float) -> bool:
        """Whether a reading whose reset is later than the last one's is a token bucket's.

        A bucket's reset is its deficit over its rate, so two readings imply one rate. A
        sliding log's reset also moves later (when its oldest request leaves), but to the
        next request's age, whatever the deficit: 2 ms, then 299 ms, at the same deficit.
        """
        if lo <= self.reset_at + 0.01 or self.remaining is None or self.limit is None:
            return False
        now = _bucket_rate(limit, remaining, reset)
        before = _bucket_rate(self.limit, self.remaining, self.reset_at - self.read_at)
        if now is None or before is None:
            return False
        return now[0] <= before[1] * _SAME_RATE and before[0] <= now[1] * _SAME_RATE

    def _learn_refill(self, limit: float, remaining: float, reset: float) -> None:
        """A token bucket's reset is the time to refill to ``limit``: it bounds the rate.

        ``remaining`` is rounded down and the reading comes after our request was counted,
        so the true deficit lies in [max(1, d - 1), d]; the bounds of every reading are
        intersected and the lower one is used, so rounding can never make us overtake.
        """
        bounds = _bucket_rate(limit, remaining, reset)
        if bounds is None:
            return
        low, high = bounds
        if low > self.refill_high or high < self.refill_low:
            self.refill_low, self.refill_high = low, high
        else:
            self.refill_low = max(self.refill_low, low)
            self.refill_high = min(self.refill_high, high)
        self.refill = self.refill_low

    def planning_rate(self) -> float | None:
        """What the planner may count on per second over the long run (None: no limit).

        A refill seen is exact. Before one is seen, a reading bounds it two ways, and the
        lower is taken: the deficit over the reset (exact for a token bucket), and the limit
        over the longest reset seen (about a window's length for a fixed window).
        """
        if self.refill:
            return min(self.refill * self.share, self.pace or math.inf)
        rates = [r * self.share for r in (self.deficit_rate,) if r]
        rates += [self.pace] if self.pace else []
        if self.limit is not None and self.remaining is not None:
            window = max(self.longest_reset, self.no_reset_wait)
            rates.append(self.limit * self.share / window)
        return min(rates) if rates else None

    def learned(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _LEARNED}

    # -- a stated limit's pacer -----------------------------------------------------------

    @property
    def pace(self) -> float | None:
        return self.stated / 60 * HEADROOM * self.share if self.stated else None

    def capacity(self) -> float:
        if self.spaced:  # a late send is not made up for: the service counts spacing
            return 1.0
        return max(1.0, (self.stated or 0.0) * self.burst * self.share)

    def pacer_level(self, now: float) -> float:
        pace = self.pace
        if pace is None:
            return math.inf
        return min(self.capacity(), self.level + max(0.0, now - self.at) * pace)

    def pacer_wait(self, amount: float, now: float) -> float:
        pace = self.pace
        if pace is None:
            return 0.0
        short = min(amount, self.capacity()) - self.pacer_level(now)
        return short / pace if short > 0 else 0.0

    def take(self, amount: float, now: float) -> None:
        if self.probing:  # that request takes the room the probe opened, no more
            self.probing, self.remaining = False, self.pending() + amount
        elif self.refill is not None and self.remaining is not None:
            # A bucket holds at most its limit at any moment: fold the refill in as we go.
            self.remaining, self.read_at = self._level(now), now
            self.counted_at = now
        self.booked += amount
        # A request that was never answered (cancelled, lost) stops counting after a while.
        self.out = [o for o in self.out if now - o[2] < _OUTSTANDING_FOR]
        self.out.append([self.booked, amount, now])
        if self.pace is not None:
            self.level, self.at = self.pacer_level(now) - amount, now

    def answered(self, mark: float) -> None:
        self.out = [o for o in self.out if o[0] != mark]

    def give(self, amount: float, now: float) -> None:
        if self.pace is not None:
            self.level, self.at = min(self.capacity(), self.pacer_level(now) + amount), now


@dataclass(slots=True)
class Probe:
    """The request rate learned from 429s where no header tells it (a geometric search)."""

    rate: float | None = None  # pace now (None: no 429 seen; unpaced)
    low: float = 0.0  # fastest rate sustained without a 429
    high: float = math.inf  # slowest rate that drew a 429
    since: float = 0.0  # when the rate last changed
    count: int = 0  # requests sent at this rate since then
    cut_at: float = -math.inf
    tat: float = -math.inf  # GCRA: the theoretical time of the next send
    sends: list[float] = field(default_factory=list)
    paced_high: bool = False  # ``high`` drew a 429 while paced (not slow start's guess)
    refused_at: float = -math.inf  # when the last 429 that cut the rate was sent
    accepted_since: int = 0  # requests sent after it and accepted

    def wait(self, now: float) -> float:
        return 0.0 if self.rate is None else max(0.0, self.tat - now)

    def take(self, now: float) -> None:
        self.sends = [*self.sends[-(_RECENT_SENDS - 1) :], now]
        if self.rate is None:
            return
        # No catching up after a late send: a leaky bucket with no burst counts spacing.
        self.tat = max(self.tat, now) + 1 / self.rate
        self.count += 1

    def accepted(self, sent_at: float, now: float) -> None:
        if sent_at > self.refused_at:
            self.accepted_since += 1
        if self.rate is None or now - self.since < _SUSTAIN_SECONDS:
            return
        if self.count < _SUSTAIN_REQUESTS:
            return
        self.low = max(self.low, self.rate)
        if not self.paced_high and self.high / self.low <= _CLOSE_ENOUGH:
            # The ceiling was slow start's guess (the gap before a refused send, which a
            # slow first send shortens), and a rate close to it holds: look above it.
            self.high *= 2
        if math.isinf(self.high):  # only bursts were refused: no rate is known too fast
            self._set(self.low * 2, now)
        elif self.high / self.low > _CLOSE_ENOUGH:
            self._set(math.sqrt(self.low * self.high), now)
        elif now - self.since >= _REPROBE_AFTER:
            self.high = self.high * 1.1  # the limit may have grown: look a little higher
            self._set(math.sqrt(self.low * self.high), now)

    def rejected(
        self, sent_at: float, now: float, *, first_guess: float, told: float | None = None
    ) -> None:
        """A 429 for a request sent at ``sent_at``; ``told``: the rate the user stated."""
        if sent_at < self.cut_at:
            return  # sent before the last cut: the same overload, already answered
        floor = self._floor(sent_at)
        if told is not None and self.rate is None:
            # The first 429 at a stated rate: the statement is believed within a margin
            # (a leaky bucket with no burst refuses a request that comes a little early).
            floor = max(floor, told * _TOLD_MARGIN)
        self.refused_at, self.accepted_since = sent_at, 0
        # Paced, the rate we paced at drew it; unpaced (slow start), what we really sent.
        too_fast = self.rate if self.rate is not None else _send_rate(self.sends, sent_at)
        if math.isinf(too_fast):
            # Sent in a burst: that says nothing of the rate the service takes. Pace at the
            # guess, and look for the limit from there.
            self._set(first_guess, now)
            self.cut_at, self.tat = now, now + 1 / first_guess
            return
        if too_fast < self.high:
            self.high, self.paced_high = too_fast, self.rate is not None or told is not None
        if self.low * _CLOSE_ENOUGH >= self.high:
            # A 429 at what looked sustainable: that was a burst allowance running out.
            self.low = self.high * _FIRST_CUT
        self.low = max(self.low, min(floor, self.high / _CLOSE_ENOUGH))
        rate = math.sqrt(self.low * self.high) if self.low > 0 else self.high * _FIRST_CUT
        self._set(rate, now)
        self.cut_at = now
        self.tat = now + 1 / rate

    def _floor(self, sent_at: float) -> float:
        """A rate the service is known to take, from what it accepted since the last 429.

        A 429 means the limiter was full when it came. Between two such moments everything
        it accepted has drained, so it drained at least (accepted - 1) requests over the
        time between them (the -1 for where in its last request each moment fell; less
        than its rate if it ran dry in between): a lower bound on its rate that no burst
        allowance can inflate, unlike a rate held for a while without a 429.
        """
        span = sent_at - self.refused_at
        if math.isinf(span) or span <= 0 or self.accepted_since < _FLOOR_REQUESTS:
            return 0.0
        return (self.accepted_since - 1) / span

    def _set(self, rate: float, now: float) -> None:
        self.rate, self.since, self.count = rate, now, 0


def _bucket_rate(limit: float, remaining: float, reset: float) -> tuple[float, float] | None:
    """The refill rates per second a token bucket reading implies, low and high (None:
    a full bucket says nothing). See :meth:`Limit._learn_refill`."""
    deficit = limit - remaining
    if deficit < 1:
        return None
    low = max(1.0, deficit - 1) / (reset + _RESET_ROUNDING)
    high = deficit / max(reset - _RESET_ROUNDING, 1e-9) if remaining >= 1 else math.inf
    return low, high


def _send_rate(sends: list[float], until: float) -> float:
    """The rate at which the send at ``until`` followed the one before (inf: at once, or
    none before). Not an average over the recent sends: slow start speeds up as it goes,
    and an average would put the limit below the rate the service had just taken."""
    recent = [t for t in sends if t <= until]
    gap = recent[-1] - recent[-2] if len(recent) >= 2 else 0.0
    return 1 / gap if gap > 0 else math.inf


@dataclass(slots=True)
class Account:
    """Both limits of one endpoint, the 429 probe, and when a 429 said to hold off."""

    requests: Limit = field(default_factory=Limit)
    tokens: Limit = field(default_factory=Limit)
    probe: Probe = field(default_factory=Probe)
    blocked_until: float = 0.0
    started: float | None = None  # the first send (slow start counts from it)
    sent: int = 0
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
        self.requests.take(1, now)
        self.tokens.take(tokens, now)
        self.probe.take(now)
        if self.started is None:
            self.started = now
        self.sent += 1
        marks = {"requests": self.requests.booked, "tokens": self.tokens.booked}
        return Ticket(now, tokens, marks)

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
        return max(0.0, self.started + (wave + place) * SLOW_START_STEP - now)

    # -- what the service said ------------------------------------------------------------

    def accepted(self, ticket: Ticket, headers: Mapping[str, str], now: float) -> None:
        """A response that was not a 429, with its headers (maybe none)."""
        self.lost(ticket)
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
            retry_after = min(retry_after, _LONGEST_RESET)
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
                if name in _LEARNED and value is not None:
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
