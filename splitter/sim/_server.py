"""``serve()``: the ASGI door on a real loopback port, run by uvicorn in a background thread."""

from __future__ import annotations

import logging
import socket
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from splitter.sim._asgi import SimulatedReset

if TYPE_CHECKING:
    from collections.abc import Iterator

    from splitter.sim._service import SimService

__all__ = ["serve"]

_STARTUP_TIMEOUT = 10.0


class _QuietResets(logging.Filter):
    """Drops uvicorn's error log for resets the simulator makes on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedReset)


@contextmanager
def serve(service: SimService, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``service`` over HTTP on ``host:port`` (0: a free port); yields the ``/v1`` base URL.

    uvicorn runs its own asyncio loop in a daemon thread; the service must not be used
    in-process at the same time. On exit the server shuts down and the thread is joined.
    """
    try:
        import uvicorn  # an optional extra, so imported only when serving
    except ImportError as exc:  # pragma: no cover - uvicorn is in the dev extras
        msg = "splitter.sim.serve needs uvicorn: pip install 'splitter-llm[sim]'"
        raise RuntimeError(msg) from exc
    # Binding here, not in uvicorn, tells us the port before the server starts.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it (Linux): without it a response's body waits for the
    # ACK of its headers, which a client on loopback delays by ~40 ms (Nagle).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        service.asgi_app,
        log_level="warning",
        http="h11",
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    quiet = _QuietResets()
    error_log = logging.getLogger("uvicorn.error")
    error_log.addFilter(quiet)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="splitter-sim-server", daemon=True
    )
    thread.start()
    try:
        _wait_started(server, thread)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}/v1"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
        error_log.removeFilter(quiet)


def _wait_started(server: object, thread: threading.Thread) -> None:
    # A real thread starting, waited for with real sleeps: real time, not splitter's clock.
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while not getattr(server, "started", False):
        if not thread.is_alive():
            raise RuntimeError("splitter.sim server failed to start")
        if time.monotonic() > deadline:
            raise RuntimeError("splitter.sim server did not start in time")
        time.sleep(0.005)
