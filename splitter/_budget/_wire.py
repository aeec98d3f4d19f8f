"""The budget's last gate, at the real send: as close to the HTTP write as httpx lets us.

A request is booked in the budget and then goes through openai, httpx and the connection
pool, each of which may yield to the event loop; on a loaded loop two requests booked
60 ms apart can reach the server 10 ms apart, and a leaky bucket with no burst refuses
the second. So the pace is kept once more at the wire: :func:`departing` names, for the
attempt running in this context, what to await just before its request's headers are
written (``Budget.depart``), and :func:`install` adds a request hook to the openai
client's httpx client that, for such an attempt only, asks httpcore (or httpcore2, under
openai 3.x's httpx2) to call it at ``send_request_headers.started`` through the ``trace``
request extension: after a connection is taken from the pool (or opened), right before
the write. Requests of other contexts through the same client are left as they were.

Only async clients get the gate (a sync client sends from a worker thread, where the
booking's own spacing holds); if the transport never calls the trace (a custom one), the
request goes at its booking as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["departing", "install"]

Gate = Callable[[], Awaitable[None]]
_HOOKED = "_splitter_wire_hook"


class _Pending:
    """The gate of one attempt's request, until it is awaited or the attempt is over.

    Under openai 2.x's httpx a response and its stream refer to each other, a cycle that
    keeps the request, its extensions with them, until a full collection. So the request's
    ``trace`` refers to this rather than to the gate (which holds the request's booking),
    emptied once the gate is awaited or the attempt has ended, and the ``trace`` itself
    leaves the request's extensions once it has awaited the gate."""

    __slots__ = ("gate",)

    def __init__(self, gate: Gate) -> None:
        self.gate: Gate | None = gate


_pending: ContextVar[_Pending | None] = ContextVar("splitter_wire_gate", default=None)


@contextmanager
def departing(gate: Gate | None) -> Iterator[None]:
    """Within the block, this context's request awaits ``gate`` right before its write."""
    pending = _Pending(gate) if gate is not None else None
    token = _pending.set(pending)
    try:
        yield
    finally:
        _pending.reset(token)
        if pending is not None:
            pending.gate = None


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
    pending = _pending.get()
    if pending is None or pending.gate is None:
        return
    extensions = request.extensions
    previous = extensions.get("trace")

    async def trace(name: str, info: dict[str, Any]) -> None:
        gate = pending.gate
        if gate is not None and name.endswith("send_request_headers.started"):
            pending.gate = None  # awaited once
            # httpcore reads the extension at each event: the rest go to the one before
            # this, and the request keeps nothing of the attempt's.
            if previous is None:
                extensions.pop("trace", None)
            else:
                extensions["trace"] = previous
            await gate()
        if previous is not None:
            await previous(name, info)

    extensions["trace"] = trace
