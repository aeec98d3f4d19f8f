"""The openai objects the wrapper returns for a split request: one set of builders."""

from __future__ import annotations

import time
import uuid
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import Response

from .._questions import Answer, CompoundAnswer, Usage

DETAILS_ATTRIBUTE = "splitter_details"


def _response(answer: CompoundAnswer, model: str, kwargs: dict[str, Any]) -> Response:
    usage = answer.usage
    key = uuid.uuid4().hex
    status = "completed" if answer.ok and not cut(answer) else "incomplete"
    response = Response.model_validate(
        {
            "id": f"resp_splitter{key}",
            "object": "response",
            "created_at": time.time(),
            "model": model,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if cut(answer) else None,
            "error": None,
            "instructions": kwargs.get("instructions"),
            "max_output_tokens": kwargs.get("max_output_tokens"),
            "temperature": kwargs.get("temperature"),
            "top_p": kwargs.get("top_p"),
            "output": [
                {
                    "type": "message",
                    "id": f"msg_splitter{key}",
                    "status": status,
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            },
        }
    )
    object.__setattr__(response, DETAILS_ATTRIBUTE, answer)
    object.__setattr__(response, "_request_id", _first_request_id(answer))
    return response


def _first_request_id(details: Answer | CompoundAnswer) -> str | None:
    """What openai puts in ``_request_id``: here the first part's provider request id (every
    part's is on ``splitter_details.parts[i].request_id``)."""
    answers = details.parts if isinstance(details, CompoundAnswer) else (details,)
    return next((a.request_id for a in answers if a.request_id), None)


def _single_completion(answer: Answer, model: str) -> ChatCompletion:
    """An aggregated single question's answer as the ``ChatCompletion`` it replaces; a
    failure raises what openai would have raised."""
    if answer.error is not None:
        cause = answer.error.__cause__
        raise cause if isinstance(cause, openai.OpenAIError) else answer.error
    finish = "stop" if answer.via == "merged" else (answer.finish_reason or "stop")
    return _chat_completion(answer, answer.text, answer.usage, finish, model)


def cut(answer: CompoundAnswer) -> bool:
    """Whether a part's answer was cut at its token cap (not: failed)."""
    return any(part.finish_reason == "length" for part in answer.parts)


def _completion(answer: CompoundAnswer, model: str) -> ChatCompletion:
    # "length" only when a part really was cut at its cap. A part that failed (a 500, a
    # refusal) has no finish_reason of its own in openai's vocabulary: the completion says
    # "stop", its text carries "[no answer: ...]" and ``splitter_details`` the error.
    finish = "length" if cut(answer) else "stop"
    return _chat_completion(answer, answer.text, answer.usage, finish, model)


def _chat_completion(
    details: Answer | CompoundAnswer, text: str | None, usage: Usage, finish: str, model: str
) -> ChatCompletion:
    """One assistant message as a ``ChatCompletion``, with splitter's ``details`` on it."""
    completion = ChatCompletion(
        id=f"splitter-{uuid.uuid4().hex}",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[
            Choice(
                index=0,
                finish_reason=finish,  # type: ignore[arg-type]
                message=ChatCompletionMessage(role="assistant", content=text),
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        ),
    )
    # Not a pydantic field: it stays out of model_dump() / to_json() and cannot collide.
    object.__setattr__(completion, DETAILS_ATTRIBUTE, details)
    object.__setattr__(completion, "_request_id", _first_request_id(details))
    return completion
