"""The `splitter` command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from splitter._cli import main


@pytest.mark.parametrize("door", [["--in-process"], []], ids=["inprocess", "server"])
def test_demo_prints_merged_vs_fan_out_and_the_ratio(
    door: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`splitter demo` times merged, fan-out and auto; fan-out wins on a batching API."""
    assert main(["demo", "--time-scale", "0.1", *door]) == 0
    out = capsys.readouterr().out
    rows = {
        m.group(1): (float(m.group(2)), m.group(3))
        for m in re.finditer(
            r"^  (merged|fan-out|auto) .*?([\d.]+) s at full scale\)(.*)$", out, re.M
        )
    }
    assert set(rows) == {"merged", "fan-out", "auto"}
    merged, fanned = rows["merged"][0], rows["fan-out"][0]
    ratio = float(re.search(r"([\d.]+)x faster", rows["fan-out"][1]).group(1))  # type: ignore[union-attr]
    assert ratio == pytest.approx(merged / fanned, rel=0.1)
    assert ratio > 1.5  # generous: the ~3.8x claim lives in docs/benchmarks.md
    assert "(merge, 1 request)" in out
    assert "each attached to its own question: 15/15" in out


def test_console_script_is_installed() -> None:
    """`python -m splitter._cli --help` style entry works as a real process."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from splitter._cli import main; raise SystemExit(main(['--help']))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "demo" in done.stdout


def test_plan_prints_the_priced_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    """`splitter plan` explains its choice for the given questions without any endpoint."""
    assert main(["plan", "a?", "b?", "c?", "--rpm", "1"]) == 0
    out = capsys.readouterr().out
    assert "why:" in out
    assert re.search(r"^> ", out, re.M)
    assert "rate limit" in out  # one request a minute: fan-out would wait


@pytest.mark.parametrize(
    ("out", "message"),
    [
        pytest.param(
            "questions.jsonl",
            "questions.jsonl: the output file is the questions file questions.jsonl",
            id="out-is-the-input",
        ),
        pytest.param(
            "notes.txt",
            "notes.txt line 1: not an answer line of splitter run (not JSON)",
            id="out-is-a-text-file",
        ),
    ],
)
def test_run_refuses_an_output_it_did_not_write_in_one_line_with_status_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: str,
    message: str,
) -> None:
    """`splitter run` prints one error line naming the file, exits 2 and changes no file."""
    monkeypatch.chdir(tmp_path)
    files = {
        "questions.jsonl": b'{"id": 1, "question": "A?"}\n',
        "notes.txt": b"shopping list\nmilk and eggs",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    argv = ["run", "questions.jsonl", "--out", out, "--model", "m"]
    argv += ["--api-key", "sk-x", "--base-url", "http://127.0.0.1:9/v1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()]
    assert err.startswith("splitter run: error: ")
    assert message in err
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
