"""The shape issue #16 gave the package, kept: small modules, a thin front door, and
openai's private API touched in one module only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "splitter"
MODULES = sorted(PACKAGE.rglob("*.py"))
OPENAI_PRIVATE = re.compile(r"\b(_base_client|_process_response|_idempotency_key)\b")


def test_no_module_is_over_450_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in MODULES
        if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long, long


def test_the_splitter_class_is_under_300_lines() -> None:
    tree = ast.parse((PACKAGE / "_splitter.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Splitter"]
    assert cls.end_lineno is not None
    assert cls.end_lineno - cls.lineno + 1 < 300


def test_openai_private_names_live_in_one_module() -> None:
    users = {str(p.relative_to(PACKAGE)) for p in MODULES if OPENAI_PRIVATE.search(p.read_text())}
    assert users == {"_wrap/_openai_class.py"}
