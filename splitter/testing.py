"""Helpers for testing code that uses splitter, against the simulated service.

async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.01)) as client:
    result = await Splitter(client).aask_many(questions, model="gpt-4o-mini")
    assert_answers_match(result)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import openai

from ._questions import BatchResult
from .sim import SimService, answer_tag, serve

__all__ = ["assert_answers_match", "open_sim_client"]

Door = Literal["inprocess", "server"]


@asynccontextmanager
async def open_sim_client(
    service: SimService | None = None, *, door: Door = "inprocess", **client_kwargs: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An ``AsyncOpenAI`` client for ``service``: in-process, or over a loopback HTTP server."""
    service = service if service is not None else SimService(time_scale=0.01)
    if door == "inprocess":
        async with service.async_client(**client_kwargs) as client:
            yield client
        return
    with serve(service) as base_url:
        async with openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-sim", **client_kwargs
        ) as client:
            yield client


def assert_answers_match(result: BatchResult) -> None:
    """Fail unless every answered question got the simulator's answer to *that* question."""
    wrong = [
        a.index
        for a in result
        if a.ok and not (a.text or "").startswith(answer_tag(a.question.text))
    ]
    assert not wrong, f"answers attached to the wrong question at indexes {wrong}"
