"""A rate-limit budget shared by many processes through Redis.

The same :class:`~._account.Account` as :class:`MemoryBudget` (the same learning from any
limiter), kept as one JSON value in Redis and changed only in optimistic transactions
(WATCH, read, change, MULTI/EXEC, again on a conflict), so every change is atomic and all
processes read one clock (Redis ``TIME``). If Redis cannot be reached the budget degrades,
with one warning, to a local budget at a conservative share of the rates it has learned
(or fails requests, by policy) and tries Redis again a little later; it never sends
without a budget.

The sync redis client runs in worker threads (never on the event loop): ``redis.asyncio``
binds its connections to one asyncio loop, which would exclude trio and the sync API's
fresh loops. :meth:`RedisBudget.snapshot` reads the copy the last call brought back.
"""

from __future__ import annotations

import functools
import json
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from .. import _clock
from .._exceptions import BudgetError
from .._policy import Limits, SharedBudget, redacted_url
from ._account import Account, Ticket
from ._adaptive import AdaptiveConcurrency
from ._memory import MemoryBudget
from ._protocol import Kind, Reservation, WaitHook
from ._snapshot import BudgetSnapshot

__all__ = ["RedisBudget"]

R = TypeVar("R")
_RETRY_REDIS_AFTER = 5.0  # seconds on the local budget before Redis is tried again
_RECHECK = 0.05
_LONGEST_NAP = 1.0
# The key's last real send (any process): go now and record it, or say how long to wait.
# Strings out, as Redis turns a script's floats into integers.
_DEPART = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local last = tonumber(redis.call('GET', KEYS[1]))
if last ~= nil and now < last + tonumber(ARGV[1]) then
  return {tostring(last + tonumber(ARGV[1]) - now), '0'}
