"""``splitter run --response-format SCHEMA.json``: every answer line carries ``parsed``, the
answer's JSON checked against the schema; a reply that does not satisfy it is re-asked alone
once, then written as an error. As real processes against the simulator on loopback (whose
json_schema replies fill the schema, and ignore ``pattern``); the dict-schema check itself
is tested case by case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from body_support import recording_client
from pydantic import BaseModel

from splitter import Policy, Splitter
from splitter._structured import schema_problem
from splitter.sim import SimService, serve

SPLITTER = [sys.executable, "-m", "splitter"]
MODEL = "gpt-4o-mini"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 80},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["answer", "confidence", "tags"],
    "additionalProperties": False,
}


def _files(folder: Path, n: int, schema: dict[str, Any]) -> dict[int, str]:
    questions = {k: f"What is {k} plus {k}? [len=20]" for k in range(n)}
    lines = (json.dumps({"id": k, "question": q}) + "\n" for k, q in questions.items())
    (folder / "questions.jsonl").write_text("".join(lines))
    (folder / "answer.schema.json").write_text(json.dumps(schema))
    return questions


def _run(folder: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    argv = ["run", "questions.jsonl", "--out", "answers.jsonl", "--model", MODEL]
    argv += ["--base-url", base_url, "--api-key", "sk-test", *extra]
    return subprocess.run(
        [*SPLITTER, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_with_a_schema_file_writes_parsed_on_every_line(tmp_path: Path) -> None:
    """Every line has the answer's JSON as ``parsed``, valid against the schema (the
    simulator fills the schema it is sent: ``confidence`` its ``minimum``), and each
    question was asked exactly once (no re-ask). A rerun reads those lines back and asks
    nothing. (Merged requests with a schema: the pydantic test below, and
    tests/test_structured_answers.py.)"""
    questions = _files(tmp_path, 12, SCHEMA)
    service = SimService(MODEL, time_scale=0.01)
    with serve(service) as base_url:
        done = _run(tmp_path, base_url, "--response-format", "answer.schema.json")
        assert done.returncode == 0, done.stderr
        again = _run(tmp_path, base_url, "--response-format", "answer.schema.json")
    assert again.returncode == 0, again.stderr
    assert "12 already in answers.jsonl, 0 answered now" in again.stderr
    records = _lines(tmp_path / "answers.jsonl")
    assert sorted(r["id"] for r in records) == sorted(questions)
    for record in records:
        assert list(record) == ["id", "answer", "error", "parsed"]
        assert record["error"] is None
        assert record["parsed"] == json.loads(record["answer"])
        assert schema_problem(record["parsed"], SCHEMA, SCHEMA) is None
        assert record["parsed"]["confidence"] == 0
    asked = [len(r.questions) for r in service.log]
    assert sum(asked) == len(questions)  # each once: nothing re-asked


def test_a_reply_the_schema_refuses_is_re_asked_alone_then_written_as_an_error(
    tmp_path: Path,
) -> None:
    """The simulator does not honour ``pattern``: each answer fails the schema, is asked
    once more alone, fails again and is written as an ``InvalidResponseError`` line without
    ``parsed``; status 1."""
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "pattern": "^[0-9]+$"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    questions = _files(tmp_path, 4, schema)
    service = SimService(MODEL, time_scale=0.01)
    with serve(service) as base_url:
        done = _run(tmp_path, base_url, "--response-format", "answer.schema.json")
    assert done.returncode == 1, done.stderr
    records = _lines(tmp_path / "answers.jsonl")
    assert sorted(r["id"] for r in records) == sorted(questions)
    for record in records:
        assert list(record) == ["id", "answer", "error"]
        assert record["answer"] is None
        assert record["error"].startswith("InvalidResponseError")
        assert "does not match the pattern" in record["error"]
    for text in questions.values():  # asked alone or merged, then once more alone
        sent = [r for r in service.log if text in r.questions]
        assert len(sent) == 2
        assert len(sent[-1].questions) == 1


def test_a_whole_response_format_file_is_sent_as_it_is(tmp_path: Path) -> None:
    """A file holding ``{"type": "json_schema", ...}`` is the response format itself: its
    schema (``confidence`` at least 7) is what the simulator filled."""
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["confidence"]["minimum"] = 7
    fmt = {"type": "json_schema", "json_schema": {"name": "mine", "schema": schema}}
    _files(tmp_path, 1, SCHEMA)
    (tmp_path / "format.json").write_text(json.dumps(fmt))
    service = SimService(MODEL, time_scale=0.01)
    with serve(service) as base_url:
        done = _run(tmp_path, base_url, "--response-format", "format.json")
    assert done.returncode == 0, done.stderr
    assert _lines(tmp_path / "answers.jsonl")[0]["parsed"]["confidence"] == 7


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "--response-format answer.schema.json: No such file", id="missing"),
        pytest.param("{not json", "--response-format answer.schema.json: not JSON", id="bad"),
        pytest.param("[1, 2]", "not a JSON schema (not an object)", id="not-an-object"),
    ],
)
def test_a_bad_schema_file_is_one_line_and_status_2(
    tmp_path: Path, content: str | None, message: str
) -> None:
    _files(tmp_path, 1, SCHEMA)
    schema = tmp_path / "answer.schema.json"
    if content is None:
        schema.unlink()
    else:
        schema.write_text(content)
    done = _run(tmp_path, "http://127.0.0.1:9/v1", "--response-format", "answer.schema.json")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("splitter run: error: ")
    assert message in done.stderr
    assert not (tmp_path / "answers.jsonl").exists()


class Capital(BaseModel):
    answer: str
    population_millions: int


@pytest.mark.anyio
async def test_run_file_with_a_pydantic_class_writes_its_json(tmp_path: Path) -> None:
    """From Python, a class as ``response_format``: ``parsed`` is the instance dumped; the
    merged request carried the class's schema inside the array schema."""
    questions = _files(tmp_path, 3, SCHEMA)
    service = SimService(MODEL, time_scale=0.002)
    async with recording_client(service, "inprocess") as (client, bodies):
        done = await Splitter(client, policy=Policy(strategy="merge")).arun_file(
            tmp_path / "questions.jsonl",
            tmp_path / "answers.jsonl",
            model=MODEL,
            response_format=Capital,
        )
    assert (done.answered, done.failed) == (len(questions), 0)
    assert [len(r.questions) for r in service.log] == [3]
    merged = bodies[0]["response_format"]["json_schema"]["schema"]["properties"]["answers"]
    assert merged["items"]["properties"]["answer"]["properties"].keys() == {
        "answer",
        "population_millions",
    }
    for record in _lines(tmp_path / "answers.jsonl"):
        assert Capital.model_validate(record["parsed"]) == Capital.model_validate_json(
            record["answer"]
        )


