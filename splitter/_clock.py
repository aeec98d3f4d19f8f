"""The one clock: every duration and instant splitter reads comes from :func:`now`.

Real runs read ``time.monotonic`` (the clock asyncio's loop sleeps on), moved on by however
far virtual time ran ahead of it (below). A virtual-time run
(``splitter.testing``) points the clock at its event loop's virtual time, so budgets,
latencies, deadlines, aggregation windows and the simulator all agree on one timeline that
jumps whenever every task is asleep. Sleeping always goes through the running event loop
(``anyio.sleep``), which is what makes such a jump possible.

The clock never goes back within a process: leaving a ``use_clock`` block whose source ran
ahead of the real clock (a virtual minute passes in a millisecond) moves the real clock on by
the difference, so objects that outlive the block (a simulator, a budget) keep counting on.

Wall-clock dates (HTTP ``reset`` timestamps, ``created`` fields) are not durations: they
keep using ``time.time()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["now", "use_clock"]

_ahead = 0.0  # seconds virtual time ran ahead of time.monotonic, in blocks now closed


def _real() -> float:
    return time.monotonic() + _ahead


_source: Callable[[], float] = _real


def now() -> float:
    """Seconds on splitter's clock (an arbitrary origin; only differences mean anything)."""
    return _source()


@contextmanager
def use_clock(source: Callable[[], float]) -> Iterator[None]:
    """Read ``source`` as the clock inside the block (e.g. a virtual clock). Process-wide: a
    virtual-time run runs one event loop at a time. Leaving a block entered from the real
    clock, a source that ran ahead moves the real clock on by as much."""
    global _source, _ahead
    before, _source = _source, source
    try:
        yield
    finally:
        _source = before
        if before is _real:
            _ahead += max(0.0, source() - _real())