end
redis.call('SET', KEYS[1], string.format('%.6f', now), 'PX', ARGV[2])
return {'0', string.format('%.6f', now)}
"""


class RedisBudget:
    """The budget of one endpoint and API key, shared through Redis."""

    def __init__(self, config: SharedBudget, *, fingerprint: str, limits: Limits) -> None:
        import redis  # the ``redis`` extra, needed only when a shared budget is asked for

        self._config = config
        self.key = f"{config.namespace}:budget:{fingerprint}"
        self._stated = (limits.rpm, limits.tpm, limits.burst)
        self._slow_start = limits.slow_start
        self._client = redis.Redis.from_url(
            config.url, socket_timeout=config.timeout, socket_connect_timeout=config.timeout
        )
        self._outage_errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            OSError,
        )
        self._lock = threading.Lock()
        self._seen = Account.new(rpm=limits.rpm, tpm=limits.tpm, burst=limits.burst, now=0.0)
        self._seen_at = 0.0  # Redis time of that copy
        self._local: MemoryBudget | None = None
        self._down_until = 0.0
        self._warned = False
        # One waiter per process looks at the shared account at a time, the others queue
        # behind it (first come, first served, whichever event loop they run on).
        self._turn = AdaptiveConcurrency(1, adaptive=False)
        self._departed: float | None = None  # this process's latest real send (local clock)

    # -- the Budget protocol -------------------------------------------------------------

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation:
        await self._turn.acquire()
        try:
            return await self._acquire(tokens, on_wait)
        finally:
            self._turn.release()

    async def _acquire(self, tokens: int, on_wait: WaitHook | None) -> Reservation:
        told = on_wait is None
        while True:
            local = self._fallback()
            if local is not None:
                return await local.acquire(tokens, on_wait)
            try:
                delay, short, ticket, awaiting = await self._transact(
                    functools.partial(_wait_or_take, tokens), keep=_took
                )
            except self._outage_errors as exc:
                self._outage(exc)
                continue
            if ticket is not None:
                return Reservation(tokens, ticket)
            if not told and on_wait is not None:
                on_wait(delay, short)
                told = True
            # A wait on a reading (not on a time the service told) ends when one comes.
            recheck = awaiting or delay == float("inf")
            await anyio.sleep(_RECHECK if recheck else min(delay, _LONGEST_NAP))

    async def depart(self, reservation: Reservation) -> None:
        """Spacing at the wire between every process on the key, at the pace of the last
        copy of the shared account: one short Redis script (``TIME``, the key's last real
        send, set it or say how long to wait) when a pace is in force, none otherwise.

        Bookings alone left the processes' sends as uneven as their event loops: booked
        55-60 ms apart, two requests of two processes left 48 ms apart, a leaky bucket with
        no burst refused the second, and the search cut the shared rate to 0.72 of it."""
        ticket = reservation.ticket
        if ticket.marks.get("local"):
            if self._local is not None:
                await self._local.depart(reservation)
            return
        while True:
            with self._lock:
                now = _clock.now()
                gap = self._seen.interval(self._seen_at + max(0.0, now - self._seen_local))
            if gap <= 0:
                return
            try:
                delay, at = await anyio.to_thread.run_sync(self._depart_sync, gap)
            except self._outage_errors:
                await self._depart_here(gap)  # the next booking or settle meets the outage
                return
            if delay <= 0:
                ticket.marks["departed"] = at  # on the Redis clock, read again at settle
                return
            await anyio.sleep(min(max(delay, 0.001), _LONGEST_NAP))

    def _depart_sync(self, gap: float) -> tuple[float, float]:
        """(seconds to wait, 0) or (0, the Redis time of this send, now recorded)."""
        ttl = int(self._config.key_ttl * 1000)
        wait, at = self._client.eval(_DEPART, 1, f"{self.key}:departed", repr(gap), ttl)
        return float(wait), float(at)

    async def _depart_here(self, gap: float) -> None:
        """Spacing within this process only (Redis out of reach)."""
        while True:
            with self._lock:
                now = _clock.now()
                delay = 0.0 if self._departed is None else self._departed + gap - now
                if delay <= 0:
                    self._departed = now
                    return
            await anyio.sleep(min(max(delay, 0.001), _LONGEST_NAP))

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
        ticket = reservation.ticket
        if ticket.marks.get("local"):  # booked on the outage budget: settled there, if alive
            if self._local is None:
                return
            await self._local.settle(
                reservation,
                headers,
                used_tokens=used_tokens,
                limited=limited,
                retry_after=retry_after,
                lost=lost,
            )
            return

        departed = ticket.marks.pop("departed", None)

        def change(account: Account, now: float) -> None:
            if departed is not None:
                # What is learned from the answer counts from the real send (as in a
                # MemoryBudget), not from the booking.
                account.depart(ticket, departed)
            if lost:
                account.lost(ticket)
                return
            if limited is not None:
                account.rejected(ticket, limited, retry_after, headers, now)
                return
            if used_tokens is not None and used_tokens < reservation.tokens:
                account.give(ticket, reservation.tokens - used_tokens, now)
            account.accepted(ticket, headers, now)

        await self._quietly(change)

    def state_limits(self, *, rpm: int | None, tpm: int | None, burst: float) -> None:
        self._stated = (rpm, tpm, burst)  # applied by the next transaction

    def snapshot(self) -> BudgetSnapshot:
        local = self._fallback()
        if local is not None:
            return local.snapshot()
        with self._lock:
            now = self._seen_at + max(0.0, _clock.now() - self._seen_local)
            return BudgetSnapshot(**self._seen.snapshot_values(now))

    def learned(self) -> dict[str, Any]:
        with self._lock:
            return self._seen.learned()

    def teach(self, learned: Mapping[str, Any]) -> None:
        """Called from setup code (``Splitter.use_service_model``): one blocking Redis
        transaction, or nothing during an outage."""
        try:
            self._transact_sync(lambda account, now: account.teach(learned))
        except self._outage_errors as exc:
            self._outage(exc)

    # -- plumbing ------------------------------------------------------------------------

    _seen_local = 0.0

    async def _transact(
        self, change: Callable[[Account, float], R], keep: Callable[[R], bool] | None = None
    ) -> R:
        return await anyio.to_thread.run_sync(self._transact_sync, change, keep)

    def _transact_sync(
        self, change: Callable[[Account, float], R], keep: Callable[[R], bool] | None = None
    ) -> R:
        """Run ``change`` on the shared account; write it back unless ``keep`` says the
        outcome changed nothing worth keeping (a look that found it must wait: written
        back, every waiting look voided every other process's transaction, and four
        processes spent their time retrying each other's polls)."""
        outcome: list[R] = []

        def work(pipe: Any) -> None:
            raw = pipe.get(self.key)
            seconds, micros = pipe.time()
            now = seconds + micros / 1_000_000
            account = (
                Account.load(json.loads(raw))
                if raw
                else Account.new(rpm=None, tpm=None, burst=self._stated[2], now=now)
            )
            rpm, tpm, burst = self._stated
            account.state(rpm=rpm, tpm=tpm, burst=burst, now=now)
            outcome[:] = [change(account, now)]
            if raw is None or keep is None or keep(outcome[0]):
                pipe.multi()
                ttl = int(self._config.key_ttl * 1000)
                pipe.set(self.key, json.dumps(account.dump()), px=ttl)
            with self._lock:
                self._seen, self._seen_at, self._seen_local = account, now, _clock.now()

        self._client.transaction(work, self.key)
        return outcome[0]

    async def _quietly(self, change: Callable[[Account, float], None]) -> None:
        """Best effort: an update lost to an outage is corrected by the next headers."""
        if self._fallback() is not None:
            return
        try:
            await self._transact(change)
        except self._outage_errors as exc:
            self._outage(exc)

    def _fallback(self) -> MemoryBudget | None:
        """The local budget while Redis is out (None once it is to be tried again)."""
        if self._local is not None and _clock.now() >= self._down_until:
            self._local = None
        return self._local

    def _outage(self, exc: BaseException) -> None:
        if self._config.on_outage == "stop":
            where = redacted_url(self._config.url)
            raise BudgetError(f"the shared budget at {where} is unreachable") from exc
        self._down_until = _clock.now() + _RETRY_REDIS_AFTER
        self._local = self._local or self._local_share()
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"the shared budget in Redis is unreachable ({type(exc).__name__}); using a "
                f"local budget at {self._config.outage_share:.0%} of the limits until it is back",
                RuntimeWarning,
                stacklevel=2,
            )

    def _local_share(self) -> MemoryBudget:
        """A local budget that uses ``outage_share`` of what the service allows: of the
        stated limits, of what was learned, and of what its headers say remains (they
        count every process on the key)."""
        rpm, tpm, burst = self._stated
        local = _LocalShare(rpm=rpm, tpm=tpm, burst=burst, share=self._config.outage_share)
        with self._lock:
            local.teach(self._seen.learned())
        return local


class _LocalShare(MemoryBudget):
    """The outage budget: its tickets say they are local, so they settle here."""

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation:
        reservation = await super().acquire(tokens, on_wait)
        reservation.ticket.marks["local"] = 1.0
        return reservation


def _took(outcome: tuple[float, Kind, Ticket | None, bool]) -> bool:
    return outcome[2] is not None


def _wait_or_take(
    tokens: int, account: Account, now: float
) -> tuple[float, Kind, Ticket | None, bool]:
    """Book a request, or say how long to wait and whether a response may end it."""
    delay, short = account.wait(tokens, now)
    if delay > 0:
        return delay, short, None, account.awaiting(short, now)
    return 0.0, short, account.take(tokens, now), False
