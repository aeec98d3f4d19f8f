"""Reading what the service says in its response headers."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from datetime import datetime

__all__ = ["parse_count", "parse_duration", "parse_retry_after"]


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


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str, *, now: float | None = None) -> float | None:
    """Seconds in an OpenAI reset duration ("1s", "6m0s", "12ms", "1h2m3.5s"), or until an
    RFC 3339 moment (Anthropic's resets); None when unreadable."""
    text = text.strip()
    if not text:
        return None
    parts = _DURATION_PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
        return seconds if math.isfinite(seconds) else None  # "999...9s" overflows to inf
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_count(text: str | None) -> float | None:
    """A non-negative finite count from a header, or None."""
    if text is None:
        return None
    value = _finite_float(text)
    return value if value is not None and value >= 0 else None
