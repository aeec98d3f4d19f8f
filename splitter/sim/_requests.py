"""Reading request bodies: JSON in, typed requests out, or a 400 naming the bad parameter."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BadRequest",
    "EmbeddingsRequest",
    "GenerationRequest",
    "openai_path",
    "parse_chat",
    "parse_embeddings",
    "parse_responses",
]


class BadRequest(Exception):
    """A request the service refuses with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A chat-completions or responses request, reduced to what the simulation needs."""

    api: Literal["chat", "responses"]
    model: str
    contents: tuple[str, ...]  # every message's text, for prompt_tokens
    user_text: str  # the last user message: the question(s)
    max_tokens: int | None
    stream: bool = False
    include_usage: bool = False
    instructions: str | None = None
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    response_format: dict[str, Any] | None = None  # json_object, or json_schema's "schema"
    tools: tuple[dict[str, Any], ...] = ()  # each offered function: name, parameters
    tool_choice: str | dict[str, Any] = "auto"
    tool_answered: bool = False  # a tool result follows the last user message
    prompt_cache_key: str | None = None  # routes requests to one prefix cache (OpenAI's)


@dataclass(frozen=True, slots=True)
class EmbeddingsRequest:
    """An embeddings request."""

    model: str
    inputs: tuple[str, ...]
    base64: bool


def _load(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise BadRequest(
            "We could not parse the JSON body of your request. The OpenAI API expects a JSON "
            "payload, but what was sent was not valid JSON."
        )
    return data


def _model(data: dict[str, Any]) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter", "model")
    return model


def _positive_int(data: dict[str, Any], *names: str) -> int | None:
    """The first of ``names`` present, which must be a positive integer."""
    for name in names:
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadRequest(f"Invalid '{name}': expected an integer of at least 1.", name)
        return value
    return None


def text_of(content: Any) -> str:
    """A message content's text: a string, or the text parts of a list of parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def _messages(items: Any, param: str) -> list[tuple[str, str]]:
    """(role, text) pairs from a list of message objects."""
    if not isinstance(items, list):
        raise BadRequest(f"Invalid type for '{param}': expected an array.", param)
    if not items:
        raise BadRequest(f"Invalid '{param}': empty array. Expected at least 1 message.", param)
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise BadRequest(
                f"Invalid '{param}[{i}]': expected a message with a role.", f"{param}[{i}]"
            )
        out.append((item["role"], text_of(item.get("content"))))
    return out


def _last_user(messages: list[tuple[str, str]]) -> str:
    users = [text for role, text in messages if role == "user"]
    return users[-1] if users else messages[-1][1]


def _answered_by_tool(messages: list[tuple[str, str]]) -> bool:
    roles = [role for role, _ in messages]
    last_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    return "tool" in roles[last_user + 1 :]


def _top_logprobs(data: dict[str, Any]) -> int:
    top = data.get("top_logprobs")
    if top is None:
        return 0
    if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20:
        raise BadRequest(
            "Invalid 'top_logprobs': expected an integer from 0 to 20.", "top_logprobs"
        )
    if not data.get("logprobs"):
        raise BadRequest(
            "Invalid value for 'top_logprobs': 'logprobs' must be set to true.", "top_logprobs"
        )
    return top


def _response_format(raw: Any, param: str) -> dict[str, Any] | None:
    """None for text; ``{}`` for json_object; the schema for json_schema."""
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {}
    if kind == "json_schema":
        spec = raw.get("json_schema", raw)  # the Responses API puts the fields at the top
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise BadRequest(f"Missing required parameter: '{param}.json_schema.schema'.", param)
        return schema
    raise BadRequest(f"Invalid value for '{param}.type': {kind!r}.", param)


def _tools(data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The offered functions (``{"name", "parameters"}``), chat's or the Responses API's shape."""
    raw = data.get("tools") or []
    if not isinstance(raw, list):
        raise BadRequest("Invalid type for 'tools': expected an array.", "tools")
    functions = []
    for i, tool in enumerate(raw):
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise BadRequest(f"Invalid 'tools[{i}]': expected a function with a name.", "tools")
        functions.append({"name": spec["name"], "parameters": spec.get("parameters") or {}})
    return tuple(functions)


def parse_chat(body: bytes) -> GenerationRequest:
    """``POST /v1/chat/completions``."""
    data = _load(body)
    model = _model(data)
    if "messages" not in data:
        raise BadRequest("Missing required parameter: 'messages'.", "messages")
    messages = _messages(data["messages"], "messages")
    n = _positive_int(data, "n") or 1
    if n > 128:
        raise BadRequest("Invalid 'n': expected an integer of at most 128.", "n")
    options = data.get("stream_options")
    return GenerationRequest(
        api="chat",
        model=model,
        contents=tuple(text for _, text in messages),
        user_text=_last_user(messages),
        max_tokens=_positive_int(data, "max_completion_tokens", "max_tokens"),
        stream=bool(data.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        n=n,
        logprobs=bool(data.get("logprobs")),
        top_logprobs=_top_logprobs(data),
        response_format=_response_format(data.get("response_format"), "response_format"),
        tools=_tools(data),
        tool_choice=data.get("tool_choice") or "auto",
        tool_answered=_answered_by_tool(messages),
        prompt_cache_key=_cache_key(data),
    )


def parse_responses(body: bytes) -> GenerationRequest:
    """``POST /v1/responses``, streamed or not."""
    data = _load(body)
    model = _model(data)
    if "input" not in data:
        raise BadRequest("Missing required parameter: 'input'.", "input")
    text_options = data.get("text")
    text_format = text_options.get("format") if isinstance(text_options, dict) else None
    raw = data["input"]
    messages = [("user", raw)] if isinstance(raw, str) else _messages(raw, "input")
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("Invalid type for 'instructions': expected a string.", "instructions")
    contents = ([instructions] if instructions else []) + [text for _, text in messages]
    return GenerationRequest(
        api="responses",
        model=model,
        contents=tuple(contents),
        user_text=_last_user(messages),
        max_tokens=_positive_int(data, "max_output_tokens"),
        stream=bool(data.get("stream")),
        instructions=instructions,
        response_format=_response_format(text_format, "text.format"),
        prompt_cache_key=_cache_key(data),
    )


def _cache_key(data: dict[str, Any]) -> str | None:
    key = data.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        raise BadRequest(
            "Invalid type for 'prompt_cache_key': expected a string.", "prompt_cache_key"
        )
    return key


def parse_embeddings(body: bytes) -> EmbeddingsRequest:
    """``POST /v1/embeddings`` with a string or a list of strings."""
    data = _load(body)
    model = _model(data)
    raw = data.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
        raise BadRequest(
            "Invalid 'input': expected a string or a non-empty array of strings.", "input"
        )
    return EmbeddingsRequest(model, tuple(inputs), data.get("encoding_format") == "base64")


_AZURE_PATH = re.compile(r"^(?:/openai|/v1)?/deployments/[^/]+(/.*)$")


def openai_path(path: str) -> str:
    """Azure OpenAI's deployment paths (``/openai/deployments/{name}/chat/completions``)
    as the OpenAI path they stand for (``/v1/chat/completions``)."""
    azure = _AZURE_PATH.match(path)
    return f"/v1{azure.group(1)}" if azure else path
