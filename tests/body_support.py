"""An openai client on the simulator that also records the chat bodies it sends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai

from splitter.sim import SimService, serve


@asynccontextmanager
async def recording_client(
    service: SimService, door: str
) -> AsyncIterator[tuple[openai.AsyncOpenAI, list[dict[str, Any]]]]:
    """An openai client on ``service`` through ``door``, and the chat bodies it sends."""
    bodies: list[dict[str, Any]] = []

    async def keep(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            bodies.append(json.loads(request.content))

    hooks = {"request": [keep]}
    if door == "inprocess":
        http = openai.DefaultAsyncHttpxClient(transport=service.transport(), event_hooks=hooks)
        async with openai.AsyncOpenAI(
            base_url=service.base_url, api_key="sk-sim", http_client=http
        ) as client:
            yield client, bodies
        return
    with serve(service) as base_url:
        http = openai.DefaultAsyncHttpxClient(event_hooks=hooks)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim", http_client=http) as c:
            yield c, bodies
