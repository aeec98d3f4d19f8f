"""The Redis-shared budget keeps the API key out of Redis, end to end (docs/security.md)."""

from __future__ import annotations

import openai
import pytest
import redis
from redis_support import RedisServer

from splitter import Limits, Policy, SharedBudget, Splitter
from splitter.sim import SimLimits, SimService, serve

pytestmark = pytest.mark.anyio

API_KEY = "sk-proj-7Hq2ZtK9wXyV4mNcR8pLbD3sFgJ6"


def pieces(text: str) -> list[str]:
    """Every 8-character piece of the key found in ``text``."""
    return sorted({API_KEY[i : i + 8] for i in range(len(API_KEY) - 7)} & _windows(text))


def _windows(text: str) -> set[str]:
    return {text[i : i + 8] for i in range(max(0, len(text) - 7))}


async def test_no_redis_key_or_value_holds_the_api_key(redis_server: RedisServer) -> None:
    """A batch run on a Redis-shared budget with a real-looking key: SCAN finds the
    budget's key, and neither it nor any field or value holds the key or 8 characters of
    it."""
    service = SimService("instant", time_scale=0.01, limits=SimLimits(rpm=600), api_key=API_KEY)
    shared = SharedBudget(url=redis_server.url, namespace="sec")
    policy = Policy(limits=Limits(shared=shared))
    with serve(service) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY) as client:
            result = await Splitter(client, policy=policy, model="m").aask_many(["a?", "b?"])
    assert result.ok
    db = redis.Redis.from_url(redis_server.url)
    try:
        keys = [k.decode() for k in db.scan_iter("*")]
        assert keys  # the budget is there, so the checks below could fail
        stored = [(k, (db.get(k) or b"").decode()) for k in keys]
    finally:
        db.close()
    assert stored
    assert [pieces(k) for k in keys] == [[]] * len(keys)
    assert [pieces(f + v) for f, v in stored] == [[]] * len(stored)
