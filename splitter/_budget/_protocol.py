"""What every rate-limit budget offers the executor and the planner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from ._snapshot import BudgetSnapshot

__all__ = ["Budget", "Kind", "Reservation", "WaitHook"]

Kind = Literal["requests", "tokens"]
WaitHook = Callable[[float, Kind], None]
"""Told before an acquire sleeps: the seconds it will wait and the limit that is short."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one request took from the budget: 1 request and its input + max_tokens."""

    tokens: int


class Budget(Protocol):
    """A shared account of what the service will accept.

    ``acquire`` waits until one request and ``tokens`` tokens may be spent (paced, never a
    whole window at once), ``refund`` returns what the request did not use, ``sync`` reads
    the service's own ``x-ratelimit-*`` account, and ``rate_limited`` pauses the bucket a
    429 named until the service's reset. ``on_wait``, if given, is told each time
    ``acquire`` is about to sleep (for events and progress; it must not block).
    """

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation: ...

    async def refund(self, reservation: Reservation, used_tokens: int) -> None: ...

    async def sync(self, headers: Mapping[str, str]) -> None: ...

    async def rate_limited(self, kind: Kind, retry_after: float | None) -> None: ...

    def snapshot(self) -> BudgetSnapshot: ...
