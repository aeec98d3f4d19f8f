"""`splitter run` / Splitter.arun_file: a JSONL file answered once per id, across crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from splitter import (
    FileRun,
    InvalidInputError,
    Policy,
    QuotaExceededError,
    RetryPolicy,
    Splitter,
)
from splitter.sim import Faults, SimService, answer_tag, serve
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio

SPLITTER = str(Path(sys.executable).with_name("splitter"))  # the installed console script


def write_questions(path: Path, n: int, tokens: int = 5) -> dict[Any, str]:
    """``n`` questions with ids of both kinds (5 and "q-6"); id -> question text."""
    questions: dict[Any, str] = {}
    with path.open("w") as file:
        for k in range(n):
            qid: Any = k if k % 2 else f"q-{k}"
            questions[qid] = f"Question {k}: what follows {k}? [len={tokens}]"
            file.write(json.dumps({"id": qid, "question": questions[qid]}) + "\n")
    return questions


def read_answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_each_id_answered_once_with_its_own_answer(out: Path, questions: dict[Any, str]) -> None:
    records = read_answers(out)
    assert sorted(map(str, (r["id"] for r in records))) == sorted(map(str, questions))
    assert len(records) == len(questions)
    for record in records:
        assert record["error"] is None
        assert record["answer"].startswith(answer_tag(questions[record["id"]]))


def test_a_run_killed_with_sigkill_resumes_to_every_id_answered_exactly_once(
    tmp_path: Path,
) -> None:
    """A real `splitter run` process is killed mid-run (and a torn line left behind, as a
    kill during a write would); the rerun skips what was written and answers the rest."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 240, tokens=40)
    # At half scale (about 0.4 s a request) the signal comes mid-run however slowly a
    # loaded machine lets this test poll; the rest then goes at a 10th of that pace.
    service = SimService("gpt-4o-mini", time_scale=0.5)
    with serve(service) as base_url:
        command = [SPLITTER, "run", str(questions_file), "--out", str(out), "--model", "m"]
        command += ["--base-url", base_url, "--concurrency", "4", "--window", "16"]
        env = {**os.environ, "OPENAI_API_KEY": "sk-never-printed"}
        first = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while (not out.exists() or len(out.read_text().splitlines()) < 20) and (
            time.monotonic() < deadline and first.poll() is None
        ):
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        service.time_scale = 0.05
        first.wait(timeout=30)
        assert first.stderr is not None
        first.stderr.close()
        assert first.returncode == -signal.SIGKILL
        written = read_answers(out)
        assert 20 <= len(written) < len(questions)  # killed mid-run, not after
        with out.open("a") as file:
            file.write('{"id": "q-torn", "answer": "half a li')  # no newline: torn
        asked_before = len(service.log)

        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert f"{len(written)} already in" in second.stderr
    assert "sk-never-printed" not in second.stderr + second.stdout
    assert_each_id_answered_once_with_its_own_answer(out, questions)
    # The rerun did not ask again what the first run had written.
    done_texts = {questions[r["id"]] for r in written}
    rerun = service.log[asked_before:]
    assert not done_texts & {q for record in rerun for q in record.questions}


async def test_the_api_answers_a_file_and_a_rerun_asks_nothing(tmp_path: Path) -> None:
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 30)
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        splitter = Splitter(client)
        first = await splitter.arun_file(questions_file, out, model="m", window=8)
        asked = len(service.log)
        again = await splitter.arun_file(questions_file, out, model="m", window=8)
    assert first == FileRun(questions=30, skipped=0, answered=30, failed=0)
    assert again == FileRun(questions=30, skipped=30, answered=0, failed=0)
    assert len(service.log) == asked
    assert_each_id_answered_once_with_its_own_answer(out, questions)


