"""What we learn about one (base_url, model): network RTT and the engine's speed curve.

The planner's cost model for a request with I input and O output tokens while m run at once:

    latency = rtt + ttft0 + I / prefill_rate + O * tpot1 * (1 + beta * (m - 1))

Every response is an observation. Where the service reports its processing time
(``openai-processing-ms``) the RTT is the rest of the measured latency, and the engine
terms are fitted to the processing time; otherwise they are fitted to the whole latency.
The fit is least squares on ``[1, I, O, O*(m-1)]``, pulled towards the policy's prior
(ridge), with older observations decaying so the model follows drift. The prior is first
rescaled by how much faster or slower than it the service really is (the geometric mean of
measured / prior-predicted time), so a prior that is 10x off does not bias the fit; its pull
is relative (a 100% change of any parameter costs the same) and fades as data arrives, while
still settling what the data cannot tell apart.
Nothing here does I/O; the clock is whatever the caller measured.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["InFlightMeter", "Observation", "ServiceEstimate", "ServiceModel", "ServicePrior"]

_DECAY = 0.98
_TYPICAL_REQUEST = (1.0, 500.0, 200.0, 0.0)  # features of a request the prior's pull is sized by


class ServicePrior(BaseModel):
    """What to assume about a service before any response has been measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rtt: float = Field(0.1, ge=0, description="Network round trip, seconds.")
    ttft0: float = Field(0.3, ge=0, description="Fixed time to first token, seconds.")
    prefill_rate: float = Field(5000.0, gt=0, description="Input tokens processed per second.")
    tpot1: float = Field(0.015, gt=0, description="Seconds per output token, decoding alone.")
    beta: float = Field(0.05, ge=0, description="TPOT growth per extra concurrent sequence.")
    weight: float = Field(
        1.0, gt=0, description="How many observations the prior is worth at first."
    )


