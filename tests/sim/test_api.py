"""The wire format through the real openai client, via both doors, on asyncio and trio."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import openai
import pytest

from splitter._compat import http_module
from splitter.sim import SimLimits, SimService, answer_tag, answer_text

# openai's AsyncStream breaks out of its event iterator at [DONE] without closing it; trio's
# async-generator finalizer then warns about it (asyncio's does not). Not the simulator's doing.
OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]
pytestmark = pytest.mark.anyio

SCALE = 0.01


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_chat_completion(open_client: OpenClient) -> None:
    """A plain chat completion returns the deterministic answer with exact usage."""
    service = SimService(time_scale=SCALE, default_answer_tokens=12)
    async with open_client(service) as client:
        reply = await client.chat.completions.create(model="gpt-4o-mini", messages=user("Why?"))
    assert reply.choices[0].message.content == answer_text("Why?", 12)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (1 + 4, 12)
    (record,) = service.log
    assert (record.status, record.completion_tokens, record.questions) == (200, 12, ("Why?",))
    assert record.arrived < record.finished
    assert service.in_flight == 0


async def test_numbered_prompt_answers_each_question(open_client: OpenClient) -> None:
    """A numbered list in the last user message is answered item by item, in its numbers."""
    service = SimService(time_scale=SCALE, default_answer_tokens=5)
    prompt = "Please answer:\n1. Alpha?\n2. Beta? [len=3]"
    messages = [{"role": "system", "content": "be brief"}, *user(prompt)]
    async with open_client(service) as client:
        reply = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    content = reply.choices[0].message.content
    assert content == f"1. {answer_text('Alpha?', 5)}\n2. {answer_text('Beta? [len=3]', 3)}"
    assert service.log[0].questions == ("Alpha?", "Beta? [len=3]")
    assert service.log[0].user_text == prompt


@OPENAI_TRIO_STREAM_LEAK
async def test_chat_stream_with_usage(open_client: OpenClient) -> None:
    """Streaming sends a role delta, one delta per token, finish_reason, usage, then [DONE]."""
    service = SimService(time_scale=SCALE, default_answer_tokens=20)
    async with open_client(service) as client:
        stream = await client.chat.completions.create(
            model="m", messages=user("Q"), stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices]
    deltas = [d for d in deltas if d]
    assert "".join(deltas) == answer_text("Q", 20)
    assert len(deltas) == 20
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 20
    assert service.log[0].stream
    assert service.in_flight == 0


async def test_max_tokens_cuts_with_length(open_client: OpenClient) -> None:
    """max_tokens shorter than the answer cuts it and reports finish_reason 'length'."""
    service = SimService(time_scale=SCALE)
    async with open_client(service) as client:
        reply = await client.chat.completions.create(model="m", messages=user("Q"), max_tokens=3)
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content == " ".join(answer_text("Q", 50).split()[:3])
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 3


async def test_responses_api(open_client: OpenClient) -> None:
    """The Responses API parses with output_text and reports incomplete on max_output_tokens."""
    service = SimService(time_scale=SCALE, default_answer_tokens=8)
    async with open_client(service) as client:
        full = await client.responses.create(model="m", input="Hello?", instructions="Be kind.")
        cut = await client.responses.create(model="m", input=user("Hello?"), max_output_tokens=2)
    assert full.output_text == answer_text("Hello?", 8)
    assert full.status == "completed"
    assert full.usage is not None
    assert full.usage.input_tokens == (2 + 4) + (2 + 4)
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert cut.output_text.split()[0] == answer_tag("Hello?")


async def test_embeddings_and_models(open_client: OpenClient) -> None:
    """Embeddings are deterministic 8-dim vectors (float or base64); models lists the profile."""
    service = SimService("serial", time_scale=SCALE)
    async with open_client(service) as client:
        first = await client.embeddings.create(model="e", input=["a", "b"])
        again = await client.embeddings.create(model="e", input="a", encoding_format="base64")
        models = [m.id async for m in client.models.list()]
    assert len(first.data) == 2
    assert len(first.data[0].embedding) == 8
    raw = base64.b64decode(str(again.data[0].embedding))  # explicit base64 is left encoded
    assert first.data[0].embedding == pytest.approx(struct.unpack("<8f", raw), abs=1e-6)
    assert first.data[0].embedding != first.data[1].embedding
    assert models == ["serial", "gpt-4o-mini"]


async def test_bad_requests_raise_bad_request_error(open_client: OpenClient) -> None:
    """Missing or invalid parameters come back as 400s naming the parameter."""
    service = SimService(time_scale=SCALE)
    async with open_client(service) as client:
        with pytest.raises(openai.BadRequestError) as empty:
            await client.chat.completions.create(model="m", messages=[])
        with pytest.raises(openai.BadRequestError) as many:
            await client.chat.completions.create(model="m", messages=user("Q"), n=2)
        with pytest.raises(openai.BadRequestError) as top:
            await client.chat.completions.create(model="m", messages=user("Q"), top_logprobs=2)
        with pytest.raises(openai.NotFoundError):
            await client.get("/nowhere", cast_to=object)
    assert empty.value.param == "messages"
    assert many.value.param == "n"
    assert top.value.param == "top_logprobs"
    assert [r.status for r in service.log] == [400, 400, 400, 404]


async def test_raw_error_shapes() -> None:
    """Bad JSON and missing fields get OpenAI's error envelope over a plain HTTP client."""
    service = SimService(time_scale=SCALE)
    url = "http://sim.invalid/v1/chat/completions"
    async with http_module().AsyncClient(transport=service.transport()) as http:
        bad_json = await http.post(url, content=b"{not json")
        no_model = await http.post(url, json={"messages": user("Q")})
        bad_messages = await http.post(url, json={"model": "m", "messages": "Q"})
    assert bad_json.status_code == 400
    assert set(bad_json.json()["error"]) == {"message", "type", "param", "code"}
    assert no_model.json()["error"]["param"] == "model"
    assert bad_messages.json()["error"]["param"] == "messages"
    assert bad_messages.headers["x-request-id"] == "req_3"


