"""The server door: a raw ASGI 3 application (no framework) serving a ``SimService``.

Streams go out one ``http.response.body`` message per write with ``more_body=True``. While a
request is handled, a watcher waits for ``http.disconnect`` and cancels the work, so a client
that goes away frees its engine slot and leaves ``in_flight``. A simulated reset sends the
headers and part of the body, then raises ``SimulatedReset`` so the server aborts the
connection mid-body (``serve`` keeps uvicorn from logging that on purpose error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from splitter.sim._service import SimResponse, SimService

__all__ = ["ASGIApp", "SimulatedReset", "make_asgi_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Promised but never sent in full, so the client sees the body cut off.
_RESET_LENGTH = 1024


class SimulatedReset(Exception):
    """Raised by the app after a partial response, making the server drop the connection."""


def make_asgi_app(service: SimService) -> ASGIApp:
    """The ASGI 3 callable for ``service``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await _http(service, scope, receive, send)

    return app


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _http(service: SimService, scope: Scope, receive: Receive, send: Send) -> None:
    # Arrived when its headers did, as nginx's limit_req counts it (before the body): the
    # first request's task group cost 7.6 ms here (the async backend's first use), and a
    # limiter stamping it later saw the next request come early (a 5 r/s leaky bucket at
    # 20 r/s real refused the second of two sent 52 ms apart, every time).
    arrived = service.clock()
    body = await _read_body(receive)
    reset = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
        authorization = dict(scope.get("headers") or []).get(b"authorization")
        response = await service.handle(
            scope["method"],
            scope["path"],
            body,
            authorization=authorization.decode("latin-1") if authorization else None,
            arrived=arrived,
        )
        reset = await _deliver(response, send)
        tg.cancel_scope.cancel()
    if reset:  # outside the task group, so the server sees this exception and not a group
        raise SimulatedReset("simulated connection reset")


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _start(status: int, headers: list[tuple[str, str]]) -> Message:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return {"type": "http.response.start", "status": status, "headers": raw}


async def _deliver(response: SimResponse, send: Send) -> bool:
    """Send the response; True when the connection must now be dropped."""
    if response.reset:
        headers = [("content-type", "application/json"), ("content-length", str(_RESET_LENGTH))]
        await send(_start(200, headers))
        await send({"type": "http.response.body", "body": b'{"id":', "more_body": True})
        return True
    if response.stream is None:
        headers = [*response.headers, ("content-length", str(len(response.body)))]
        await send(_start(response.status, headers))
        await send({"type": "http.response.body", "body": response.body})
        return False
    try:
        await send(_start(response.status, response.headers))
        async for chunk in response.stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await response.stream.aclose()
    return False
