"""What users pass, checked and turned into ``Question``s before any request goes out.

A bad item is an ``InvalidInputError`` naming its index; a keyword splitter owns is an
error naming the keyword; every other argument of the front door is checked here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

from pydantic import ValidationError

from ._dag import PLACEHOLDER
from ._estimate import question_tokens
from ._exceptions import InvalidInputError
from ._policy import Policy
from ._questions import Question, check_sendable
from ._responses_api import check_keywords
from ._structured import structured_of

__all__ = [
    "QuestionLike",
    "check_context",
    "check_isolation_key",
    "check_map_input",
    "check_params",
    "choose_model",
    "map_item",
    "normalize_questions",
]

QuestionLike = str | Question
# Keywords splitter builds itself; passing them would silently fight the plan.
_OWNED_PARAMS = {
    "messages": "splitter builds the messages; pass system= for a shared system prompt "
    "and context= for a shared document",
    "model": "pass model= as its own argument",
    "stream": "ask_many returns whole answers",
    "n": "one answer per question is all splitter can keep in order",
}


def normalize_questions(
    questions: Iterable[QuestionLike], *, policy: Policy, model: str
) -> list[Question]:
    """Check and convert the caller's items; errors name the item's index."""
    if isinstance(questions, str | bytes):
        raise InvalidInputError("questions must be a list of questions, not a single string")
    if not isinstance(questions, Iterable):
        raise InvalidInputError(
            f"questions must be a list of questions, not {type(questions).__name__}"
        )
    items = [_to_question(i, item) for i, item in enumerate(questions)]
    seen: dict[str, int] = {}
    for i, q in enumerate(items):
        _check_own_request(i, q, policy)
        _check_size(i, q, policy, model)
        if q.id is not None:
            if q.id in seen:
                raise InvalidInputError(
                    f"questions[{i}] repeats id {q.id!r} of questions[{seen[q.id]}]", index=i
                )
            seen[q.id] = i
    return items


def map_item(index: int, item: object, *, policy: Policy, model: str) -> Question:
    """One item of :meth:`Splitter.amap`'s input, checked as ``aask_many`` checks it; a
    question that depends on another is refused (map answers each on its own)."""
    question = _to_question(index, item)
    _check_own_request(index, question, policy)
    _check_size(index, question, policy, model)
    refs = [*question.depends_on, *(m["ref"] for m in PLACEHOLDER.finditer(question.text))]
    if refs:
        raise InvalidInputError(
            f"questions[{index}] depends on {refs[0]!r}: map answers every question on its own; "
            "ask questions that depend on each other with aask_many",
            index=index,
        )
    return question


def check_map_input(questions: object, window: object) -> None:
    """:meth:`Splitter.amap`'s input: any (async) iterable but a string; a positive window."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidInputError(f"window must be a positive int, not {window!r}")
    if isinstance(questions, str | bytes):
        raise InvalidInputError("questions must be an iterable of questions, not a string")
    if not isinstance(questions, Iterable | AsyncIterable):
        raise InvalidInputError(f"questions must be an iterable, not {type(questions).__name__}")


def check_params(params: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The caller's request keywords, refused if splitter owns one; the policy's timeout
    added unless the caller set one."""
    _check_owned(params, "keyword", _OWNED_PARAMS)
    structured_of(params)  # a class that is not a pydantic model fails here, by name
    if policy.timeout is not None:
        params.setdefault("timeout", policy.timeout)
    return params


def _check_owned(params: dict[str, Any], what: str, owned: dict[str, str]) -> None:
    for key, why in owned.items():
        if key in params and not (key == "n" and params[key] == 1):
            raise InvalidInputError(f"{what} {key!r} is not accepted: {why}")


# A question's own keywords: those of the batch, and what Question has a field for.
_OWNED_BY_QUESTION = {
    **_OWNED_PARAMS,
    "messages": "pass the history as Question(messages=...) and the question as its text",
    "system": "pass Question(system=...)",
    "context": "pass Question(context=...)",
}


def _check_own_request(index: int, question: Question, policy: Policy) -> None:
    """A question's own keywords, refused as the batch's are (naming the item)."""
    if not question.params:
        return
    try:
        _check_owned(question.params, "keyword", _OWNED_BY_QUESTION)
        structured_of(question.params)
        if policy.api == "responses":
            check_keywords(question.params)
    except InvalidInputError as exc:
        raise InvalidInputError(f"questions[{index}].params: {exc}", index=index) from None


def choose_model(model: str | None, default: str | None) -> str:
    """The call's model, else the Splitter's; one of them is required."""
    chosen = model or default
    if not chosen:
        raise InvalidInputError("model is required: pass model=... here or to Splitter()")
    return chosen


def check_context(context: object) -> str | None:
    """``context=``: None, or a str with something in it that can be sent as UTF-8."""
    if context is None:
        return None
    if not isinstance(context, str):
        raise InvalidInputError(f"context must be a str or None, not {type(context).__name__}")
    if not context.strip():
        raise InvalidInputError(
            "context is empty: pass the shared text the questions are about, or leave it out"
        )
    check_sendable(context, "context")
    return context


def check_isolation_key(isolation_key: object) -> None:
    if isolation_key is not None and not isinstance(isolation_key, str):
        raise InvalidInputError(
            f"isolation_key must be a str or None, not {type(isolation_key).__name__}"
        )


def _check_size(index: int, question: Question, policy: Policy, model: str) -> None:
    # A token is at least one byte and a character at most four: a text this short cannot
    # be over the limit, and is not encoded here (the estimate stage counts it, once); a
    # longer one's count is remembered, and the estimate stage reuses it.
    if 4 * len(question.text) <= policy.max_question_tokens:
        return
    tokens = question_tokens(question.text, model)
    if tokens > policy.max_question_tokens:
        raise InvalidInputError(
            f"questions[{index}] is ~{tokens} tokens, over max_question_tokens="
            f"{policy.max_question_tokens}",
            index=index,
        )


def _to_question(index: int, item: object) -> Question:
    if isinstance(item, Question):
        return item
    if not isinstance(item, str):
        raise InvalidInputError(
            f"questions[{index}] must be a str or Question, not {type(item).__name__}", index=index
        )
    try:
        return Question(text=item)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise InvalidInputError(f"questions[{index}]: {reason}", index=index) from None
