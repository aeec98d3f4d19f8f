"""Adaptive concurrency: back off multiplicatively on overload, grow back additively (AIMD)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

__all__ = ["AdaptiveConcurrency"]

_CUT = 0.5
_COOLDOWN = 1.0  # seconds between two cuts: one burst of 429s is one signal, not fifty


class AdaptiveConcurrency:
    """The current concurrency limit for one endpoint, between 1 and the policy's ceiling.

    Limiters of the batches in flight are attached while they run and follow the limit.
    """

    def __init__(
        self, ceiling: int, *, adaptive: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ceiling = ceiling
        self.adaptive = adaptive
        self._limit = float(ceiling)
        self._clock = clock
        self._last_cut = -float("inf")
        self._limiters: set[anyio.CapacityLimiter] = set()

    @property
    def current(self) -> int:
        return max(1, int(self._limit))

    def limiter(self) -> anyio.CapacityLimiter:
        """A limiter for one batch, following this limit until :meth:`release`."""
        limiter = anyio.CapacityLimiter(self.current)
        self._limiters.add(limiter)
        return limiter

    def release(self, limiter: anyio.CapacityLimiter) -> None:
        self._limiters.discard(limiter)

    def on_success(self) -> None:
        if self.adaptive and self._limit < self.ceiling:
            self._set(min(self.ceiling, self._limit + 1 / self._limit))

    def on_overload(self) -> None:
        now = self._clock()
        if self.adaptive and now - self._last_cut >= _COOLDOWN:
            self._last_cut = now
            self._set(max(1.0, self._limit * _CUT))

    def _set(self, limit: float) -> None:
        before = self.current
        self._limit = limit
        if self.current != before:
            for limiter in self._limiters:
                limiter.total_tokens = self.current
