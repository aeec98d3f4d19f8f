"""The thin sync twin: run an async function to completion from synchronous code.

Inside a thread that already runs an event loop (Jupyter, an async web handler calling
sync code) ``anyio.run`` would fail, so the call moves to a fresh worker thread there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio
import sniffio

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(func: Callable[[], Awaitable[T]]) -> T:
    """Run ``func()`` on a new event loop, in this thread or, if it has a loop, in another."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return anyio.run(func)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="splitter-sync") as pool:
        return pool.submit(anyio.run, func).result()
