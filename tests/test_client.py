"""wrap(client): ordinary openai-python code runs unchanged; compound prompts are split."""

from __future__ import annotations

import anyio
import openai
import pytest
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

import splitter
from splitter import CompoundAnswer, InvalidInputError, Policy
from splitter._wrap import _route
from splitter.sim import SimService, answer_tag

pytestmark = pytest.mark.anyio

# openai's AsyncStream leaves its event iterator unclosed at [DONE]; trio's async-generator
# finalizer warns about it (see tests/sim/test_api.py). Not splitter's doing.
OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)

DETAILS = "splitter_details"  # where a split request keeps its CompoundAnswer
COMPOUND = "Please answer separately:\n1. Why is the sky blue?\n2. How many legs has a spider?"


async def ordinary_usage(client: openai.AsyncOpenAI) -> list[object]:
    """An unmodified snippet of everyday openai-python usage."""
    out: list[object] = []
    out.append(
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Say hi."}]
        )
    )
    async with await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Count."}], stream=True
    ) as stream:
        out.append([chunk async for chunk in stream])
    out.append(await client.responses.create(model="gpt-4o-mini", input="Say hi."))
    out.append(await client.embeddings.create(model="text-embedding-3-small", input="hi"))
    out.append([m.id async for m in client.models.list()])
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": COMPOUND}]
    )
    out.append(raw.parse())
    return out


@OPENAI_TRIO_STREAM_LEAK
async def test_everyday_openai_code_returns_the_same_types_when_wrapped() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        before = await ordinary_usage(plain)
        wrapped = splitter.wrap(plain)
        assert isinstance(wrapped, openai.AsyncOpenAI)
        after = await ordinary_usage(wrapped)
    for was, now in zip(before, after, strict=True):
        assert type(was) is type(now)
    assert isinstance(after[0], ChatCompletion)
    assert all(isinstance(c, ChatCompletionChunk) for c in after[1])  # type: ignore[attr-defined]
    assert isinstance(after[2], Response)
    assert isinstance(after[3], CreateEmbeddingResponse)
    assert after[4] == before[4]
    # with_raw_response splits like the plain call; parse() gives the joined completion.
    assert isinstance(after[5], ChatCompletion)
    assert isinstance(getattr(after[5], DETAILS), CompoundAnswer)


async def test_a_compound_prompt_comes_back_as_one_chat_completion() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        completion = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "Be concise."},
                {"role": "user", "content": COMPOUND},
            ],
            temperature=0,
        )
    assert isinstance(completion, ChatCompletion)
    details = getattr(completion, DETAILS)
    assert isinstance(details, CompoundAnswer)
    assert len(details.parts) == 2
    assert completion.choices[0].message.content == details.text
    assert details.text.startswith("1. ")
    assert "\n\n2. " in details.text
    assert completion.usage is not None
    assert completion.usage.total_tokens == details.usage.total_tokens
    assert DETAILS not in completion.model_dump()
    assert len(service.log) == 2  # one request per part, none for the whole
    assert all(r.user_text.startswith("Please answer separately:") for r in service.log)


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"response_format": {"type": "json_object"}},
        {"logprobs": True},
        {"logprobs": True, "top_logprobs": 2},
    ],
    ids=["tools", "json-mode", "logprobs", "top-logprobs"],
)
async def test_requests_that_must_stay_whole_pass_through(extra: dict[str, object]) -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        completion = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": COMPOUND}],
            **extra,  # type: ignore[arg-type]
        )
    assert not hasattr(completion, DETAILS)
    assert len(service.log) == 1
    if extra.get("logprobs"):
        assert completion.choices[0].logprobs is not None  # the model's own, whole


async def test_logprobs_false_is_the_default_and_still_splits() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        completion = await splitter.wrap(plain).chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}], logprobs=False
        )
    assert isinstance(getattr(completion, DETAILS), CompoundAnswer)
    assert len(service.log) == 2


_UNSET = {"NOT_GIVEN": openai.NOT_GIVEN, "omit": openai.omit, "None": None, "empty": []}


