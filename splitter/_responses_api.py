"""The Responses API dialect (``Policy(api="responses")``): a chat request's messages and
keywords said the way ``client.responses.create`` takes them, and its replies (whole or
streamed) read back as a chat completion's text, finish reason and usage.

Everything above this module keeps speaking chat completions: one request is a list of
messages and keywords, one answer is text with a finish reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ._exceptions import InvalidInputError, InvalidResponseError
from ._questions import Usage
from ._sse import event_of

__all__ = ["ResponsesCollected", "check_keywords", "reply_of", "request_of"]

# Chat keywords with no Responses API equivalent: refused by name rather than sent to be
# refused (or ignored) by the service.
_NO_EQUIVALENT = frozenset(
    {"stop", "n", "seed", "logprobs", "logit_bias", "frequency_penalty", "presence_penalty"}
)
_DROPPED = frozenset({"stream_options"})  # usage always comes in response.completed
_RENAMED = frozenset({"max_tokens", "max_completion_tokens", "response_format"})  # said anew


def check_keywords(params: Mapping[str, Any]) -> None:
    """``InvalidInputError`` naming a keyword that cannot go to the Responses API (checked
    with the call's other input, before anything is sent)."""
    refused = sorted(_NO_EQUIVALENT.intersection(params))
    if refused:
        raise InvalidInputError(
            f"keyword {refused[0]!r} has no Responses API equivalent (Policy(api='responses')); "
            "leave it out or use api='chat'"
        )
    if "response_format" in params:
        _text_format(params["response_format"])


def request_of(
    model: str, messages: list[dict[str, Any]], params: Mapping[str, Any]
) -> dict[str, Any]:
    """``responses.create`` keywords for a chat request: leading system messages become
    ``instructions``, the rest ``input``; ``max_tokens``/``max_completion_tokens`` become
    ``max_output_tokens``; ``response_format`` becomes ``text.format``."""
    check_keywords(params)
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    kwargs: dict[str, Any] = {
        k: v for k, v in params.items() if k not in _DROPPED and k not in _RENAMED
    }
    kwargs["model"] = model
    kwargs["input"] = [dict(m) for m in messages[lead:]]
    if lead:
        kwargs["instructions"] = "\n\n".join(str(m.get("content", "")) for m in messages[:lead])
    cap = params.get("max_completion_tokens", params.get("max_tokens"))
    if cap is not None:
        kwargs["max_output_tokens"] = cap
    if "response_format" in params:
        text_format = _text_format(params["response_format"])
        if text_format is not None:
            kwargs["text"] = {**kwargs.get("text", {}), "format": text_format}
    return kwargs


def _text_format(response_format: object) -> dict[str, Any] | None:
    if not isinstance(response_format, Mapping):
        raise InvalidInputError(
            "response_format must be a dict ({'type': 'json_schema', ...}) with "
            f"api='responses', not {type(response_format).__name__}"
        )
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping):
            raise InvalidInputError("response_format json_schema needs a 'json_schema' object")
        return {"type": "json_schema", **spec}
    raise InvalidInputError(
        f"response_format type {kind!r} is not one of text, json_object, json_schema"
    )


def reply_of(response: Any, request_id: str | None) -> tuple[str, str | None, Usage]:
    """A Responses API response's text, chat-style finish reason and usage."""
    status = getattr(response, "status", None)
    if status == "failed":
        error = getattr(response, "error", None)
        raise InvalidResponseError(f"the response failed: {error}", request_id=request_id)
    texts = [
        part.text
        for item in getattr(response, "output", None) or ()
        if getattr(item, "type", None) == "message"
        for part in getattr(item, "content", None) or ()
        if getattr(part, "type", None) == "output_text"
    ]
    if not texts:
        raise InvalidResponseError("the response holds no answer text", request_id=request_id)
    details = getattr(response, "incomplete_details", None)
    reason = getattr(details, "reason", None) if details is not None else None
    usage = getattr(response, "usage", None)
    counted = Usage()
    if usage is not None:
        details = getattr(usage, "input_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) or 0
        counted = Usage(usage.input_tokens, usage.output_tokens, min(cached, usage.input_tokens))
    return "".join(texts), _finish(status, reason), counted


def _finish(status: object, reason: object) -> str | None:
    """A chat finish reason for a response's status: "length" only for a reply cut at its
    cap, as a chat completion says it."""
    if status == "completed":
        return "stop"
    if status == "incomplete":
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    return None


class ResponsesCollected:
    """What a Responses API event stream adds up to (the same questions ``_openai`` asks of
    a chat stream: new text, finish reason, usage)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def line(self, line: str) -> str:
        """Take one line of the event stream; return the new answer text in it, if any."""
        event = event_of(line)
        if event is None:
            return ""
        kind = event.get("type")
        if kind == "response.output_text.delta":
            piece = event.get("delta")
            if isinstance(piece, str) and piece:
                self.text.append(piece)
                return piece
            return ""
        if kind in ("error", "response.failed"):
            said = json.dumps(event)[:200]
            raise InvalidResponseError(f"the service reported an error mid-stream: {said}")
        if kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            response = response if isinstance(response, dict) else {}
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            self.finish_reason = _finish(response.get("status"), reason)
            self.usage = _usage(response.get("usage"))
        return ""


def _usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    counts = [usage.get("input_tokens"), usage.get("output_tokens"), cached]
    if not all(
        isinstance(n, int | float) and not isinstance(n, bool) and math.isfinite(n) and n >= 0
        for n in counts
    ):
        return None
    prompt, completion, hit = (int(n) for n in counts)  # type: ignore[arg-type]
    return Usage(prompt, completion, min(hit, prompt))
