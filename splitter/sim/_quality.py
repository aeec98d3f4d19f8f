"""Merge quality: how a profile's model answers several questions in one prompt.

Real models answer worse when questions are merged (Batch Prompting measured accuracy
falling past 4-6 items), and small ones ignore the layout asked for. Three knobs of a
``Profile`` model that, all off by default:

* ``merge_good_items=k``: in a prompt of several questions, items past the k-th are answered
  off-topic (the answer to another question: ``answer_text("off-topic: " + question, n)``,
  same length, a different ``answer_tag``);
* ``merge_non_answer_rate=p``: with probability p (drawn from the service's seed and the
  request's number) a multi-question reply is well-formed but every item says
  ``NON_ANSWER``;
* ``merge_markers=False``: a multi-question reply is the answers run together in one
  paragraph, no marker lines and no numbers (a JSON schema still gets its items: the
  replies' JSON is made from the answers, not from this text).

A single question is always answered well.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING

from splitter.sim._answers import (
    Answer,
    answer_length,
    answer_text,
    render_merged,
    render_numbered,
)

if TYPE_CHECKING:
    from splitter.sim._profiles import Profile

__all__ = ["NON_ANSWER", "merged_quality"]

NON_ANSWER = "I am not sure about that."


def merged_quality(
    answer: Answer, profile: Profile, *, seed: int, number: int, default_tokens: int
) -> Answer:
    """``answer`` as the profile's model gives it (unchanged for one question, or knobs off)."""
    if len(answer.parts) < 2:
        return answer
    rng = random.Random(f"merge-quality:{seed}:{number}")
    parts = answer.parts
    if profile.merge_non_answer_rate and rng.random() < profile.merge_non_answer_rate:
        parts = tuple((k, NON_ANSWER) for k, _ in answer.parts)
    elif profile.merge_good_items is not None:
        good = profile.merge_good_items
        parts = tuple(
            (k, body if i < good else _off_topic(q.text, default_tokens))
            for i, ((k, body), q) in enumerate(zip(answer.parts, answer.questions, strict=True))
        )
    if not profile.merge_markers:
        text = " ".join(body for _, body in parts)
    elif parts is answer.parts:
        return answer
    elif answer.nonce:
        text = render_merged(answer.nonce, parts)
    else:
        text = render_numbered(parts)
    return dataclasses.replace(answer, text=text, parts=parts)


def _off_topic(question: str, default_tokens: int) -> str:
    return answer_text(f"off-topic: {question}", answer_length(question, default_tokens))
