"""Everything splitter learns about one (base_url, model), kept across batches."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._budget import HeaderTracker
from ._estimate import OutputLengths
from ._policy import Policy
from ._service_model import InFlightMeter, ServiceModel

__all__ = ["Endpoint"]


@dataclass(slots=True)
class Endpoint:
    """The learned service model, answer lengths and budget readings for one endpoint."""

    service: ServiceModel
    lengths: OutputLengths
    budget: HeaderTracker
    meter: InFlightMeter = field(default_factory=InFlightMeter)
    #: (predicted, measured) wall time of every planned batch: how honest the model is.
    accuracy: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def for_policy(cls, policy: Policy) -> Endpoint:
        return cls(
            service=ServiceModel(policy.prior),
            lengths=OutputLengths(policy.expected_output_tokens),
            budget=HeaderTracker(rpm=policy.limits.rpm, tpm=policy.limits.tpm),
        )
