"""Injected failures: what goes wrong, how often, drawn reproducibly.

Each request draws at most one fault at arrival from a generator seeded with the service's
seed and the request's number, so a run is reproducible request by request whatever the
interleaving. Error faults answer with OpenAI's error shapes; ``reset`` drops the connection;
``stall`` holds the response long enough to trip client timeouts; ``truncate`` ends a stream
early (and resets a non-streaming request); ``sloppy`` garbles a multi-question answer the way
real models do: one answer dropped, two merged under one number, or two swapped.
"""

from __future__ import annotations

import random
from enum import Enum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from splitter.sim._answers import render_numbered

__all__ = ["FaultKind", "Faults", "draw_fault", "request_rng", "sloppy_parts"]

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
        default=0.0, description="A multi-question answer garbled (drop, merge or swap)."
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


def sloppy_parts(parts: list[tuple[int, str]], rng: random.Random) -> str:
    """A numbered answer with one mistake: an answer dropped, two merged, or two swapped."""
    parts = list(parts)
    i = rng.randrange(len(parts) - 1)
    mistake = rng.choice(("drop", "merge", "swap"))
    if mistake == "drop":
        del parts[rng.randrange(len(parts))]
    elif mistake == "merge":
        (number, first), (_, second) = parts[i], parts[i + 1]
        parts[i : i + 2] = [(number, f"{first} {second}")]
    else:
        (n1, a1), (n2, a2) = parts[i], parts[i + 1]
        parts[i : i + 2] = [(n1, a2), (n2, a1)]
    return render_numbered(parts)