async def test_failures_are_recorded_with_their_error_and_asked_again_next_run(
    tmp_path: Path,
) -> None:
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 12)
    broken = SimService("gpt-4o-mini", time_scale=0.002, faults=Faults(rate_500=1.0))
    once = Policy(retry=RetryPolicy(max_attempts=1))
    async with open_sim_client(broken) as client:
        failing = await Splitter(client, policy=once).arun_file(questions_file, out, model="m")
        kept = await Splitter(client, policy=once).arun_file(
            questions_file, out, model="m", retry_failed=False
        )
    assert failing == FileRun(questions=12, skipped=0, answered=0, failed=12)
    assert kept == FileRun(questions=12, skipped=12, answered=0, failed=0)
    records = read_answers(out)
    assert len(records) == 12
    assert all(r["answer"] is None and r["error"].startswith("ServerError") for r in records)

    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        retried = await Splitter(client).arun_file(questions_file, out, model="m")
    assert retried == FileRun(questions=12, skipped=0, answered=12, failed=0)
    assert_each_id_answered_once_with_its_own_answer(out, questions)


async def test_an_error_every_request_would_meet_stops_the_run_after_one_line(
    tmp_path: Path,
) -> None:
    """An empty quota before any answer: its line is written and its error raised, not one
    line per question; the next run, on a working service, answers every id once."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 300)
    broken = SimService("gpt-4o-mini", time_scale=0.002, faults=Faults(rate_quota=1.0))
    async with open_sim_client(broken) as client:
        with pytest.raises(QuotaExceededError):
            await Splitter(client).arun_file(questions_file, out, model="m", window=8)
    records = read_answers(out)
    assert 1 <= len(records) <= 8
    assert all(r["error"].startswith("QuotaExceededError") for r in records)

    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        retried = await Splitter(client).arun_file(questions_file, out, model="m")
    assert retried == FileRun(questions=300, skipped=0, answered=300, failed=0)
    assert_each_id_answered_once_with_its_own_answer(out, questions)


GOOD = '{"id": "first", "question": "Fine?"}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param("{oops", "line 2: not JSON", id="not-json"),
        pytest.param('{"id": 1}', "line 2: no 'question' field", id="no-question"),
        pytest.param('{"question": "A?"}', "line 2: no 'id' field", id="no-id"),
        pytest.param("[1, 2]", "line 2: not a JSON object", id="not-an-object"),
        pytest.param(
            '{"id": "first", "question": "B?"}', 'line 2: id "first" repeats line 1', id="repeat"
        ),
        pytest.param(
            '{"id": 1, "question": "A?", "depends_on": [0]}',
            "line 2: unknown field 'depends_on'",
            id="unknown-field",
        ),
        pytest.param('{"id": 1.5, "question": "A?"}', "line 2: id must be a string", id="float-id"),
        pytest.param(
            '{"id": 1, "question": "  "}', "line 2: question: the question is blank", id="blank"
        ),
        pytest.param(
            '{"id": 1, "question": "A?", "max_tokens": 0}',
            "line 2: max_tokens: Input should be greater than or equal to 1",
            id="bad-max-tokens",
        ),
    ],
)
async def test_a_bad_input_file_is_an_error_naming_the_line_before_any_request(
    tmp_path: Path, bad: str, message: str
) -> None:
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions_file.write_text(f"{GOOD}\n{bad}\n{GOOD.replace('first', 'last')}\n")
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client).arun_file(questions_file, out, model="m")
    assert f"questions.jsonl {message}" in str(caught.value)
    assert service.log == []
    assert not out.exists()


ANSWER = '{"id": "q-0", "answer": "done", "error": null}\n'
QUESTION = '{"id": 1, "question": "What follows 1?"}'


@pytest.mark.parametrize(
    ("name", "content", "line", "reason"),
    [
        pytest.param(
            "notes.txt",
            b"shopping list\nmilk and eggs",
            1,
            "not JSON)",
            id="text-without-final-newline",
        ),
        pytest.param(
            "questions.jsonl",
            f"{QUESTION}\n{QUESTION.replace('1', '3')}\n".encode(),
            1,
            "fields ['id', 'question']",
            id="a-questions-file",
        ),
        pytest.param(
            "questions.jsonl",
            QUESTION.encode(),
            1,
            "the last line has no newline and is not a torn answer)",
            id="one-question-without-final-newline",
        ),
        pytest.param(
            "answers.jsonl",
            f"{ANSWER}not json at all\n{ANSWER[:20]}".encode(),
            2,
            "not JSON)",
            id="a-bad-line-before-a-torn-answer",
        ),
        pytest.param(
            "answers.jsonl",
            f"{ANSWER}{ANSWER}hello".encode(),
            3,
            "the last line",
            id="text-after-answers",
        ),
        pytest.param(
            "answers.jsonl",
            ANSWER.replace('"done"', '"done", "usage": 3').encode(),
            1,
            "fields ['answer', 'error', 'id', 'usage']",
            id="an-extra-field",
        ),
        pytest.param(
            "answers.jsonl",
            f'{ANSWER}{{"id": 1, "answer": "x", "error": "E: y"}}\n'.encode(),
            2,
            "both an answer and an error)",
            id="answer-and-error",
        ),
        pytest.param(
            "notes.txt",
            "\u00e9".encode()[:1],  # the first byte of two
            1,
            "the last line has no newline and is not a torn answer)",
            id="half-a-character",
        ),
        pytest.param(
            "answers.jsonl",
            f"{ANSWER}".encode() + b"\xff\xfe\n",
            2,
            "not UTF-8 text)",
            id="not-utf8",
        ),
    ],
)
async def test_an_output_that_is_not_an_answer_file_is_refused_and_left_as_it_was(
    tmp_path: Path, name: str, content: bytes, line: int, reason: str
) -> None:
    """Every line of an existing output is checked before anything changes: a file holding
    a line splitter did not write is refused, naming file and line, byte for byte as it was."""
    questions_file, out = tmp_path / "input.jsonl", tmp_path / name
    write_questions(questions_file, 4)
    out.write_bytes(content)
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client).arun_file(questions_file, out, model="m")
    expected = f"{out} line {line}: not an answer line of splitter run ({reason}"
    assert expected in str(caught.value)
    assert out.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["input.jsonl", name])
    assert service.log == []


@pytest.mark.parametrize(
    "torn",
    [
        pytest.param('{"id": "q-4", "answer": "half a li', id="in-the-answer"),
        pytest.param('{"id": "q-4", "answer": "a \\u00', id="in-an-escape"),
        pytest.param('{"id": -', id="in-the-id"),
        pytest.param('{"id": 3, "answer": null, "error": "APIError: x"}', id="only-the-newline"),
        pytest.param("{", id="first-byte"),
    ],
)
async def test_an_answer_file_with_a_torn_last_line_is_cut_and_resumed(
    tmp_path: Path, torn: str
) -> None:
    """A last line without newline that is how an answer line begins is cut off, and the
    rerun skips the complete answers and asks the rest."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 6)
    done = [json.dumps({"id": q, "answer": "earlier", "error": None}) for q in ("q-0", 1)]
    out.write_text("\n".join(done) + "\n" + torn)
    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        run = await Splitter(client).arun_file(questions_file, out, model="m")
    assert run == FileRun(questions=6, skipped=2, answered=4, failed=0)
    assert out.read_text().startswith("\n".join(done) + "\n{")
    assert sorted(map(str, (r["id"] for r in read_answers(out)))) == sorted(map(str, questions))


