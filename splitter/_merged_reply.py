"""A merged request's reply read back into one answer per question: the text parsed by its
nonce markers (or, with a JSON schema, its ``answers`` array by id), the service's usage
shared out over the answers, each answer's length taught to the endpoint; the items
missing, ambiguous, cut off or invalid are named for re-asking alone (``via="repair"``).
And whether a failed merged request's questions may pass alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ._endpoint import Endpoint
from ._exceptions import APIStatusError, SplitterError
from ._merge import ANSWER_MARKER_TOKENS, MergedPrompt, parse_merged
from ._openai import Completion
from ._questions import Answer, Question, Usage
from ._retry import is_retryable
from ._structured import Structured, parse_merged_json

__all__ = ["MergedReply", "alone_may_pass", "note_schema_refusal", "read_merged"]

logger = logging.getLogger("splitter")

# A merged request the service refused for its content: alone, its questions may pass.
_CONTENT_STATUS = frozenset({400, 413, 422})
# The words of a refusal that names the JSON schema (OpenAI names the parameter; vLLM and
# other servers say it in the message).
_SCHEMA_WORDS = ("response_format", "json_schema", "text.format")


@dataclass(frozen=True, slots=True)
class MergedReply:
    """The answers read from a merged reply, and the questions to re-ask alone."""

    answers: list[Answer]
    missing: list[int]


def read_merged(
    completion: Completion,
    prompt: MergedPrompt,
    indexes: Sequence[int],
    questions: Sequence[Question],
    endpoint: Endpoint,
    attempts: int,
    structured: Structured | None = None,
) -> MergedReply:
    """``completion``, the reply to ``prompt`` asking ``questions[i]`` for ``i`` in
    ``indexes`` (in that order), as answers; what was read is taught to ``endpoint``.
    With ``structured``, the reply is the JSON ``answers`` array its schema asked for,
    each item validated into its answer's ``parsed`` (plain-text answers: none)."""
    truncated = completion.finish_reason == "length"
    if structured is not None:
        read = parse_merged_json(completion.text, prompt.count, structured, truncated=truncated)
        found = {indexes[k - 1]: text for k, (text, _) in read.items()}
        values = {indexes[k - 1]: value for k, (_, value) in read.items()}
        missing = [i for i in indexes if i not in found]
    else:
        parsed = parse_merged(completion.text, prompt, truncated=truncated)
        found = {indexes[k - 1]: text for k, text in parsed.answers.items()}
        values = {}
        missing = [indexes[k - 1] for k in parsed.missing]
    record = endpoint.merges.markers if structured is None else endpoint.merges.json
    record.observe(len(indexes), len(found))
    answers = []
    for (index, text), usage in zip(
        found.items(), _usage_shares(completion.usage, found), strict=True
    ):
        question = questions[index]
        # The service's own count shared out by length (less the marker), the same unit
        # as a single answer's usage: a local tokenizer may count unlike the model's.
        own = max(1, usage.completion_tokens - ANSWER_MARKER_TOKENS)
        endpoint.lengths.observe(question.text, own)
        answers.append(
            Answer(
                index,
                question,
                text,
                usage=usage,
                attempts=attempts,
                request_id=completion.request_id,
                finish_reason="stop",
                via="merged",
                parsed=values.get(index),
            )
        )
    return MergedReply(answers, missing)


def alone_may_pass(error: SplitterError) -> bool:
    """A merged request failed: may its questions, asked alone, still be answered?"""
    if isinstance(error, APIStatusError) and not is_retryable(error):
        return error.status_code in _CONTENT_STATUS  # e.g. too long together
    return True


def note_schema_refusal(endpoint: Endpoint, error: SplitterError) -> None:
    """A plain-text merge asked for as JSON failed with ``error``: if the service refused
    the schema itself, the endpoint's merges use markers from now on (logged once)."""
    if not isinstance(error, APIStatusError) or error.status_code not in _CONTENT_STATUS:
        return
    said = f"{error.param or ''} {error}".lower()
    if endpoint.merges.json_refused or not any(word in said for word in _SCHEMA_WORDS):
        return
    endpoint.merges.json_refused = True
    logger.warning(
        "endpoint %s refused a JSON schema for merged answers (%s); its merged requests "
        "use marker lines from now on",
        endpoint.fingerprint,
        error,
    )


def _usage_shares(total: Usage, texts: dict[int, str]) -> list[Usage]:
    """Split a merged request's usage over its answers: prompt evenly, completion by length;
    the shares add up to the total exactly."""
    n = len(texts)
    prompts = _apportion(total.prompt_tokens, [1.0] * n)
    cached = _apportion(total.cached_tokens, [1.0] * n)
    completions = _apportion(total.completion_tokens, [max(1, len(t)) for t in texts.values()])
    return [Usage(p, c, h) for p, c, h in zip(prompts, completions, cached, strict=True)]


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    if not weights:
        return []
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares
