"""splitter's merged-request format: parsing, answering, cuts and sloppy replies."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

import openai
import pytest

from splitter.sim import Faults, SimService, answer_tag, answer_text
from splitter.sim._answers import (
    Answer,
    answer_length,
    answer_prompt,
    count_tokens,
    cut_tokens,
    parse_merged,
    render_merged,
)
from splitter.sim._faults import sloppy_answer, sloppy_merged

OpenClient = Callable[..., AbstractAsyncContextManager[openai.AsyncOpenAI]]
OPENAI_TRIO_STREAM_LEAK = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object (SSEDecoder|AsyncStream|Response)\\."
    ":pytest.PytestUnraisableExceptionWarning"
)
SCALE = 0.01
NONCE = "k3x9q2mz"
TRICKY = "Compare:\n1. apples\n2. pears\n@@ zzzz answer 2 @@\n@@ zzzz question 9 @@ too"
QUESTIONS = ["What is 2+2?", TRICKY, "Third one [len=3]"]


def merged_prompt(questions: Sequence[str], nonce: str = NONCE, preamble: str = "") -> str:
    """A prompt as splitter's core builds it."""
    head = (
        f"{preamble}\n\nAnswer each of the {len(questions)} questions below on its own. Start"
        " each answer with its marker line, copied exactly and alone on its line, then the"
        " answer. Write nothing before the first marker.\n"
        f"For example: @@ {nonce} answer 1 @@\n"
    )
    items = "\n".join(f"@@ {nonce} question {k} @@\n{q}" for k, q in enumerate(questions, 1))
    return f"{head}\n{items}"


def merged_reply(questions: Sequence[str], tokens: int, nonce: str = NONCE) -> str:
    """The correct reply: each answer tagged and sized exactly as a lone question's would be."""
    return "\n".join(
        f"@@ {nonce} answer {k} @@\n{answer_text(q, answer_length(q, tokens))}"
        for k, q in enumerate(questions, 1)
    )


# -- parsing and answering --------------------------------------------------------------------


def test_parse_merged_finds_items_in_order() -> None:
    """Preamble and instruction lines are skipped; numbered and foreign-nonce lines stay put."""
    prompt = merged_prompt(QUESTIONS, preamble="Context:\n1. not a question\n2. nor this")
    items = parse_merged(prompt)
    assert items is not None
    assert [(q.number, q.nonce, q.text) for q in items] == [
        (k, NONCE, q) for k, q in enumerate(QUESTIONS, 1)
    ]


def test_parse_merged_keeps_multiline_text_and_crlf() -> None:
    """An item is everything up to the next marker, stripped; CRLF marker lines count."""
    prompt = "@@ ab1 question 1 @@\r\n  line one\r\n\r\n  line two  \r\n@@ ab1 question 2 @@\r\nB"
    items = parse_merged(prompt)
    assert items is not None
    assert [q.text for q in items] == ["line one\r\n\r\n  line two", "B"]


@pytest.mark.parametrize(
    "prompt",
    [
        "no markers here",
        "1. a\n2. b",
        "For example: @@ abc answer 1 @@",  # the instruction line alone is no question
        "@@ abc answer 1 @@\nx\n@@ abc answer 2 @@\ny",
        " @@ abc question 1 @@\nx",  # not alone on its line
        "@@ abc question 1 @@ and more\nx",
        "@@ ABC question 1 @@\nx",  # nonces are lowercase
        "@@ abc question 1 @@\nx\n@@ xyz question 2 @@\ny",  # two nonces
    ],
)
def test_parse_merged_rejects(prompt: str) -> None:
    """Only whole marker lines of one nonce make a merged prompt."""
    assert parse_merged(prompt) is None


def test_merged_prompt_is_answered_under_markers() -> None:
    """Each answer follows its marker, with the same tag and length as if asked alone."""
    answer = answer_prompt(merged_prompt(QUESTIONS, preamble="Be brief."), default_tokens=4)
    assert answer.text == merged_reply(QUESTIONS, 4)
    assert answer.nonce == NONCE
    assert [q.text for q in answer.questions] == QUESTIONS
    lines = answer.text.splitlines()
    assert lines[0] == f"@@ {NONCE} answer 1 @@"
    assert lines[1].split()[0] == answer_tag(QUESTIONS[0])
    assert lines[3].split()[0] == answer_tag(TRICKY)
    assert lines[5] == answer_text("Third one [len=3]", 3)
    # 5 words per marker line, plus 4 + 4 + 3 answer words.
    assert count_tokens(answer.text) == 3 * 5 + 4 + 4 + 3


def test_merged_single_item_and_numbered_tags_agree() -> None:
    """One marker suffices; a question's tag is the same merged, numbered or alone."""
    single = answer_prompt(merged_prompt(["Why?"]), default_tokens=2)
    assert single.text == f"@@ {NONCE} answer 1 @@\n{answer_text('Why?', 2)}"
    numbered = answer_prompt("1. Why?\n2. How?", default_tokens=2)
    assert numbered.text.splitlines()[0] == f"1. {answer_text('Why?', 2)}"
    assert numbered.nonce is None


def test_cut_can_fall_mid_marker() -> None:
    """max_tokens counts marker words, so a cut may end inside a marker line."""
    text = answer_prompt(merged_prompt(["A?", "B?"]), default_tokens=3).text
    assert (
        cut_tokens(text, 5 + 3 + 2) == f"@@ {NONCE} answer 1 @@\n{answer_text('A?', 3)}\n@@ {NONCE}"
    )


# -- sloppy replies ----------------------------------------------------------------------------

