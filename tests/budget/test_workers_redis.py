"""`splitter run --workers N --redis URL`: the workers book on one Redis budget, and go on
with local shares when Redis is unreachable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from redis_support import RedisServer

from splitter.sim import SimService, answer_tag, serve

ENV = {**os.environ, "OPENAI_API_KEY": "sk-never-printed"}
HISTORY = [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hello."}]


def write_questions(path: Path, n: int) -> dict[Any, str]:
    """``n`` questions, each with a history (so asked alone); id -> question text."""
    questions: dict[Any, str] = {}
    with path.open("w") as file:
        for k in range(n):
            questions[k] = f"Question {k}: what follows {k}? [len=5]"
            file.write(json.dumps({"id": k, "question": questions[k], "messages": HISTORY}) + "\n")
    return questions


def run_workers(
    tmp_path: Path, redis_url: str, n: int
) -> tuple[SimService, Path, str, dict[Any, str]]:
    questions_file, out = tmp_path / "questions.jsonl", tmp_path / "answers.jsonl"
    questions = write_questions(questions_file, n)
    service = SimService("gpt-4o-mini", time_scale=0.01)
    with serve(service) as base_url:
        command = [sys.executable, "-m", "splitter", "run", str(questions_file), "--out", str(out)]
        command += ["--model", "m", "--base-url", base_url, "--workers", "2", "--rpm", "600"]
        command += ["--redis", redis_url]
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(questions)
    assert all(r["answer"].startswith(answer_tag(questions[r["id"]])) for r in records)
    return service, out, done.stderr, questions


def test_workers_book_on_one_redis_budget(tmp_path: Path, redis_server: RedisServer) -> None:
    """Two workers on one Redis budget at --rpm 600: every id once, the budget's key is in
    Redis, and together they keep to about 10 requests a second (unshared: 20)."""
    service, _, _, _ = run_workers(tmp_path, redis_server.url, 100)
    client = redis.Redis.from_url(redis_server.url)
    assert [key.decode() for key in client.keys("splitter:budget:*")]
    client.close()
    arrived = sorted(record.arrived for record in service.log)
    assert len(arrived) == 100
    # After the budget's opening room (the first 10), the pace: a stalled worker's later
    # burst is paid for by its stall, so a loaded machine only sends slower.
    rate = (len(arrived) - 11) / (arrived[-1] - arrived[10])
    assert rate <= 10 * 1.5, f"{rate:.1f} requests/s at --rpm 600"


def test_workers_go_on_with_local_shares_when_redis_is_unreachable(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Redis down from the start: the run still answers every id once, on local budgets
    (SharedBudget.on_outage='local'), and says so once, in one line."""
    redis_server.kill()
    _, _, stderr, _ = run_workers(tmp_path, redis_server.url, 20)
    warned = [line for line in stderr.splitlines() if "unreachable" in line]
    assert len(warned) == 1, stderr
    assert warned[0].startswith("splitter run: warning: the shared budget in Redis is unreachable")
