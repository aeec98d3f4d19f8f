"""The loopback server (serve) with async and sync clients, and the python -m entry point."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

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
    """A client that gives up frees the server-side request (in_flight back to 0).

    The client gives up once the server holds the request (not after a fixed delay, which
    a loaded machine can spend before the request even arrives)."""
    service = SimService("llama-cpp-cpu", time_scale=0.05)
    with serve(service) as url:
        async with (
            openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as client,
            anyio.create_task_group() as tg,
        ):

            async def ask() -> None:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Long [len=500]"}]
                )

            tg.start_soon(ask)
            with anyio.fail_after(30):
                while not service.in_flight:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        with anyio.move_on_after(30):
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


def _accepted_sockets(port: int) -> list[socket.socket]:
    """This process's connected sockets whose local port is ``port``: a loopback server's
    side of its connections (duplicates, for the caller to close)."""
    fds = Path("/proc/self/fd") if Path("/proc/self/fd").is_dir() else Path("/dev/fd")
    found = []
    for name in os.listdir(fds):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue  # not a socket, or closed since it was listed
        try:
            inet = sock.family in (socket.AF_INET, socket.AF_INET6)
            if inet and sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port:
                sock.getpeername()  # connected: an accepted socket, not the listening one
                found.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    return found


@pytest.mark.anyio
async def test_a_response_is_not_held_back_by_delayed_acks() -> None:
    """The server's side of a loopback connection has TCP_NODELAY, so a response's body is
    sent without waiting for the ACK of its headers, which a client delays by ~40 ms
    (Nagle's algorithm against delayed ACKs); bench/loopback.py measures what it saves."""
    service = SimService("instant")
    with serve(service) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            for _ in range(2):  # kept alive: the second goes over the first's connection
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
            accepted = _accepted_sockets(int(url.rsplit(":", 1)[1].split("/")[0]))
            try:
                delays = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted]
            finally:
                for sock in accepted:
                    sock.close()
    assert len(delays) == 1
    assert all(delays)
