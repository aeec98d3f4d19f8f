"""What the simulated model answers: deterministic, checkable text.

Every answer to a question starts with ``answer_tag(question)``, so a client can tell which
question an answer belongs to (and catch swapped or merged answers). A prompt holding a
numbered list of two or more items is several questions, answered as a numbered list in the
items' own numbers; anything else is one question. ``[len=N]`` inside a question pins its
answer to N tokens. A token is a whitespace-separated word.

Prompt formats are parsers from text to ``Question`` items, tried in order (``PARSERS``), so
another format can be added next to the numbered list without touching it.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "PARSERS",
    "Answer",
    "Question",
    "answer_prompt",
    "answer_tag",
    "answer_text",
    "count_tokens",
    "cut_tokens",
    "parse_numbered",
    "prompt_tokens",
    "render_numbered",
    "token_pieces",
]

_VOCAB = (
    "the", "model", "answer", "is", "likely", "because", "data", "shows", "a", "clear",
    "result", "with", "some", "caveats", "and", "more", "detail", "on", "each", "point",
    "which", "depends", "context", "overall", "yes", "no", "mostly", "rarely", "often", "here",
)  # fmt: skip
_ITEM = re.compile(r"^\s*(\d+)[.)]\s+(.+)$")
_LEN = re.compile(r"\[len=(\d+)\]")
_PIECE = re.compile(r"\s*\S+")


def answer_tag(question: str) -> str:
    """The answer's first word: ``"ans-"`` and 8 hex digits of the stripped question's sha256."""
    return "ans-" + hashlib.sha256(question.strip().encode()).hexdigest()[:8]


def answer_text(question: str, tokens: int) -> str:
    """A deterministic answer of exactly ``tokens`` words, starting with ``answer_tag``."""
    if tokens < 1:
        raise ValueError("an answer has at least one token")
    tag = answer_tag(question)
    rng = random.Random(tag)  # seeded by the hash: same question, same filler
    return " ".join([tag, *rng.choices(_VOCAB, k=tokens - 1)])


@dataclass(frozen=True, slots=True)
class Question:
    """One question found in a prompt, with the number it was listed under (if any)."""

    text: str
    number: int | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The full reply to a prompt and the questions it answered."""

    text: str
    questions: tuple[Question, ...]
    parts: tuple[tuple[int, str], ...] = ()  # (number, answer) per item of a list prompt


def parse_numbered(text: str) -> list[Question] | None:
    """Items of a numbered list (``1.`` or ``1)``), or None unless there are at least two.

    Text before the first item is a preamble and ignored. A line that does not start an item
    continues the previous one; item lines are stripped and joined with newlines.
    """
    items: list[tuple[int, list[str]]] = []
    for line in text.splitlines():
        match = _ITEM.match(line)
        if match:
            items.append((int(match.group(1)), [match.group(2).strip()]))
        elif items:
            items[-1][1].append(line.strip())
    if len(items) < 2:
        return None
    return [Question("\n".join(lines).strip(), number) for number, lines in items]


PARSERS: list[Callable[[str], list[Question] | None]] = [parse_numbered]
"""Multi-question prompt formats, tried in order; the first to match wins."""


def find_questions(text: str) -> list[Question]:
    """The questions a prompt holds: a recognised list's items, else the whole text."""
    for parse in PARSERS:
        found = parse(text)
        if found:
            return found
    return [Question(text.strip())]


def answer_length(question: str, default: int) -> int:
    """Tokens to answer with: a ``[len=N]`` marker's N, else ``default`` (at least 1)."""
    match = _LEN.search(question)
    return max(1, int(match.group(1)) if match else default)


def render_numbered(parts: Sequence[tuple[int, str]]) -> str:
    """``"1. first\\n2. second"`` from (number, answer) pairs."""
    return "\n".join(f"{number}. {body}" for number, body in parts)


def answer_prompt(text: str, default_tokens: int) -> Answer:
    """The full answer to a prompt's text."""
    questions = find_questions(text)
    bodies = [answer_text(q.text, answer_length(q.text, default_tokens)) for q in questions]
    if len(questions) == 1 and questions[0].number is None:
        return Answer(bodies[0], tuple(questions))
    parts = tuple(
        (q.number or i + 1, body) for i, (q, body) in enumerate(zip(questions, bodies, strict=True))
    )
    return Answer(render_numbered(parts), tuple(questions), parts)


def token_pieces(text: str) -> list[str]:
    """The text split into tokens, each with the whitespace before it; they join back to it."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    """Whitespace-separated words in ``text``."""
    return len(text.split())


def cut_tokens(text: str, limit: int) -> str:
    """The first ``limit`` tokens of ``text``, keeping its own whitespace."""
    return "".join(token_pieces(text)[:limit])


def prompt_tokens(contents: Sequence[str]) -> int:
    """Prompt size: per message, a quarter token per UTF-8 byte (rounded up) plus 4."""
    return sum(math.ceil(len(c.encode()) / 4) + 4 for c in contents)
