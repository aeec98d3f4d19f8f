"""``RequestSpec``: what every request of a batch is sent with (model, system prompt,
the caller's keywords), and the messages and output cap of one request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RequestSpec"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of a batch is sent with."""

    model: str
    system: str | None
    params: dict[str, Any]
    isolation_key: str | None = None  # whose answers these are: a cache never crosses it

    def messages(self, user: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": user}]

    def capped(self, max_tokens: int | None) -> dict[str, Any]:
        """The params with the output cap set (under the caller's own key, if any)."""
        if max_tokens is None:
            return self.params
        key = "max_completion_tokens" if "max_completion_tokens" in self.params else "max_tokens"
        return {**self.params, key: max_tokens}