async def test_a_torn_line_cut_inside_a_character_is_cut_too(tmp_path: Path) -> None:
    """A torn line that ends halfway through a multi-byte character still reads as torn."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write_questions(questions_file, 2)
    out.write_bytes('{"id": 1, "answer": "caf\u00e9'.encode()[:-1])
    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        run = await Splitter(client).arun_file(questions_file, out, model="m")
    assert run == FileRun(questions=2, skipped=0, answered=2, failed=0)
    assert len(read_answers(out)) == 2


async def test_an_answer_holding_a_line_separator_is_still_one_line(tmp_path: Path) -> None:
    """Output lines are split at newlines only: an answer holding U+2028 or U+0085 (which
    JSON leaves unescaped) is read back as the one answer line it is."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write_questions(questions_file, 2)
    line = json.dumps({"id": 1, "answer": "a\u2028b\x85c", "error": None}, ensure_ascii=False)
    out.write_text(line + "\n", encoding="utf-8")
    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        run = await Splitter(client).arun_file(questions_file, out, model="m")
    assert run == FileRun(questions=2, skipped=1, answered=1, failed=0)
    assert out.read_text(encoding="utf-8").startswith(line + "\n")


async def test_an_empty_output_file_is_an_answer_file_with_no_answers(tmp_path: Path) -> None:
    """An empty output (a run stopped before its first answer, or a `touch`) is answered into."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 5)
    out.write_bytes(b"")
    async with open_sim_client(SimService("gpt-4o-mini", time_scale=0.002)) as client:
        run = await Splitter(client).arun_file(questions_file, out, model="m")
    assert run == FileRun(questions=5, skipped=0, answered=5, failed=0)
    assert_each_id_answered_once_with_its_own_answer(out, questions)


@pytest.mark.parametrize(
    "alias",
    [
        pytest.param("questions.jsonl", id="same-path"),
        pytest.param("sub/../questions.jsonl", id="other-relative-path"),
        pytest.param("link.jsonl", id="symlink"),
        pytest.param("hard.jsonl", id="hard-link"),
    ],
)
async def test_the_input_file_as_output_is_refused_before_anything_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alias: str
) -> None:
    """`--out` naming the questions file, by any path or link, is refused with both files
    named and the file's bytes unchanged, before a request is sent."""
    monkeypatch.chdir(tmp_path)
    write_questions(tmp_path / "questions.jsonl", 6)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "questions.jsonl")
    os.link(tmp_path / "questions.jsonl", tmp_path / "hard.jsonl")
    before = (tmp_path / "questions.jsonl").read_bytes()
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError) as caught:
            await Splitter(client).arun_file("questions.jsonl", alias, model="m")
    assert f"{alias}: the output file is the questions file questions.jsonl" in str(caught.value)
    assert (tmp_path / "questions.jsonl").read_bytes() == before
    assert service.log == []


