"""Injected failures: what goes wrong, how often, drawn reproducibly.

Each request draws at most one fault at arrival from a generator seeded with the service's
seed and the request's number, so a run is reproducible request by request whatever the
interleaving. Error faults answer with OpenAI's error shapes; ``reset`` drops the connection;
``stall`` holds the response long enough to trip client timeouts; ``truncate`` ends a stream
early (and resets a non-streaming request); ``sloppy`` garbles a multi-question answer the way
real models do: one answer dropped, two merged under one number (or marker), or two swapped;
a merged-format answer may instead ignore its markers and come back as a numbered list.

A swap in the merged format keeps the markers in order (the text under ``answer 2`` is really
answer 3's), so markers alone cannot reveal it: only the answers' tags can.
The log records ``sloppy`` when an answer was lost, merged or misplaced, and
``sloppy_format`` when only the format deviated (a numbered list of correct answers).
"""

from __future__ import annotations

import random
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from splitter.sim._answers import render_merged, render_numbered

if TYPE_CHECKING:
    from splitter.sim._answers import Answer

__all__ = [
    "FaultKind",
    "Faults",
    "draw_fault",
    "request_rng",
    "sloppy_answer",
    "sloppy_merged",
    "sloppy_parts",
]

Rate = Annotated[float, Field(ge=0.0, le=1.0)]
"""A probability."""


class FaultKind(Enum):
    """The failure a request suffers; values are the ``error_code`` the log records."""

    RATE_LIMIT = "rate_limit_exceeded"
    QUOTA = "insufficient_quota"
    E500 = "server_error_500"
    E502 = "server_error_502"
    E503 = "server_error_503"
    RESET = "reset"
    STALL = "stall"
    TRUNCATE = "truncated"
    SLOPPY = "sloppy"


class Faults(BaseModel):
    """Per-request fault probabilities (their sum at most 1) and the faults' parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate_429: Rate = Field(default=0.0, description="429 rate_limit_exceeded.")
    rate_quota: Rate = Field(default=0.0, description="429 insufficient_quota.")
    rate_500: Rate = Field(default=0.0, description="500 server_error.")
    rate_502: Rate = Field(default=0.0, description="502 server_error.")
    rate_503: Rate = Field(default=0.0, description="503 server_error.")
    rate_reset: Rate = Field(default=0.0, description="Connection dropped.")
    rate_stall: Rate = Field(default=0.0, description="Response held back for stall_seconds.")
    stall_seconds: float = Field(
        default=30.0, ge=0, description="Simulated seconds a stalled response is held back."
    )
    rate_truncate: Rate = Field(
        default=0.0, description="Stream cut short (non-streaming: connection dropped)."
    )
    rate_sloppy: Rate = Field(
        default=0.0,
        description="A multi-question answer garbled (drop, merge or swap; a merged-format "
        "answer may also come back as a numbered list).",
    )
    sloppy_swaps: bool = Field(
        default=True,
        description="Whether a sloppy answer may swap two answers' texts. No format can reveal "
        "a swap, so turn this off to test that everything detectable is repaired.",
    )
    retry_after: float = Field(
        default=1.0, ge=0, description="Simulated seconds a fault 429 asks the client to wait."
    )

    @model_validator(mode="after")
    def _at_most_one(self) -> Self:
        if sum(rate for _, rate in self.table()) > 1 + 1e-9:
            raise ValueError("fault rates must sum to at most 1 (one fault per request)")
        return self

    def table(self) -> list[tuple[FaultKind, float]]:
        """Each fault with its probability, in the fixed order draws walk them."""
        return [
            (FaultKind.RATE_LIMIT, self.rate_429),
            (FaultKind.QUOTA, self.rate_quota),
            (FaultKind.E500, self.rate_500),
            (FaultKind.E502, self.rate_502),
            (FaultKind.E503, self.rate_503),
            (FaultKind.RESET, self.rate_reset),
            (FaultKind.STALL, self.rate_stall),
            (FaultKind.TRUNCATE, self.rate_truncate),
            (FaultKind.SLOPPY, self.rate_sloppy),
        ]


def request_rng(seed: int, number: int) -> random.Random:
    """The generator for request ``number`` of a service seeded with ``seed``."""
    return random.Random(f"splitter-sim:{seed}:{number}")


def draw_fault(faults: Faults, rng: random.Random) -> FaultKind | None:
    """At most one fault for a request (always consumes exactly one draw)."""
    x = rng.random()
    for kind, rate in faults.table():
        if x < rate:
            return kind
        x -= rate
    return None


def _kinds(swaps: bool, *extra: str) -> tuple[str, ...]:
    return ("drop", "merge", *(("swap",) if swaps else ()), *extra)


def sloppy_parts(parts: list[tuple[int, str]], rng: random.Random, *, swaps: bool = True) -> str:
    """A numbered answer with one mistake: an answer dropped, two merged, or two swapped."""
    changed, _ = _mistake(parts, rng, _kinds(swaps), joiner=" ")
    return render_numbered(changed)


def _mistake(
    parts: list[tuple[int, str]], rng: random.Random, kinds: tuple[str, ...], *, joiner: str
) -> tuple[list[tuple[int, str]], str]:
    """Parts with one mistake drawn from ``kinds``; two merged answers are joined by ``joiner``.

    Any other kind (a format deviation) leaves the parts as they are, for the caller to render.
    """
    parts = list(parts)
    i = rng.randrange(len(parts) - 1)
    mistake = rng.choice(kinds)
    if mistake == "drop":
        del parts[rng.randrange(len(parts))]
    elif mistake == "merge":
        (number, first), (_, second) = parts[i], parts[i + 1]
        parts[i : i + 2] = [(number, f"{first}{joiner}{second}")]
    elif mistake == "swap":
        (n1, a1), (n2, a2) = parts[i], parts[i + 1]
        parts[i : i + 2] = [(n1, a2), (n2, a1)]
    return parts, mistake


def sloppy_merged(
    nonce: str, parts: list[tuple[int, str]], rng: random.Random, *, swaps: bool = True
) -> tuple[str, str]:
    """A merged-format answer with one mistake, and which one it was.

    ``drop``: one answer is lost with its marker. ``merge``: answer k+1's marker line is
    missing, so its text follows answer k's on the next line. ``swap``: two neighbours' texts
    are exchanged under markers left in order (undetectable from the markers). ``numbered``:
    the markers are ignored and the answers come as a ``1. ...`` list. At least two parts;
    the draws are those of ``sloppy_parts`` with one more kind to choose from.
    """
    changed, mistake = _mistake(parts, rng, _kinds(swaps, "numbered"), joiner="\n")
    if mistake == "numbered":
        return render_numbered(changed), mistake
    return render_merged(nonce, changed), mistake


def sloppy_answer(
    answer: Answer, rng: random.Random, *, swaps: bool = True
) -> tuple[str, str | None]:
    """A sloppy reply to ``answer`` and the error code to log.

    The code is ``"sloppy"`` when an answer was lost, merged or misplaced,
    ``"sloppy_format"`` when a merged-format reply came back as a correct numbered list, and
    None when nothing changed (fewer than two answers, or a swap of two identical ones).
    """
    if len(answer.parts) < 2:
        return answer.text, None
    if answer.nonce is None:
        text, mistake = sloppy_parts(list(answer.parts), rng, swaps=swaps), "sloppy"
    else:
        text, mistake = sloppy_merged(answer.nonce, list(answer.parts), rng, swaps=swaps)
    if text == answer.text:
        return text, None
    return text, "sloppy_format" if mistake == "numbered" else "sloppy"
