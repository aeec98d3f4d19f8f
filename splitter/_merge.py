"""Merged requests: one prompt asking several questions, and mapping its answer back.

Each answer is asked for under a marker line holding a random per-request nonce, so text
inside a question (a fake marker, a numbered list, "answer 2 is X") cannot decide where
another question's answer is read from: the question could not know the nonce. When a
model ignores the markers, a numbered list, "Answer N:" headings or a JSON array are
accepted, but only when they hold exactly the items 1..n in order and no question uses
that layout itself (its list could be what the model answered); anything ambiguous is
left for the executor to re-ask alone, because a re-ask costs time while a misattributed
answer costs correctness.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "MergeFormat",
    "MergeFormats",
    "MergeRecord",
    "MergedPrompt",
    "ParsedAnswers",
    "build_merged_prompt",
    "holds_marker_lines",
    "parse_merged",
]

#: The token costs of a merged request beyond its questions and answers: the input pays
#: the instruction once and a marker per item; the output a marker per answer
#: ("@@ nonce answer k @@").
INSTRUCTION_TOKENS = 60
MARKER_TOKENS = 8
ANSWER_MARKER_TOKENS = 5

Method = Literal["markers", "numbered", "headings", "json", "none"]
MergeFormat = Literal["markers", "json"]
_RECORD_DECAY = 0.9  # per merged reply: a few recent replies outweigh old ones
_RECORD_PRIOR = 4.0  # answers' worth of assumed success before any merged reply is seen


class MergeRecord:
    """How reliably one endpoint's model answers merged requests in a readable form.

    ``success`` is the share of merged answers read back (a prior of full success worth a
    few answers, then decayed counts): a model that ignores the format (a small local model,
    say) has every merged answer re-asked alone, which the planner prices in.
    """

    __slots__ = ("_asked", "_read")

    def __init__(self) -> None:
        self._asked = 0.0
        self._read = 0.0

    def observe(self, asked: int, read: int) -> None:
        """One merged reply: ``asked`` answers in it, ``read`` of them parsed."""
        self._asked = self._asked * _RECORD_DECAY + asked
        self._read = self._read * _RECORD_DECAY + read

    @property
    def success(self) -> float:
        return (self._read + _RECORD_PRIOR) / (self._asked + _RECORD_PRIOR)


class MergeFormats:
    """One endpoint's merged replies by layout: read back under nonce markers, or as the
    JSON a schema asked for; which layout its plain-text merges use (``MergePolicy.format``).

    Under "auto" the layout read back more reliably is used, markers on a tie (no schema
    is sent to a service that might not take one): a model that ignores the markers (a
    small local model, say) has its next merged requests asked for JSON, which a service
    that enforces schemas cannot get wrong in form. A service that refused the schema gets
    markers from then on, whatever the policy says.
    """

    __slots__ = ("json", "json_refused", "markers")

    def __init__(self) -> None:
        self.markers = MergeRecord()
        self.json = MergeRecord()
        self.json_refused = False

    def choose(self, stated: Literal["auto", "markers", "json"]) -> MergeFormat:
        """The layout a merged request of plain-text questions is asked in."""
        if stated == "markers" or self.json_refused:
            return "markers"
        if stated == "json" or self.json.success > self.markers.success:
            return "json"
        return "markers"

    def success(self, stated: Literal["auto", "markers", "json"], *, schema: bool) -> float:
        """The share of merged answers read back in the layout a merge will use (``schema``:
        the caller's own JSON schema, always asked for as JSON)."""
        return (self.json if schema else self.record(self.choose(stated))).success

    def record(self, layout: MergeFormat) -> MergeRecord:
        return self.json if layout == "json" else self.markers


@dataclass(frozen=True, slots=True)
class MergedPrompt:
    """The user message of a merged request and what its answer is parsed with."""

    text: str
    nonce: str
    count: int
    # Layouts a marker-less answer may be read by: not one that a question's own text
    # uses, or the model answering that question's list would pass for every item.
    positional: tuple[Method, ...] = ("headings", "numbered")


@dataclass(frozen=True, slots=True)
class ParsedAnswers:
    """Answers found (by 1-based item number) and the items that must be re-asked."""

    answers: dict[int, str]
    missing: tuple[int, ...]
    method: Method
    suspects: tuple[int, ...] = field(default=())  # found, but possibly holding a lost neighbour


def build_merged_prompt(
    questions: Sequence[str],
    *,
    preamble: str | None = None,
    nonce: str | None = None,
    as_json: bool = False,
) -> MergedPrompt:
    """One prompt that asks every question under its own nonce-marked heading; ``as_json``:
    the answers are asked for as a JSON ``answers`` array keyed by question number (the
    request's schema, ``_structured.merged_format``, says their shape)."""
    nonce = nonce or secrets.token_hex(6)
    head = (
        f"Answer each of the {len(questions)} questions below on its own. Start each answer "
        "with its marker line, copied exactly and alone on its line, then the answer. "
        f"Write nothing before the first marker.\nFor example: @@ {nonce} answer 1 @@"
    )
    if as_json:
        head = (
            f"Answer each of the {len(questions)} questions below on its own. Reply with "
            'JSON: {"answers": [{"id": K, "answer": ...}, ...]}, one item per question, '
            "K its number."
        )
    items = "\n".join(
        f"@@ {nonce} question {i} @@\n{q.strip()}" for i, q in enumerate(questions, 1)
    )
    parts = [preamble.strip()] if preamble and preamble.strip() else []
    lines = [line for q in questions for line in q.splitlines()]
    positional = tuple(
        method for pattern, method in _POSITIONAL if not any(pattern.match(line) for line in lines)
    )
    return MergedPrompt("\n\n".join([*parts, head, items]), nonce, len(questions), positional)


def holds_marker_lines(questions: Sequence[str]) -> bool:
    """Whether a question holds a line shaped like a merged prompt's own markers. A model
    may take it for one and answer the wrong items: under markers its reply then uses no
    marker of this request's nonce and is re-asked, but a JSON schema makes any reply well
    formed, so such a group is asked under markers (``MergePolicy.format``)."""
    return any(_MARKER_LINE.search(q) for q in questions)


_MARKER_LINE = re.compile(r"^[ \t]*@@.*@@[ \t]*\r?$", re.M)


def parse_merged(text: str, prompt: MergedPrompt, *, truncated: bool = False) -> ParsedAnswers:
    """Map a merged response back to item numbers; ``truncated`` when finish_reason=length."""
    method: Method = "markers"
    pieces = _marker_pieces(text, prompt.nonce)
    found = _trusted(pieces, prompt.count)
    if not pieces:
        # Only a response that never used this request's markers is read by position: once
        # a marker is there, numbered lines and "Answer N" under it are some answer's text.
        found, method = _fallback(text, prompt.count, prompt.positional)
    answers = {k: v for k, v in found.items() if v}
    lost = [k for k in range(1, prompt.count + 1) if k not in answers]
    if truncated and answers:
        # The cut explains every item after the last one found, and may have hit that one.
        lost = [k for k in lost if k < max(answers)]
        del answers[max(answers)]
    # A lost marker usually means its answer ran into the previous one.
    suspects = tuple(sorted({k - 1 for k in lost} & answers.keys()))
    for k in suspects:
        del answers[k]
    missing = tuple(k for k in range(1, prompt.count + 1) if k not in answers)
    return ParsedAnswers(answers, missing, method if answers else "none", suspects)


def _split(text: str, matches: list[re.Match[str]]) -> list[tuple[int, str]]:
    ends = [m.start() for m in matches[1:]] + [len(text)] if matches else []
    return [
        (int(m.group(1)), text[m.end() : end].strip()) for m, end in zip(matches, ends, strict=True)
    ]


def _marker_pieces(text: str, nonce: str) -> list[tuple[int, str]]:
    pattern = re.compile(
        rf"^[ \t]*(?:#+[ \t]*|\*\*)?@@[ \t]*{re.escape(nonce)}[ \t]+answer[ \t]+(\d{{1,9}})[ \t]*@@"
        r"(?:\*\*)?[ \t]*$",
        re.M | re.I,
    )
    return _split(text, list(pattern.finditer(text)))


def _trusted(pieces: list[tuple[int, str]], count: int) -> dict[int, str]:
    seen = Counter(k for k, _ in pieces)
    # A number that appears twice cannot be trusted either time.
    return {k: v for k, v in pieces if 1 <= k <= count and seen[k] == 1}


_NUMBERED = re.compile(r"^[ \t]*(?:\*\*)?(\d{1,9})[.)](?:\*\*)?(?:[ \t]+|[ \t]*$)", re.M)
_HEADINGS = re.compile(
    r"^[ \t]*(?:#+[ \t]*)?(?:\*\*)?answer[ \t]+(\d{1,9})[ \t]*[:.)-]?(?:\*\*)?[ \t]*", re.M | re.I
)


_POSITIONAL: tuple[tuple[re.Pattern[str], Method], ...] = (
    (_HEADINGS, "headings"),
    (_NUMBERED, "numbered"),
)


def _fallback(text: str, count: int, allowed: Sequence[Method]) -> tuple[dict[int, str], Method]:
    as_json = _json_array(text, count)
    if as_json:
        return as_json, "json"
    readings = [(list(p.finditer(text)), m) for p, m in _POSITIONAL if m in allowed]
    # The format is the one the response opens with: "1." lines after "Answer 1:" headings
    # are some answer's own list, and must not be read as the items.
    heads = [p.search(text) for p, _ in _POSITIONAL]
    first = min((m.start() for m in heads if m is not None), default=-1)
    for matches, method in readings:
        pieces = _split(text, matches)
        if (
            matches[:1]
            and matches[0].start() == first
            and [k for k, _ in pieces] == list(range(1, count + 1))
        ):
            return dict(pieces), method
    return {}, "none"


def _json_array(text: str, count: int) -> dict[int, str]:
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    if isinstance(value, list) and len(value) == count and all(isinstance(v, str) for v in value):
        return {i: v.strip() for i, v in enumerate(value, 1)}
    return {}
