"""The configuration users tune: small, frozen, keyword-only, validated field by field.

Tweak a copy with ``policy.model_copy(update={...})``; unknown fields are an error, so a
misspelt option fails loudly instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._cache import Cache
from ._pricing import Pricing
from ._service_model import ServicePrior

__all__ = [
    "DecomposePolicy",
    "Limits",
    "MergePolicy",
    "Policy",
    "RetryPolicy",
    "SharedBudget",
    "Weighted",
]


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Config):
    """How much the service lets us send."""

    max_concurrency: int = Field(
        64,
        ge=1,
        description="Most requests in flight at once (held until the body is read).",
    )
    rpm: int | None = Field(None, ge=1, description="Requests per minute allowed; None: unknown.")
    tpm: int | None = Field(
        None, ge=1, description="Tokens per minute allowed (input + max_tokens); None: unknown."
    )
    enforce: bool = Field(
        True, description="Wait for the rate-limit budget before sending; False relies on 429s."
    )
    burst: float = Field(
        1 / 6,
        gt=0,
        le=1,
        description="Most of a minute's budget sent at once (Azure enforces ~10 s sub-windows).",
    )
    adaptive: bool = Field(
        True,
        description="Halve concurrency on overload (503/529) and timeouts; regrow it one by one.",
    )
    slow_start: bool = Field(
        True,
        description="While nothing is known of an endpoint's limits, open in waves of 1, 2, "
        "4, ... requests 0.1 s apart (False: send at once; for a server you know is "
        "unlimited, or tests that time requests sent together).",
    )
    shared: SharedBudget | None = Field(
        None, description="Share the budget with other processes through Redis."
    )
    oversized: Literal["allow_once", "error"] = Field(
        "allow_once",
        description="A request larger than the whole token budget: send it once, leaving a "
        "debt, or fail it with BudgetError.",
    )


class SharedBudget(_Config):
    """One rate-limit budget for every process on an API key, kept in Redis (``redis`` extra).

    Keys are ``{namespace}:budget:{fingerprint}``, where the fingerprint hashes the base URL,
    the API key and the model (never the key itself), and expire when unused.
    """

    url: str = Field("redis://127.0.0.1:6379/0", description="Where the Redis server is.")
    namespace: str = Field("splitter", min_length=1, description="Prefix of every key.")
    on_outage: Literal["local", "stop"] = Field(
        "local",
        description="Redis unreachable: continue on a local budget at outage_share of the "
        "limits, or fail requests with BudgetError. Never unlimited.",
    )
    outage_share: float = Field(
        0.25, gt=0, le=1, description="Share of the limits one process uses during an outage."
    )
    key_ttl: float = Field(600, gt=0, description="Seconds an unused budget key lives.")
    timeout: float = Field(0.5, gt=0, description="Seconds to wait for Redis before an outage.")

    def __repr_args__(self) -> Iterator[tuple[str | None, object]]:
        # A password in the URL stays out of reprs (and so out of logs and tracebacks).
        for name, value in super().__repr_args__():
            yield name, redacted_url(value) if name == "url" and isinstance(value, str) else value


def redacted_url(url: str) -> str:
    """``url`` with its password, if any, shown as ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable url>"
    if not password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class RetryPolicy(_Config):
    """The one retry layer: jittered exponential backoff that honours the service's retry-after.

    Retried: 408, 409, 429 (but not ``insufficient_quota``), 5xx, connection errors, timeouts
    and 2xx bodies without an answer. Never retried: any other 4xx. Connection errors
    (refused, unknown host, no connection within the connect timeout) are retried only once
    the endpoint has answered: from a base URL that has never answered, the first one fails
    the batch at once with an ``APIConnectionError`` naming the URL.
    """

    # 7: with a share p of attempts failing independently, p**attempts go unanswered;
    # at p = 0.3 (bench/soak.py) 5 attempts leave 0.24%, 7 leave 0.02% (target 0.1%).
    max_attempts: int = Field(7, ge=1, description="Attempts per request, the first included.")
    initial_wait: float = Field(0.5, ge=0, description="Backoff before the first retry, seconds.")
    max_wait: float = Field(30.0, ge=0, description="Cap on one backoff wait, seconds.")
    jitter: float = Field(0.5, ge=0, description="Up to this many seconds added to each backoff.")
    max_retry_after: float = Field(
        120.0,
        ge=0,
        description="Longest retry-after the service may ask for; a longer one fails the request.",
    )

    @model_validator(mode="after")
    def _initial_within_cap(self) -> RetryPolicy:
        if self.initial_wait > self.max_wait:
            raise ValueError(
                f"initial_wait ({self.initial_wait}) must not exceed max_wait ({self.max_wait})"
            )
        return self


