"""What every rate-limit budget offers the executor, the wrapper's gate and the planner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ._account import Ticket
from ._snapshot import BudgetSnapshot

__all__ = ["Budget", "Kind", "Reservation", "WaitHook"]

Kind = Literal["requests", "tokens"]
WaitHook = Callable[[float, Kind], None]
"""Told before an acquire sleeps: the seconds it will wait and the limit that is short."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one request took from the budget: 1 request and its input + max_tokens."""

    tokens: int
    ticket: Ticket


class Budget(Protocol):
    """A shared account of what the service will accept.

    The steps, in order, for every request (splitter's own and the wrapper's alike):
    ``acquire`` waits until the request may go and books it; ``settle`` tells the budget
    how it went: the response's headers (which teach the limits), the tokens it really
    used (the rest is given back), or, for a 429, which limit refused it and the
    retry-after. ``on_wait``, if given, is told each time ``acquire`` is about to sleep
    (for events and progress; it must not block). No call blocks the event loop.
    """

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation: ...

    async def depart(self, reservation: Reservation) -> None:
        """The booked request is about to go on the wire (called as close to the write as
        the HTTP client allows): waits until the pace since the last real send lets it go,
        and records the moment, so the spacing a limiter sees is the one the budget kept."""

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
        """``limited``: the request was answered 429 for that limit. ``used_tokens``: what
        a successful request used (None: keep the whole booking). ``lost``: no response
        came (a connection error, a timeout, a cancellation): nothing to learn."""

    def state_limits(self, *, rpm: int | None, tpm: int | None, burst: float) -> None:
        """Limits the user stated (per minute); the stricter of two statements holds."""

    def snapshot(self) -> BudgetSnapshot: ...

    def learned(self) -> dict[str, Any]:
        """What was learned about the limits, portable to another process (no moments)."""

    def teach(self, learned: Mapping[str, Any]) -> None:
        """Start from :meth:`learned` of an earlier run."""
