"""``Pricing``: the user's own price table, so usage and plans can be read in money.

No prices ship with splitter: providers change them, and discounts, batch tiers and
contracts differ. The figures in docs and examples are illustrations, not truth.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Pricing", "price_for"]

_PER = 1_000_000  # prices are per million tokens, as providers quote them


class Pricing(BaseModel):
    """One model's prices per million tokens (any currency, used as given).

    ``model=None`` applies to every model without a row of its own. ``cached_input`` is
    what a prompt token read from the service's prompt cache costs; None: the input price.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="Price of a million prompt tokens.")
    output: float = Field(ge=0, description="Price of a million completion tokens.")
    cached_input: float | None = Field(
        None, ge=0, description="Price of a million cached prompt tokens; None: input's."
    )
    model: str | None = Field(None, description="The model these prices are for; None: any.")

    @model_validator(mode="after")
    def _cached_is_a_discount(self) -> Pricing:
        if self.cached_input is not None and self.cached_input > self.input:
            raise ValueError(
                f"cached_input ({self.cached_input}) is above input ({self.input}): "
                "a cached prompt token never costs more than a fresh one"
            )
        return self

    def cost(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """The price of one request's (or many requests') tokens."""
        cached = min(max(cached_tokens, 0), prompt_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            (prompt_tokens - cached) * self.input
            + cached * cached_price
            + completion_tokens * self.output
        ) / _PER


def price_for(pricing: Pricing | Sequence[Pricing] | None, model: str) -> Pricing | None:
    """The row of ``pricing`` for ``model``: its own, else the one for any model."""
    if pricing is None:
        return None
    rows = (pricing,) if isinstance(pricing, Pricing) else tuple(pricing)
    own = next((row for row in rows if row.model == model), None)
    return own if own is not None else next((row for row in rows if row.model is None), None)
