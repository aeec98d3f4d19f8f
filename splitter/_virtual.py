"""Virtual time: one timeline for the event loop and splitter's clock, jumping when idle.

A virtual-time run replaces the event loop's clock with a number that moves only when every
task is asleep: then it jumps straight to the earliest wake-up (a sleep, a timeout, a
simulated token), so a minute of rate-limit window costs no real time and every duration is
exact whatever the machine's load. ``_clock.use_clock`` points splitter's clock at the same
number, so budgets, latencies, deadlines and the simulator all read it.

* asyncio: :class:`VirtualTimeLoop`, a selector event loop whose ``time()`` is the virtual
  clock and whose selector, asked to wait with nothing ready, moves the clock by the wait
  instead of sleeping. (``looptime`` does the same; its pytest plugin breaks every fixture
  of a suite without pytest-asyncio, so splitter keeps these few lines of its own.)
* trio: a ``trio.abc.Clock`` on the same number; trio asks a clock how long to sleep only
  when no task can run, and it answers "jumped: 0". (trio's own
  ``MockClock(autojump_threshold=0)`` jumps while a thread works too, and openai's client
  runs one on its first request.)

Time never passes while code runs, only while tasks wait. Work in threads (``to_thread``,
``run_in_executor``) takes no virtual time: the loop waits for it for real. A real socket
does not stop a jump: virtual time is for code that talks to the in-process simulator, not
to real servers (a read timeout would fire at once).
"""

from __future__ import annotations

import asyncio
import functools
import math
import selectors
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from . import _clock

__all__ = ["Backend", "VirtualClock", "VirtualTimeLoop", "active", "virtual_backend"]

Backend = Literal["asyncio", "trio"]
_active = 0  # virtual_backend blocks open (nested ones share the innermost clock)
_THREAD_POLL = 0.001  # real seconds between looks while a thread works
_RESOLUTION = 1e-6  # seconds: asyncio's timers this close to the clock are due


class VirtualClock:
    """Seconds of virtual time, starting where splitter's clock stood when it was made (so
    objects made before the run, which took their origin from that clock, carry on)."""

    def __init__(self, start: float | None = None) -> None:
        self._now = _clock.now() if start is None else start

    def now(self) -> float:
        """The virtual present."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the present ``seconds`` on (never back)."""
        self._now += max(0.0, seconds)


class _JumpingSelector(selectors.DefaultSelector):
    """Polls for I/O without waiting; a wait with nothing ready moves the clock instead,
    unless a thread is at work (its result will be I/O: the self-pipe): then it waits."""

    def __init__(self, clock: VirtualClock, threads_busy: Callable[[], bool]) -> None:
        super().__init__()
        self._virtual = clock
        self._threads_busy = threads_busy

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer at all: only I/O or a thread can wake the loop
            return super().select(None)
        if self._threads_busy():  # threads take no virtual time: wait for them for real
            return super().select(_THREAD_POLL)
        self._virtual.advance(timeout)  # every task sleeps: jump to the earliest wake-up
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on ``clock``'s virtual time."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_JumpingSelector(clock, self._threads_busy))
        self._virtual = clock
        # asyncio fires a timer once time() + this resolution passes it. After a jump the
        # clock stands exactly on the timer, and at a clock reading past ~2e7 s (splitter's
        # clock carries on from every virtual run) 1 ns no longer changes it: the timer would
        # never fire. A microsecond stays above the last place of any reading below ~1e9 s.
        base: float = getattr(self, "_clock_resolution", 0.0)
        self._clock_resolution = max(base, _RESOLUTION)
        self._executor_work: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()

    def time(self) -> float:
        return self._virtual.now()

    def run_in_executor(  # type: ignore[override]  # the same signature, spelled loosely
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> asyncio.Future[Any]:
        future = super().run_in_executor(executor, func, *args)
        self._executor_work.add(future)
        return future

    def _threads_busy(self) -> bool:
        """Whether work handed to a thread (``asyncio.to_thread``, ``anyio.to_thread``) runs."""
        if any(not f.done() for f in self._executor_work):
            return True
        return _anyio_threads_busy()


def _anyio_threads_busy() -> bool:
    import anyio.to_thread

    try:
        return anyio.to_thread.current_default_thread_limiter().borrowed_tokens > 0
    except Exception:  # no anyio context here: then anyio has lent no thread either
        return False


@functools.cache
def _trio_clock_class() -> type[Any]:
    import trio

    class TrioVirtualClock(trio.abc.Clock):
        """trio's clock on a :class:`VirtualClock`. trio asks it how long to sleep only when
        no task can run: then it jumps to the deadline, unless a thread is at work."""

        def __init__(self, clock: VirtualClock) -> None:
            self._virtual = clock

        def start_clock(self) -> None:
            """Nothing to start: the clock moves only by jumps."""

        def current_time(self) -> float:
            return self._virtual.now()

        def deadline_to_sleep_time(self, deadline: float) -> float:
            wait = deadline - self._virtual.now()
            if wait <= 0 or math.isinf(wait):  # due now; or no timer: only I/O can wake it
                return max(0.0, wait)
            if trio.to_thread.current_default_thread_limiter().borrowed_tokens:
                return _THREAD_POLL  # threads take no virtual time: wait for them for real
            self._virtual.advance(wait)
            return 0.0

    return TrioVirtualClock


def active() -> bool:
    """Whether a virtual-time block is open in this process."""
    return _active > 0


@contextmanager
def virtual_backend(backend: Backend = "asyncio") -> Iterator[tuple[str, dict[str, Any]]]:
    """Point splitter's clock at a new virtual clock; yield the anyio backend (name and
    options) whose event loops run on it."""
    global _active
    clock = VirtualClock()
    options: dict[str, Any]
    if backend == "trio":
        options = {"clock": _trio_clock_class()(clock)}
    elif backend == "asyncio":
        options = {"loop_factory": lambda: VirtualTimeLoop(clock)}
    else:
        raise ValueError(f"virtual time runs on 'asyncio' or 'trio', not {backend!r}")
    _active += 1
    try:
        with _clock.use_clock(clock.now):
            yield backend, options
    finally:
        _active -= 1
