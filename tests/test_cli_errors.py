"""Every way the `splitter` command can fail ends in one clear line on stderr and its
documented exit status, never a traceback; each case runs as a real process."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from splitter._cli import main
from splitter._cli._main import EXIT_STATUS
from splitter._cli._run import resume_command
from splitter.sim import SimService, answer_tag, serve

SPLITTER = [sys.executable, "-m", "splitter"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _splitter(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m splitter ARGS`` with no OPENAI_* variable but those given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [*SPLITTER, *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


FILES = {
    "good.jsonl": b'{"id": 1, "question": "A?"}\n',
    "bad.jsonl": b'{"id": 1, "question": "A?"}\n{"id": 2, "question": "B?"\n',
    "binary.jsonl": b'{"id": 1, "question": "A?"}\n\xff\xfe\n',
    "extra.jsonl": b'{"id": 1, "question": "A?", "model": "m"}\n',
}
RUN = ["--out", "answers.jsonl", "--model", "m"]
KEY = ["--api-key", "sk-test"]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        pytest.param(["nope"], 2, "invalid choice: 'nope'", id="unknown-command"),
        pytest.param(["demo", "--bogus"], 2, "unrecognized arguments: --bogus", id="bad-flag"),
        pytest.param(
            ["demo", "--profile", "nope"],
            2,
            "argument --profile: invalid choice: 'nope' (choose from 'gpt-4o-mini'",
            id="demo-unknown-profile",
        ),
        pytest.param(
            ["demo", "--time-scale", "0"],
            2,
            "argument --time-scale: must be a number above 0, not 0",
            id="zero-time-scale",
        ),
        pytest.param(
            ["plan", "a?", "--concurrency", "0"],
            2,
            "argument --concurrency: must be at least 1, not 0",
            id="zero-concurrency",
        ),
        pytest.param(
            ["plan", "a?", "--rpm", "many"],
            2,
            "argument --rpm: not a whole number: 'many'",
            id="rpm-not-a-number",
        ),
        pytest.param(
            ["plan", "a?", "--strategy", "fast"],
            2,
            "argument --strategy: invalid choice: 'fast'",
            id="unknown-strategy",
        ),
        pytest.param(
            ["bench", "--questions", "0"],
            2,
            "argument --questions: must be at least 1, not 0",
            id="bench-zero-questions",
        ),
        pytest.param(
            ["run", "missing.jsonl", *RUN, *KEY],
            2,
            "splitter run: error: missing.jsonl: No such file or directory",
            id="missing-input",
        ),
        pytest.param(
            ["run", "bad.jsonl", *RUN, *KEY],
            2,
            "splitter run: error: bad.jsonl line 2: not JSON",
            id="malformed-line",
        ),
        pytest.param(
            ["run", "binary.jsonl", *RUN, *KEY],
            2,
            "splitter run: error: binary.jsonl line 2: not UTF-8 text",
            id="unreadable-line",
        ),
        pytest.param(
            ["run", "extra.jsonl", *RUN, *KEY],
            2,
            "splitter run: error: extra.jsonl line 1: unknown field 'model'",
            id="unknown-field",
        ),
        pytest.param(
            ["run", "good.jsonl", *RUN, *KEY, "--window", "0"],
            2,
            "argument --window: must be at least 1, not 0",
            id="zero-window",
        ),
        pytest.param(
            ["run", "good.jsonl", *RUN],
            2,
            "splitter run: error: no API key: pass --api-key KEY or set OPENAI_API_KEY",
            id="run-no-key",
        ),
        pytest.param(
            ["ask", "--model", "m", "A?"],
            2,
            "splitter ask: error: no API key: pass --api-key KEY or set OPENAI_API_KEY",
            id="ask-no-key",
        ),
        pytest.param(
            ["ask", "--model", "m", *KEY, "--base-url", "{url}", "A?", "B?"],
            3,
            "splitter ask: error: {url}/ has never answered (connection failed: ",
            id="ask-unreachable",
        ),
        pytest.param(
            ["run", "good.jsonl", *RUN, *KEY, "--base-url", "{url}"],
            3,
            "splitter run: error: {url}/ has never answered (connection failed: ",
            id="run-unreachable",
        ),
    ],
)
def test_each_failure_is_one_line_and_its_status(
    tmp_path: Path, args: list[str], status: int, message: str
) -> None:
    """The process exits with the documented status; stderr ends in the one line that says
    what is wrong (argparse's usage lines may come before it), and holds no traceback."""
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    done = _splitter(*(a.replace("{url}", url) for a in args), cwd=tmp_path)
    assert "Traceback" not in done.stderr
    assert done.returncode == status, done.stderr
    lines = done.stderr.strip().splitlines()
    assert message.replace("{url}", url) in lines[-1]
    if re.match(r"argument |invalid choice|unrecognized", message):  # argparse's own
        assert lines[0].startswith("usage: splitter")
    else:
        assert len(lines) == 1


def test_the_simulator_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    """`python -m splitter.sim --port P` while P is taken: one line naming it, status 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "splitter.sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"python -m splitter.sim: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def test_a_closed_stdout_ends_quietly_with_141(tmp_path: Path) -> None:
    """`splitter plan ... | head -0`: the reader is gone before anything is printed; no
    BrokenPipeError traceback, no message, status 141 as a shell reports SIGPIPE."""
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails: the reader left
    try:
        done = subprocess.run(
            [*SPLITTER, "plan", "a?", "b?", "c?"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        os.close(write)
    assert done.returncode == 141
    assert done.stderr == ""


def test_every_exit_status_is_documented_in_help_and_docs() -> None:
    """The statuses the tests above see are the ones `--help` and docs/cli.md list."""
    documented = set(re.findall(r"^  (\d+) ", EXIT_STATUS, re.M))
    assert documented == {"0", "1", "2", "3", "130", "141"}
    docs = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    for status in documented:
        assert re.search(rf"^\| `{status}` \|", docs, re.M), status


@pytest.mark.parametrize("command", ["demo", "bench", "ask", "run", "plan"])
def test_help_of_each_command_shows_defaults_and_exits_0(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`splitter COMMAND --help`: plain words (no reStructuredText), the defaults shown,
    and the exit-status table."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "(default: " in out
    assert "``" not in out
    assert "exit status:" in out
    assert "130  interrupted" in out


def test_demo_help_lists_the_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    """The choices are shown, not just a name to guess."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # as wrapped to any terminal width
    assert "{gpt-4o-mini,instant,llama-cpp-cpu,serial}" in out
    assert "(default: gpt-4o-mini)" in out


def _questions(path: Path, n: int) -> dict[int, str]:
    questions = {k: f"Question {k}: what follows {k}? [len=30]" for k in range(n)}
    lines = (json.dumps({"id": k, "question": q}) + "\n" for k, q in questions.items())
    path.write_text("".join(lines))
    return questions


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _sigint_default() -> None:
    """A child started from a background job may inherit SIGINT ignored; Ctrl-C is what
    this test sends, so it gets the default handling back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_run_says_what_is_written_and_how_to_resume(tmp_path: Path) -> None:
    """SIGINT mid-run: status 130, one line with the answers safely written (as many as the
    file holds) and the command that resumes; that command, run as printed, answers the
    rest, every id exactly once."""
    questions = _questions(tmp_path / "questions.jsonl", 120)
    # At half scale (about 0.4 s a request) the signal comes mid-run however slowly a
    # loaded machine lets this test poll; the rest then goes at a 10th of that pace.
    service = SimService("gpt-4o-mini", time_scale=0.5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENAI_API_KEY"] = "sk-never-printed"
    with serve(service) as base_url:
        argv = ["run", "questions.jsonl", *RUN, "--base-url", base_url]
        argv += ["--concurrency", "2", "--window", "4"]
        first = subprocess.Popen(
            [*SPLITTER, *argv],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_sigint_default,
        )
        out = tmp_path / "answers.jsonl"
        deadline = time.monotonic() + 60  # a guard against a hang, not a timing claim
        while first.poll() is None and time.monotonic() < deadline:
            if out.exists() and len(out.read_bytes().splitlines()) >= 4:
                break
            time.sleep(0.02)
        first.send_signal(signal.SIGINT)
        service.time_scale = 0.05
        _, stderr = first.communicate(timeout=60)
        assert first.returncode == 130, stderr
        assert "Traceback" not in stderr
        line = stderr.strip().splitlines()[-1]
        said = re.fullmatch(
            r"splitter run: interrupted; (\d+) answers are safely in answers\.jsonl\. "
            r"Resume with: (.+)",
            line,
        )
        assert said is not None, stderr
        written = [r for r in _lines(out) if r["error"] is None]
        assert int(said.group(1)) == len(written)
        assert 4 <= len(written) < len(questions)  # stopped mid-run
        assert "sk-never-printed" not in stderr

        resume = shlex.split(said.group(2))
        assert resume == [*SPLITTER, *argv]
        second = subprocess.run(
            resume, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert second.returncode == 0, second.stderr
    records = _lines(out)
    assert sorted(r["id"] for r in records) == sorted(questions)  # each id once
    for record in records:
        assert isinstance(record["id"], int)
        assert isinstance(record["answer"], str)
        assert record["answer"].startswith(answer_tag(questions[record["id"]]))


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        pytest.param(
            ["run", "q s.jsonl", "--api-key", "sk-secret", "--out", "a.jsonl"],
            "splitter run 'q s.jsonl' --api-key \"$OPENAI_API_KEY\" --out a.jsonl",
            id="separate",
        ),
        pytest.param(
            ["run", "q.jsonl", "--api-key=sk-secret", "--out", "a.jsonl"],
            'splitter run q.jsonl --api-key="$OPENAI_API_KEY" --out a.jsonl',
            id="joined",
        ),
    ],
)
def test_the_resume_command_never_shows_a_typed_key(argv: list[str], shown: str) -> None:
    """A key typed on the command line is replaced by the variable a shell expands."""
    assert resume_command(Namespace(prog=["splitter"], argv=argv)) == shown