async def test_rate_limit_headers_429_and_recovery(open_client: OpenClient) -> None:
    """The requests bucket empties into 429s that count too, then refills after the reset."""
    # Real time: at 3 requests a simulated minute a request comes back every 20 simulated
    # seconds, 200 ms at SCALE, which a loaded machine's pause before the fourth request
    # reached (a CI run saw it accepted). At 0.05 it is a second.
    service = SimService(time_scale=0.05, limits=SimLimits(rpm=3, tpm=100_000))
    async with open_client(service) as client:
        remaining = []
        for _ in range(3):
            create = client.chat.completions.with_raw_response.create
            raw = await create(model="m", messages=user("Q"))
            remaining.append(raw.headers["x-ratelimit-remaining-requests"])
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
            assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        with pytest.raises(openai.RateLimitError) as first:
            await client.chat.completions.create(model="m", messages=user("Q"))
        with pytest.raises(openai.RateLimitError) as second:
            await client.chat.completions.create(model="m", messages=user("Q"))
        wait_ms = float(second.value.response.headers["retry-after-ms"])
        await anyio.sleep(wait_ms / 1000 + 0.02)
        await client.chat.completions.create(model="m", messages=user("Q"))
    assert remaining == ["2", "1", "0"]
    assert first.value.code == "rate_limit_exceeded"
    assert first.value.type == "requests"
    assert int(first.value.response.headers["retry-after"]) >= 1
    # The refused request was charged, so the next refusal quotes a longer wait.
    assert wait_ms > float(first.value.response.headers["retry-after-ms"])
    assert [r.status for r in service.log] == [200, 200, 200, 429, 429, 200]


async def test_token_limit_refuses_by_tokens(open_client: OpenClient) -> None:
    """A request whose prompt plus max_tokens overdraws the tokens bucket gets a tokens 429."""
    service = SimService(time_scale=SCALE, limits=SimLimits(tpm=100))
    async with open_client(service) as client:
        await client.chat.completions.create(model="m", messages=user("Q"), max_tokens=60)
        with pytest.raises(openai.RateLimitError) as refused:
            await client.chat.completions.create(model="m", messages=user("Q"), max_tokens=60)
    assert refused.value.type == "tokens"
    assert "x-ratelimit-remaining-tokens" in refused.value.response.headers
    body = refused.value.body
    assert isinstance(body, dict)
    assert json.dumps(body)  # a plain JSON object, as openai decoded it


def test_a_service_time_scale_set_while_it_serves_is_the_engines_pace() -> None:
    """The setter is the engine's rescale: read back as set; a scale that is not positive
    is refused with the field named, and the old pace kept."""
    service = SimService(time_scale=1.0)
    service.time_scale = 0.05
    assert service.time_scale == 0.05
    with pytest.raises(ValueError, match="time_scale must be positive"):
        service.time_scale = -1
    assert service.time_scale == 0.05
