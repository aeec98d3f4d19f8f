"""The one owner per endpoint: everything splitter learns about (base URL, API key, model).

Every ``Splitter``, batch, aggregator and ``wrap()`` clone (``with_options``, ``copy``) in
the process that talks to the same endpoint shares one :class:`Endpoint`: one service
model, one record of answer lengths and merged replies, one rate-limit budget and one
concurrency limit. Endpoints are keyed by a fingerprint that hashes the API key (the key
itself is never kept), so two keys on one base URL are two endpoints.

Two ``Limits`` for one endpoint: the stricter ``rpm``, ``tpm``, ``max_concurrency`` and
``burst`` win (a limit is a fact about the service, and the lower claim is the safe one),
logged once per conflicting pair at WARNING.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import threading
from dataclasses import dataclass, field

from ._budget import Budget, BudgetSnapshot
from ._budget._adaptive import AdaptiveConcurrency
from ._canary import CanaryRecord
from ._estimate import OutputLengths
from ._merge import MergeFormats
from ._meter import InFlightMeter
from ._policy import Limits, Policy
from ._service_model import ServiceModel

__all__ = ["Claim", "Endpoint", "endpoint_fingerprint", "endpoint_for", "forget_endpoints"]

logger = logging.getLogger("splitter")

_endpoints: dict[tuple[object, ...], Endpoint] = {}
_lock = threading.Lock()


def endpoint_fingerprint(base_url: str, api_key: str | None, model: str) -> str:
    """A short, irreversible name for (endpoint, API key, model), for keys and logs."""
    text = "\n".join((base_url.rstrip("/"), api_key or "", model))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(slots=True, eq=False)
class Claim:
    """Requests a batch planned and has not booked yet."""

    requests: float
    tokens: float

    def booked(self, tokens: float) -> None:
        self.requests = max(0.0, self.requests - 1)
        self.tokens = max(0.0, self.tokens - tokens)


@dataclass(slots=True)
class Endpoint:
    """The learned service model, answer lengths, merged-reply success, budget and
    concurrency for one endpoint."""

    service: ServiceModel
    lengths: OutputLengths
    budget: Budget
    concurrency: AdaptiveConcurrency
    meter: InFlightMeter
    limits: Limits
    fingerprint: str = ""
    merges: MergeFormats = field(default_factory=MergeFormats)  # merged replies read back
    canaries: CanaryRecord = field(default_factory=CanaryRecord)  # merge quality
    answered: bool = False  # has this endpoint ever sent back a response (of any status)?
    claims: list[Claim] = field(default_factory=list)  # planned by running batches, unbooked

    def budget_snapshot(self) -> BudgetSnapshot:
        """The budget as the planner should see it: less what batches planned at the same
        time are about to book (each would otherwise plan on the whole room)."""
        snapshot = self.budget.snapshot()
        claims = list(self.claims)
        if not claims:
            return snapshot
        requests, tokens = snapshot.remaining_requests, snapshot.remaining_tokens
        if requests is not None:
            requests = max(0.0, requests - sum(c.requests for c in claims))
        if tokens is not None:
            tokens = max(0.0, tokens - sum(c.tokens for c in claims))
        return dataclasses.replace(snapshot, remaining_requests=requests, remaining_tokens=tokens)

    def claim(self, requests: int, tokens: int) -> Claim:
        """Hold ``requests`` (of ``tokens``) a batch has planned off later plans' room
        until it books them; :meth:`release` when the batch ends."""
        claim = Claim(float(requests), float(tokens))
        self.claims.append(claim)
        return claim

    def release(self, claim: Claim) -> None:
        with contextlib.suppress(ValueError):
            self.claims.remove(claim)

    def tighten(self, limits: Limits) -> None:
        """Apply another caller's ``limits``: the stricter of each stated limit wins."""
        merged = _stricter(self.limits, limits)
        if merged == self.limits:
            return
        logger.warning(
            "two Limits for endpoint %s: %s and %s; the stricter of each holds: %s",
            self.fingerprint,
            _stated(self.limits),
            _stated(limits),
            _stated(merged),
        )
        self.limits = merged
        self.concurrency.lower_ceiling(merged.max_concurrency)
        self.concurrency.adaptive = merged.adaptive
        self.budget.state_limits(rpm=merged.rpm, tpm=merged.tpm, burst=merged.burst)


def endpoint_for(policy: Policy, *, base_url: str, api_key: str | None, model: str) -> Endpoint:
    """The process-wide owner of this endpoint, made from ``policy`` on first use."""
    fingerprint = endpoint_fingerprint(base_url, api_key, model)
    shared = policy.limits.shared
    # A budget kept in Redis and one kept here are different accounts of the key.
    key = (fingerprint, shared.url, shared.namespace) if shared else (fingerprint,)
    with _lock:
        found = _endpoints.get(key)
        if found is None:
            found = _endpoints[key] = _new(policy, fingerprint)
            return found
    found.tighten(policy.limits)
    return found


def forget_endpoints() -> None:
    """Drop everything learned about every endpoint (tests; a fresh start)."""
    with _lock:
        _endpoints.clear()


def _new(policy: Policy, fingerprint: str) -> Endpoint:
    limits = policy.limits
    budget: Budget
    if limits.shared is not None:
        from ._budget._redis import RedisBudget

        budget = RedisBudget(limits.shared, fingerprint=fingerprint, limits=limits)
    else:
        from ._budget import MemoryBudget

        budget = MemoryBudget(
            rpm=limits.rpm, tpm=limits.tpm, burst=limits.burst, slow_start=limits.slow_start
        )
    service = ServiceModel(policy.prior)
    return Endpoint(
        service=service,
        lengths=OutputLengths(policy.expected_output_tokens),
        budget=budget,
        concurrency=AdaptiveConcurrency(limits.max_concurrency, adaptive=limits.adaptive),
        meter=InFlightMeter(service.slot_candidates),
        limits=limits,
        fingerprint=fingerprint,
    )


def _stricter(a: Limits, b: Limits) -> Limits:
    def low(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else min(x, y)

    return a.model_copy(
        update={
            "rpm": low(a.rpm, b.rpm),
            "tpm": low(a.tpm, b.tpm),
            "max_concurrency": min(a.max_concurrency, b.max_concurrency),
            "burst": min(a.burst, b.burst),
            "adaptive": a.adaptive and b.adaptive,
        }
    )


def _stated(limits: Limits) -> str:
    return (
        f"rpm={limits.rpm} tpm={limits.tpm} max_concurrency={limits.max_concurrency} "
        f"burst={limits.burst:.3g} adaptive={limits.adaptive}"
    )
