"""The lines of ``splitter run``'s files: an input line as a ``Question``, an answer as an
output line, and whether a line of an existing output is one of ours.

Input lines come in two formats, told apart line by line: splitter's own
(``{"id": ..., "question": ...}`` with optional ``expected_tokens``, ``max_tokens``,
``system``, ``messages``, ``params``) and OpenAI's Batch API (``{"custom_id": ...,
"method": "POST", "url": "/v1/chat/completions", "body": {...}}``: the body's last message
is the question, a leading system message its system prompt, the messages between its
history, every other body key its request keywords). Either may carry ``metadata``: any
JSON value, copied to the answer's output line as it is. Any other key is refused (a typo
such as ``max_token`` would otherwise be silently dropped).

Output lines come in two formats too, chosen by the run (``OutputFormat``): splitter's own
``{"id": ..., "answer": ..., "error": ...}`` (with ``"parsed"``, the structured answer's
JSON value, where the question asked for a JSON schema) and the Batch API's output shape
``{"id": "batch_req_...", "custom_id": ..., "response": {"status_code": 200,
"request_id": ..., "body": <chat.completion>}, "error": null}`` (a failed question:
``"response": null, "error": {"code": ..., "message": ...}``); ``"metadata"`` last when the
question had some.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ValidationError

from ._exceptions import InvalidInputError, SplitterError
from ._questions import Answer, Question

__all__ = [
    "BatchLines",
    "InputLine",
    "OutputFormat",
    "OutputLines",
    "SplitterLines",
    "key_of",
    "output_lines",
    "read_input_line",
]

OutputFormat = Literal["splitter", "batch"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("splitter", "batch")

_OWN_FIELDS = frozenset(
    {"id", "question", "expected_tokens", "max_tokens", "system", "messages", "params", "metadata"}
)
_BATCH_FIELDS = frozenset({"custom_id", "method", "url", "body", "metadata"})
_BATCH_URL = "/v1/chat/completions"


def key_of(raw_id: object) -> str:
    """The id as a question id: its JSON text, so that 5 and "5" stay apart and the
    output can give back the id exactly as the input had it."""
    return json.dumps(raw_id, ensure_ascii=False)


# -- input --------------------------------------------------------------------------------


class InputLine(NamedTuple):
    """One input line read: its question, and what its request keywords are called there
    (``params`` in splitter's format, ``body`` in the Batch API's), for error messages."""

    question: Question
    params_field: str


def read_input_line(number: int, line: str, where: str, model: str | None) -> InputLine:
    """Line ``number`` (1-based) of the input file ``where``; ``model`` is the run's (a
    Batch API body naming another is refused)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{where} line {number}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise InvalidInputError(f"{where} line {number}: not a JSON object")
    at = f"{where} line {number}"
    if "custom_id" in record:
        return InputLine(_batch_question(record, at, model), "body")
    return InputLine(_own_question(record, at), "params")


def body_model(line: str) -> str | None:
    """The model a Batch API line's body names, if the line is one that does."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    body = record.get("body") if isinstance(record, dict) and "custom_id" in record else None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _own_question(record: dict[str, Any], at: str) -> Question:
    for field in ("id", "question"):
        if field not in record:
            raise InvalidInputError(f"{at}: no {field!r} field")
    unknown = sorted(set(record) - _OWN_FIELDS)
    if unknown:
        raise InvalidInputError(
            f"{at}: unknown field {unknown[0]!r} (known: {sorted(_OWN_FIELDS)}; "
            "put anything of your own under 'metadata')"
        )
    raw_id = _checked_id(record["id"], "id", at)
    if not isinstance(record["question"], str):
        raise InvalidInputError(f"{at}: question must be a string")
    fields = {k: record[k] for k in ("system", "messages", "params") if k in record}
    return _question(
        at,
        {"text": "question"},
        text=record["question"],
        id=key_of(raw_id),
        expected_tokens=record.get("expected_tokens"),
        max_tokens=record.get("max_tokens"),
        metadata=record.get("metadata"),
        **fields,
    )


def _batch_question(record: dict[str, Any], at: str, model: str | None) -> Question:
    unknown = sorted(set(record) - _BATCH_FIELDS)
    if unknown:
        raise InvalidInputError(
            f"{at}: unknown field {unknown[0]!r} of a Batch API line "
            f"(known: {sorted(_BATCH_FIELDS)})"
        )
    raw_id = _checked_id(record["custom_id"], "custom_id", at)
    if record.get("method", "POST") != "POST":
        raise InvalidInputError(f"{at}: method must be POST, not {record['method']!r}")
    if record.get("url", _BATCH_URL) != _BATCH_URL:
        raise InvalidInputError(
            f"{at}: url {record['url']!r} is not asked; splitter run answers {_BATCH_URL}"
        )
    body = record.get("body")
    if not isinstance(body, dict):
        raise InvalidInputError(f"{at}: body must be a JSON object (a chat completion request)")
    named = body.get("model")
    if named is not None and model is not None and named != model:
        raise InvalidInputError(
            f"{at}: body model {named!r} is not the run's model {model!r} (one run asks one model)"
        )
    text, system, history = _split_messages(body.get("messages"), at)
    params = {k: v for k, v in body.items() if k not in ("model", "messages")}
    return _question(
        at,
        {"text": "the last message's content", "messages": "body.messages", "params": "body"},
        text=text,
        id=key_of(raw_id),
        system=system,
        messages=history,
        params=params,
        metadata=record.get("metadata"),
    )


def _split_messages(messages: object, at: str) -> tuple[str, str, list[Any]]:
    """A Batch API body's messages as (question, system prompt, history): the last is the
    user's question; a leading system message is the system prompt ('' when there is
    none, so no default is added to a request the body spells out)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError(f"{at}: body.messages must be a non-empty list of messages")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise InvalidInputError(f"{at}: the last of body.messages must be the user's question")
    text = _text_of(last.get("content"))
    if text is None:
        raise InvalidInputError(
            f"{at}: the last message's content must be text (a string, or text parts)"
        )
    earlier = messages[:-1]
    first = earlier[0] if earlier else None
    if isinstance(first, dict) and first.get("role") == "system":
        system = first.get("content")
        if isinstance(system, str):
            return text, system, earlier[1:]
    return text, "", earlier


