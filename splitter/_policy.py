"""The configuration users tune: small, frozen, keyword-only, validated field by field.

Tweak a copy with ``policy.model_copy(update={...})``; unknown fields are an error, so a
misspelt option fails loudly instead of being ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Limits", "Policy", "RetryPolicy"]


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


class RetryPolicy(_Config):
    """The one retry layer: jittered exponential backoff that honours the service's retry-after.

    Retried: 408, 409, 429 (but not ``insufficient_quota``), 5xx, connection errors, timeouts
    and 2xx bodies without an answer. Never retried: any other 4xx.
    """

    max_attempts: int = Field(5, ge=1, description="Attempts per request, the first included.")
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
