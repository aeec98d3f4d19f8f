"""The one clock: every duration and instant splitter reads comes from :func:`now`.

Real runs read ``time.monotonic`` (the clock asyncio's loop sleeps on). A virtual-time run
(``splitter.testing``) points the clock at its event loop's virtual time, so budgets,
latencies, deadlines, aggregation windows and the simulator all agree on one timeline that
jumps whenever every task is asleep. Sleeping always goes through the running event loop
(``anyio.sleep``), which is what makes such a jump possible.

Wall-clock dates (HTTP ``reset`` timestamps, ``created`` fields) are not durations: they
keep using ``time.time()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["now", "use_clock"]

_source: Callable[[], float] = time.monotonic


def now() -> float:
    """Seconds on splitter's clock (an arbitrary origin; only differences mean anything)."""
    return _source()


@contextmanager
def use_clock(source: Callable[[], float]) -> Iterator[None]:
    """Read ``source`` as the clock inside the block (e.g. ``trio.current_time`` under a
    ``MockClock``). Process-wide: a virtual-time test runs one event loop at a time."""
    global _source
    before, _source = _source, source
    try:
        yield
    finally:
        _source = before