@dataclass(frozen=True, slots=True)
class ServiceEstimate:
    """A snapshot of the cost model's parameters, for the planner."""

    rtt: float
    ttft0: float
    prefill_rate: float
    tpot1: float
    beta: float

    def tpot(self, concurrency: float) -> float:
        return self.tpot1 * (1 + self.beta * max(0.0, concurrency - 1))

    def latency(self, input_tokens: float, output_tokens: float, concurrency: float) -> float:
        """Predicted seconds for one request while ``concurrency`` decode together."""
        prefill = self.ttft0 + input_tokens / self.prefill_rate
        return self.rtt + prefill + output_tokens * self.tpot(concurrency)


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured response."""

    input_tokens: int
    output_tokens: int
    latency: float  # seconds from send to the full body, as the client saw it
    concurrency: float  # time-averaged requests in flight to this service meanwhile
    processing: float | None = None  # the service's own processing seconds, if reported


class ServiceModel:
    """Online estimate of one service's RTT and speed curve."""

    def __init__(self, prior: ServicePrior | None = None) -> None:
        self.prior = prior if prior is not None else ServicePrior()
        self._xtx = [[0.0] * 4 for _ in range(4)]
        self._xty = [0.0] * 4
        self._rtt_sum = 0.0
        self._rtt_weight = 0.0
        self._fit_includes_rtt: bool | None = None
        self._log_ratio = 0.0  # decayed sum of log(measured / prior-predicted)
        self._ratio_weight = 0.0
        self.observations = 0
        self._cached: ServiceEstimate | None = None

    def observe(self, obs: Observation) -> None:
        """Fold one response into the model."""
        if obs.latency <= 0 or not math.isfinite(obs.latency):
            return
        includes_rtt = obs.processing is None
        if self._fit_includes_rtt is None:
            self._fit_includes_rtt = includes_rtt
        if includes_rtt != self._fit_includes_rtt:
            return  # one fit per target; a service reports processing time always or never
        target = obs.latency if includes_rtt else float(obs.processing or 0.0)
        if not includes_rtt:
            self._rtt_sum = self._rtt_sum * _DECAY + max(0.0, obs.latency - target)
            self._rtt_weight = self._rtt_weight * _DECAY + 1
        x = (
            1.0,
            float(obs.input_tokens),
            float(obs.output_tokens),
            obs.output_tokens * max(0.0, obs.concurrency - 1),
        )
        predicted = _dot(x, self._prior_theta(includes_rtt))
        if target > 0 and predicted > 0:
            self._log_ratio = self._log_ratio * _DECAY + math.log(target / predicted)
            self._ratio_weight = self._ratio_weight * _DECAY + 1
        for i in range(4):
            self._xty[i] = self._xty[i] * _DECAY + x[i] * target
            for j in range(4):
                self._xtx[i][j] = self._xtx[i][j] * _DECAY + x[i] * x[j]
        self.observations += 1
        self._cached = None

    def estimate(self) -> ServiceEstimate:
        """The current parameters (the prior until data arrives)."""
        if self._cached is None:
            self._cached = self._solve()
        return self._cached

    def _prior_theta(self, includes_rtt: bool | None) -> tuple[float, float, float, float]:
        p = self.prior
        ttft0 = p.ttft0 + (p.rtt if includes_rtt else 0.0)
        return (ttft0, 1 / p.prefill_rate, p.tpot1, p.tpot1 * p.beta)

    def _solve(self) -> ServiceEstimate:
        speed = math.exp(self._log_ratio / self._ratio_weight) if self._ratio_weight else 1.0
        theta0 = tuple(v * speed for v in self._prior_theta(self._fit_includes_rtt))
        a = [row[:] for row in self._xtx]
        b = self._xty[:]
        typical = _dot(_TYPICAL_REQUEST, theta0)
        fade = 1 + self.observations
        # How far each parameter may plausibly move: its own size, except the concurrency
        # slope, which may be anywhere from 0 to about tpot1 (beta from 0 to 1).
        reach = (theta0[0], theta0[1], theta0[2], theta0[2])
        for j in range(4):
            lam = self.prior.weight * (typical / 2) ** 2 / max(reach[j], 1e-12) ** 2 / fade
            a[j][j] += lam
            b[j] += lam * theta0[j]
        ttft0, inv_prefill, tpot1, slope = _solve4(a, b)
        tpot1 = max(tpot1, 1e-6)
        if self._fit_includes_rtt:
            rtt = 0.0
        elif self._rtt_weight:
            rtt = self._rtt_sum / self._rtt_weight
        else:
            rtt = self.prior.rtt
        return ServiceEstimate(
            rtt=rtt,
            ttft0=max(0.0, ttft0),
            prefill_rate=1 / inv_prefill if inv_prefill > 1e-9 else 1e9,
            tpot1=tpot1,
            beta=min(2.0, max(0.0, slope / tpot1)),
        )

    # -- persistence ---------------------------------------------------------------------

    def dumps(self) -> str:
        """What was learned, as JSON (see :meth:`loads`)."""
        return json.dumps(
            {
                "xtx": self._xtx,
                "xty": self._xty,
                "rtt": [self._rtt_sum, self._rtt_weight],
                "fit_includes_rtt": self._fit_includes_rtt,
                "ratio": [self._log_ratio, self._ratio_weight],
                "observations": self.observations,
                "prior": self.prior.model_dump(),
            }
        )

    @classmethod
    def loads(cls, text: str) -> ServiceModel:
        data = json.loads(text)
        model = cls(ServicePrior(**data["prior"]))
        model._xtx = [[float(v) for v in row] for row in data["xtx"]]
        model._xty = [float(v) for v in data["xty"]]
        model._rtt_sum, model._rtt_weight = (float(v) for v in data["rtt"])
        model._fit_includes_rtt = data["fit_includes_rtt"]
        model._log_ratio, model._ratio_weight = (float(v) for v in data["ratio"])
        model.observations = int(data["observations"])
        return model

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps())

    @classmethod
    def load(cls, path: str | Path) -> ServiceModel:
        return cls.loads(Path(path).read_text())


def _dot(x: tuple[float, ...], theta: tuple[float, ...]) -> float:
    return sum(a * b for a, b in zip(x, theta, strict=True))


def _solve4(a: list[list[float]], b: list[float]) -> tuple[float, float, float, float]:
    """Gaussian elimination with partial pivoting; the ridge keeps ``a`` well conditioned."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            factor = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= factor * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return (x[0], x[1], x[2], x[3])


class InFlightMeter:
    """Time-averaged count of requests in flight, to tag observations with concurrency."""

    def __init__(self) -> None:
        self._count = 0
        self._area = 0.0
        self._since = 0.0

    def _advance(self, now: float) -> None:
        self._area += self._count * (now - self._since)
        self._since = now

    def start(self, now: float) -> tuple[float, float]:
        """Count a request in; returns the token to pass to :meth:`finish`."""
        self._advance(now)
        self._count += 1
        return (now, self._area)

    def finish(self, token: tuple[float, float], now: float) -> float:
        """Count a request out; returns the average concurrency over its lifetime."""
        self._advance(now)
        self._count -= 1
        started, area = token
        return (self._area - area) / (now - started) if now > started else 1.0
