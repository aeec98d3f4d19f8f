"""`splitter run --workers N`: one file answered by N real processes on one budget and one
output, every id exactly once, across a worker killed with SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from splitter import FileRun, Splitter
from splitter.sim import SimService, answer_tag, serve
from splitter.testing import open_sim_client

ENV = {**os.environ, "OPENAI_API_KEY": "sk-never-printed"}
HISTORY = [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hello."}]


def write_questions(path: Path, n: int, tokens: int = 5, alone: bool = False) -> dict[Any, str]:
    """``n`` questions with ids of both kinds; ``alone``: each with a history, so that each
    is asked in a request of its own. id -> question text."""
    questions: dict[Any, str] = {}
    with path.open("w") as file:
        for k in range(n):
            qid: Any = k if k % 2 else f"q-{k}"
            questions[qid] = f"Question {k}: what follows {k}? [len={tokens}]"
            line: dict[str, Any] = {"id": qid, "question": questions[qid]}
            if alone:
                line["messages"] = HISTORY
            file.write(json.dumps(line) + "\n")
    return questions


def read_answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_each_id_answered_once(out: Path, questions: dict[Any, str]) -> None:
    records = read_answers(out)
    assert sorted(map(str, (r["id"] for r in records))) == sorted(map(str, questions))
    for record in records:
        assert record["error"] is None
        assert record["answer"].startswith(answer_tag(questions[record["id"]]))
    assert not list(out.parent.glob(out.name + ".part-*"))  # the parts were folded in


def run_command(questions_file: Path, out: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "splitter",
        "run",
        str(questions_file),
        "--out",
        str(out),
        "--model",
        "m",
        "--base-url",
        base_url,
        *extra,
    ]


def asked(service: SimService, start: int = 0) -> Counter[str]:
    """How many times each question was asked, from the simulator's log."""
    return Counter(q for record in service.log[start:] for q in record.questions)


