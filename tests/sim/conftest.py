"""Fixtures for the simulator's tests: a client through either door of a SimService."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import openai
import pytest

from splitter.sim import SimService, serve

OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]


@pytest.fixture(params=["inprocess", "server"])
def door(request: pytest.FixtureRequest) -> str:
    """Which door a test reaches the service through."""
    return str(request.param)


@pytest.fixture
def open_client(door: str) -> OpenClient:
    """``open_client(service, **kwargs)``: an AsyncOpenAI client through the test's door."""

    @asynccontextmanager
    async def opener(service: SimService, **kwargs: Any) -> AsyncIterator[openai.AsyncOpenAI]:
        kwargs.setdefault("max_retries", 0)
        if door == "inprocess":
            async with service.async_client(**kwargs) as client:
                yield client
            return
        with serve(service) as url:
            async with openai.AsyncOpenAI(base_url=url, api_key="sk-test", **kwargs) as client:
                yield client

    return opener
