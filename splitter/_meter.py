"""Requests in flight to one service (:class:`InFlightMeter`): what each response shared the
engine with, and how long it would have queued for each candidate slot count. Nothing here
does I/O; the clock is whatever the caller measured."""

from __future__ import annotations

import bisect
import math
import operator
from collections import deque
from collections.abc import Iterable, Mapping

__all__ = ["SLOT_CANDIDATES", "InFlightMeter", "Reading"]

# Slot counts tried; None is "no limit". Powers of two and the usual -np / max_num_seqs values.
SLOT_CANDIDATES: tuple[int | None, ...] = (
    *(1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128, 256),
    None,
)

Reading = tuple[float, float]  # (seconds queued at the server, sequences running beside it)


_first = operator.itemgetter(0)  # of a (time, areas) snapshot


class InFlightMeter:
    """Requests in flight to one service, to tag each response with what it shared.

    For every candidate slot count S it also reconstructs a server that runs S at once and
    admits the next request whenever one finishes, and reads off how long each request
    queued there and how many sequences shared the engine with it once admitted. Two
    readings of its admission are kept where they differ, and the model takes, per slot
    count, the one its fit explains better:

    * first come, first served (llama.cpp's slots and vLLM's scheduler): admitted once all
      but S - 1 of the requests sent before it and still out then had returned. Misread
      when requests sent within moments of each other reach the server in another order;
    * by response order: admitted when the S-th response before its own returned. Misread
      when lengths differ: a long request admitted first returns after short ones.
    """

    def __init__(self, slots: Iterable[int | None] = SLOT_CANDIDATES) -> None:
        self._caps = tuple(dict.fromkeys([*slots, None]))
        # Each cap as a number (None: no cap, infinite), for ``_advance``.
        self._limits = tuple(math.inf if cap is None else cap for cap in self._caps)
        self._unlimited = self._caps.index(None)
        self._count = 0
        # integral of min(count, cap) over time (a tuple: a snapshot of it is itself)
        self._areas = (0.0,) * len(self._caps)
        self._since = 0.0
        self._sent = 0
        # token -> (sent at, areas then, tokens sent before it and still out then; None: its
        # queue is not read, only the sequences beside it)
        self._flights: dict[int, tuple[float, tuple[float, ...], tuple[int, ...] | None]] = {}
        self._returned: dict[int, tuple[float, tuple[float, ...]]] = {}  # token -> when, areas
        # token -> requests sent (``_sent``) when it returned: the later ones it was not ahead of
        self._sent_by_return: dict[int, int] = {}
        self._prune_above = 64  # size of ``_returned`` past which :meth:`_forget` prunes
        longest = max((cap for cap in self._caps if cap is not None), default=1)
        self._finished: deque[tuple[float, tuple[float, ...]]] = deque(maxlen=longest)

    @property
    def in_flight(self) -> int:
        return self._count

    def _advance(self, now: float) -> None:
        elapsed = now - self._since
        count = self._count
        if elapsed > 0 and count:
            self._areas = tuple(
                [
                    area + (count if count < cap else cap) * elapsed
                    for area, cap in zip(self._areas, self._limits, strict=True)
                ]
            )
        if now > self._since:
            self._since = now

    def start(self, now: float, *, read: bool = True) -> int:
        """Count a request in; returns the token to pass to :meth:`finish`. ``read=False``:
        its queue will not be read (:meth:`finish` gives only the "no limit" reading), so
        the requests ahead of it, O(in flight), are not recorded."""
        self._advance(now)
        token = self._sent
        self._flights[token] = (now, self._areas, tuple(self._flights) if read else None)
        self._sent += 1
        self._count += 1
        return token

    def finish(self, token: int, now: float) -> Mapping[int | None, tuple[Reading, ...]]:
        """Count a request out; returns, per slot count, its readings (first come, first
        served first; one reading where both agree)."""
        self._advance(now)
        started, start_areas, earlier = self._flights.pop(token)
        self._count -= 1
        if earlier is None:  # not read: the sequences beside it, as "no limit" reads them
            served = now - started
            i = self._unlimited
            running = (self._areas[i] - start_areas[i]) / served if served > 0 else 1.0
            self._returned_at(token, now)
            return {None: ((0.0, running),)}
        # When the requests sent before it returned, earliest first; those still out
        # return later than any of these.
        returned = self._returned
        returns = [returned[t] for t in earlier if t in returned]
        returns.sort(key=_first)
        finished, areas_now = self._finished, self._areas
        ahead, known, done = len(earlier), len(returns), len(finished)
        view: dict[int | None, tuple[Reading, ...]] = {}
        for i, cap in enumerate(self._caps):
            area = areas_now[i]
            if cap is None:
                served = now - started
                running = (area - start_areas[i]) / served if served > 0 else 1.0
                view[cap] = ((0.0, running),)
                continue
            # Admitted once all but cap - 1 of those ahead had returned.
            k = ahead - cap
            first_come = returns[k] if 0 <= k < known else None
            by_order = finished[-cap] if done >= cap else None
            readings: list[Reading] = []
            for at in (first_come, by_order):
                when, areas = (
                    (started, start_areas) if at is None or not started < at[0] < now else at
                )
                served = now - when
                running = (area - areas[i]) / served if served > 0 else 1.0
                reading = (when - started, running)
                if reading not in readings:
                    readings.append(reading)
            view[cap] = tuple(readings)
        self._returned_at(token, now)
        return view

    def _returned_at(self, token: int, now: float) -> None:
        """Record when ``token`` returned, for the readings of the requests still out."""
        snapshot = (now, self._areas)
        self._finished.append(snapshot)
        self._returned[token] = snapshot
        self._sent_by_return[token] = self._sent
        self._forget()

    def _forget(self) -> None:
        """Drop return times no request still in flight can ask for.

        Request ``f`` asks for ``t`` when ``t`` was in flight as ``f`` was sent: ``t < f`` and
        ``f`` was sent before ``t`` returned (``f < sent_by_return[t]``); so ``t`` is wanted
        while the first request still in flight after ``t`` was sent before ``t`` returned.
        What is kept sets the next size to prune at, so that a prune that frees little
        (every return still wanted by a later request) is not redone at the next return."""
        if len(self._returned) <= max(2 * self._count + 64, self._prune_above):
            return
        flying = list(self._flights)  # in the order sent: ascending tokens
        sent_by_return = self._sent_by_return
        kept: dict[int, tuple[float, tuple[float, ...]]] = {}
        for t, r in self._returned.items():
            at = bisect.bisect_right(flying, t)
            if at < len(flying) and flying[at] < sent_by_return[t]:
                kept[t] = r
        self._returned = kept
        self._sent_by_return = {t: sent_by_return[t] for t in kept}
        self._prune_above = 2 * len(kept) + 64
