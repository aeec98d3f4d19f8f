"""What a request keeps alive while it is in flight (issue #21): every tracked object that
outlives two young collections is carried into the garbage collector's oldest generation,
whose growth sets off the full collections (tens of milliseconds each on openai's heap, and
most of splitter's collector time in ``bench/overhead.py``). Counted, not timed: the same on
a loaded machine."""

from __future__ import annotations

import gc
import json
from typing import Any

import anyio
import openai
import pytest

from splitter import Limits, Policy, Splitter
from splitter._compat import http_module

pytestmark = pytest.mark.anyio

_N = 64
_REPLY = json.dumps(
    {
        "id": "chatcmpl-held",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "2"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }
).encode()
# Splitter's own objects per request in flight beyond the raw client's, here (asyncio and
# trio, openai 3.x and 2.x): 49.5 before issue #21's cut of the send path (a closure and its
# cells, a partial, a generator-made context manager, coroutines that only passed an
# awaitable on), 34-35 after.
_MOST_OWN = 40


class _Held:
    """A transport handler that holds every reply until ``_N`` requests are in, counting
    the tracked objects then (after a collection)."""

    def __init__(self) -> None:
        self.arrived = 0
        self.all_in: anyio.Event | None = None
        self.counted = 0

    async def __call__(self, request: Any) -> Any:
        self.arrived += 1
        if self.all_in is not None:
            if self.arrived == _N:
                gc.collect()
                self.counted = len(gc.get_objects())
                self.all_in.set()
            else:
                await self.all_in.wait()
        return http_module().Response(
            200, content=_REPLY, headers={"content-type": "application/json"}
        )


async def _raw(client: openai.AsyncOpenAI, questions: list[str]) -> None:
    async def one(text: str) -> None:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}]
        )

    async with anyio.create_task_group() as tg:
        for text in questions:
            tg.start_soon(one, text)


async def _splitter(client: openai.AsyncOpenAI, questions: list[str]) -> None:
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=_N))
    result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert result.ok
    assert result.stats.requests == _N


async def test_a_request_in_flight_keeps_few_objects_beyond_the_raw_clients() -> None:
    """64 one-question requests all in flight at once (the transport holds their replies):
    splitter keeps at most ``_MOST_OWN`` tracked objects alive per request beyond what the
    raw openai client keeps for the same request (49.5 before the cut)."""
    held = _Held()
    questions = [f"What is {i} + {i}?" for i in range(_N)]
    http = http_module().AsyncClient(transport=http_module().MockTransport(held))
    alive: dict[str, float] = {}
    async with openai.AsyncOpenAI(
        base_url="http://held.invalid/v1", api_key="sk-test", max_retries=0, http_client=http
    ) as client:
        for _ in range(2):  # warm: lazy imports, the tokenizer, the endpoint's first lessons
            await _raw(client, questions)
            await _splitter(client, questions)
        for name, arm in (("raw", _raw), ("splitter", _splitter)):
            gc.collect()
            before = len(gc.get_objects())
            held.arrived, held.all_in = 0, anyio.Event()
            await arm(client, questions)
            held.all_in = None
            alive[name] = (held.counted - before) / _N
    own = alive["splitter"] - alive["raw"]
    assert alive["raw"] > 20, alive  # the count saw the requests in flight at all
    assert own <= _MOST_OWN, alive
