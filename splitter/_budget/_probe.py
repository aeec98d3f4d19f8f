"""The request rate learned from 429s where no header tells it: pure state, no I/O.

Without any rate headers (nginx ``limit_req``), or when a 429 comes while the headers said
there was room (Azure's 10-second sub-windows), the request rate is found between the
fastest rate known to hold (the floor) and the slowest one that drew a 429 (the ceiling).
Slow start's first 429 is bracketed by the rate of the request accepted just before it
(a limiter with no burst accepts nothing faster than its rate), and the search bisects
between the two. Otherwise it climbs from the floor, 10% above it at first, then 20%,
40%, ... as each step holds, and after a 429 goes back to the floor (TCP CUBIC and the
AWS SDKs' adaptive retry mode climb back the same way): a limit just above the floor
costs one 429. What the service accepted between two 429s bounds its rate from below,
which a burst allowance cannot fake. Once slow start has shown an allowance (its first
429 came after requests faster than the limit went through), a climb's step holds only
after enough requests to have filled that allowance at the step's excess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["CLOSE_ENOUGH", "FIRST_CUT", "Probe"]

FIRST_CUT = 0.5  # with no good rate known, the search resumes at this part of a bad one
_SUSTAIN_SECONDS = 0.25  # a rate held this long without a 429 is known to be sustainable
_SUSTAIN_REQUESTS = 4  # ... over at least this many requests
CLOSE_ENOUGH = 1.15  # the search stops when the fastest good rate is this close to a bad one
# (within 15%: the floor is then at least 0.87 of the limit)
# ... and where both ends were measured against a limiter that lends nothing (slow start's
# first 429 bracketed), within 8%: a bisection step there costs a 429 at most half the time,
# and a 20 r/s bucket stopped at 0.86 of its rate (0.92 with one step more).
_CLOSE_ENOUGH_MEASURED = 1.08
_REPROBE_AFTER = 30.0  # seconds at a settled rate before probing a little higher again
# ... and requests: a re-probe may cost a 429, so at most one in this many is spent on it
# (every 30 s was 60 requests at 2 r/s: 3 of a 200-request run's 7 429s).
_REPROBE_REQUESTS = 100
_DRAIN_MARGIN = 0.95  # paced this far under the rate two 429s' drain implies
_ALLOWANCE_SEEN = 3  # requests slow start had through over the rate: a bucket not run dry
# Requests a climb's step must hold before it counts, at most (slow start's count of an
# allowance, 12 for nginx's burst=5 at 20 r/s, asked 132 for a 10% step: the pace stayed at
# 0.69 of the rate for 9 s)
_HOLD_AT_MOST = 30
_TOLD_MARGIN = 0.8  # a first 429 at a stated rate searches from this fraction of it up
_FLOOR_REQUESTS = 3  # accepted between two 429s before they bound the rate from below
_HELD_FULL = 2  # accepted in a row after a 429 (the limiter full): the pace is about the limit
_RECENT_SENDS = 8
_FIRST_STEP = 0.1  # the first climb above a rate known to hold: 10% higher, then 20%, 40%...


@dataclass(slots=True)
class Probe:
    """The request rate learned from 429s where no header tells it (a search between a
    floor and a ceiling)."""

    rate: float | None = None  # pace now (None: no 429 seen; unpaced)
    low: float = 0.0  # fastest rate sustained without a 429
    high: float = math.inf  # slowest rate that drew a 429
    since: float = 0.0  # when the rate last changed
    count: int = 0  # requests sent at this rate since then
    cut_at: float = -math.inf  # when the rate was last cut (read by nothing now: a field
    # still, so an account state another version of splitter wrote to Redis still loads)
    resume_at: float = -math.inf  # the first send a cut paced (booked after it)
    tat: float = -math.inf  # GCRA: the theoretical time of the next send
    sends: list[float] = field(default_factory=list)
    paced_high: bool = False  # ``high`` drew a 429 while paced (not slow start's guess)
    refused_at: float = -math.inf  # when the last 429 that cut the rate was sent
    accepted_since: int = 0  # requests sent after it and accepted
    # Unpaced (slow start): the rates at which accepted requests followed the send before
    # them (the latest few). A limiter with no burst accepts only what comes at its rate
    # or slower, so the first 429 is bracketed between the fastest and the rate that drew
    # it.
    accepted_rates: list[float] = field(default_factory=list)
    climbs: int = 0  # climbs above the floor since the last 429 (each step twice the last)
    bracketed: bool = False  # slow start's first 429 lies between two rates it measured
    # Requests slow start had through before its first 429 when they came faster than the
    # limit allows (0: none seen): a burst allowance at most this deep.
    burst: int = 0
    # Slow start's first 429 was bracketed: the limiter lent nothing faster than its rate.
    no_burst: bool = False
    # The rate that bracket rests on (a limiter with no burst takes at least it), and the
    # requests accepted before slow start's first 429 (the allowance, if it had one).
    bracket_low: float = 0.0
    opened: int = 0

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
        if self.rate is None and math.isinf(self.high):
            gap_rate = _send_rate(self.sends, sent_at)
            if not math.isinf(gap_rate):
                self.accepted_rates = [*self.accepted_rates[-(_RECENT_SENDS - 1) :], gap_rate]
        if self.rate is None or now - self.since < _SUSTAIN_SECONDS:
            return
        if self.count < _SUSTAIN_REQUESTS:
            return
        # Above a limiter's burst allowance a rate too fast is refused only once its excess
        # has filled it: 10% over the floor holds ~10 requests a request of allowance, and
        # held for fewer it proves nothing. But not for more than _HOLD_AT_MOST: a step
        # taken as held too soon costs one 429, whose drain then tells the rate.
        excess = self.rate - self.low
        if (
            self.burst
            and self.low > 0
            and excess > 0
            and self.count < min(self.burst * self.rate / excess, _HOLD_AT_MOST)
        ):
            return
        self.low = max(self.low, self.rate)
        if not self.paced_high and self.high / self.low <= CLOSE_ENOUGH:
            # The ceiling was slow start's guess (the gap before a refused send, which a
            # slow first send shortens), and a rate close to it holds: look above it.
            self.high *= 2
        if self.high / self.low > (_CLOSE_ENOUGH_MEASURED if self.no_burst else CLOSE_ENOUGH):
            # Between two rates slow start measured, a geometric bisection. Otherwise a
            # climb from the rate known to hold, a little at first and faster as each step
            # holds (TCP CUBIC and the AWS SDKs' adaptive mode climb back the same way): a
            # limit just above the floor costs one 429, not a bisection's two or three.
            # Under a ceiling slow start's timing alone set, the climb ignores it.
            step = self.low * (1 + _FIRST_STEP * 2**self.climbs)
            self.climbs += 1
            middle = math.sqrt(self.low * self.high)
            if self.bracketed:
                step = middle
            elif self.paced_high:
                step = min(step, middle)
            self._set(step, now)
        elif now - self.since >= _REPROBE_AFTER and self.count >= _REPROBE_REQUESTS:
            self.high = self.high * 1.1  # the limit may have grown: look a little higher
            self._set(math.sqrt(self.low * self.high), now)

    def rejected(
        self, sent_at: float, now: float, *, first_guess: float, told: float | None = None
    ) -> None:
        """A 429 for a request sent at ``sent_at``; ``told``: the rate the user stated."""
        if sent_at < self.resume_at:
            # Sent before the last cut's pace could space it (booked before that 429 came
            # back, however late it left): the same overload, already answered. Taken as
            # the new pace's, one such request, sent as the first 429 came back 50 ms
            # after slow start's burst, cut a 30 r/s bucket's search to 5 r/s.
            return
        floor = self._floor(sent_at)
        # Accepted at this pace since a 429 left the limiter full: no burst allowance
        # could have let them through, so the pace was about the limit (timing decided).
        held_when_full = not math.isinf(self.refused_at) and self.accepted_since >= _HELD_FULL
        refused_before = self.refused_at
        if told is not None and self.rate is None:
            # The first 429 at a stated rate: the statement is believed within a margin
            # (a leaky bucket with no burst refuses a request that comes a little early).
            floor = max(floor, told * _TOLD_MARGIN)
        accepted = self.accepted_since
        self.refused_at, self.accepted_since = sent_at, 0
        # Paced, the rate we paced at drew it; unpaced (slow start), what we really sent.
        too_fast = self.rate if self.rate is not None else _send_rate(self.sends, sent_at)
        if self.no_burst and too_fast * 1.01 < self.bracket_low:
            # Refused clearly slower than slow start had through: no limiter without a
            # burst allowance does that, so the bracket was an allowance's (its first 429
            # fell on the first send of a faster wave). Believed, it cut 15% a 429 (13 of
            # them from 70 r/s down to a 10 r/s bucket with a burst of 5).
            self.no_burst = held_when_full = False
            self.burst = max(self.burst, self.opened)
        if math.isinf(too_fast):
            # Sent in a burst: that says nothing of the rate the service takes. Pace at the
            # guess, and look for the limit from there.
            self._set(first_guess, now)
            self.cut_at, self.tat = now, now + 1 / first_guess
            self.resume_at = self.tat
            return
        if too_fast < self.high:
            self.high, self.paced_high = too_fast, self.rate is not None or told is not None
        bracket = self._bracket(too_fast) if self.rate is None else 0.0
        self.bracketed = bracket > 0
        self.no_burst = self.no_burst or self.bracketed
        if self.rate is None:
            self.opened = accepted
        if self.rate is None and not self.bracketed and self.accepted_rates:
            self.burst = accepted
        if self.bracketed:
            self.bracket_low = bracket
            floor = max(floor, bracket)
            self.paced_high = True  # measured against a floor: no mere guess
        if self.high <= self.low:
            # A 429 at a rate that had held: a burst allowance running out, or, if it held
            # while the limiter was full or slow start showed it lends nothing, the limit
            # met exactly (a send a few ms early). (One a climb's step above the floor only
            # says the limit lies in between.) Halved there, a floor slow start measured a
            # hair over a 20 r/s limit cost 1.5 s of climbing back from 10.
            if held_when_full or self.no_burst:  # at the rate the recent requests really went
                paced = _mean_rate(self.sends, sent_at, after=refused_before)
                self.low = min(self.high, paced if held_when_full else math.inf) / CLOSE_ENOUGH
            else:
                self.low = self.high * FIRST_CUT
        # Where slow start showed an allowance of a few requests (a bucket that does not run
        # dry in the wait after a 429), two 429s bound its rate from above too.
        span = sent_at - refused_before
        drains = self.burst >= _ALLOWANCE_SEEN
        ceiling = _drain_ceiling(accepted, span, self.rate) if drains else math.inf
        if ceiling < self.high:
            # Paced above what the limiter drained between its two 429s: a cut to just
            # under the pace that drew it was still over the rate, a staircase of 429s, one
            # a cut (17 of 217 requests against 10 r/s with a burst of 5).
            self.high, self.paced_high = ceiling, True
            self.low = min(self.low, ceiling / CLOSE_ENOUGH)
        self.low = max(self.low, min(floor, self.high / CLOSE_ENOUGH))
        # Back to the fastest rate known to hold, to climb again from there.
        rate = self.low if self.low > 0 else self.high * FIRST_CUT
        if not math.isinf(ceiling):
            # The drain itself is known within a request over the span: paced a little under
            # it, not at the floor, whose climbs a burst allowance holds back (a bucket of
            # 30 r/s with a burst of 10 was left at 20, 0.77 of its rate).
            rate = max(rate, min(accepted / span * _DRAIN_MARGIN, self.high))
        self.climbs = 0
        self._set(rate, now)
        # The next request waits two intervals, not one: a limiter that counts a refused
        # request (nginx's accounting, OpenAI's) holds it for an interval, and the request
        # one interval on was refused too, putting the ceiling at the limit itself (a
        # search that then settled at 0.88 of it). Elsewhere it costs one interval a 429.
        self.cut_at = now
        self.tat = self.resume_at = now + 2 / rate

    def _bracket(self, too_fast: float) -> float:
        """Slow start's first 429, at ``too_fast``: the rate of the request accepted just
        before it bounds the limit from below (0: no bound).

        A limiter with no burst accepts nothing faster than its rate: accepted at a
        clearly slower rate, or at about the same rate but only once (the limit is that
        rate, and timing decided), the limit lies between the two. Accepted at about the
        refused rate more than once, the accepted ones were a burst allowance's.
        """
        close = [r for r in self.accepted_rates if r * CLOSE_ENOUGH >= too_fast]
        if not self.accepted_rates or len(close) > 1:
            return 0.0
        return min(max(self.accepted_rates), too_fast / CLOSE_ENOUGH)

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


def _send_rate(sends: list[float], until: float) -> float:
    """The rate at which the send at ``until`` followed the one before (inf: at once, or
    none before). Not an average over the recent sends: slow start speeds up as it goes,
    and an average would put the limit below the rate the service had just taken."""
    recent = [t for t in sends if t <= until]
    gap = recent[-1] - recent[-2] if len(recent) >= 2 else 0.0
    return 1 / gap if gap > 0 else math.inf


def _drain_ceiling(accepted: int, span: float, pace: float | None) -> float:
    """An upper bound on a leaky bucket's rate from two 429s ``span`` apart with ``accepted``
    requests taken in between, sent at ``pace`` (inf: no bound).

    A 429 means the bucket held more than its burst allowance less one request (and at
    most the allowance); everything it took in between was drained, and it was that full
    again at the second. So it drained fewer than ``accepted + 1`` requests over ``span``,
    unless it ran dry in between, which a pace above that bound rules out once the bucket
    holds a few requests' allowance. (``Probe._floor``, ``(accepted - 1) / span``, is the
    matching lower bound, which holds for any bucket.)"""
    if pace is None or math.isinf(span) or span <= 0 or accepted < 1:
        return math.inf
    bound = (accepted + 1) / span
    return bound if pace > bound else math.inf


def _mean_rate(sends: list[float], until: float, after: float = -math.inf) -> float:
    """The mean rate of the recent sends after ``after`` up to ``until`` (inf: fewer than
    two). (After a 429 the next send waits a second interval: not the pace.)"""
    recent = [t for t in sends if after < t <= until]
    span = recent[-1] - recent[0] if len(recent) >= 2 else 0.0
    return (len(recent) - 1) / span if span > 0 else math.inf