@pytest.mark.parametrize("unset", list(_UNSET), ids=list(_UNSET))
@pytest.mark.parametrize(
    "parameter",
    sorted(_route._KEEP_WHOLE | {"stream_options", "n"}),
)
async def test_a_parameter_passed_as_unset_does_not_keep_a_prompt_whole(
    parameter: str, unset: str
) -> None:
    """pydantic-ai and openai-agents pass every parameter, the unset ones as openai's
    sentinels, None or []: the prompt must still split, as if they were left out."""
    service = SimService("instant")
    async with service.async_client() as plain:
        completion = await splitter.wrap(plain).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": COMPOUND}],
            **{parameter: _UNSET[unset]},  # type: ignore[arg-type]
        )
    assert isinstance(getattr(completion, DETAILS), CompoundAnswer)
    assert len(service.log) == 2


async def test_a_responses_request_with_unset_parameters_is_split() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        response = await splitter.wrap(plain).responses.create(
            model="m",
            input=COMPOUND,
            tools=openai.omit,
            include=[],
            instructions=None,
            stream=False,
            reasoning=openai.NOT_GIVEN,
        )
    assert isinstance(response, Response)
    assert len(service.log) == 2
    assert "1. " in response.output_text
    assert "2. " in response.output_text


async def test_n_above_one_goes_to_the_service_as_it_is() -> None:
    """The simulator refuses n=2 (as some servers do): the caller sees that refusal."""
    service = SimService("instant")
    async with service.async_client() as plain:
        with pytest.raises(openai.BadRequestError, match="n=1"):
            await splitter.wrap(plain).chat.completions.create(
                model="m", messages=[{"role": "user", "content": COMPOUND}], n=2
            )
    assert len(service.log) == 1


async def test_conversations_and_content_parts_are_never_split() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        history = await client.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": COMPOUND},
            ],
        )
        parts = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": [{"type": "text", "text": COMPOUND}]}]
        )
    for completion in (history, parts):
        assert not hasattr(completion, DETAILS)
    assert len(service.log) == 2


async def test_with_options_and_copies_keep_splitting() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout")).with_options(timeout=30)
        assert isinstance(client, openai.AsyncOpenAI)
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}]
        )
    assert hasattr(completion, DETAILS)
    assert len(service.log) == 2


async def test_a_compound_responses_input_comes_back_as_one_response() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        response = await client.responses.create(
            model="gpt-4o-mini", input=COMPOUND, instructions="Be brief.", max_output_tokens=50
        )
        with_tools = await client.responses.create(
            model="gpt-4o-mini",
            input=COMPOUND,
            tools=[{"type": "function", "name": "f", "parameters": {}, "strict": False}],
        )
    assert isinstance(response, Response)
    details = getattr(response, DETAILS)
    assert response.output_text == details.text
    assert details.text.startswith("1. ")
    assert response.usage is not None
    assert response.usage.total_tokens == details.usage.total_tokens
    assert not hasattr(with_tools, DETAILS)
    split = [r for r in service.log if r.path.endswith("/chat/completions")]
    assert len(split) == 2
    assert [r.path.endswith("/responses") for r in service.log].count(True) == 1


async def test_single_calls_of_one_end_user_are_aggregated_never_across_users() -> None:
    """With a window, concurrent one-question calls carrying the same safety_identifier are
    planned together (merged here, as forced); another user's call never joins them; calls
    without an identifier go out alone."""
    service = SimService("instant")
    policy = Policy(aggregate_window_ms=100, strategy="merge")
    calls = [
        ("acme", "What is DNS?"),
        ("acme", "What is TLS?"),
        ("acme", "What is BGP?"),
        ("globex", "What is NTP?"),
        (None, "What is ARP?"),
    ]
    replies: dict[str, ChatCompletion] = {}
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=policy)

        async def one(user: str | None, question: str) -> None:
            extra = {"safety_identifier": user} if user else {}
            replies[question] = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": question}],
                **extra,  # type: ignore[arg-type]
            )

        async with anyio.create_task_group() as tg:
            for user, question in calls:
                tg.start_soon(one, user, question)
    for _, question in calls:
        content = replies[question].choices[0].message.content or ""
        assert content.startswith(answer_tag(question)), question
    acme = {q for u, q in calls if u == "acme"}
    prompts = [set(r.questions) or {r.user_text} for r in service.log]
    assert acme in prompts  # one merged request for acme's three
    assert all(p <= acme or not (p & acme) for p in prompts)  # and nobody else's with them
    assert len(service.log) == 3
    assert isinstance(getattr(replies["What is DNS?"], DETAILS), splitter.Answer)


