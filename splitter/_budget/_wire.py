"""The budget's last gate, at the real send: as close to the HTTP write as httpx lets us.

A request is booked in the budget and then goes through openai, httpx and the connection
pool, each of which may yield to the event loop; on a loaded loop two requests booked
60 ms apart can reach the server 10 ms apart, and a leaky bucket with no burst refuses
the second. So the pace is kept once more at the wire: :func:`departing` names, for the
attempt running in this context, the booking whose ``Budget.depart`` to await just before
its request's headers are written, and :func:`install` adds a request hook to the openai
client's httpx client that, for such an attempt only, asks httpcore (or httpcore2, under
openai 3.x's httpx2) to call it at ``send_request_headers.started`` through the ``trace``
request extension: after a connection is taken from the pool (or opened), right before
the write. Requests of other contexts through the same client are left as they were.

Only async clients get the gate (a sync client sends from a worker thread, where the
booking's own spacing holds); if the transport never calls the trace (a custom one), the
request goes at its booking as before.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._protocol import Budget, Reservation

__all__ = ["departing", "install"]

_HOOKED = "_splitter_wire_hook"


class _Departure:
    """One attempt's request and its booking, from the attempt's start to its end: the
    context manager :func:`departing` returns, and (as ``trace``) the request's trace.

    One object per attempt, with no closure, cell or partial of its own: each request in
    flight keeps fewer objects alive for the garbage collector to carry into its oldest
    generation (issue #21). Under openai 2.x's httpx a response and its stream refer to
    each other, a cycle that keeps the request, its extensions with them, until a full
    collection: so everything here is let go once the budget is awaited or the attempt has
    ended, and ``trace`` leaves the request's extensions then (the trace before it, if
    any, put back)."""

    __slots__ = ("_token", "budget", "extensions", "previous", "reservation")

    def __init__(self, budget: Budget, reservation: Reservation) -> None:
        self.budget: Budget | None = budget
        self.reservation: Reservation | None = reservation
        self.extensions: dict[str, Any] | None = None  # the request's, once it is built
        self.previous: Any = None  # the trace the request had before this one
        self._token: Token[_Departure | None] | None = None

    def __enter__(self) -> None:
        self._token = _departing.set(self)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _departing.reset(self._token)
        self._unhook()
        self.budget = self.reservation = self._token = None

    def hook(self, extensions: dict[str, Any]) -> None:
        """Become the trace of the request whose ``extensions`` these are (a request of this
        attempt before it, never written, gets its own trace back)."""
        self._unhook()
        self.extensions, self.previous = extensions, extensions.get("trace")
        extensions["trace"] = self.trace

    def _unhook(self) -> None:
        extensions, previous = self.extensions, self.previous
        self.extensions = self.previous = None
        if extensions is not None:
            if previous is None:
                extensions.pop("trace", None)
            else:
                extensions["trace"] = previous

    async def trace(self, name: str, info: dict[str, Any]) -> None:
        budget, reservation, previous = self.budget, self.reservation, self.previous
        if budget is not None and name.endswith("send_request_headers.started"):
            self.budget = self.reservation = None  # awaited once
            # httpcore reads the extension at each event: the rest go to the one before
            # this, and the request keeps nothing of the attempt's.
            self._unhook()
            if reservation is not None:
                await budget.depart(reservation)
        if previous is not None:
            await previous(name, info)


# :func:`departing` without a budget: nothing to await, nothing to set (one, reused).
_NOTHING: AbstractContextManager[None] = nullcontext()
_departing: ContextVar[_Departure | None] = ContextVar("splitter_wire_departure", default=None)


def departing(
    budget: Budget | None, reservation: Reservation | None
) -> AbstractContextManager[None]:
    """Within the ``with`` block, this context's request awaits ``budget.depart(reservation)``
    right before its write (nothing without both)."""
    if budget is None or reservation is None:
        return _NOTHING
    return _Departure(budget, reservation)


def install(client: Any) -> bool:
    """Add the request hook to ``client``'s (an ``openai.AsyncOpenAI``) httpx client, once;
    False where it has none that takes async hooks."""
    http = getattr(client, "_client", None)
    hooks = getattr(http, "event_hooks", None)
    if http is None or not isinstance(hooks, dict) or not _is_async(http):
        return False
    if getattr(http, _HOOKED, False):
        return True
    request_hooks = list(hooks.get("request", []))
    request_hooks.append(_on_request)
    http.event_hooks = {**hooks, "request": request_hooks}
    setattr(http, _HOOKED, True)
    return True


def _is_async(http: Any) -> bool:
    return type(http).__name__ == "AsyncClient" or any(
        c.__name__ == "AsyncClient" for c in type(http).__mro__
    )


async def _on_request(request: Any) -> None:
    departure = _departing.get()
    if departure is not None and departure.budget is not None:  # booked, not yet written
        departure.hook(request.extensions)
