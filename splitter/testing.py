"""Helpers for testing code that uses splitter, against the simulated service.

async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.01)) as client:
    result = await Splitter(client).aask_many(questions, model="gpt-4o-mini")
    assert_answers_match(result)

On virtual time (``virtual_time``, ``run_virtual``) the event loop's clock and splitter's
clock are one number that jumps whenever every task is asleep: the simulator's latencies,
rate-limit windows, deadlines and aggregation windows pass exactly, in no real time, however
busy the machine is. Use ``time_scale=1`` there: simulated seconds are virtual seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal, TypeVar, TypeVarTuple, Unpack

import anyio
import openai

from . import _virtual
from ._endpoint import forget_endpoints
from ._questions import BatchResult
from .sim import SimService, answer_tag, serve

__all__ = [
    "assert_answers_match",
    "forget_endpoints",
    "open_sim_client",
    "run_virtual",
    "virtual_time",
]

Door = Literal["inprocess", "server"]
Backend = _virtual.Backend
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@asynccontextmanager
async def open_sim_client(
    service: SimService | None = None, *, door: Door = "inprocess", **client_kwargs: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An ``AsyncOpenAI`` client for ``service``: in-process, or over a loopback HTTP server
    (not on virtual time: a real socket's wait would let the clock jump past its timeout)."""
    service = service if service is not None else SimService(time_scale=0.01)
    if door == "inprocess":
        async with service.async_client(**client_kwargs) as client:
            yield client
        return
    if _virtual.active():
        raise RuntimeError(
            "the loopback server runs on real time; on virtual time use door='inprocess'"
        )
    with serve(service) as base_url:
        async with openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-sim", **client_kwargs
        ) as client:
            yield client


@contextmanager
def virtual_time(backend: Backend = "asyncio") -> Iterator[tuple[str, dict[str, Any]]]:
    """Run on virtual time inside the block: yields the anyio backend ``(name, options)``
    whose event loops run on it, for ``anyio.run(..., backend=name, backend_options=options)``
    or as the value of anyio's pytest fixture ``anyio_backend``::

        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            with virtual_time(request.param) as backend:
                yield backend

    Splitter's clock reads the same virtual time while the block is open (process-wide: one
    virtual-time run at a time). Time moves only while every task waits; work handed to
    threads takes none. The simulator must be reached in-process (``open_sim_client``'s
    default door, ``SimService.async_client``).
    """
    # What endpoints learned on another timeline would be read on this one: start afresh.
    forget_endpoints()
    try:
        with _virtual.virtual_backend(backend) as chosen:
            yield chosen
    finally:
        forget_endpoints()


def run_virtual(
    func: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts, backend: Backend = "asyncio"
) -> T:
    """``anyio.run(func, *args)`` on virtual time (see :func:`virtual_time`)."""
    with virtual_time(backend) as (name, options):
        return anyio.run(func, *args, backend=name, backend_options=options)


def assert_answers_match(result: BatchResult) -> None:
    """Fail unless every answered question got the simulator's answer to *that* question."""
    wrong = [
        a.index
        for a in result
        if a.ok and not (a.text or "").startswith(answer_tag(a.question.text))
    ]
    assert not wrong, f"answers attached to the wrong question at indexes {wrong}"
