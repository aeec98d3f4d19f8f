"""One dimension (requests or tokens) of an endpoint's limit: the service's own word and
a stated limit's pacer. Pure state, no I/O; see :mod:`._account` for the whole picture.

The service's word (``x-ratelimit-{limit,remaining,reset}-*``) is taken as what it says
whatever the window's length: ``remaining`` can go now, and capacity is back at ``reset``.
What comes back at a reset is learned, not assumed: a reset that moves later as we spend
is a token bucket (OpenAI), refilled continuously at the rate its resets imply; a service
whole again after a reset is a fixed window; for anything else a reset lets one request
through to read the new state (a sliding log frees one slot at a time).
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["HEADROOM", "KINDS", "LEARNED", "LONGEST_RESET", "Kind", "Limit"]

Kind = Literal["requests", "tokens"]
KINDS: tuple[Kind, Kind] = ("requests", "tokens")

HEADROOM = 0.97  # a stated or reset-implied rate is spent at this fraction
LONGEST_RESET = 86_400.0  # a reset read as further away than a day is read as a day
LEARNED = (  # what a Limit learns about the service, kept with the service model
    "limit",
    "refill",
    "full_at_reset",
    "longest_reset",
    "no_reset_wait",
    "deficit_rate",
    "spaced",
)
_RESET_ROUNDING = 0.0005
_OUTSTANDING_FOR = 120.0  # seconds a request without an answer is taken to be on its way
_OWN_MISCOUNT = 0.25  # how far under the service's count our token estimate may be
_SAME_RATE = 1.5  # two readings implying rates this close describe one bucket
_MARK = operator.itemgetter(0)


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
    # Half the shortest round trip seen: a request is counted that long after it left, not
    # at once (a 3 ms path let a bucket read at its send overtake the refill by a third
    # of a request, and at the edge of an empty bucket that was a 429 every 0.25 s).
    lag: float = math.inf
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
        self.lag = min(self.lag, max(0.0, now - sent_at) / 2)
        counted = min(sent_at + self.lag, now)  # when the service counted it, at the latest
        if reset is not None:
            reset = min(reset, LONGEST_RESET)
            if self.refill:
                # A bucket in debt says remaining 0, but its reset (the time to refill
                # to the limit) still tells how deep: OpenAI counts a refused request, so
                # each 429 digs the bucket a request deeper, and a budget reading only
                # "0" sent into the debt, drawing more 429s (81-84 in ~1,080 requests).
                remaining = min(remaining, limit - reset * self.refill)
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
            self._adopt(limit, remaining, now, counted)
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
            if (
                trusted
                or self.remaining is None
                or self._since(remaining, counted, now) < self._level(now)
            ):
                self._adopt(limit, remaining, now, counted)
        if told and self.refill is not None and reset:
            self._learn_refill(limit, remaining, reset)

    def awaiting(self, now: float) -> bool:
        """True while our picture is an assumption made at a reset that only a response
        can confirm: a wait on it may end as soon as one comes, not at the time foreseen."""
        return self.rolled and not self.probing and self.reset_at > now

    def _since(self, remaining: float, counted: float, now: float) -> float:
        """A reading made when a request was counted (at ``counted``), as of ``now``: a bucket
        has refilled since. (Compared raw, an older reading taken after a newer one looked
        lower than it was and undid it: a bucket 3 requests in debt read as 2 in hand.)"""
        if not self.refill:
            return remaining
        return remaining + self.refill * HEADROOM * max(0.0, now - counted)

    def _adopt(self, limit: float, remaining: float, now: float, counted: float) -> None:
        self.limit, self.remaining, self.read_at = limit, remaining, now
        self.counted_at = min(counted, now)
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
        return {name: getattr(self, name) for name in LEARNED}

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
        # ``out`` is in the order sent, so the stale ones are at its front: a filter of the
        # whole list per request was quadratic in the requests in flight (90 us a request
        # at 256 in flight, profiled).
        out = self.out
        if out and now - out[0][2] >= _OUTSTANDING_FOR:
            self.out = out = [o for o in out if now - o[2] < _OUTSTANDING_FOR]
        out.append([self.booked, amount, now])
        if self.pace is not None:
            self.level, self.at = self.pacer_level(now) - amount, now

    def answered(self, mark: float) -> None:
        # ``out`` is sorted by mark (each is ``booked`` after its request was added).
        out = self.out
        at = bisect_left(out, mark, key=_MARK)
        del out[at : bisect_right(out, mark, lo=at, key=_MARK)]

    def give(self, amount: float, now: float) -> None:
        if self.pace is not None:
            self.level, self.at = min(self.capacity(), self.pacer_level(now) + amount), now


def _bucket_rate(limit: float, remaining: float, reset: float) -> tuple[float, float] | None:
    """The refill rates per second a token bucket reading implies, low and high (None:
    a full bucket says nothing). See :meth:`Limit._learn_refill`."""
    deficit = limit - remaining
    if deficit < 1:
        return None
    low = max(1.0, deficit - 1) / (reset + _RESET_ROUNDING)
    high = deficit / max(reset - _RESET_ROUNDING, 1e-9) if remaining >= 1 else math.inf
    return low, high
