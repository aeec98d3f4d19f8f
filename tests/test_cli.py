"""The `splitter` command line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from splitter._cli import main


@pytest.mark.parametrize("door", [["--in-process"], []], ids=["inprocess", "server"])
def test_demo_prints_merged_vs_fan_out_and_the_ratio(
    door: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`splitter demo` times one merged request and fan-out, and fan-out wins on a batching API."""
    assert main(["demo", "--time-scale", "0.05", *door]) == 0
    out = capsys.readouterr().out
    full_scale = [float(x) for x in re.findall(r"([\d.]+) s at full scale", out)]
    merged, fanned = full_scale
    ratio = float(re.search(r"fan-out is ([\d.]+)x faster", out).group(1))  # type: ignore[union-attr]
    assert "answers in order: 5/5" in out
    assert ratio == pytest.approx(merged / fanned, rel=0.1)
    assert ratio > 2


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