def test_two_workers_answer_every_id_exactly_once(tmp_path: Path) -> None:
    """Each of 2 workers answers its share into one output: every id once, and the service
    was asked each question once."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 80)
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2")
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"80 questions: 0 already in {out}, 80 answered now, 0 failed" in done.stderr
    assert_each_id_answered_once(out, questions)
    assert asked(service) == Counter(questions.values())


def test_a_worker_killed_with_sigkill_fails_the_run_and_a_rerun_completes_it(
    tmp_path: Path,
) -> None:
    """One of two workers is killed mid-run: the run says so and exits 1, keeping every
    line any worker wrote; the rerun answers the rest, each id once, asking nothing the
    first run had written."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 240, tokens=40)
    # At half scale (about 0.4 s a request) the signal comes mid-run however slowly a
    # loaded machine lets this test poll; the rest then goes at a 10th of that pace.
    service = SimService("gpt-4o-mini", time_scale=0.5)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2")
        command += ["--concurrency", "8", "--window", "16"]
        parent = subprocess.Popen(command, env=ENV, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while (not out.exists() or len(out.read_text().splitlines()) < 20) and (
            time.monotonic() < deadline and parent.poll() is None
        ):
            time.sleep(0.02)
        children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
        assert len(children) == 2, children
        os.kill(int(children[0]), signal.SIGKILL)
        service.time_scale = 0.05
        _, stderr = parent.communicate(timeout=120)
        assert parent.returncode == 1, stderr
        assert re.search(r"worker [12] of 2 was killed by SIGKILL", stderr)
        assert "a worker died" in stderr
        assert "Answer the rest with:" in stderr
        written = read_answers(out)
        ids = [str(r["id"]) for r in written]
        assert len(ids) == len(set(ids))  # nothing written twice
        assert 20 <= len(written) < len(questions)  # the killed worker's rest is missing
        asked_before = len(service.log)

        second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert f"{len(written)} already in" in second.stderr
    assert "sk-never-printed" not in stderr + second.stderr + second.stdout
    assert_each_id_answered_once(out, questions)
    done_texts = {questions[r["id"]] for r in written}
    assert not done_texts & set(asked(service, asked_before))


def test_a_malformed_line_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    """As with one process, the whole input is checked first: exit 2 naming the line,
    nothing asked, nothing written."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write_questions(questions_file, 10)
    with questions_file.open("a") as file:
        file.write('{"id": "bad", "question": 5}\n')
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2")
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "questions.jsonl line 11: question must be a string" in done.stderr
    assert service.log == []
    assert not out.exists()
    assert not list(tmp_path.glob("answers.jsonl.part-*"))


def test_a_service_that_cannot_be_used_stops_every_worker_with_one_line(
    tmp_path: Path,
) -> None:
    """A base URL nothing answers: exit 3, as with one process, and its error said once
    (each worker met it), not once per worker or per question."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    write_questions(questions_file, 40)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"  # bound, then closed: nothing listens
    command = run_command(questions_file, out, base_url, "--workers", "2")
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("splitter run: error: ")
    assert base_url in errors[0]
    assert len(read_answers(out)) <= 2  # at most the one line each worker stopped at


def test_workers_share_one_stated_rpm(tmp_path: Path) -> None:
    """Two workers at --rpm 600 send, together, at about 10 requests a second (counted
    from the simulator's log; an unshared budget drew 21), so the bound is 15."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 150, alone=True)
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2", "--rpm", "600")
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_each_id_answered_once(out, questions)
    assert len(service.log) == 150  # one request per question: each has a history
    rate = paced_rate([record.arrived for record in service.log])
    assert rate <= 10 * 1.5, f"{rate:.1f} requests/s at --rpm 600"


def paced_rate(arrived: list[float]) -> float:
    """Requests per second after the first 10. A budget opens with the room it gathered
    before its first request (5 at once for one process here), then paces; a stalled
    worker's later burst is paid for by its stall, so a loaded machine only sends slower."""
    arrived = sorted(arrived)
    return (len(arrived) - 11) / (arrived[-1] - arrived[10])


@pytest.mark.anyio
async def test_a_rerun_folds_the_part_files_a_cut_short_run_left(tmp_path: Path) -> None:
    """Part files left by a run whose parent died: their complete lines not already in the
    output are appended (a torn last line dropped, a line already there not doubled), the
    parts removed, and only the rest asked."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 12)
    ids = list(questions)

    def line(qid: Any) -> str:
        record = {"id": qid, "answer": f"{answer_tag(questions[qid])} kept", "error": None}
        return json.dumps(record) + "\n"

    out.write_text(line(ids[0]) + line(ids[1]))
    (tmp_path / "answers.jsonl.part-0").write_text(line(ids[1]) + line(ids[2]) + '{"id": 9')
    (tmp_path / "answers.jsonl.part-1").write_text(line(ids[3]))
    service = SimService("gpt-4o-mini", time_scale=0.002)
    async with open_sim_client(service) as client:
        done = await Splitter(client).arun_file(questions_file, out, model="m")
    assert done == FileRun(questions=12, skipped=4, answered=8, failed=0)
    assert_each_id_answered_once(out, questions)
    assert set(asked(service)) == {questions[qid] for qid in ids[4:]}
    kept = [r for r in read_answers(out) if r["answer"].endswith(" kept")]
    assert sorted(map(str, (r["id"] for r in kept))) == sorted(map(str, ids[:4]))


def test_ctrl_c_stops_the_workers_and_says_how_to_resume(tmp_path: Path) -> None:
    """SIGINT to the parent (Ctrl-C) stops every worker: exit 130, the answers written so
    far counted and kept, no part file left; the printed command resumes to every id once."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 240, tokens=40)
    # At half scale (about 0.4 s a request) the signal comes mid-run however slowly a
    # loaded machine lets this test poll; the rest then goes at a 10th of that pace.
    service = SimService("gpt-4o-mini", time_scale=0.5)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2")
        command += ["--concurrency", "8", "--window", "16"]
        parent = subprocess.Popen(command, env=ENV, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while (not out.exists() or len(out.read_text().splitlines()) < 20) and (
            time.monotonic() < deadline and parent.poll() is None
        ):
            time.sleep(0.02)
        parent.send_signal(signal.SIGINT)
        service.time_scale = 0.05
        _, stderr = parent.communicate(timeout=120)
        assert parent.returncode == 130, stderr
        written = read_answers(out)
        assert f"interrupted; {len(written)} answers are safely in {out}" in stderr
        assert "Resume with:" in stderr
        assert "Traceback" not in stderr
        assert not list(tmp_path.glob("answers.jsonl.part-*"))
        assert len(written) < len(questions)

        second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert_each_id_answered_once(out, questions)


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # exited, not yet reaped by whoever adopted it


def test_a_parent_killed_with_sigkill_leaves_parts_that_the_rerun_folds_in(
    tmp_path: Path,
) -> None:
    """The parent killed: its workers notice and stop, their part files stay; the rerun
    folds them in and answers the rest, each id once."""
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, 240, tokens=40)
    # At half scale (about 0.4 s a request) the signal comes mid-run however slowly a
    # loaded machine lets this test poll; the rest then goes at a 10th of that pace.
    service = SimService("gpt-4o-mini", time_scale=0.5)
    with serve(service) as base_url:
        command = run_command(questions_file, out, base_url, "--workers", "2")
        command += ["--concurrency", "8", "--window", "16"]
        parent = subprocess.Popen(command, env=ENV, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while (not out.exists() or len(out.read_text().splitlines()) < 20) and (
            time.monotonic() < deadline and parent.poll() is None
        ):
            time.sleep(0.02)
        children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
        parent.kill()
        service.time_scale = 0.05
        parent.wait(timeout=30)
        deadline = time.monotonic() + 60
        while not all(_gone(int(pid)) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(int(pid)) for pid in children)
        assert list(tmp_path.glob("answers.jsonl.part-*"))

        second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert_each_id_answered_once(out, questions)
