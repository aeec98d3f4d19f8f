"""The default budget: requests and tokens buckets in this process."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

import anyio

from ._bucket import Bucket
from ._protocol import Kind, Reservation, WaitHook
from ._snapshot import BudgetSnapshot

__all__ = ["MemoryBudget"]


class MemoryBudget:
    """Token buckets for requests (RPM) and tokens (TPM), paced and synced from headers.

    An acquire books its request and tokens at once and then sleeps until the buckets have
    refilled enough to cover it (a debt-based schedule, as GCRA does): callers are served in
    the order they asked, and no event-loop primitive is held, so one budget may be shared by
    every Splitter in the process, whichever loop they run on. Without a known limit it
    never waits.
    """

    def __init__(
        self,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        burst: float = 1.0,
        share: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        now = clock()
        self._clock = clock
        self._sleep = sleep
        self.buckets: dict[Kind, Bucket] = {
            "requests": Bucket.per_minute(rpm, burst=burst, now=now),
            "tokens": Bucket.per_minute(tpm, burst=burst, now=now),
        }
        for bucket in self.buckets.values():
            bucket.share = share
        self._shift = 0.0  # seconds every booked request has been moved back by 429s
        self._limited: Kind = "requests"  # the limit the latest 429 named

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation:
        now = self._clock()
        requests, token_bucket = self.buckets["requests"], self.buckets["tokens"]
        request_wait, token_wait = requests.wait(1, now), token_bucket.wait(tokens, now)
        delay = max(request_wait, token_wait)
        short: Kind = "requests" if request_wait >= token_wait else "tokens"
        requests.take(1, now)
        token_bucket.take(tokens, now)
        seen = self._shift
        try:
            # A 429 while we wait moves our turn back (see Bucket.block).
            while delay > 0:
                if on_wait is not None:
                    on_wait(delay, short)
                await self._sleep(delay)
                delay = max(self._shift - seen, self._blocked_for())
                seen, short = self._shift, self._limited
        except BaseException:  # cancelled while waiting: the booking is returned
            requests.give(1, self._clock())
            token_bucket.give(tokens, self._clock())
            raise
        return Reservation(tokens)

    def _blocked_for(self) -> float:
        now = self._clock()
        return max(bucket.blocked_until - now for bucket in self.buckets.values())

    async def refund(self, reservation: Reservation, used_tokens: int) -> None:
        unused = reservation.tokens - used_tokens
        if unused > 0:
            self.buckets["tokens"].give(unused, self._clock())

    async def sync(self, headers: Mapping[str, str]) -> None:
        now = self._clock()
        for kind, bucket in self.buckets.items():
            bucket.read(headers, kind, now)
        # A tiny deficit rounds its reset to "0s", so one limit may have told its window
        # while the other has not yet.
        windows = [w for b in self.buckets.values() if (w := b.window()) is not None]
        if windows:
            for bucket in self.buckets.values():
                bucket.assume_window(windows[0])

    async def rate_limited(self, kind: Kind, retry_after: float | None) -> None:
        bucket = self.buckets[kind]
        self._limited = kind
        if retry_after is None:
            retry_after = 1 / bucket.rate if bucket.rate else 1.0
        self._shift += bucket.block(retry_after, self._clock())

    def snapshot(self) -> BudgetSnapshot:
        now = self._clock()
        requests, tokens = self.buckets["requests"], self.buckets["tokens"]
        return BudgetSnapshot(
            remaining_requests=requests.level_at(now) if requests.known else None,
            remaining_tokens=tokens.level_at(now) if tokens.known else None,
            requests_per_second=requests.rate,
            tokens_per_second=tokens.rate,
            token_capacity=tokens.capacity if tokens.known else None,
        )