_DEFS = {"$defs": {"unit": {"type": "string", "enum": ["m", "km"]}}}


@pytest.mark.parametrize(
    ("value", "schema", "problem"),
    [
        pytest.param({"answer": "x", "confidence": 3, "tags": ["a"]}, SCHEMA, None, id="valid"),
        pytest.param({"answer": "x", "tags": ["a"]}, SCHEMA, "'confidence' is missing", id="req"),
        pytest.param(
            {"answer": "x", "confidence": 3, "tags": ["a"], "more": 1},
            SCHEMA,
            "'more' is not allowed",
            id="extra",
        ),
        pytest.param(
            {"answer": "x", "confidence": 11, "tags": ["a"]},
            SCHEMA,
            "the reply.confidence: over the maximum 10",
            id="maximum",
        ),
        pytest.param(
            {"answer": "x", "confidence": True, "tags": ["a"]},
            SCHEMA,
            "confidence: not of type integer",
            id="bool-is-not-integer",
        ),
        pytest.param(
            {"answer": "x", "confidence": 2, "tags": []}, SCHEMA, "fewer than 1", id="minItems"
        ),
        pytest.param(
            {"answer": "x", "confidence": 2, "tags": [3]},
            SCHEMA,
            "the reply.tags[0]: not of type string",
            id="item-type",
        ),
        pytest.param("y" * 81, SCHEMA["properties"]["answer"], "longer than 80", id="maxLength"),
        pytest.param(2.0, {"type": "integer"}, None, id="integral-float"),
        pytest.param(None, {"type": ["string", "null"]}, None, id="nullable"),
        pytest.param("km", {"$ref": "#/$defs/unit", **_DEFS}, None, id="ref"),
        pytest.param("mi", {"$ref": "#/$defs/unit", **_DEFS}, "must be one of", id="ref-enum"),
        pytest.param(
            3, {"anyOf": [{"type": "string"}, {"type": "null"}]}, "none of its anyOf", id="anyOf"
        ),
        pytest.param("b", {"const": "a"}, 'must be "a"', id="const"),
    ],
)
def test_a_dict_schema_checks_the_keywords_strict_mode_uses(
    value: object, schema: dict[str, Any], problem: str | None
) -> None:
    found = schema_problem(value, schema, schema)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
