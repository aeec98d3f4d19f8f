"""One concurrency limit per endpoint, adaptive (AIMD), shared across event loops.

Every batch, Splitter, aggregator and ``wrap()`` clone on an endpoint takes its slots from
the endpoint's one :class:`AdaptiveConcurrency`, so ``max_concurrency`` is a limit on the
endpoint, not on a batch. The sync API runs each call on a fresh event loop in a worker
thread, so the limit may be shared by several loops at once: it holds no loop-bound
primitive, only a lock and, per waiter, a way to wake that waiter's own loop.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import sniffio

from .. import _clock

__all__ = ["AdaptiveConcurrency"]

_CUT = 0.5
_COOLDOWN = 1.0  # seconds between two cuts: one burst of overloads is one signal, not fifty


@dataclass(slots=True, eq=False)
class _Waiter:
    wake: Callable[[], None]
    granted: bool = False


def _waker() -> tuple[Callable[[], None], Callable[[], Awaitable[object]]]:
    """A thread-safe way to wake the current task's loop, and what to await for it."""
    if sniffio.current_async_library() == "trio":
        import trio

        event, token = trio.Event(), trio.lowlevel.current_trio_token()
        return (lambda: token.run_sync_soon(event.set)), event.wait
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    def wake() -> None:
        loop.call_soon_threadsafe(resolve)

    return wake, lambda: asyncio.shield(future)


class AdaptiveConcurrency:
    """The endpoint's requests in flight, at most :attr:`current` (1 to ``ceiling``).

    Overload (503/529, timeouts) halves the limit, at most once a second; each success
    regrows it by 1/limit. Slots are granted first come, first served.
    """

    def __init__(self, ceiling: int, *, adaptive: bool = True) -> None:
        self.ceiling = ceiling
        self.adaptive = adaptive
        self._limit = float(ceiling)
        self._last_cut = -float("inf")
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def current(self) -> int:
        return max(1, int(self._limit))

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def lower_ceiling(self, ceiling: int) -> None:
        """A stricter ``max_concurrency`` configured for the same endpoint."""
        with self._lock:
            self.ceiling = min(self.ceiling, ceiling)
            self._limit = min(self._limit, float(self.ceiling))

    def try_acquire(self) -> bool:
        """Take a slot if one is free now (never yields to the event loop)."""
        with self._lock:
            if self._in_flight < self.current and not self._waiters:
                self._in_flight += 1
                return True
            return False

    async def acquire(self) -> None:
        if self.try_acquire():
            await anyio.lowlevel.checkpoint()
            return
        wake, wait = _waker()
        waiter = _Waiter(wake)
        with self._lock:
            self._waiters.append(waiter)
            self._grant()
        try:
            await wait()
        except BaseException:
            with self._lock:
                if waiter.granted:  # woken and cancelled at once: the slot goes on
                    self._in_flight -= 1
                    self._grant()
                else:
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._grant()

    def _grant(self) -> None:
        """Hand free slots to the oldest waiters (under the lock)."""
        while self._waiters and self._in_flight < self.current:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self._in_flight += 1
            waiter.wake()

    def on_success(self) -> None:
        if self.adaptive and self._limit < self.ceiling:
            with self._lock:
                self._limit = min(self.ceiling, self._limit + 1 / self._limit)
                self._grant()

    def on_overload(self) -> None:
        if not self.adaptive:
            return
        with self._lock:  # loops in two threads overloaded at once: one cut, not two
            now = _clock.now()
            if now - self._last_cut >= _COOLDOWN:
                self._last_cut = now
                self._limit = max(1.0, self._limit * _CUT)
