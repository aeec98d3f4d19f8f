"""The built wheel installs into a fresh venv under its distribution name, ``splitter-llm``,
and its ``splitter`` command and ``import splitter`` work from there.

Marked ``slow`` (it builds a wheel and installs its dependencies from the package index:
about a minute), so the default run skips it; ``.ci/run`` runs it as its own step.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )


def test_wheel_installs_and_runs(tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ROOT, cwd=tmp_path)
    (wheel,) = dist.glob("*.whl")
    assert wheel.name.startswith("splitter_llm-")

    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / ("Scripts" if os.name == "nt" else "bin")
    _run(bin_dir / "python", "-m", "pip", "install", "-q", f"{wheel}[sim]", cwd=tmp_path)

    out = _run(bin_dir / "splitter", "--version", cwd=tmp_path).stdout
    assert out.strip() == f"splitter-llm {version}"
    imported = _run(
        bin_dir / "python",
        "-c",
        "import splitter; print(splitter.__file__, splitter.__version__)",
        cwd=tmp_path,
    ).stdout.split()
    assert Path(imported[0]).is_relative_to(tmp_path / "venv")  # the wheel, not the source tree
    assert imported[1] == version
    demo = _run(bin_dir / "splitter", "demo", "--time-scale", "0.02", cwd=tmp_path).stdout
    assert "merged" in demo
    assert "fan-out" in demo
