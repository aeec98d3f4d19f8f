"""The HTTP library the installed openai client is built on.

openai 3.x runs on ``httpx2``, earlier releases on ``httpx``. splitter's own HTTP pieces
(the simulator's in-process transport, errors it raises in place of a network) must be
made of the same library, or openai neither accepts nor recognises them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import openai

__all__ = ["http_module"]


def http_module() -> ModuleType:
    """Return ``httpx2`` or ``httpx``: whichever the installed openai's clients subclass."""
    for base in openai.DefaultAsyncHttpxClient.__mro__:
        root = base.__module__.split(".", 1)[0]
        if root in ("httpx", "httpx2"):
            return importlib.import_module(root)
    return importlib.import_module("httpx")  # pragma: no cover - every openai>=1 matches above
