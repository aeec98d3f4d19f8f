"""Latency profiles: how fast a simulated model serves, in simulated seconds.

A profile describes one deployment: the network round trip, the fixed and per-token cost of
prefill, the per-token decode cost when a sequence decodes alone, how that cost grows with
each extra sequence decoding alongside (``beta``), and how many sequences can be admitted at
once (``slots``). The numbers are what the engine in ``_engine`` turns into waits.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["PROFILES", "Profile"]


class Profile(BaseModel):
    """One simulated deployment's timing; every time is in simulated seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="Model name the profile is known by.")
    rtt: float = Field(
        ge=0,
        description="Network round trip (s): half before the server sees the request, "
        "half before the client gets the response headers.",
    )
    ttft0: float = Field(ge=0, description="Fixed prefill cost per request (s).")
    prefill_rate: float = Field(
        gt=0, description="Prompt tokens processed per second during prefill."
    )
    tpot1: float = Field(
        ge=0, description="Seconds per output token when one sequence decodes alone."
    )
    beta: float = Field(
        ge=0,
        description="Growth of the decode step cost per extra active sequence: a step costs "
        "tpot1 * (1 + beta * (active - 1)).",
    )
    slots: int = Field(
        ge=1,
        description="Most sequences admitted at once (prefill or decode); the rest queue FIFO.",
    )
    context_window: int = Field(ge=1, description="Largest prompt + completion in tokens.")
    prefix_cache: Literal["none", "slot", "shared"] = Field(
        default="none",
        description="Prefix cache: 'slot' keeps each slot's last prompt (llama.cpp: reused only "
        "by a request that lands on that slot), 'shared' shares 16-token prefix blocks across "
        "requests (vLLM), 'none' recomputes every prompt.",
    )
    cache_capacity: int = Field(
        default=1_000_000, ge=0, description="Tokens a 'shared' prefix cache holds (LRU)."
    )
    shared_prefill: bool = Field(
        default=False,
        description="Prefill is compute-bound: concurrent prefills share the engine's prefill "
        "throughput (the prompt tokens of each of p progress at 1/p speed; each request's "
        "fixed ttft0 is its own) instead of overlapping freely.",
    )
    timings: bool = Field(
        default=False,
        description="Report like llama-server: a 'timings' object (cache_n, prompt_n, "
        "prompt_ms, predicted_n, predicted_ms, predicted_per_token_ms, ...) in each chat "
        "response and a stream's last chunk, and GET /props with total_slots.",
    )
    merge_good_items: int | None = Field(
        default=None,
        ge=0,
        description="In a prompt of several questions, items past this many are answered "
        "off-topic (None: every item is answered well).",
    )
    merge_non_answer_rate: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of multi-question replies that are well-formed non-answers "
        "('I am not sure about that.' for every item), drawn from the service's seed.",
    )
    merge_markers: bool = Field(
        default=True,
        description="The model writes a multi-question reply under the prompt's marker lines "
        "(or numbered); False: one run-on paragraph with no markers, as SmolLM2-135M "
        "writes it. A json_schema still shapes the reply (a grammar enforces it).",
    )
    structured_outputs: bool = Field(
        default=True,
        description="The server enforces a json_schema response_format; False: it refuses "
        "one with 400 naming response_format, as a server without guided decoding does.",
    )

    def prefill_seconds(self, input_tokens: int) -> float:
        """Simulated seconds one sequence spends in prefill (alone, ``input_tokens`` uncached)."""
        return self.ttft0 + input_tokens / self.prefill_rate

    def step_seconds(self, active: int) -> float:
        """Simulated seconds per output token while ``active`` sequences decode together."""
        return self.tpot1 * (1 + self.beta * (max(active, 1) - 1))


def _builtin() -> dict[str, Profile]:
    profiles = [
        # A GPU-served API: big batches, decode cost barely grows with concurrency.
        Profile(
            name="gpt-4o-mini",
            rtt=0.06,
            ttft0=0.25,
            prefill_rate=20000,
            tpot1=0.012,
            beta=0.02,
            slots=512,
            context_window=128000,
        ),
        # beta = 1: concurrent sequences share throughput, so fan-out gains nothing.
        Profile(
            name="serial",
            rtt=0.01,
            ttft0=0.05,
            prefill_rate=5000,
            tpot1=0.02,
            beta=1.0,
            slots=64,
            context_window=32768,
        ),
        # Measured llama.cpp on 2 CPU cores with 5 parallel slots.
        Profile(
            name="llama-cpp-cpu",
            rtt=0.001,
            ttft0=0.05,
            prefill_rate=400,
            tpot1=0.027,
            beta=0.42,
            slots=5,
            context_window=8192,
        ),
        # Zero latency everywhere: what remains is the client's own overhead.
        Profile(
            name="instant",
            rtt=0.0,
            ttft0=0.0,
            prefill_rate=math.inf,
            tpot1=0.0,
            beta=0.0,
            slots=100000,
            context_window=1_000_000,
        ),
    ]
    return {p.name: p for p in profiles}


PROFILES: Mapping[str, Profile] = MappingProxyType(_builtin())
"""The built-in profiles by name (read-only)."""
