"""Reading what the service says in its response headers."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping

__all__ = ["parse_retry_after"]


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date).

    Returns None when neither header holds a usable, finite, non-negative value.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None and (ms := _finite_float(raw_ms)) is not None and ms >= 0:
        return ms / 1000
    raw = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _finite_float(raw)
    if seconds is not None:
        return seconds if seconds >= 0 else None
    try:
        moment = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


def _finite_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
