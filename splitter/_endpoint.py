"""Everything splitter learns about one (base_url, model), kept across batches."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._budget import Budget, BudgetSnapshot
from ._budget._adaptive import AdaptiveConcurrency
from ._budget._registry import shared_budget
from ._estimate import OutputLengths
from ._merge import MergeRecord
from ._policy import Policy
from ._service_model import InFlightMeter, ServiceModel

__all__ = ["Endpoint"]


@dataclass(slots=True)
class Endpoint:
    """The learned service model, answer lengths, merged-reply success, budget and
    concurrency for one endpoint."""

    service: ServiceModel
    lengths: OutputLengths
    budget: Budget | None  # None: Limits(enforce=False)
    concurrency: AdaptiveConcurrency
    meter: InFlightMeter
    merges: MergeRecord = field(default_factory=MergeRecord)

    @classmethod
    def for_policy(
        cls, policy: Policy, *, base_url: str, api_key: str | None, model: str
    ) -> Endpoint:
        limits = policy.limits
        budget: Budget | None = None
        if limits.enforce:
            budget = shared_budget(base_url, api_key, model, limits)
        service = ServiceModel(policy.prior)
        return cls(
            service=service,
            lengths=OutputLengths(policy.expected_output_tokens),
            budget=budget,
            concurrency=AdaptiveConcurrency(limits.max_concurrency, adaptive=limits.adaptive),
            meter=InFlightMeter(service.slot_candidates),
        )

    def budget_snapshot(self) -> BudgetSnapshot:
        return self.budget.snapshot() if self.budget is not None else BudgetSnapshot()
