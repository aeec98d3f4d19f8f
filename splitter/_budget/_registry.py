"""One budget per (base_url, API key, model) in the process, shared by every Splitter.

Keys hold a hash of the API key, never the key itself.
"""

from __future__ import annotations

import hashlib
import threading

from .._policy import Limits
from ._memory import MemoryBudget

__all__ = ["key_fingerprint", "shared_budget"]

_budgets: dict[tuple[str, str, str], MemoryBudget] = {}
_lock = threading.Lock()


def key_fingerprint(api_key: str | None) -> str:
    """A short, irreversible name for an API key (for budget keys and logs)."""
    return hashlib.sha256((api_key or "").encode()).hexdigest()[:16]


def shared_budget(base_url: str, api_key: str | None, model: str, limits: Limits) -> MemoryBudget:
    """The process-wide budget for this endpoint and key; made from ``limits`` on first use."""
    key = (base_url.rstrip("/"), key_fingerprint(api_key), model)
    with _lock:
        if key not in _budgets:
            _budgets[key] = MemoryBudget(rpm=limits.rpm, tpm=limits.tpm, burst=limits.burst)
        return _budgets[key]
