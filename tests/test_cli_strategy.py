"""`splitter run --strategy`: the plan pinned from the command line, primed fan-out included
(issue #19), run as a real process against the simulator over loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from splitter.sim import SimService, answer_tag, serve

ENV = {**os.environ, "OPENAI_API_KEY": "sk-never-printed"}


@pytest.mark.parametrize(
    ("strategy", "streamed"), [("primed", 1), ("fanout", 0)], ids=["primed", "fanout"]
)
def test_run_sends_the_pinned_strategy(tmp_path: Path, strategy: str, streamed: int) -> None:
    """Four questions under one system prompt: one request each; primed streams the first
    (to see its first token) and sends the others after it arrived, fan-out streams none."""
    questions = {f"q{k}": f"Question {k}: what follows {k}? [len=20]" for k in range(4)}
    source, out = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    source.write_text(
        "".join(json.dumps({"id": i, "question": q}) + "\n" for i, q in questions.items())
    )
    service = SimService(time_scale=0.01)
    with serve(service) as base_url:
        argv = [sys.executable, "-m", "splitter", "run", str(source), "--out", str(out)]
        argv += ["--model", "m", "--base-url", base_url, "--system", "Be brief."]
        argv += ["--strategy", strategy, "--no-progress"]
        proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(a["id"] for a in answers) == sorted(questions)
    assert all(a["answer"].startswith(answer_tag(questions[a["id"]])) for a in answers)
    chats = [r for r in service.log if r.path.endswith("/chat/completions")]
    assert len(chats) == 4
    assert sum(r.stream for r in chats) == streamed
    if strategy == "primed":
        first = next(r for r in chats if r.stream)
        assert all(r.arrived > first.arrived for r in chats if r is not first)


def test_run_refuses_an_unknown_strategy() -> None:
    """An unknown strategy is a usage error (status 2), naming the choices."""
    argv = [sys.executable, "-m", "splitter", "run", "q.jsonl", "--out", "a.jsonl"]
    proc = subprocess.run([*argv, "--strategy", "greedy"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "primed" in proc.stderr