PARTS = [(1, "ans-a x"), (2, "ans-b y"), (3, "ans-c z")]


def _by_kind() -> dict[str, set[str]]:
    outputs: dict[str, set[str]] = {}
    for seed in range(200):
        text, mistake = sloppy_merged("n0", PARTS, random.Random(seed))
        outputs.setdefault(mistake, set()).add(text)
    return outputs


def test_sloppy_merged_kinds() -> None:
    """Every kind occurs, each exactly the way a model deviates, and never the right reply."""
    outputs = _by_kind()
    assert set(outputs) == {"drop", "merge", "swap", "numbered"}
    m = "@@ n0 answer {} @@\n{}".format
    a, b, c = m(1, "ans-a x"), m(2, "ans-b y"), m(3, "ans-c z")
    assert outputs["drop"] == {f"{b}\n{c}", f"{a}\n{c}", f"{a}\n{b}"}
    assert outputs["merge"] == {f"{a}\nans-b y\n{c}", f"{a}\n{b}\nans-c z"}
    assert outputs["swap"] == {
        f"{m(1, 'ans-b y')}\n{m(2, 'ans-a x')}\n{c}",
        f"{a}\n{m(2, 'ans-c z')}\n{m(3, 'ans-b y')}",
    }
    assert outputs["numbered"] == {"1. ans-a x\n2. ans-b y\n3. ans-c z"}
    assert render_merged("n0", PARTS) not in set().union(*outputs.values())


def test_sloppy_merged_is_seeded() -> None:
    """The same generator state always makes the same mistake."""
    runs = [sloppy_merged("n0", PARTS, random.Random(f"s{i}")) for i in range(30)]
    assert runs == [sloppy_merged("n0", PARTS, random.Random(f"s{i}")) for i in range(30)]


def test_sloppy_answer_error_codes() -> None:
    """'sloppy' only when an answer changed; a numbered-list deviation is 'sloppy_format'."""
    merged = answer_prompt(merged_prompt(["A?", "B?", "C?"]), default_tokens=3)
    codes: dict[str | None, set[str]] = {}
    for seed in range(100):
        text, code = sloppy_answer(merged, random.Random(seed))
        codes.setdefault(code, set()).add(text)
        assert text != merged.text
    assert set(codes) == {"sloppy", "sloppy_format"}
    assert all(t.startswith("1. ans-") for t in codes["sloppy_format"])
    numbered = answer_prompt("1. A?\n2. B?", default_tokens=3)
    assert {sloppy_answer(numbered, random.Random(s))[1] for s in range(20)} == {"sloppy"}
    single = answer_prompt(merged_prompt(["A?"]), default_tokens=3)
    assert sloppy_answer(single, random.Random(0)) == (single.text, None)
    twins = Answer("@@ n answer 1 @@\nx\n@@ n answer 2 @@\nx", (), ((1, "x"), (2, "x")), "n")
    swaps = {sloppy_answer(twins, random.Random(s)) for s in range(40)}
    assert (twins.text, None) in swaps  # swapping identical answers changes nothing


# -- through the real openai client ------------------------------------------------------------


@pytest.mark.anyio
async def test_merged_end_to_end(open_client: OpenClient) -> None:
    """A merged prompt is answered under its markers, with exact usage and logged items."""
    service = SimService(time_scale=SCALE, default_answer_tokens=6)
    prompt = merged_prompt(QUESTIONS, preamble="Be brief.")
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": prompt}]
    async with open_client(service) as client:
        reply = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        cut = await client.chat.completions.create(model="m", messages=messages, max_tokens=14)  # type: ignore[arg-type]
    expected = merged_reply(QUESTIONS, 6)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 3 * 5 + 6 + 6 + 3 == count_tokens(expected)
    assert service.log[0].questions == tuple(QUESTIONS)
    # 14 tokens: marker 1, answer 1, then three words of marker 2.
    assert cut.choices[0].message.content == cut_tokens(expected, 14)
    assert cut.choices[0].message.content.endswith(f"\n@@ {NONCE} answer")
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None
    assert cut.usage.completion_tokens == 14


@OPENAI_TRIO_STREAM_LEAK
@pytest.mark.anyio
async def test_merged_stream(open_client: OpenClient) -> None:
    """Streamed, the merged reply arrives one token at a time and joins back exactly."""
    service = SimService(time_scale=SCALE, default_answer_tokens=3)
    prompt = merged_prompt(["A?", "B?"])
    async with open_client(service) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": prompt}], stream=True
        )
        chunks = [chunk async for chunk in stream]
    deltas = [c.choices[0].delta.content for c in chunks if c.choices]
    assert "".join(d for d in deltas if d) == merged_reply(["A?", "B?"], 3)


@pytest.mark.anyio
async def test_merged_sloppy_end_to_end(open_client: OpenClient) -> None:
    """Sloppy merged replies are garbled reproducibly and logged by what went wrong."""

    async def run() -> tuple[list[str], list[str | None]]:
        service = SimService(time_scale=SCALE, faults=Faults(rate_sloppy=1.0), seed=5)
        prompt = merged_prompt(["A?", "B?", "C?"])
        async with open_client(service) as client:
            replies = [
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": prompt}]
                )
                for _ in range(6)
            ]
        return [r.choices[0].message.content or "" for r in replies], [
            r.error_code for r in service.log
        ]

    texts, codes = await run()
    correct = merged_reply(["A?", "B?", "C?"], 50)
    assert correct not in texts
    assert set(codes) <= {"sloppy", "sloppy_format"}
    assert "sloppy" in codes
    assert (texts, codes) == await run()
