"""``RequestSpec``: what a request is sent with (model, system prompt, shared context,
history, the caller's keywords): the batch's, and each question's own over it
(``RequestSpec.of``); the messages and output cap of one request, and the shape that
questions merged together must share.

A request's messages run from what is shared most to what is shared least, so the requests
of a batch begin with the same bytes and an engine's prefix cache can serve their repeats:
one system message (the system prompt, then the context, joined by a blank line), then the
question's own history, then the user message (the question, or a merged request's
questions).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._structured import Structured, structured_of, wire_params

if TYPE_CHECKING:
    from ._questions import Question

__all__ = ["RequestSpec", "sends_cache_key"]

#: The hosts that take ``prompt_cache_key`` under ``Policy(prompt_cache_key="auto")``.
_CACHE_KEY_HOSTS = frozenset({"api.openai.com"})


def sends_cache_key(setting: bool | str, base_url: str) -> bool:
    """Whether requests to ``base_url`` carry a ``prompt_cache_key`` under ``setting``
    (``Policy.prompt_cache_key``): "auto" only to OpenAI's own API, whose requests take it;
    another server may refuse a body parameter it does not know."""
    if setting != "auto":
        return bool(setting)
    return urlsplit(base_url).hostname in _CACHE_KEY_HOSTS


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of a batch is sent with; ``of(question)`` what one question's is."""

    model: str
    system: str | None
    params: dict[str, Any]
    isolation_key: str | None = None  # whose answers these are: a cache never crosses it
    history: tuple[dict[str, Any], ...] = ()  # messages between the system prompt and the user's
    context: str | None = None  # what the questions are about, after the system prompt
    cache_keyed: bool = False  # requests carry a prompt_cache_key (see ``sends_cache_key``)

    @property
    def head(self) -> str:
        """The system message's text: the system prompt, then the context ("" for neither)."""
        return "\n\n".join(part for part in (self.system, self.context) if part)

    def messages(self, user: str) -> list[dict[str, Any]]:
        head = self.head
        system = [{"role": "system", "content": head}] if head else []
        return [*system, *self.history, {"role": "user", "content": user}]

    def capped(self, max_tokens: int | None) -> dict[str, Any]:
        """The params as sent, with the output cap set (under the caller's own key, if any);
        a pydantic class as ``response_format`` is sent as its JSON schema."""
        params = wire_params(self.params)
        key = self.prompt_cache_key
        if key is not None and not _has_cache_key(params):
            params = {**params, "prompt_cache_key": key}
        if max_tokens is None:
            return params
        key = "max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"
        return {**params, key: max_tokens}

    @property
    def prompt_cache_key(self) -> str | None:
        """The key its requests share, where they carry one: requests with the same model
        and system message share it (and their prefix), so the service routes them to one
        cache; None without a system message (nothing is shared) or when not keyed."""
        head = self.head
        if not self.cache_keyed or not head:
            return None
        digest = hashlib.sha256(f"{self.model}\n{head}".encode()).hexdigest()
        return f"splitter-{digest[:24]}"

    @property
    def structured(self) -> Structured | None:
        """The JSON schema its answers are read back with (``Answer.parsed``), if any."""
        return structured_of(self.params)

    @property
    def cap(self) -> int | None:
        """The output cap the keywords set, if any."""
        cap = self.params.get("max_tokens", self.params.get("max_completion_tokens"))
        return cap if isinstance(cap, int) else None

    def of(self, question: Question) -> RequestSpec:
        """The request ``question`` is sent with: its own system prompt, context, history
        and keywords over the batch's (its keywords key by key; ``system=""``,
        ``context=""``: none)."""
        if not question.has_own_request:
            return self
        system = self.system if question.system is None else question.system
        context = self.context if question.context is None else question.context
        params = {**self.params, **question.params} if question.params else self.params
        return replace(
            self, system=system, context=context, params=params, history=question.messages
        )

    def shape(self, question: Question, index: int) -> Hashable:
        """What ``question``'s request must share with others' to be merged with them:
        None for the batch's own request; a question with history is alone (its index)."""
        if not question.has_own_request:
            return None
        if question.messages:
            return ("history", index)
        own = self.of(question)
        if own.head == self.head and own.params == self.params:
            return None
        # Keywords compared by their JSON text; a value JSON cannot show (a class passed as
        # response_format) by its repr, which only ever keeps apart what may be equal.
        return (own.head, json.dumps(own.params, sort_keys=True, default=repr))


def _has_cache_key(params: Mapping[str, Any]) -> bool:
    """Whether the caller set a ``prompt_cache_key`` (as a keyword or in ``extra_body``)."""
    extra = params.get("extra_body")
    return "prompt_cache_key" in params or (
        isinstance(extra, Mapping) and "prompt_cache_key" in extra
    )
