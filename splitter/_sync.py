"""The thin sync twin: run an async function to completion from synchronous code.

Inside a thread that already runs an event loop (Jupyter, an async web handler calling
sync code) ``anyio.run`` would fail, so the call moves to a fresh worker thread there.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, Awaitable, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import ParamSpec, TypeVar

import anyio
import anyio.from_thread
import sniffio

__all__ = ["call_sync", "iterate_sync", "run_sync"]

T = TypeVar("T")
P = ParamSpec("P")


def run_sync(func: Callable[[], Awaitable[T]]) -> T:
    """Run ``func()`` on a new event loop, in this thread or, if it has a loop, in another."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return anyio.run(func)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="splitter-sync") as pool:
        return pool.submit(anyio.run, func).result()


def call_sync(func: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` run to completion by :func:`run_sync`: a sync twin's body."""
    return run_sync(functools.partial(func, *args, **kwargs))


def iterate_sync(
    stream: AbstractAsyncContextManager[AsyncIterable[T]],
) -> Generator[T, None, None]:
    """Read an async stream (entered as a context manager) from synchronous code.

    The stream lives on an event loop in a helper thread (a blocking portal), so this works
    with or without a loop in the calling thread; closing the iterator early leaves the
    stream's context, which cancels what it still runs.
    """
    with anyio.from_thread.start_blocking_portal() as portal:
        entered = portal.wrap_async_context_manager(stream)
        events = entered.__enter__()
        try:
            reader = events.__aiter__()
            while True:
                try:
                    event = portal.call(reader.__anext__)
                except StopAsyncIteration:
                    return
                yield event
        finally:
            # Closed early (GeneratorExit at the yield) or done: either way the stream ends
            # normally, cancelling what still runs; its own errors still propagate.
            entered.__exit__(None, None, None)
