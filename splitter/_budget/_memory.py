"""The default budget: one :class:`~._account.Account` in this process."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from .. import _clock
from ._account import Account
from ._protocol import Kind, Reservation, WaitHook
from ._snapshot import BudgetSnapshot

__all__ = ["MemoryBudget"]

_RECHECK = 0.05  # seconds between looks while waiting on a reading no time can predict
_LONGEST_NAP = 1.0  # a newer reading may open room sooner than the wait foreseen


class MemoryBudget:
    """Rate limits learned from any limiter (see ``_account``), kept in this process.

    It holds no event-loop primitive, only a lock, so one budget may be shared by every
    Splitter in the process, whichever loop (or thread) they run on. A waiter sleeps until
    the account says its request may go, then books it; where the account waits for a
    response it cannot time (the first request after a window's reset), it looks again
    every few milliseconds.
    """

    def __init__(
        self,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        burst: float = 1.0,
        slow_start: bool = True,
        share: float = 1.0,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._clock = clock if clock is not None else _clock.now
        self._sleep = sleep
        self._lock = threading.Lock()
        self.account = Account.new(
            rpm=rpm, tpm=tpm, burst=burst, now=self._clock(), slow_start=slow_start, share=share
        )

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation:
        told = on_wait is None
        while True:
            with self._lock:
                now = self._clock()
                delay, short = self.account.wait(tokens, now)
                if delay <= 0:
                    return Reservation(tokens, self.account.take(tokens, now))
                awaiting = self.account.awaiting(short, now)
            if not told and on_wait is not None:
                on_wait(delay, short)
                told = True
            # A wait on a reading (not on a time the service told) ends when one comes.
            recheck = awaiting or delay == float("inf")
            await self._sleep(_RECHECK if recheck else _nap(delay))

    async def depart(self, reservation: Reservation) -> None:
        while True:
            with self._lock:
                now = self._clock()
                delay = self.account.depart_wait(now)
                if delay <= 0:
                    self.account.depart(reservation.ticket, now)
                    return
            await self._sleep(_nap(delay))

    async def settle(
        self,
        reservation: Reservation,
        headers: Mapping[str, str],
        *,
        used_tokens: int | None = None,
        limited: Kind | None = None,
        retry_after: float | None = None,
        lost: bool = False,
    ) -> None:
        with self._lock:
            now = self._clock()
            ticket = reservation.ticket
            if lost:
                self.account.lost(ticket)
                return
            if limited is not None:
                self.account.rejected(ticket, limited, retry_after, headers, now)
                return
            if used_tokens is not None and used_tokens < reservation.tokens:
                self.account.give(ticket, reservation.tokens - used_tokens, now)
            self.account.accepted(ticket, headers, now)

    def state_limits(self, *, rpm: int | None, tpm: int | None, burst: float) -> None:
        with self._lock:
            self.account.state(rpm=rpm, tpm=tpm, burst=burst, now=self._clock())

    def learned(self) -> dict[str, Any]:
        with self._lock:
            return self.account.learned()

    def teach(self, learned: Mapping[str, Any]) -> None:
        with self._lock:
            self.account.teach(learned)

    def snapshot(self) -> BudgetSnapshot:
        with self._lock:
            return BudgetSnapshot(**self.account.snapshot_values(self._clock()))


def _nap(delay: float) -> float:
    """How long to sleep for a wait of ``delay``: at least a millisecond (a wait that
    rounds away to nothing on a virtual clock would never let time move on), at most
    :data:`_LONGEST_NAP`."""
    return min(max(delay, 0.001), _LONGEST_NAP)
