"""`splitter run` / Splitter.arun_file with OpenAI Batch API lines in and out, metadata
carried through, and resuming in every pairing of input and output format.

Against the simulator over the real openai client; requests are counted from its log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai.types.chat
import pytest

from splitter import FileRun, InvalidInputError, Policy, RetryPolicy, Splitter
from splitter.sim import SimService, answer_tag, serve
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio

MODEL = "gpt-4o-mini"
SPLITTER = str(Path(sys.executable).with_name("splitter"))  # the installed console script


def batch_line(custom_id: Any, question: str, **body: Any) -> dict[str, Any]:
    messages = body.pop("messages", [])
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "messages": [*messages, {"role": "user", "content": question}],
            **body,
        },
    }


def own_line(qid: Any, question: str, **fields: Any) -> dict[str, Any]:
    return {"id": qid, "question": question, **fields}


def write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _service() -> SimService:
    return SimService(MODEL, time_scale=0.002)


def _questions(n: int, start: int = 0) -> list[tuple[str, str]]:
    return [(f"req-{k}", f"Batch question {k}: what is {k} plus one?") for k in range(start, n)]


def _text(record: dict[str, Any], output_format: str) -> str | None:
    if output_format == "splitter":
        return record["answer"]
    return record["response"]["body"]["choices"][0]["message"]["content"]


def _id(record: dict[str, Any], output_format: str) -> Any:
    return record["id"] if output_format == "splitter" else record["custom_id"]


async def test_batch_api_lines_are_asked_as_their_bodies_say(tmp_path: Path) -> None:
    """System message, history and keywords of each body are sent; lines whose bodies
    agree are merged, a line with history is asked alone; ids are the custom_ids."""
    history = [
        {"role": "user", "content": "Call me Ada."},
        {"role": "assistant", "content": "Hello Ada."},
    ]
    system = {"role": "system", "content": "Be brief."}
    records = [
        batch_line("a", "First shared?", messages=[system], temperature=0),
        batch_line("b", "Second shared?", messages=[system], temperature=0),
        batch_line("c", "Hot one?", messages=[system], temperature=1.5, max_tokens=40),
        batch_line("d", "With history?", messages=[system, *history], temperature=0),
        own_line("e", "Splitter's own line?"),  # the formats may share a file
    ]
    source, out = tmp_path / "batch.jsonl", tmp_path / "answers.jsonl"
    write(source, records)
    service = _service()
    async with open_sim_client(service) as client:
        run = await Splitter(client, policy=Policy(strategy="merge")).arun_file(
            source, out, model=MODEL, system="Batch default."
        )
    assert run == FileRun(questions=5, skipped=0, answered=5, failed=0)
    asked = sorted(sorted(r.questions) for r in service.log)
    assert asked == [
        ["First shared?", "Second shared?"],
        ["Hot one?"],
        ["Splitter's own line?"],
        ["With history?"],
    ]
    with_history = next(r for r in service.log if r.questions == ("With history?",))
    alone = next(r for r in service.log if r.questions == ("Hot one?",))
    assert with_history.prompt_tokens > alone.prompt_tokens  # its history was sent
    answers = {r["id"]: r for r in read(out)}
    assert sorted(answers) == ["a", "b", "c", "d", "e"]
    for record in records:
        qid = record.get("custom_id", record.get("id"))
        text = record["body"]["messages"][-1]["content"] if "body" in record else record["question"]
        assert answers[qid]["answer"].startswith(answer_tag(text))


async def test_batch_output_lines_are_the_batch_api_s_shape(tmp_path: Path) -> None:
    """Each success is a chat.completion the openai types accept; a failure is an error
    object with a null response."""
    records = [batch_line(qid, q) for qid, q in _questions(4)]
    records.append(batch_line("bad", "Refused?", response_format={"type": "bogus"}))
    source, out = tmp_path / "batch.jsonl", tmp_path / "answers.jsonl"
    write(source, records)
    once = Policy(retry=RetryPolicy(max_attempts=1))
    async with open_sim_client(_service()) as client:
        run = await Splitter(client, policy=once).arun_file(
            source, out, output_format="batch"
        )  # no model: the bodies name it
    assert run == FileRun(questions=5, skipped=0, answered=4, failed=1)
    lines = {r["custom_id"]: r for r in read(out)}
    assert sorted(lines) == sorted([*(qid for qid, _ in _questions(4)), "bad"])
    for qid, question in _questions(4):
        line = lines[qid]
        assert list(line) == ["id", "custom_id", "response", "error"]
        assert line["id"].startswith("batch_req_")
        assert line["error"] is None
        assert line["response"]["status_code"] == 200
        assert line["response"]["request_id"]
        completion = openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
        assert completion.model == MODEL
        assert completion.choices[0].message.content is not None
        assert completion.choices[0].message.content.startswith(answer_tag(question))
        assert completion.usage is not None
        assert completion.usage.completion_tokens > 0
    bad = lines["bad"]
    assert bad["response"] is None
    # The service's own code when it gives one; this one gives none: splitter's error class.
    assert bad["error"]["code"] == "APIStatusError"
    assert "400" in bad["error"]["message"]
    assert "response_format" in bad["error"]["message"]
    assert len({r["id"] for r in lines.values()}) == 5  # each line its own batch_req id


@pytest.mark.parametrize("input_format", ["splitter", "batch"])
@pytest.mark.parametrize("output_format", ["splitter", "batch"])
async def test_a_rerun_asks_only_what_is_not_answered(
    tmp_path: Path, input_format: str, output_format: str
) -> None:
    """Done ids are skipped, a failed one is asked again (its line replaced), a torn last
    line is cut and asked again: every id ends with one line, its own answer."""
    make = batch_line if input_format == "batch" else own_line
    source, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write(source, [make(qid, q) for qid, q in _questions(6)])
    service = _service()
    fanout = Policy(strategy="fanout")
    async with open_sim_client(service) as client:
        first = await Splitter(client, policy=fanout).arun_file(
            source, out, model=MODEL, output_format=output_format
        )
        assert first.answered == 6
        # A later input has four more; one answer failed; the last line was torn.
        write(source, [make(qid, q) for qid, q in _questions(10)])
        lines = out.read_text().splitlines(keepends=True)
        failed = json.loads(lines[0])
        failed_id = _id(failed, output_format)
        if output_format == "splitter":
            failed |= {"answer": None, "error": "ServerError: boom"}
        else:
            failed |= {"response": None, "error": {"code": "ServerError", "message": "boom"}}
        torn_id = _id(json.loads(lines[-1]), output_format)
        out.write_text(json.dumps(failed) + "\n" + "".join(lines[1:-1]) + lines[-1][:30])
        before = len(service.log)
        again = await Splitter(client, policy=fanout).arun_file(
            source, out, model=MODEL, output_format=output_format
        )
    assert again == FileRun(questions=10, skipped=4, answered=6, failed=0)
    asked_again = sorted(r.user_text for r in service.log[before:])
    wanted = dict(_questions(10))
    expected = [wanted[failed_id], wanted[torn_id], *(q for _, q in _questions(10, 6))]
    assert asked_again == sorted(expected)
    records = read(out)
    assert sorted(_id(r, output_format) for r in records) == sorted(wanted)
    for record in records:
        assert _text(record, output_format).startswith(
            answer_tag(wanted[_id(record, output_format)])
        )


async def test_metadata_is_carried_to_the_output_line_unchanged(tmp_path: Path) -> None:
    """metadata of either input format comes back on the answer's line, in either output
    format, and is never sent; any other unknown field is still refused."""
    meta = {"row": 7, "tags": ["x", "y"], "note": "keep me"}
    source = tmp_path / "questions.jsonl"
    write(
        source,
        [
            own_line(1, "Own line with metadata?", metadata=meta),
            {**batch_line("b-1", "Batch line with metadata?"), "metadata": [1, 2]},
            own_line(2, "Own line without?"),
        ],
    )
    service = _service()
    async with open_sim_client(service) as client:
        for output_format in ("splitter", "batch"):
            out = tmp_path / f"{output_format}.jsonl"
            await Splitter(client).arun_file(source, out, model=MODEL, output_format=output_format)
            by_id = {_id(r, output_format): r for r in read(out)}
            assert by_id[1]["metadata"] == meta
            assert by_id["b-1"]["metadata"] == [1, 2]
            assert "metadata" not in by_id[2]
        assert all("keep me" not in r.user_text for r in service.log)
        write(source, [own_line(1, "Typo?", max_token=5)])
        with pytest.raises(InvalidInputError, match=r"unknown field 'max_token'.*'metadata'"):
            await Splitter(client).arun_file(source, tmp_path / "never.jsonl", model=MODEL)


async def test_resuming_with_the_other_output_format_is_refused(tmp_path: Path) -> None:
    """An output written as Batch API lines is not appended to in splitter's format (nor
    the other way round): refused, with the format to use, and left byte for byte."""
    source, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write(source, [batch_line(qid, q) for qid, q in _questions(3)])
    async with open_sim_client(_service()) as client:
        await Splitter(client).arun_file(source, out, model=MODEL, output_format="batch")
        written = out.read_bytes()
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client).arun_file(source, out, model=MODEL)
    assert "answers.jsonl line 1: not an answer line of splitter run" in str(caught.value)
    assert "output format 'batch': resume with that" in str(caught.value)
    assert out.read_bytes() == written


@pytest.mark.parametrize(
    ("record", "message"),
    [
        pytest.param(
            {**batch_line("x", "q"), "url": "/v1/embeddings"},
            "line 1: url '/v1/embeddings' is not asked; splitter run answers /v1/chat/completions",
            id="url",
        ),
        pytest.param(
            {**batch_line("x", "q"), "method": "GET"}, "line 1: method must be POST", id="method"
        ),
        pytest.param(
            {"custom_id": "x", "method": "POST", "url": "/v1/chat/completions"},
            "line 1: body must be a JSON object",
            id="no-body",
        ),
        pytest.param(
            {**batch_line("x", "q"), "body": {"model": MODEL, "messages": []}},
            "line 1: body.messages must be a non-empty list",
            id="no-messages",
        ),
        pytest.param(
            batch_line("x", "q", messages=[{"role": "user", "content": "q"}])
            | {
                "body": {
                    "model": MODEL,
                    "messages": [
                        {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "a"},
                    ],
                }
            },
            "line 1: the last of body.messages must be the user's question",
            id="last-not-user",
        ),
        pytest.param(
            batch_line("x", "q", messages=[{"role": "wizard", "content": "hi"}]),
            "line 1: body.messages: messages[0] has role 'wizard'",
            id="bad-history",
        ),
        pytest.param(
            {
                **batch_line("x", "q"),
                "body": {"model": "gpt-4o", "messages": [{"role": "user", "content": "q"}]},
            },
            "line 1: body model 'gpt-4o' is not the run's model 'gpt-4o-mini'",
            id="other-model",
        ),
        pytest.param(
            batch_line("x", "q", stream=True),
            "line 1: body: keyword 'stream' is not accepted",
            id="stream",
        ),
        pytest.param(
            {**batch_line("x", "q"), "extra": 1},
            "line 1: unknown field 'extra' of a Batch API line",
            id="unknown",
        ),
        pytest.param(
            {**batch_line(True, "q")}, "line 1: custom_id must be a string or an integer", id="id"
        ),
        pytest.param(
            own_line(1, "q", params={"model": "x"}),
            "line 1: params: keyword 'model' is not accepted",
            id="own-params-model",
        ),
    ],
)
async def test_a_bad_line_is_refused_naming_it_before_any_request(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    source, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write(source, [record])
    service = _service()
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client).arun_file(source, out, model=MODEL)
    assert f"questions.jsonl {message}" in str(caught.value)
    assert service.log == []
    assert not out.exists()


def test_splitter_run_answers_a_batch_api_file_into_batch_api_lines(tmp_path: Path) -> None:
    """The command as a subprocess: no --model (the bodies name it), --output-format batch;
    a rerun skips every id."""
    source, out = tmp_path / "batch.jsonl", tmp_path / "out.jsonl"
    questions = dict(_questions(8))
    write(source, [batch_line(qid, q, temperature=0) for qid, q in questions.items()])
    service = _service()
    with serve(service) as base_url:
        command = [SPLITTER, "run", str(source), "--out", str(out), "--output-format", "batch"]
        command += ["--base-url", base_url]
        env = {**os.environ, "OPENAI_API_KEY": "sk-sim"}
        first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        asked = len(service.log)
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "8 questions: 0 already in" in first.stderr
    assert "8 answered now, 0 failed" in first.stderr
    assert again.returncode == 0, again.stderr
    assert "8 questions: 8 already in" in again.stderr
    assert len(service.log) == asked  # nothing asked twice
    records = read(out)
    assert sorted(r["custom_id"] for r in records) == sorted(questions)
    for record in records:
        content = record["response"]["body"]["choices"][0]["message"]["content"]
        assert content.startswith(answer_tag(questions[record["custom_id"]]))


async def test_without_a_model_anywhere_the_run_is_refused_before_any_request(
    tmp_path: Path,
) -> None:
    """No model given and no Batch API body naming one: an error saying where to put it."""
    source, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write(source, [own_line(1, "Which model?")])
    service = _service()
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match=r"model is required: pass model=\.\.\."):
            await Splitter(client).arun_file(source, out)
    assert service.log == []
    assert not out.exists()
