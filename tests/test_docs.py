"""Every Python snippet in README.md and docs/ runs, in order, against the simulator."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from splitter.sim import SimService, serve

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
DOCS = [
    doc
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if FENCE.search(doc.read_text())
]


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_snippets_run(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The doc's python blocks run top to bottom in one namespace (top-level await allowed)."""
    snippets = FENCE.findall(doc.read_text())
    with serve(SimService("instant")) as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-sim")
        namespace: dict[str, object] = {}

        async def run_all() -> None:
            for source in snippets:
                code = compile(source, str(doc), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                if code.co_flags & inspect.CO_COROUTINE:
                    await eval(code, namespace)
                else:  # as in a script: no event loop running (it may start its own)
                    await anyio.to_thread.run_sync(eval, code, namespace)

        anyio.run(run_all)
