"""What the simulated model answers: deterministic, checkable text.

Every answer to a question starts with ``answer_tag(question)``, so a client can tell which
question an answer belongs to (and catch swapped or merged answers). A prompt is several
questions in one of two formats, tried in this order:

* splitter's merged-request format: lines that are exactly ``@@ NONCE question K @@`` (one
  nonce, lowercase alphanumeric, shared by all of them) each start item K, which runs to the
  next such line or the end; text before the first is a preamble. It is answered as
  ``@@ NONCE answer K @@`` lines, each followed by its item's answer. A question's text may
  hold numbered lines or marker-like lines of another nonce; they stay inside it.
* a numbered list of two or more items, answered as a numbered list in the items' own
  numbers.

Anything else is one question. ``[len=N]`` inside a question pins its answer to N tokens, so
a question gets the same answer alone, in a list, or merged. A token is a whitespace-separated
word (a merged answer's marker line is five of them).

Prompt formats are parsers from text to ``Question`` items, tried in order (``PARSERS``), so
another format can be added next to these without touching them.
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
    "parse_merged",
    "parse_numbered",
    "prompt_tokens",
    "render_merged",
    "render_numbered",
    "token_pieces",
]

_VOCAB = (
    "the", "model", "answer", "is", "likely", "because", "data", "shows", "a", "clear",
    "result", "with", "some", "caveats", "and", "more", "detail", "on", "each", "point",
    "which", "depends", "context", "overall", "yes", "no", "mostly", "rarely", "often", "here",
)  # fmt: skip
_ITEM = re.compile(r"^\s*(\d+)[.)]\s+(.+)$")
# A whole line (a "\r\n" ending allowed); ``$`` under re.M never matches mid-line.
_MERGED_MARKER = re.compile(r"^@@ ([a-z0-9]+) question ([0-9]+) @@\r?$", re.MULTILINE)
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
    """One question found in a prompt, with the number it was listed under (if any).

    ``nonce`` is set for an item of a merged prompt (marker ``@@ nonce question number @@``).
    """

    text: str
    number: int | None = None
    nonce: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """The full reply to a prompt and the questions it answered."""

    text: str
    questions: tuple[Question, ...]
    parts: tuple[tuple[int, str], ...] = ()  # (number, answer) per item of a multi-question prompt
    nonce: str | None = None  # set when the prompt was in the merged format


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


def parse_merged(text: str) -> list[Question] | None:
    """Items of a merged prompt, or None unless it has marker lines all of one nonce.

    A marker line is exactly ``@@ NONCE question K @@``. Item K's text is everything from its
    marker line to the next one (or the end), stripped; text before the first is a preamble.
    """
    markers = list(_MERGED_MARKER.finditer(text))
    if not markers or len({m.group(1) for m in markers}) != 1:
        return None
    ends = [m.start() for m in markers[1:]] + [len(text)]
    return [
        Question(text[m.end() : end].strip(), int(m.group(2)), m.group(1))
        for m, end in zip(markers, ends, strict=True)
    ]


PARSERS: list[Callable[[str], list[Question] | None]] = [parse_merged, parse_numbered]
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


def render_merged(nonce: str, parts: Sequence[tuple[int, str]]) -> str:
    """``"@@ nonce answer 1 @@\\nfirst\\n@@ nonce answer 2 @@\\nsecond"`` from (number, answer)."""
    return "\n".join(f"@@ {nonce} answer {number} @@\n{body}" for number, body in parts)


def answer_prompt(text: str, default_tokens: int) -> Answer:
    """The full answer to a prompt's text."""
    questions = find_questions(text)
    bodies = [answer_text(q.text, answer_length(q.text, default_tokens)) for q in questions]
    if len(questions) == 1 and questions[0].number is None:
        return Answer(bodies[0], tuple(questions))
    parts = tuple(
        (q.number or i + 1, body) for i, (q, body) in enumerate(zip(questions, bodies, strict=True))
    )
    nonce = questions[0].nonce
    if nonce is not None:
        return Answer(render_merged(nonce, parts), tuple(questions), parts, nonce)
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