def streamed_text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@OPENAI_TRIO_STREAM_LEAK
async def test_a_streamed_compound_prompt_comes_as_chunks_in_its_own_numbering() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    long_first = (
        "Please answer separately:\n1. Tell a long story about the sea. [len=80]\n"
        "2. Name one color. [len=2]"
    )
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        async with await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": long_first}],
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            chunks = [chunk async for chunk in stream]
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    details = stream.splitter_details
    assert isinstance(details, CompoundAnswer)
    assert streamed_text(chunks) == details.text
    assert details.text.startswith("1. ")
    # Part 1 arrived live, piece by piece, before part 2 (already done) followed in one go.
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    second = next(k for k, piece in enumerate(pieces) if "\n\n2. " in piece)
    assert second > 20
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == details.usage.total_tokens
    assert len(service.log) == 2
    assert all(r.stream for r in service.log)


async def test_a_streamed_split_read_without_async_with_ends_cleanly() -> None:
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}], stream=True
        )
        chunks = [chunk async for chunk in stream]
    assert streamed_text(chunks) == stream.splitter_details.text
    assert not any(c.usage for c in chunks)  # not asked for, not sent


async def test_leaving_a_streamed_split_early_cancels_the_parts() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.05)
    prompt = "Please answer separately:\n1. Name one color. [len=2]\n2. Write an essay. [len=900]"
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        with anyio.fail_after(10):
            async with await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": prompt}], stream=True
            ) as stream:
                async for chunk in stream:
                    if "1. " in (chunk.choices[0].delta.content or ""):
                        break
    assert stream.splitter_details is None  # never finished
    assert any(r.status == 499 for r in service.log)  # the essay was abandoned mid-way


def test_sync_client_is_wrapped_too() -> None:
    service = SimService("instant")
    with (
        splitter.sim.serve(service) as base_url,
        openai.OpenAI(base_url=base_url, api_key="sk-sim") as plain,
    ):
        client = splitter.wrap(plain)
        assert isinstance(client, openai.OpenAI)
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}]
        )
        assert client.models.list().data
        with client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}], stream=True
        ) as stream:
            chunks = list(stream)
    assert hasattr(completion, DETAILS)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert streamed_text(chunks) == stream.splitter_details.text


async def test_an_azure_client_is_wrapped_and_split() -> None:
    """AsyncAzureOpenAI (deployment URLs, api-version) behaves like the OpenAI client."""
    service = SimService("instant")
    azure = openai.AsyncAzureOpenAI(
        azure_endpoint="http://sim.invalid",
        api_key="sk-azure",
        api_version="2024-10-21",
        http_client=openai.DefaultAsyncHttpxClient(transport=service.transport()),
    )
    async with splitter.wrap(azure) as client:
        assert isinstance(client, openai.AsyncAzureOpenAI)
        completion = await client.chat.completions.create(
            model="my-deployment", messages=[{"role": "user", "content": COMPOUND}]
        )
        single = await client.chat.completions.create(
            model="my-deployment", messages=[{"role": "user", "content": "Say hi."}]
        )
    assert hasattr(completion, DETAILS)
    assert not hasattr(single, DETAILS)
    assert len(service.log) == 3
    assert all(r.path == "/openai/deployments/my-deployment/chat/completions" for r in service.log)


def test_wrap_refuses_what_is_not_an_openai_client() -> None:
    with pytest.raises(splitter.InvalidInputError, match=r"openai\.OpenAI or openai\.AsyncOpenAI"):
        splitter.wrap(object())  # type: ignore[type-var]


