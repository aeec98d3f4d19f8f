"""`splitter run --skip-invalid` / `arun_file(skip_invalid=True)`: a malformed input line
stops nothing else. Each is named and never sent; every valid line is answered once, with
one process or several, and a rerun asks nothing again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from splitter import FileRun, Splitter
from splitter.sim import SimService, answer_tag, serve
from splitter.testing import open_sim_client

ENV = {**os.environ, "OPENAI_API_KEY": "sk-never-printed"}
BAD_BATCH = {  # the last message is not the user's question
    "custom_id": "batch-1",
    "body": {"messages": [{"role": "assistant", "content": "Hello."}]},
}
# Line number -> (malformed line, what stderr says about it).
MALFORMED = {
    4: ('{"id": "q-4", "question": "Never asked 4?"', "line 4: not JSON"),
    10: ('{"id": "q-0", "question": "Never asked 10?"}', 'line 10: id "q-0" repeats line 1'),
    16: (json.dumps(BAD_BATCH), "line 16: the last of body.messages must be the user's question"),
}


def write_questions(path: Path, n: int = 20) -> dict[Any, str]:
    """``n`` lines, those numbered in ``MALFORMED`` malformed; id -> question text of the
    valid ones."""
    questions: dict[Any, str] = {}
    with path.open("w") as file:
        for number in range(1, n + 1):
            if number in MALFORMED:
                file.write(MALFORMED[number][0] + "\n")
                continue
            k = number - 1
            qid: Any = k if k % 2 else f"q-{k}"
            questions[qid] = f"Question {k}: what follows {k}? [len=5]"
            file.write(json.dumps({"id": qid, "question": questions[qid]}) + "\n")
    return questions


def run_command(questions_file: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "splitter", "run", str(questions_file), "--out", str(out)),
        *("--model", "m", "--base-url", base_url, *extra),
    ]


def asked(service: SimService, start: int = 0) -> Counter[str]:
    """How many times each question was asked, from the simulator's log."""
    return Counter(q for record in service.log[start:] for q in record.questions)


def assert_each_valid_id_answered_once(out: Path, questions: dict[Any, str]) -> None:
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(str(r["id"]) for r in records) == sorted(map(str, questions))
    for record in records:
        assert record["error"] is None
        assert record["answer"].startswith(answer_tag(questions[record["id"]]))
    assert not list(out.parent.glob(out.name + ".part-*"))


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_skip_invalid_answers_the_rest_once_names_each_bad_line_and_a_rerun_asks_nothing(
    tmp_path: Path, workers: int
) -> None:
    """3 malformed lines among 20: the 17 others answered once each, the 3 named on stderr
    and never sent, exit status 1; the rerun skips them again and asks nothing."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file)
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--skip-invalid")
        command += ["--workers", str(workers)]
        first = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
        asked_first = len(service.log)
        again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert first.returncode == 1, first.stderr
    for _, said in MALFORMED.values():
        assert f"splitter run: skipped questions.jsonl {said}" in first.stderr
    assert f"17 questions: 0 already in {out}, 17 answered now, 0 failed" in first.stderr
    assert "3 lines skipped (not valid questions)" in first.stderr
    assert "Traceback" not in first.stderr + again.stderr
    assert asked(service) == Counter(questions.values())  # each valid one once, no other
    assert_each_valid_id_answered_once(out, questions)
    assert again.returncode == 1, again.stderr
    assert f"17 questions: 17 already in {out}, 0 answered now, 0 failed" in again.stderr
    assert "3 lines skipped (not valid questions)" in again.stderr
    assert len(service.log) == asked_first


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_without_skip_invalid_a_bad_line_refuses_the_file_and_nothing_is_sent(
    tmp_path: Path, workers: int
) -> None:
    """The default is unchanged: exit status 2 naming the first bad line, nothing asked,
    no output; the message says what `--skip-invalid` would do."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write_questions(questions_file)
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", str(workers))
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"splitter run: error: questions.jsonl {MALFORMED[4][1]}" in done.stderr
    assert "--skip-invalid, answers the other lines" in done.stderr
    assert service.log == []
    assert not out.exists()


@pytest.mark.anyio
async def test_the_api_names_the_first_20_bad_lines_and_counts_the_rest(tmp_path: Path) -> None:
    """`arun_file(skip_invalid=True)` on 25 malformed lines of every kind (a non-UTF-8 one
    too) among 35: the 10 valid ones answered, the 25 counted, the first 20 named in order."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    bad = [b"{oops", b'{"id": 1}', b'{"question": "A?"}', b"[1]", b"\xff\xfe", b'{"id": 2.5}']
    lines: list[bytes] = []
    questions: dict[Any, str] = {}
    for k in range(35):
        if k % 7 < 5:  # lines 1-5, 8-12, ... malformed
            lines.append(bad[k % len(bad)])
        else:
            questions[k] = f"Valid {k}? [len=5]"
            lines.append(json.dumps({"id": k, "question": questions[k]}).encode())
    questions_file.write_bytes(b"\n".join(lines) + b"\n")
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        run = await Splitter(client).arun_file(questions_file, out, model="m", skip_invalid=True)
    assert (run.questions, run.answered, run.failed, run.skipped_invalid) == (10, 10, 0, 25)
    bad_numbers = [k + 1 for k in range(35) if k % 7 < 5]
    assert [reason.split(":")[0] for reason in run.invalid] == [
        f"questions.jsonl line {number}" for number in bad_numbers[:20]
    ]
    assert "questions.jsonl line 5: not UTF-8 text" in run.invalid
    assert asked(service) == Counter(questions.values())
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == sorted(
        questions
    )
    assert run == FileRun(10, 0, 10, 0, 25, run.invalid)
