"""One budget per (base_url, API key, model) in the process, shared by every Splitter.

Keys hold a hash of the API key, never the key itself.
"""

from __future__ import annotations

import hashlib
import threading

from .._policy import Limits
from ._memory import MemoryBudget
from ._protocol import Budget

__all__ = ["endpoint_fingerprint", "shared_budget"]

_budgets: dict[tuple[object, ...], Budget] = {}
_lock = threading.Lock()


def endpoint_fingerprint(base_url: str, api_key: str | None, model: str) -> str:
    """A short, irreversible name for (endpoint, API key, model), for keys and logs."""
    text = "\n".join((base_url.rstrip("/"), api_key or "", model))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def shared_budget(base_url: str, api_key: str | None, model: str, limits: Limits) -> Budget:
    """The process-wide budget for this endpoint and key; made from ``limits`` on first use:
    in Redis when ``limits.shared`` says so, else in memory."""
    fingerprint = endpoint_fingerprint(base_url, api_key, model)
    shared = limits.shared
    key = (fingerprint, shared.url, shared.namespace) if shared else (fingerprint,)
    with _lock:
        if key not in _budgets:
            if shared is not None:
                from ._redis import RedisBudget

                _budgets[key] = RedisBudget(shared, fingerprint=fingerprint, limits=limits)
            else:
                _budgets[key] = MemoryBudget(rpm=limits.rpm, tpm=limits.tpm, burst=limits.burst)
        return _budgets[key]