async def test_a_failed_part_is_not_reported_as_cut_at_its_token_cap() -> None:
    """A part that failed (here insufficient_quota) says so in its text and details; the
    completion's finish_reason is not "length", the Response not "max_output_tokens"."""
    from splitter.sim import Faults

    service = SimService("instant", faults=Faults(rate_quota=1.0))
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}]
        )
        response = await client.responses.create(model="m", input=COMPOUND)
    details = getattr(completion, DETAILS)
    assert not details.ok
    assert completion.choices[0].finish_reason == "stop"
    assert "[no answer" in (completion.choices[0].message.content or "")
    assert response.status == "incomplete"
    assert response.incomplete_details is None


async def test_a_split_stream_says_stop_for_a_failed_part_and_length_for_a_cut_one() -> None:
    """As the whole reply: a failed part streams "[no answer: ...]" and ends with "stop";
    a part cut at its cap ends the stream with "length"."""
    from splitter.sim import Faults

    async def last_finish(service: SimService, **kwargs: object) -> tuple[str | None, str]:
        async with service.async_client() as plain:
            client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
            stream = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": COMPOUND}],
                stream=True,
                **kwargs,  # type: ignore[arg-type]
            )
            chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        return finishes[-1], text

    failed, failed_text = await last_finish(SimService("instant", faults=Faults(rate_quota=1.0)))
    cut, _ = await last_finish(SimService("instant", default_answer_tokens=50), max_tokens=3)
    assert failed == "stop"
    assert "[no answer" in failed_text
    assert cut == "length"


async def test_a_part_cut_at_its_token_cap_is_reported_as_length() -> None:
    service = SimService("instant", default_answer_tokens=50)
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}], max_tokens=3
        )
        response = await client.responses.create(model="m", input=COMPOUND, max_output_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


async def test_wrap_on_event_sees_every_split_requests_batch_also_through_clones() -> None:
    seen: list[splitter.Event] = []
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"), on_event=seen.append)
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}]
        )
        clone = client.with_options(timeout=30)
        await clone.chat.completions.create(
            model="m", messages=[{"role": "user", "content": COMPOUND}]
        )
    finished = [e for e in seen if isinstance(e, splitter.RequestFinished)]
    assert len(finished) == len(service.log) == 4
    assert sum(isinstance(e, splitter.BatchFinished) for e in seen) == 2


def test_wrap_refuses_an_on_event_that_is_not_callable() -> None:
    with pytest.raises(InvalidInputError, match="on_event must be callable"):
        splitter.wrap(openai.OpenAI(api_key="sk-x", base_url="http://127.0.0.1:9/v1"), on_event=3)  # type: ignore[arg-type]


@OPENAI_TRIO_STREAM_LEAK
async def test_the_raw_doors_split_and_parse_to_the_joined_reply() -> None:
    """LangChain's ``invoke`` goes through ``with_raw_response``: a compound prompt splits
    there too, and the raw response reads as openai's would: ``parse()`` gives the joined
    completion, the headers name the first part's request id (all of them in
    ``x-splitter-request-ids``); ``with_streaming_response`` and a streamed raw call alike."""
    service = SimService("instant")
    messages = [{"role": "user", "content": COMPOUND}]
    async with service.async_client() as plain:
        client = splitter.wrap(plain, policy=Policy(strategy="fanout"))
        raw = await client.chat.completions.with_raw_response.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers={"x-mine": "1"},
        )
        async with client.chat.completions.with_streaming_response.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
        ) as streamed:
            via_stream_door = await streamed.parse()
        raw_stream = await client.chat.completions.with_raw_response.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            stream=True,
        )
        chunks = [chunk async for chunk in raw_stream.parse()]
        raw_response = await client.responses.with_raw_response.create(model="m", input=COMPOUND)
        whole = await client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "Say hi."}]
        )
    completion = raw.parse()
    details = getattr(completion, DETAILS)
    assert isinstance(details, CompoundAnswer)
    ids = [part.request_id for part in details.parts]
    assert set(ids) <= {r.request_id for r in service.log}
    assert raw.headers["x-request-id"] == completion._request_id == ids[0]
    assert raw.headers["x-splitter-request-ids"] == ",".join(ids)
    assert raw.http_response.json()["choices"][0]["message"]["content"] == details.text
    assert isinstance(getattr(via_stream_door, DETAILS), CompoundAnswer)
    assert streamed_text(chunks) == raw_stream.parse().splitter_details.text
    assert isinstance(getattr(raw_response.parse(), DETAILS), CompoundAnswer)
    assert not hasattr(whole.parse(), DETAILS)  # one question: openai's own raw response
    assert whole.headers["x-request-id"] == service.log[-1].request_id
    assert len(service.log) == 4 * 2 + 1


