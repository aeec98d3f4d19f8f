"""A base URL that has never answered fails at once with an error naming it; connection
errors from an endpoint that has answered before are retried (issue #20 item 2)."""

from __future__ import annotations

import socket
from typing import Any

import openai
import pytest

from splitter import APIConnectionError, PartialFailure, Policy, RetryPolicy, Splitter
from splitter._compat import http_module

pytestmark = pytest.mark.anyio
httpx: Any = http_module()

# Five attempts with no backoff: a retried connection error shows as five attempts at once.
RETRYING = Policy(strategy="fanout", retry=RetryPolicy(max_attempts=5, initial_wait=0, jitter=0))
QUESTIONS = ["One?", "Two?", "Three?"]


def _free_port() -> int:
    """A loopback port nothing listens on (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Attempts:
    """Counts the HTTP requests a client tries to send (an httpx request hook)."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, request: Any) -> None:
        self.count += 1

    def sync(self, request: Any) -> None:
        self.count += 1


async def test_a_free_port_fails_after_one_attempt_naming_the_url() -> None:
    """Nothing listens on the port: one connection attempt, not five, and every answer's
    error is an APIConnectionError that names the base URL."""
    url = f"http://127.0.0.1:{_free_port()}/v1"
    attempts = _Attempts()
    http_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [attempts]})
    async with openai.AsyncOpenAI(base_url=url, api_key="sk", http_client=http_client) as client:
        result = await Splitter(client, policy=RETRYING).aask_many(QUESTIONS, model="m")
    assert attempts.count == 1
    assert [type(a.error) for a in result] == [APIConnectionError] * 3
    assert all(url in str(a.error) and "has never answered" in str(a.error) for a in result)


def test_the_sync_api_raises_naming_the_url() -> None:
    """raise_on_error=True: the PartialFailure raised names the URL in its own message."""
    url = f"http://127.0.0.1:{_free_port()}/v1"
    attempts = _Attempts()
    http_client = openai.DefaultHttpxClient(event_hooks={"request": [attempts.sync]})
    client = openai.OpenAI(base_url=url, api_key="sk", http_client=http_client)
    with client, pytest.raises(PartialFailure) as raised:
        Splitter(client, policy=RETRYING).ask_many(QUESTIONS, model="m", raise_on_error=True)
    assert attempts.count == 1
    assert url in str(raised.value)
    assert "has never answered" in str(raised.value)


def _completion() -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Yes."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


class _Network:
    """A transport that answers while ``up`` and otherwise fails to connect with ``error``."""

    def __init__(self, error: type[Exception]) -> None:
        self.error = error
        self.up = False
        self.attempts = 0

    def __call__(self, request: Any) -> Any:
        self.attempts += 1
        if not self.up:
            raise self.error("cannot reach the host", request=request)
        return httpx.Response(200, json=_completion())


def _client(network: _Network) -> openai.AsyncOpenAI:
    http_client = openai.DefaultAsyncHttpxClient(transport=httpx.MockTransport(network))
    return openai.AsyncOpenAI(base_url="http://gone.test/v1", api_key="sk", http_client=http_client)


@pytest.mark.virtual_time
@pytest.mark.parametrize(
    "error",
    [
        pytest.param(httpx.ConnectError, id="refused-or-dns"),
        pytest.param(httpx.ConnectTimeout, id="unroutable-connect-timeout"),
    ],
)
async def test_a_connection_never_made_stops_the_batch_at_once(error: type[Exception]) -> None:
    """A connect timeout counts as no connection (an unroutable address), not as a slow
    server: one attempt, and the error names the URL."""
    network = _Network(error)
    async with _client(network) as client:
        result = await Splitter(client, policy=RETRYING).aask_many(QUESTIONS, model="m")
    assert network.attempts == 1
    assert [type(a.error) for a in result] == [APIConnectionError] * 3
    assert all("http://gone.test/v1" in str(a.error) for a in result)


@pytest.mark.virtual_time
async def test_connection_errors_are_retried_once_the_endpoint_has_answered() -> None:
    """After one answer the same failure is a blip: each request is tried all five times."""
    network = _Network(httpx.ConnectError)
    network.up = True
    async with _client(network) as client:
        splitter = Splitter(client, policy=RETRYING)
        first = await splitter.aask_many(["Up?"], model="m")
        network.up = False
        network.attempts = 0
        later = await splitter.aask_many(["Down?"], model="m")
    assert [a.text for a in first] == ["Yes."]
    assert network.attempts == 5
    assert [type(a.error) for a in later] == [APIConnectionError]
    assert "has never answered" not in str(later[0].error)
    assert "connection failed: cannot reach the host" in str(later[0].error)