def _text_of(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        parts = [
            p.get("text") if isinstance(p, dict) and p.get("type") == "text" else None
            for p in content
        ]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(p for p in parts if p is not None)
    return None


def _checked_id(raw_id: object, field: str, at: str) -> str | int:
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise InvalidInputError(f"{at}: {field} must be a string or an integer")
    return raw_id


def _question(at: str, names: Mapping[str, str], **fields: Any) -> Question:
    """A ``Question`` of ``fields``; a field's error named as the line calls it."""
    try:
        return Question(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "line"
        reason = error["msg"].removeprefix("Value error, ")
        raise InvalidInputError(f"{at}: {names.get(field, field)}: {reason}") from None


# -- output -------------------------------------------------------------------------------


class OutputLines(Protocol):
    """One output format: the line written for an answer, and reading such lines back."""

    name: OutputFormat

    def line(self, answer: Answer) -> str:
        """``answer``'s line, without its newline."""
        ...

    def problem(self, record: object) -> str | None:
        """Why ``record`` is not a line of this format; None if it is one."""
        ...

    def read(self, record: dict[str, Any]) -> tuple[str, bool]:
        """A line of this format's question id, and whether it was answered."""
        ...

    def begins(self, text: str) -> bool:
        """Whether ``text`` is how a line of this format begins (a torn last line)."""
        ...


class SplitterLines:
    """``{"id": ..., "answer": ..., "error": ...}`` (and ``"parsed"``, ``"metadata"``, if
    any)."""

    name: OutputFormat = "splitter"

    def line(self, answer: Answer) -> str:
        assert answer.question.id is not None
        record: dict[str, Any] = {
            "id": json.loads(answer.question.id),
            "answer": answer.text if answer.ok else None,
            "error": _error_text(answer.error),
        }
        if answer.ok and answer.parsed is not None:
            record["parsed"] = _json_value(answer.parsed)
        _add_metadata(record, answer.question)
        return json.dumps(record, ensure_ascii=False)

    def problem(self, record: object) -> str | None:
        if not isinstance(record, dict):
            return "not a JSON object"
        fields = sorted(set(record) - {"parsed", "metadata"})
        if fields != sorted(_ANSWER_FIELDS):
            return f"fields {sorted(record)}, not {list(_ANSWER_FIELDS)}"
        raw_id, answer, error = (record[field] for field in _ANSWER_FIELDS)
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            return "id is not a string or an integer"
        if not all(value is None or isinstance(value, str) for value in (answer, error)):
            return "answer and error must each be a string or null"
        if answer is not None and error is not None:
            return "both an answer and an error"
        if "parsed" in record and answer is None:
            return "parsed without an answer"
        return None

    def read(self, record: dict[str, Any]) -> tuple[str, bool]:
        return key_of(record["id"]), record["error"] is None

    def begins(self, text: str) -> bool:
        return _begins_answer(text)


class BatchLines:
    """OpenAI's Batch API output lines; ``model`` is named in each response body."""

    name: OutputFormat = "batch"

    def __init__(self, model: str) -> None:
        self.model = model

    def line(self, answer: Answer) -> str:
        assert answer.question.id is not None
        record: dict[str, Any] = {
            "id": f"{_BATCH_REQUEST}{uuid.uuid4().hex}",
            "custom_id": json.loads(answer.question.id),
            "response": None,
            "error": None,
        }
        if answer.ok:
            record["response"] = {
                "status_code": 200,
                "request_id": answer.request_id,
                "body": self._completion(answer),
            }
        else:
            record["error"] = {"code": _code(answer.error), "message": str(answer.error)}
        _add_metadata(record, answer.question)
        return json.dumps(record, ensure_ascii=False)

    def _completion(self, answer: Answer) -> dict[str, Any]:
        usage = answer.usage
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": answer.finish_reason or "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        }

    def problem(self, record: object) -> str | None:
        if not isinstance(record, dict):
            return "not a JSON object"
        fields = sorted(set(record) - {"metadata"})
        if fields != sorted(_BATCH_OUTPUT_FIELDS):
            return f"fields {sorted(record)}, not {list(_BATCH_OUTPUT_FIELDS)}"
        line_id, raw_id = record["id"], record["custom_id"]
        if not isinstance(line_id, str) or not line_id.startswith(_BATCH_REQUEST):
            return f"id does not begin with {_BATCH_REQUEST!r}"
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            return "custom_id is not a string or an integer"
        response, error = record["response"], record["error"]
        if (response is None) == (error is None):
            return "not exactly one of response and error"
        if error is not None and not (
            isinstance(error, dict) and all(isinstance(error.get(k), str) for k in _ERROR_KEYS)
        ):
            return "error is not an object with a code and a message"
        if response is not None and not (
            isinstance(response, dict) and isinstance(response.get("body"), dict)
        ):
            return "response is not an object with a body"
        return None

    def read(self, record: dict[str, Any]) -> tuple[str, bool]:
        return key_of(record["custom_id"]), record["error"] is None

    def begins(self, text: str) -> bool:
        # The id's fixed start is mark enough: every complete line before it was checked.
        head = f'{{"id": "{_BATCH_REQUEST}'
        return text.startswith(head) if len(text) > len(head) else head.startswith(text)


def output_lines(output_format: object, model: str) -> OutputLines:
    """The output format named ``output_format``; an ``InvalidInputError`` for any other."""
    if output_format == "splitter":
        return SplitterLines()
    if output_format == "batch":
        return BatchLines(model)
    raise InvalidInputError(
        f"output_format must be one of {list(OUTPUT_FORMATS)}, not {output_format!r}"
    )


_ANSWER_FIELDS = ("id", "answer", "error")
_BATCH_OUTPUT_FIELDS = ("id", "custom_id", "response", "error")
_ERROR_KEYS = ("code", "message")
_BATCH_REQUEST = "batch_req_"


def _json_value(parsed: Any) -> Any:
    """A structured answer's ``parsed`` as JSON: a pydantic instance dumped, a JSON value as
    it is."""
    if isinstance(parsed, BaseModel):
        return parsed.model_dump(mode="json")
    return parsed


def _add_metadata(record: dict[str, Any], question: Question) -> None:
    if question.metadata is not None:
        record["metadata"] = question.metadata


def _code(error: SplitterError | None) -> str:
    """A failed line's error code: the service's own, else splitter's error class."""
    code = getattr(error, "code", None)
    return code if isinstance(code, str) and code else type(error).__name__


def _error_text(error: SplitterError | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {error}"


_STRING_START = (  # a JSON string, possibly cut anywhere, even inside an escape
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*(?:\\(?:u[0-9a-fA-F]{0,3})?)?'
)
_ID_START = re.compile(f"(?:{_STRING_START}|-)?")
_TEXT_START = re.compile(f"(?:{_STRING_START}|n|nu|nul)?")
# An answer line as SplitterLines.line lays it out: literal text and (types, how a value
# begins); then "}", or the metadata, whose value may be anything.
_LAYOUT: tuple[str | tuple[tuple[type, ...], re.Pattern[str]], ...] = (
    '{"id": ',
    ((str, int), _ID_START),
    ', "answer": ',
    ((str, type(None)), _TEXT_START),
    ', "error": ',
    ((str, type(None)), _TEXT_START),
)
_METADATA = ', "metadata": '
_DECODER = json.JSONDecoder()


def _begins_answer(text: str) -> bool:
    """Whether ``text`` is the start of a line that ``SplitterLines.line`` writes (what a
    process that died mid-write leaves), or all of one but its newline."""
    at = 0
    for piece in _LAYOUT:
        rest = text[at:]
        if isinstance(piece, str):
            if not rest.startswith(piece):
                return piece.startswith(rest)
            at += len(piece)
            continue
        types, start = piece
        try:
            value, at = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            return start.fullmatch(rest) is not None
        if isinstance(value, bool) or not isinstance(value, types):
            return False
    rest = text[at:]
    return rest in ("", "}") or _METADATA.startswith(rest) or rest.startswith(_METADATA)