_SCHEMA = '{"properties": {"capital": {"type": "string"}}, "required": ["capital"]}'
# The frameworks' own format instructions, verbatim (with a schema filled in).
_FORMAT_INSTRUCTIONS = {
    "langchain-pydantic-parser": (
        "The output should be formatted as a JSON instance that conforms to the JSON schema "
        'below.\n\nAs an example, for the schema {...} the object {"foo": ["bar", "baz"]} '
        f"is a well-formatted instance of the schema.\n\nHere is the output schema:\n```\n"
        f"{_SCHEMA}\n```"
    ),
    "langchain-json-strict": (
        "STRICT OUTPUT FORMAT:\n- Return only the JSON value that conforms to the schema. Do "
        "not include any additional text, explanations, headings, or separators."
    ),
    "langchain-comma-list": (
        "Your response should be a list of comma separated values, eg: `foo, bar, baz` or "
        "`foo,bar,baz`"
    ),
    "langchain-numbered-list": (
        "Your response should be a numbered list with each item on a new line. For example: "
        "\n\n1. foo\n\n2. bar\n\n3. baz"
    ),
    "langchain-markdown-list": "Your response should be a markdown list, eg: `- foo\n- bar`",
    "langchain-xml": "The output should be formatted as a XML file.",
    "instructor-json": (
        "As a genius expert, your task is to understand the content and provide the parsed "
        f"objects in json that match the following json_schema:\n\n{_SCHEMA}\n\nMake sure to "
        "return an instance of the JSON, not the schema itself"
    ),
    "pydantic-ai-prompted": (
        "Always respond with a JSON object that's compatible with this schema:\n\n"
        f"{_SCHEMA}\n\nDon't include any text or Markdown fencing before or after."
    ),
    "answer-in-json": "Answer in JSON.",
    "respond-with-a-list": "Respond with a list.",
    "following-format": "Respond in the following format:\nCity: <name>\nSum: <number>",
    "tags": "Wrap your answer in <answer></answer> tags.",
    "single-object": "Reply with a single object holding both answers.",
    "one-sentence": "Answer in one sentence.",
}
_NOT_FORMAT = ["Be concise.", "You are a helpful assistant.", "Answer in French.", "Be informal."]


@pytest.mark.parametrize(
    ("system", "whole"),
    [pytest.param(text, True, id=name) for name, text in _FORMAT_INSTRUCTIONS.items()]
    + [pytest.param(text, False, id=text) for text in _NOT_FORMAT],
)
async def test_a_system_message_that_dictates_the_format_keeps_the_prompt_whole(
    system: str, whole: bool
) -> None:
    """Split, each part would get the format and the joined reply would have it twice (two
    JSON objects, two lists) where the caller's parser expects one; chat's system message
    and the Responses API's ``instructions`` alike. Other system messages still split."""
    service = SimService("instant")
    async with service.async_client() as plain:
        client = splitter.wrap(plain)
        completion = await client.chat.completions.create(
            model="m",
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": COMPOUND},
            ],
        )
        response = await client.responses.create(model="m", input=COMPOUND, instructions=system)
    assert hasattr(completion, DETAILS) is not whole
    assert hasattr(response, DETAILS) is not whole
    assert len(service.log) == (2 if whole else 4)
