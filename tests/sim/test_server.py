"""The loopback server (serve) with async and sync clients, and the python -m entry point."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time

import anyio
import openai
import pytest

from splitter.sim import SimService, answer_text, serve


@pytest.mark.anyio
async def test_serve_with_async_client() -> None:
    """serve() yields a /v1 URL that the async openai client talks to over HTTP."""
    service = SimService(time_scale=0.01, default_answer_tokens=4)
    with serve(service) as url:
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Hi"}]
            )
    assert reply.choices[0].message.content == answer_text("Hi", 4)


@pytest.mark.anyio
async def test_server_notices_disconnects() -> None:
    """A client that gives up frees the server-side request (in_flight back to 0)."""
    service = SimService("llama-cpp-cpu", time_scale=0.05)
    with serve(service) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as client:
            with anyio.move_on_after(0.2):
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Long [len=500]"}]
                )
        with anyio.move_on_after(5):
            while service.in_flight:
                await anyio.sleep(0.01)
    assert service.in_flight == 0
    assert service.log[0].status == 499


def test_serve_with_sync_client_and_clean_shutdown() -> None:
    """The sync openai client works against serve(), and the server thread ends on exit."""
    service = SimService(time_scale=0.01, default_answer_tokens=3)
    before = threading.active_count()
    with serve(service) as url, openai.OpenAI(base_url=url, api_key="k", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}]
        )
        models = [m.id for m in client.models.list()]
    assert reply.choices[0].message.content == answer_text("Hi", 3)
    assert "gpt-4o-mini" in models
    assert threading.active_count() == before


def test_cli_serves_one_request() -> None:
    """python -m splitter.sim starts a real server process that answers a request."""
    command = [sys.executable, "-m", "splitter.sim", "--port", "0", "--profile", "instant",
               "--answer-tokens", "5", "--rpm", "100"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            banner = process.stdout.readline().strip()
            assert banner.startswith("splitter.sim serving instant at http://127.0.0.1:")
            url = banner.rsplit(" ", 1)[-1]
            with openai.OpenAI(base_url=url, api_key="k", max_retries=0) as client:
                raw = client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "Hi"}]
                )
            assert raw.parse().choices[0].message.content == answer_text("Hi", 5)
            assert raw.headers["x-ratelimit-limit-requests"] == "100"
        finally:
            process.terminate()
            assert process.wait(timeout=10) == 0


@pytest.mark.anyio
async def test_a_response_is_not_held_back_by_delayed_acks() -> None:
    """Over loopback a kept-alive request costs about what the in-process door costs: the
    server sends a response's body without waiting for the ACK of its headers, which a
    client delays by ~40 ms (Nagle's algorithm against delayed ACKs: over 10x the whole
    request here, before the listening socket set TCP_NODELAY)."""
    service = SimService("instant")

    async def median_seconds(client: openai.AsyncOpenAI) -> float:
        times = []
        for _ in range(7):
            started = time.perf_counter()
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            times.append(time.perf_counter() - started)
        return statistics.median(times[1:])  # the first opens the connection

    with serve(service) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            over_http = await median_seconds(client)
    async with service.async_client(max_retries=0) as client:
        in_process = await median_seconds(client)
    assert over_http < 8 * in_process, (over_http, in_process)
