"""Which way a request to the wrapped client goes: whole (pass-through, through the gate) or
split into its parts; what may ride along, and the isolation key."""

from __future__ import annotations

import re
from typing import Any

import openai

from .._policy import Policy

# How frameworks say "not set": pydantic-ai and openai-agents pass every parameter, the
# unset ones as openai's sentinels (``NOT_GIVEN``, ``omit``), ``None`` or an empty list
# (``tools=[]``, ``include=[]``). Read as present, any of them kept every prompt whole.
_SENTINELS: tuple[type, ...] = tuple(
    kind for kind in (getattr(openai, "NotGiven", None), getattr(openai, "Omit", None)) if kind
)

#: The attribute of a split request's ``ChatCompletion`` holding splitter's ``CompoundAnswer``.
# Requests with any of these are answered as one: splitting would change what they mean.
_KEEP_WHOLE = frozenset(
    {
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "audio",
        "modalities",
        "prediction",
        "parallel_tool_calls",
        # Per-token log probabilities of a joined answer would have to be stitched from the
        # parts' and the labels between them (which no model wrote): asked for, they keep
        # the request whole, so what comes back is what the model produced.
        "logprobs",
        "top_logprobs",
    }
)


# A system message (or ``instructions``) that dictates the reply's shape keeps the prompt
# whole: each part would get the shape, and the joined answer would have it several times
# (two JSON objects, two lists) where the caller's parser expects one. Conservative on
# purpose: a false alarm only costs the split. Each rule is one way of saying it; the
# framework texts (LangChain's output parsers, instructor's, pydantic-ai's prompted output)
# are in tests/test_client.py.
_FORMAT_RULES = tuple(
    re.compile(rule, re.IGNORECASE | re.DOTALL)
    for rule in (
        r"\b(json|yaml|xml|csv|toml|html)\b",  # a data format
        r"schema",
        r"```|~~~",  # fenced output
        r"<\s*/?\s*[a-z_][\w-]*\s*>",  # an XML-style tag to wrap the answer in
        r"\bformat",  # "the following format", "formatted as", "format your answer"
        r"\b(template|structure[ds]?)\b",
        r"\b(respond|reply|replies|answer|output|return|response|write)\w*\b.{0,40}?"
        r"\b(list|table|bullets?|object|array|single|one (word|line|sentence|paragraph))\b",
        r"\b(bullet(ed)? points?|numbered list|markdown|single (object|line|sentence|word|"
        r"paragraph|answer|response|value))\b",
        r"\bonly (one|a single)\b",
    )
)


def dictates_format(system: str | None) -> bool:
    """Whether a system message tells the model what shape its reply must take."""
    return system is not None and any(rule.search(system) for rule in _FORMAT_RULES)


def _given(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The parameters a request really sets: openai's "not given" sentinels, ``None``,
    empty containers, ``stream=False`` and ``logprobs=False`` (the defaults) are dropped."""
    return {
        key: value
        for key, value in kwargs.items()
        if value is not None
        and not isinstance(value, _SENTINELS)
        and not (isinstance(value, list | tuple | dict | set | frozenset) and not value)
        and not (key in ("stream", "logprobs") and value is False)
    }


def _compound(kwargs: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | None:
    """(prompt, system, params) when the request may be split; None to pass it through."""
    kwargs = _given(kwargs)
    if _KEEP_WHOLE & kwargs.keys() or kwargs.get("n") not in (None, 1):
        return None
    messages, model = kwargs.get("messages"), kwargs.get("model")
    if not isinstance(messages, list) or not isinstance(model, str):
        return None
    system: list[str] = []
    users: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            return None  # images, audio or content parts: not ours to take apart
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(message["content"])
        elif role == "user" and not users:
            users.append(message["content"])
        else:
            return None  # earlier turns or several user messages: a conversation
    if not users:
        return None
    if any(dictates_format(text) for text in system):
        return None
    dropped = ("messages", "model", "stream", "stream_options", "n")
    params = {k: v for k, v in kwargs.items() if k not in dropped}
    return users[0], "\n\n".join(system) or None, params


# What a Responses API request may carry and still be split; anything else (tools, text
# formats, reasoning, stored conversations, background runs, stream) keeps it whole.
_RESPONSES_SPLITTABLE = frozenset({"model", "input", "instructions", "temperature", "top_p"})


def _compound_response(kwargs: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]] | None:
    """(prompt, instructions, chat params) when a ``responses.create`` may be split."""
    kwargs = _given(kwargs)
    if not kwargs.keys() <= _RESPONSES_SPLITTABLE | {"max_output_tokens"}:
        return None
    if not isinstance(kwargs.get("model"), str):
        return None
    given = kwargs.get("input")
    if isinstance(given, list) and len(given) == 1 and isinstance(given[0], dict):
        message = given[0]
        if message.get("role") == "user" and message.keys() <= {"role", "content", "type"}:
            given = message.get("content")
    instructions = kwargs.get("instructions")
    if not isinstance(given, str) or not isinstance(instructions, str | None):
        return None
    if dictates_format(instructions):
        return None
    params: dict[str, Any] = {k: kwargs[k] for k in ("temperature", "top_p") if k in kwargs}
    if isinstance(kwargs.get("max_output_tokens"), int):
        params["max_tokens"] = kwargs["max_output_tokens"]  # per part, as it was for the whole
    return given, instructions, params


def _isolation_key(kwargs: dict[str, Any], policy: Policy) -> str | None:
    """The key a single question may be aggregated under: the request's own end-user id
    (``safety_identifier``, or the older ``user``), when the policy aggregates at all."""
    if policy.aggregate_window_ms is None or kwargs.get("stream"):
        return None
    for field in ("safety_identifier", "user"):
        key = kwargs.get(field)
        if isinstance(key, str) and key:
            return f"{field}:{key}"
    return None