def test_the_cli_reports_a_bad_file_without_a_traceback(tmp_path: Path) -> None:
    questions_file = tmp_path / "questions.jsonl"
    questions_file.write_text('{"id": 1}\n')
    done = subprocess.run(
        [SPLITTER, "run", str(questions_file), "--out", str(tmp_path / "o.jsonl"), "--model", "m"],
        env={**os.environ, "OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "questions.jsonl line 1: no 'question' field" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_draws_a_bar_over_the_whole_file_from_what_was_done(tmp_path: Path) -> None:
    """`splitter run --progress`: the bar's length is the whole file and it starts at the
    ids answered by an earlier run; without --progress and off a terminal, no bar."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 30)
    done_before = list(questions)[:10]
    out.write_text(
        "".join(
            json.dumps({"id": q, "answer": "earlier", "error": None}) + "\n" for q in done_before
        )
    )
    service = SimService("gpt-4o-mini", time_scale=0.002)
    with serve(service) as base_url:
        argv = [SPLITTER, "run", str(questions_file), "--out", str(out), "--model", "m"]
        env = {**os.environ, "OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": base_url}
        shown = subprocess.run(
            [*argv, "--progress"], env=env, capture_output=True, text=True, timeout=60
        )
        quiet = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    final = shown.stderr.rsplit("\r", 1)[-1]
    assert "30/30" in final
    assert "ok=30 failed=0" in final  # the 10 done before count as answered
    assert "30 questions: 10 already in" in shown.stderr
    assert quiet.returncode == 0, quiet.stderr
    assert "30/30" not in quiet.stderr  # nothing left, and no bar off a terminal
    assert len(read_answers(out)) == 30
