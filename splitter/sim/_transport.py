"""The in-process door: an async transport of openai's own HTTP library.

The transport hands each request to ``SimService.handle`` inside the caller's event loop (so
it runs on asyncio and trio alike) and turns the result into a response of the HTTP library
openai is built on (``splitter._compat.http_module``: ``httpx2`` or ``httpx``). With no socket
underneath, it enforces the request's read timeout itself, so stalls trip client timeouts
(``ReadTimeout``, which openai reports as ``APITimeoutError``), and it reports a dropped
connection the way the library does for a real one: ``RemoteProtocolError``.

The classes are made at runtime (cached) because their base classes belong to whichever HTTP
library is installed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

import anyio

from splitter._compat import http_module

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from splitter.sim._service import BodyStream, SimService

__all__ = ["make_transport"]


def _read_timeout(request: Any) -> float | None:
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read") if isinstance(timeout, dict) else None
    return float(value) if isinstance(value, int | float) else None


class _StreamBody:
    """Body of a streaming response; every read is bounded by the read timeout."""

    def __init__(self, stream: BodyStream, timeout: float | None, request: Any) -> None:
        self._stream = stream
        self._timeout = timeout
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._stream)
        while True:
            try:
                with anyio.fail_after(self._timeout):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                raise http_module().ReadTimeout(
                    "simulated read timeout", request=self._request
                ) from exc
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Transport:
    """Serves requests from a ``SimService`` without a network."""

    def __init__(self, service: SimService) -> None:
        self._service = service

    async def handle_async_request(self, request: Any) -> Any:
        http = http_module()
        body = await request.aread()
        timeout = _read_timeout(request)
        trace = request.extensions.get("trace")
        if trace is not None:  # as httpcore calls it right before it writes a request
            await trace("http11.send_request_headers.started", {"request": request})
        try:
            with anyio.fail_after(timeout):
                response = await self._service.handle(
                    request.method,
                    request.url.path,
                    body,
                    authorization=request.headers.get("authorization"),
                )
        except TimeoutError as exc:
            raise http.ReadTimeout("simulated read timeout", request=request) from exc
        if response.reset:
            message = "Server disconnected without sending a response."
            raise http.RemoteProtocolError(message, request=request)
        if response.stream is None:
            return http.Response(
                response.status, headers=response.headers, content=response.body, request=request
            )
        stream = _stream_class()(response.stream, timeout, request)
        return http.Response(
            response.status, headers=response.headers, stream=stream, request=request
        )

    async def aclose(self) -> None:
        """Nothing to release: there are no connections."""


@functools.cache
def _stream_class() -> type[_StreamBody]:
    base = http_module().AsyncByteStream
    return cast("type[_StreamBody]", type("SimStreamBody", (_StreamBody, base), {}))


@functools.cache
def _transport_class() -> type[_Transport]:
    base = http_module().AsyncBaseTransport
    return cast("type[_Transport]", type("SimTransport", (_Transport, base), {}))


def make_transport(service: SimService) -> Any:
    """A transport (an ``AsyncBaseTransport`` of openai's HTTP library) for ``service``."""
    return _transport_class()(service)
