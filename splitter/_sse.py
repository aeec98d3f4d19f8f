"""One line of a server-sent event stream (chat completions' and the Responses API's)."""

from __future__ import annotations

import json
from typing import Any

from ._exceptions import InvalidResponseError

__all__ = ["event_of"]


def event_of(line: str) -> dict[str, Any] | None:
    """The JSON object a ``data:`` line carries; None for every other line (``event:``
    names, comments, blank separators) and for chat's closing ``[DONE]``."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise InvalidResponseError(f"an unreadable stream event: {data[:80]!r}") from exc
    if not isinstance(event, dict):
        raise InvalidResponseError(f"an unexpected stream event: {data[:80]!r}")
    return event
