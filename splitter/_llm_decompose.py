"""Asking a model to take a prompt apart: the request, and a strict reading of its reply.

The reply must be one JSON object (a ```json fence around it is tolerated)::

    {"parts": [{"text": "...", "depends_on": [1]}, ...]}

with ``depends_on`` holding 1-based numbers of earlier parts. The model copies only the
sub-questions, never the shared context (that would cost as many output tokens as the
prompt): the preamble and postscript are the prompt's text before the first part and after
the last, when the parts are found in it verbatim. Anything else — not JSON,
a blank part, a forward or self reference — is a ``ValueError``; the caller then falls back
to the rules in ``_decompose``. Pure: no I/O here.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._decompose import Decomposition, Part

__all__ = ["INSTRUCTION", "parse_plan", "request_text"]

INSTRUCTION = """\
Split the user's prompt below into its independent sub-questions. Reply with one JSON \
object and nothing else:
{"parts": [{"text": "<a sub-question, copied exactly as written>", "depends_on": \
[<numbers of earlier parts whose answers it needs>]}]}
A list of options, requirements or items inside one question is ONE part. Quoted or pasted \
material is not a question. If the prompt is one question, reply with one part holding all \
of it. Parts are numbered from 1."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*(?P<body>.*?)\s*```\s*$", re.S)


class _PlanPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str = Field(min_length=1)
    depends_on: list[int] = Field(default_factory=list)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    parts: list[_PlanPart] = Field(min_length=1)


def request_text(prompt: str) -> str:
    """The user message of the decomposition call."""
    return f"{INSTRUCTION}\n\n<prompt>\n{prompt}\n</prompt>"


def parse_plan(reply: str, prompt: str) -> Decomposition:
    """The model's reply as a ``Decomposition`` of ``prompt``; ``ValueError`` if unusable."""
    fenced = _FENCE.match(reply)
    try:
        plan = _Plan.model_validate(json.loads(fenced.group("body") if fenced else reply))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"the decomposition reply is not the JSON asked for: {exc}") from None
    parts: list[Part] = []
    for number, item in enumerate(plan.parts, start=1):
        text = item.text.strip()
        if not text:
            raise ValueError(f"part {number} of the decomposition is blank")
        bad = [d for d in item.depends_on if not 1 <= d < number]
        if bad:
            raise ValueError(f"part {number} depends on {bad}: only earlier parts can be needed")
        start = prompt.find(text)
        parts.append(
            Part(
                text,
                None,
                0.8,
                tuple(sorted({d - 1 for d in item.depends_on})),
                max(start, 0),
                max(start, 0) + len(text),
            )
        )
    found = all(prompt.find(p.text) >= 0 for p in parts)
    preamble = prompt[: parts[0].start].strip() if found else ""
    postscript = prompt[parts[-1].end :].strip() if found else ""
    return Decomposition(prompt, preamble, tuple(parts), postscript)
