"""OpenAI's JSON and server-sent-event bodies, as the real ``openai`` client parses them."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from typing import Any

__all__ = [
    "DONE",
    "chat_chunk",
    "chat_completion",
    "dumps",
    "embedding_vector",
    "embeddings",
    "error_body",
    "models_list",
    "response_dict",
    "response_object",
    "sse",
]

DONE = b"data: [DONE]\n\n"
_FINGERPRINT = "splitter-sim"
EMBEDDING_DIM = 8


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


def sse(obj: Any) -> bytes:
    """One ``data:`` event."""
    return b"data: " + dumps(obj) + b"\n\n"


def error_body(
    message: str, type_: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """OpenAI's error envelope."""
    return dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def _chat_usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:  # only a service with a prefix cache reports it
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    return usage


def chat_completion(
    *,
    id_: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    prompt: int,
    completion: int,
    cached: int | None = None,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """A non-streaming ``chat.completion``; ``extra`` adds top-level fields (``timings``)."""
    return dumps(
        {
            "id": id_,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": _chat_usage(prompt, completion, cached),
            "system_fingerprint": _FINGERPRINT,
            **(extra or {}),
        }
    )


def chat_chunk(
    *,
    id_: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: tuple[int, int, int | None] | None = None,
    choices: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One ``chat.completion.chunk`` event; ``delta=None`` makes the choiceless usage chunk;
    ``choices`` replaces the single choice ``delta`` makes."""
    if choices is None:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        )
    body: dict[str, Any] = {
        "id": id_,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": _FINGERPRINT,
        "choices": choices,
        **(extra or {}),
    }
    if usage is not None:
        body["usage"] = _chat_usage(*usage)
    return sse(body)


def response_object(**fields: Any) -> bytes:
    """``response_dict`` as JSON bytes."""
    return dumps(response_dict(**fields))


def response_dict(
    *,
    id_: str,
    created: int,
    model: str,
    text: str,
    incomplete: bool,
    prompt: int,
    completion: int,
    instructions: str | None,
    max_output_tokens: int | None,
    cached: int = 0,
) -> dict[str, Any]:
    """A Responses API ``response`` with one assistant message."""
    message = {
        "type": "message",
        "id": "msg_" + id_.removeprefix("resp_"),
        "status": "incomplete" if incomplete else "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
    return {
        "id": id_,
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "error": None,
        "instructions": instructions,
        "max_output_tokens": max_output_tokens,
        "output": [message],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def embedding_vector(text: str) -> list[float]:
    """A deterministic unit-ish vector of ``EMBEDDING_DIM`` floats for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 127.5 - 1.0, 6) for b in digest[:EMBEDDING_DIM]]


def embeddings(*, model: str, inputs: list[str], base64_: bool, prompt: int) -> bytes:
    """An embeddings list, as floats or as base64 little-endian float32 (what the client asked)."""
    data: list[dict[str, Any]] = []
    for index, text in enumerate(inputs):
        vector = embedding_vector(text)
        encoded: Any = vector
        if base64_:
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    usage = {"prompt_tokens": prompt, "total_tokens": prompt}
    return dumps({"object": "list", "data": data, "model": model, "usage": usage})


def models_list(names: list[str], created: int) -> bytes:
    """``GET /v1/models``."""
    data = [
        {"id": n, "object": "model", "created": created, "owned_by": "splitter-sim"} for n in names
    ]
    return dumps({"object": "list", "data": data})
