"""What one generation says, and its wire bodies: choices, logprobs, tool calls, SSE events.

A ``Reply`` is decided once per request (text or tool calls, finish reason, ``n`` choices);
the functions here turn it into the chat completion, its stream chunks, the Responses API
object and its stream events. Every choice of an ``n`` > 1 request says the same (the
simulated model decodes greedily); ``usage`` counts all of them.

Logprobs are deterministic: a token's logprob is ``-(h % 2000) / 1000`` for ``h`` a hash of
its text and position (between 0 and -2); its ``top_logprobs`` are the token itself and then
other words, each less likely than the one before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from splitter.sim import _wire
from splitter.sim._answers import count_tokens, cut_tokens, token_pieces
from splitter.sim._structured import chosen_tools, json_reply, tool_arguments

if TYPE_CHECKING:
    from splitter.sim._answers import Answer
    from splitter.sim._requests import GenerationRequest

__all__ = [
    "Reply",
    "chat_choices",
    "chunk_choices",
    "decide_reply",
    "each_choice",
    "logprob_content",
    "response_events",
    "tool_chunk_choices",
]

_ALTERNATIVES = ("the", "a", "it", "this", "and", "of", "to", "in", "is", "that")


@dataclass(frozen=True, slots=True)
class Reply:
    """One request's generated reply, as every choice says it."""

    content: str | None
    finish: str
    tool_calls: tuple[tuple[str, str], ...] = ()  # (function name, arguments JSON)
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def pieces(self) -> list[str]:
        """The content's tokens (what a stream sends one by one)."""
        return token_pieces(self.content or "")

    @property
    def choice_tokens(self) -> int:
        """Tokens one choice decodes."""
        if self.tool_calls:
            return sum(count_tokens(f"{name} {args}") for name, args in self.tool_calls)
        return count_tokens(self.content or "")

    @property
    def completion_tokens(self) -> int:
        """Tokens billed: every choice's."""
        return self.choice_tokens * self.n


def _logprob(token: str, position: int) -> float:
    digest = hashlib.sha256(f"{position}:{token}".encode()).digest()
    return -(int.from_bytes(digest[:4], "big") % 2000) / 1000


def logprob_content(pieces: list[str], top: int, start: int = 0) -> list[dict[str, Any]]:
    """``logprobs.content`` entries for ``pieces``, the first at position ``start``."""
    entries = []
    for offset, piece in enumerate(pieces):
        value = _logprob(piece, start + offset)
        others = [w for w in _ALTERNATIVES if w != piece.strip()][: max(0, top - 1)]
        tops = [(piece, value)] + [(f" {w}", value - 1.0 - i) for i, w in enumerate(others)]
        entries.append(
            {
                "token": piece,
                "logprob": value,
                "bytes": list(piece.encode()),
                "top_logprobs": [
                    {"token": t, "logprob": round(lp, 3), "bytes": list(t.encode())}
                    for t, lp in tops[:top]
                ],
            }
        )
    return entries


def _tool_call_objects(reply: Reply, call_id: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{call_id}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        for i, (name, args) in enumerate(reply.tool_calls)
    ]


def chat_choices(reply: Reply, call_id: str) -> list[dict[str, Any]]:
    """The ``choices`` of a non-streaming chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = _tool_call_objects(reply, call_id)
    logprobs = None
    if reply.logprobs:
        logprobs = {"content": logprob_content(reply.pieces, reply.top_logprobs), "refusal": None}
    return [
        {"index": i, "message": message, "logprobs": logprobs, "finish_reason": reply.finish}
        for i in range(reply.n)
    ]


def chunk_choices(reply: Reply, pieces: list[str], start: int) -> list[dict[str, Any]]:
    """One stream chunk's choices carrying ``pieces`` (tokens ``start``... of the content)."""
    delta = {"content": "".join(pieces)}
    logprobs = None
    if reply.logprobs:
        logprobs = {"content": logprob_content(pieces, reply.top_logprobs, start), "refusal": None}
    return [
        {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": None}
        for i in range(reply.n)
    ]


def tool_chunk_choices(reply: Reply, call_id: str) -> list[dict[str, Any]]:
    """The stream chunk that carries every tool call whole."""
    calls = [{"index": i, **c} for i, c in enumerate(_tool_call_objects(reply, call_id))]
    return [
        {"index": i, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None}
        for i in range(reply.n)
    ]


def _event(kind: str, number: int, **fields: Any) -> bytes:
    return f"event: {kind}\n".encode() + _wire.sse(
        {"type": kind, "sequence_number": number, **fields}
    )


def response_events(response: dict[str, Any], pieces: list[str]) -> list[bytes]:
    """The Responses API's stream for the finished ``response`` object (whose text is
    ``pieces`` joined): created, in_progress, the item and part opened, one delta per token
    (``len(pieces)`` events from index 4), the text, part and item done, then completed
    (or incomplete)."""
    message = response["output"][0]
    item_id, text = message["id"], message["content"][0]["text"]
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    empty_part = {"type": "output_text", "text": "", "annotations": []}
    opened = {**message, "status": "in_progress", "content": []}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    head = [
        _event("response.created", 0, response=started),
        _event("response.in_progress", 1, response=started),
        _event("response.output_item.added", 2, output_index=0, item=opened),
        _event("response.content_part.added", 3, part=empty_part, **where),
    ]
    n = 4 + len(pieces)
    deltas = [
        _event("response.output_text.delta", 4 + i, delta=p, logprobs=[], **where)
        for i, p in enumerate(pieces)
    ]
    tail = [
        _event("response.output_text.done", n, text=text, logprobs=[], **where),
        _event("response.content_part.done", n + 1, part=message["content"][0], **where),
        _event("response.output_item.done", n + 2, output_index=0, item=message),
        _event(f"response.{response['status']}", n + 3, response=response),
    ]
    return head + deltas + tail


def decide_reply(request: GenerationRequest, answer: Answer, text: str) -> Reply:
    """What the model says: tool calls when it calls a tool, else the (JSON) text."""
    items = list(answer.parts) or [(1, answer.text)]
    tools = chosen_tools(
        request.tools, request.tool_choice, request.user_text, request.tool_answered
    )
    if tools:
        calls = tuple((t["name"], tool_arguments(t, items)) for t in tools)
        return Reply(None, "tool_calls", calls, request.n)
    if request.response_format is not None:
        text = json_reply(request.response_format, items)
    finish = "stop"
    if request.max_tokens is not None and count_tokens(text) > request.max_tokens:
        text, finish = cut_tokens(text, request.max_tokens), "length"
    return Reply(text, finish, (), request.n, request.logprobs, request.top_logprobs)


def each_choice(reply: Reply, **fields: Any) -> list[dict[str, Any]]:
    """One chunk choice per ``n`` with these fields."""
    base: dict[str, Any] = {"delta": {}, "logprobs": None, "finish_reason": None}
    return [{"index": i, **base, **fields} for i in range(reply.n)]
