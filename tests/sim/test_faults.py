"""Every injected fault, as the real openai client sees it through either door."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import openai
import pytest

from splitter._compat import http_module
from splitter.sim import Faults, SimService, answer_text

pytestmark = pytest.mark.anyio

OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]
SCALE = 0.01
MESSAGES = [{"role": "user", "content": "Q"}]


def faulty(**rates: float) -> SimService:
    return SimService(time_scale=SCALE, faults=Faults(**rates, retry_after=2.0, stall_seconds=30))


async def create(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]


async def ask_and_drain(client: openai.AsyncOpenAI, *, stream: bool) -> None:
    """Ask once; read a stream to its end (over HTTP a broken stream fails only when read)."""
    reply = await client.chat.completions.create(
        model="m",
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=stream,
    )
    if isinstance(reply, openai.AsyncStream):
        async with reply:
            async for _ in reply:
                pass


async def test_fault_429_has_retry_after(open_client: OpenClient) -> None:
    """A fault 429 is a RateLimitError whose retry-after-ms is the scaled Faults.retry_after."""
    service = faulty(rate_429=1.0)
    async with open_client(service) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await create(client)
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after-ms"] == str(round(2.0 * SCALE * 1000))
    assert service.log[0].error_code == "rate_limit_exceeded"


async def test_fault_quota(open_client: OpenClient) -> None:
    """insufficient_quota is a 429 without retry-after, coded insufficient_quota."""
    service = faulty(rate_quota=1.0)
    async with open_client(service) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await create(client)
    assert caught.value.code == "insufficient_quota"
    assert caught.value.type == "insufficient_quota"
    assert "retry-after" not in caught.value.response.headers
    assert service.log[0].error_code == "insufficient_quota"


@pytest.mark.parametrize(
    ("rate", "status"), [("rate_500", 500), ("rate_502", 502), ("rate_503", 503)]
)
async def test_fault_server_errors(open_client: OpenClient, rate: str, status: int) -> None:
    """500/502/503 faults are InternalServerErrors with type server_error."""
    service = faulty(**{rate: 1.0})
    async with open_client(service) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await create(client)
    assert caught.value.status_code == status
    assert caught.value.type == "server_error"
    assert (service.log[0].status, service.log[0].error_code) == (status, "server_error")


@pytest.mark.parametrize("stream", [False, True])
async def test_fault_reset(open_client: OpenClient, stream: bool) -> None:
    """A reset reaches the client as a RemoteProtocolError, wrapped in APIConnectionError.

    openai 2.x does not wrap errors raised while a stream is read, so there the bare
    RemoteProtocolError of its HTTP library arrives.
    """
    service = faulty(rate_reset=1.0)
    remote_protocol_error = http_module().RemoteProtocolError
    async with open_client(service) as client:
        with pytest.raises((openai.APIConnectionError, remote_protocol_error)) as caught:
            await ask_and_drain(client, stream=stream)
    raised = caught.value
    cause = raised if isinstance(raised, remote_protocol_error) else raised.__cause__
    assert isinstance(cause, remote_protocol_error)
    assert (service.log[0].status, service.log[0].error_code) == (0, "reset")
    assert service.in_flight == 0


async def test_fault_stall_times_out(open_client: OpenClient) -> None:
    """A stall holds the response past the client's timeout: APITimeoutError."""
    service = faulty(rate_stall=1.0)  # 30 sim s = 0.3 s real
    async with open_client(service, timeout=0.1) as client:
        with pytest.raises(openai.APITimeoutError):
            await create(client)
    for _ in range(100):  # the server door learns of the disconnect asynchronously
        if service.log:
            break
        await _pause()
    assert service.log[0].error_code == "stall"
    assert service.log[0].status == 499
    assert service.in_flight == 0


async def test_fault_stall_then_answers(open_client: OpenClient) -> None:
    """With a patient client, a stalled request still answers, just late."""
    service = faulty(rate_stall=1.0)
    async with open_client(service, timeout=5.0) as client:
        await create(client)
    record = service.log[0]
    assert record.finished - record.arrived >= 30 * SCALE
    assert (record.status, record.error_code) == (200, "stall")


@OPENAI_TRIO_STREAM_LEAK
async def test_fault_truncate_stream(open_client: OpenClient) -> None:
    """A truncated stream ends halfway with no finish_reason and no error raised."""
    service = faulty(rate_truncate=1.0)
    async with open_client(service) as client:
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer_text("Q", 50).startswith(text)
    assert len(text.split()) == 25
    assert all(c.choices[0].finish_reason is None for c in chunks if c.choices)
    assert service.log[0].error_code == "truncated"


async def test_fault_truncate_non_stream_resets(open_client: OpenClient) -> None:
    """Without streaming, truncation drops the connection after generating."""
    service = faulty(rate_truncate=1.0)
    async with open_client(service) as client:
        with pytest.raises(openai.APIConnectionError):
            await create(client)
    assert service.log[0].error_code == "truncated"


async def test_fault_sloppy(open_client: OpenClient) -> None:
    """Sloppy replies to a numbered prompt garble the answers; single questions are spared."""
    service = faulty(rate_sloppy=1.0)
    prompt = "1. A?\n2. B?\n3. C?"
    correct = "\n".join(f"{i}. {answer_text(q, 50)}" for i, q in [(1, "A?"), (2, "B?"), (3, "C?")])
    async with open_client(service) as client:
        replies = [
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": prompt}]
            )
            for _ in range(3)
        ]
        single = await client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    for reply in replies:
        assert reply.choices[0].message.content != correct
    assert single.choices[0].message.content == answer_text("Q", 50)
    assert [r.error_code for r in service.log] == ["sloppy", "sloppy", "sloppy", None]


async def test_faults_are_reproducible() -> None:
    """Two services with the same seed inject the same faults on the same requests."""

    async def run(seed: int) -> list[str | None]:
        service = SimService("instant", faults=Faults(rate_500=0.3, rate_quota=0.3), seed=seed)
        async with service.async_client(max_retries=0) as client:
            for _ in range(12):
                with contextlib.suppress(openai.APIStatusError):
                    await create(client)
        return [r.error_code for r in service.log]

    first = await run(3)
    assert first == await run(3)
    assert {"server_error", "insufficient_quota", None} <= set(first)


async def _pause() -> None:

    await anyio.sleep(0.02)