class MergePolicy(_Config):
    """When and how several questions may share one request."""

    max_per_request: int = Field(
        4, ge=1, description="Most questions in one merged request (quality drops past 4-6)."
    )
    answer_margin: float = Field(
        2.0, ge=1, description="A merged request's max_tokens is this times the expected output."
    )
    min_answer_tokens: int = Field(
        64, ge=1, description="Floor of each merged item's share of max_tokens."
    )
    context_window: int | None = Field(
        None,
        ge=1,
        description="The model's context (input + max_tokens); no merged request exceeds it.",
    )
    format: Literal["auto", "markers", "json"] = Field(
        "auto",
        description="How a merged request of plain-text questions asks for its answers: "
        "'markers', under nonce marker lines; 'json', as a JSON schema the service enforces "
        "(one {id, answer} item per question: OpenAI structured outputs, vLLM guided "
        "decoding, llama.cpp grammars); 'auto', markers until the endpoint's replies read "
        "back better as JSON (learned per endpoint). A service that refuses the schema "
        "(400 naming response_format) gets markers from then on.",
    )
    canaries: bool = Field(
        True,
        description="Under strategy='auto', ask some merged items alone as well and compare "
        "(docs/planner.md, 'Merge quality'); a disagreeing merged answer is replaced by the "
        "solo one. False: no canaries and no agreement gate.",
    )
    canary_placement: Literal["auto", "beside", "after"] = Field(
        "auto",
        description="Where a canary goes: 'beside' its merged request (at once), 'after' "
        "its reply is back (the engine's prefix cache then holds the shared context), or "
        "'auto', whichever the plan prices faster ('after' only while merged replies are "
        "read back reliably).",
    )
    canary_first: int = Field(
        8,
        ge=0,
        description="An endpoint's first this many merged requests each send one canary, "
        "while the agreement estimate is unsettled.",
    )
    canary_share: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Once settled, canaries are at most this share of the endpoint's requests.",
    )
    canary_overlap: float = Field(
        0.5,
        gt=0,
        le=1,
        description="A merged answer agrees with its canary when their sets of words overlap "
        "(Jaccard, case and punctuation ignored) at least this much.",
    )
    min_agreement: float = Field(
        0.8,
        ge=0,
        le=1,
        description="strategy='auto' plans merged requests only while the learned share of "
        "canaries that agree stays at or above this; below it, one request per question.",
    )


class Weighted(_Config):
    """An objective trading seconds against tokens: score = seconds + tokens/1000 * weight."""

    seconds_per_1k_tokens: float = Field(ge=0, description="Seconds you'd give to save 1k tokens.")


class DecomposePolicy(_Config):
    """How ``Splitter.ask`` finds the sub-questions of one prompt."""

    mode: Literal["heuristic", "llm"] = Field(
        "heuristic",
        description="heuristic: local rules only; llm: also ask a model for a JSON plan when "
        "that is priced worth it (falls back to the rules on any error).",
    )
    model: str | None = Field(
        None, description="Model for the decomposition call; None: the call's own model."
    )
    min_prompt_tokens: int = Field(
        200, ge=1, description="Shorter prompts are left to the rules: they rarely fool them."
    )
    max_share: float = Field(
        0.25,
        gt=0,
        description="Ask the model only if its predicted time is at most this share of the "
        "predicted time to answer the whole prompt in one request.",
    )


Strategy = Literal["auto", "merge", "fanout", "primed"]
Objective = Literal["latency", "cost"] | Weighted


class Policy(_Config):
    """Everything splitter decides with. ``Policy()`` is a sensible default."""

    limits: Limits = Field(default_factory=Limits, description="What the service allows.")
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="How failures are retried.")
    timeout: float | None = Field(
        600.0, gt=0, description="Per-request timeout in seconds; None: the client's own."
    )
    deadline: float | None = Field(
        None, gt=0, description="Overall time for a batch, seconds; unanswered questions then fail."
    )
    max_question_tokens: int = Field(
        100_000, ge=1, description="Largest question accepted (estimated tokens)."
    )
    strategy: Strategy = Field(
        "auto",
        description="auto: price the plans; merge / fanout: force one request / one each; "
        "primed: one each, the first alone and the rest at its first token (a shared prefix).",
    )
    objective: Objective = Field(
        "latency", description="What auto minimises: latency, cost (billed tokens), or Weighted."
    )
    merge: MergePolicy = Field(default_factory=MergePolicy, description="Merging limits.")
    decompose: DecomposePolicy = Field(
        default_factory=DecomposePolicy, description="How one prompt is taken apart (ask)."
    )
    prior: ServicePrior = Field(
        default_factory=ServicePrior, description="The service model before any measurement."
    )
    expected_output_tokens: int = Field(
        200, ge=1, description="Answer length assumed when nothing better is known."
    )
    aggregate_window_ms: float | None = Field(
        None,
        ge=0,
        description="Splitter.aask_one: calls sharing an isolation_key (and model, system and "
        "keywords) that arrive within this many milliseconds of the first are planned as one "
        "batch, so a tight budget can merge them; None: every call is asked alone.",
    )
    api: Literal["chat", "responses"] = Field(
        "chat",
        description="Which API each request goes to: chat completions, or the Responses API "
        "(client.responses.create; max_tokens is sent as max_output_tokens, a leading system "
        "prompt as instructions, response_format as text.format).",
    )
    pricing: Pricing | tuple[Pricing, ...] | None = Field(
        None,
        description="Your price table (per million tokens, per model): RunStats.cost and "
        "BatchResult.explain() then show what a batch cost, cached input priced as such.",
    )
    prompt_cache_key: bool | Literal["auto"] = Field(
        "auto",
        description="Send one prompt_cache_key (a hash of the model and the system message) "
        "with every request that has a system prompt or context=, so the service routes a "
        "batch's requests to one prefix cache: 'auto' only to api.openai.com (other servers "
        "may refuse a parameter they do not know), True to any endpoint, False never. Your "
        "own prompt_cache_key keyword always wins.",
    )
    cache: Cache | None = Field(
        None,
        description="Keep whole answers and give them again to the same question (same "
        "model, messages, answer-shaping keywords, endpoint and isolation_key); identical "
        "questions of one batch are then sent once. None: no cache.",
    )
