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
_gate: ContextVar[Gate | None] = ContextVar("splitter_wire_gate", default=None)
_HOOKED = "_splitter_wire_hook"


@contextmanager
def departing(gate: Gate | None) -> Iterator[None]:
    """Within the block, this context's request awaits ``gate`` right before its write."""
    token = _gate.set(gate)
    try:
        yield
    finally:
        _gate.reset(token)


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
    gate = _gate.get()
    if gate is None:
        return
    extensions = request.extensions
    previous = extensions.get("trace")
    done = False

    async def trace(name: str, info: dict[str, Any]) -> None:
        nonlocal done
        if not done and name.endswith("send_request_headers.started"):
            done = True
            await gate()
        if previous is not None:
            await previous(name, info)

    extensions["trace"] = trace
