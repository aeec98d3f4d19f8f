"""What we learn about one (base_url, model): network RTT and the engine's speed curve.

The planner's cost model for a request with I input and O output tokens while m run at once:

    latency = rtt + ttft0 + I / prefill_rate * (1 + share * (s - 1))
                    + O * tpot1 * (1 + beta * (s - 1)) * q

where s = min(m, slots) sequences share the engine and q = max(1, m / slots) is how much
longer a request takes because the engine runs only ``slots`` at once and queues the rest
(llama.cpp's ``-np``, vLLM's ``max_num_seqs``). Without a slot limit s = m and q = 1.

Every response is an observation. Where the service reports its processing time
(``openai-processing-ms``) the RTT is the rest of the measured latency, and the engine
terms are fitted to the processing time; otherwise they are fitted to the whole latency.
The fit is least squares on ``[1, I, O, O*(m-1), I*(m-1)]``, pulled towards the policy's prior
(ridge), with older observations decaying so the model follows drift. The slot count is
not reported by any API, so one such fit runs per candidate count, and the count whose fit
leaves clearly less unexplained time than "no limit" wins (a queue shows as latency growing
faster with concurrency past the slot count than below it). The prior is first
rescaled by how much faster or slower than it the service really is (the geometric mean of
measured / prior-predicted time), so a prior that is 10x off does not bias the fit; its pull
is relative (a 100% change of any parameter costs the same) and fades as data arrives, while
still settling what the data cannot tell apart.
Nothing here does I/O; the clock is whatever the caller measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._cost_model import ServiceEstimate, simulate
from ._engine_readings import EngineReadings
from ._fit_sampling import FitSampler
from ._meter import SLOT_CANDIDATES, Reading
from ._prefix_cache import PrefixCacheRecord
from ._service_fit import _DECAY, _SETTLED, FEATURES, Theta, _dot, _Fit

__all__ = ["Observation", "ServiceModel", "ServicePrior"]

# features of a request the prior's pull is sized by
_TYPICAL_REQUEST = (1.0, 500.0, 200.0, 0.0, 0.0)
# A learned prefill share below this is taken as none: a hosted API's concurrent requests do
# not share one engine's compute as far as one client sees, and noise must not make the
# planner price every plan with the (slower) shared-prefill replay.
_MIN_SHARE = 0.05
# A slot limit must leave at most this share of the prediction error "no limit" leaves:
# noise alone must not invent a queue.
_SLOTS_EVIDENCE = 0.7
_EPISODE_CAP = 256  # requests replayed at once when the service is never idle
# Slot counts are scored on every episode until this many have been, then on one in
# _SCORE_EVERY (an episode skipped is dropped whole, so the errors stay comparable).
_SCORED_FIRST = 4
_SCORE_EVERY = 4
_PENDING_EPISODES = 4  # episodes whose replay may wait until the slot count is read


class ServicePrior(BaseModel):
    """What to assume about a service before any response has been measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rtt: float = Field(0.1, ge=0, description="Network round trip, seconds.")
    ttft0: float = Field(0.3, ge=0, description="Fixed time to first token, seconds.")
    prefill_rate: float = Field(5000.0, gt=0, description="Input tokens processed per second.")
    tpot1: float = Field(0.015, gt=0, description="Seconds per output token, decoding alone.")
    beta: float = Field(0.05, ge=0, description="TPOT growth per extra concurrent sequence.")
    prefill_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="How much concurrent prefills slow each other: 0 independent (a hosted "
        "API, as far as one client sees), 1 compute-bound (one local engine); learned from "
        "llama-server's timings where it reports them.",
    )
    cached_rate: float | None = Field(
        None,
        gt=0,
        description="Prompt tokens per second for a prefix the engine's cache holds; None: "
        "no cache assumed until responses report cached tokens, then learned from them.",
    )
    slots: int | None = Field(
        None,
        ge=1,
        description="Sequences the server runs at once (llama.cpp -np, vLLM max_num_seqs), "
        "when known; None learns it from responses.",
    )
    weight: float = Field(
        1.0, gt=0, description="How many observations the prior is worth at first."
    )


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured response."""

    input_tokens: int
    output_tokens: int
    latency: float  # seconds from send to the full body, as the client saw it
    concurrency: float  # time-averaged requests in flight to this service meanwhile
    processing: float | None = None  # the service's own processing seconds, if reported
    cached_tokens: int = 0  # of input_tokens, read from the service's prefix cache
    # Per candidate slot count: the readings of (seconds it would have queued at the server,
    # time-averaged sequences running meanwhile), from :class:`InFlightMeter`; missing: no
    # queue.
    queue: Mapping[int | None, tuple[Reading, ...]] | None = None
    started: float | None = None  # when it was sent, on the caller's clock
    idle: bool = False  # nothing else was in flight to this service when it returned
    # Folded into the fits (False: one :meth:`ServiceModel.sample` left out; its queue was
    # not read, and it counts only in the episode replayed to score the slot counts).
    fit: bool = True
    # Sent once another request of its batch, with these prompt tokens in common, had its
    # first token (primed fan-out, or the others of an ordered stream): what the cache
    # served of them says whether the cache is shared or each slot's own. 0: not such.
    follows: int = 0


class ServiceModel:
    """Online estimate of one service's RTT, speed curve and slot count."""

    def __init__(self, prior: ServicePrior | None = None) -> None:
        self.prior = prior if prior is not None else ServicePrior()
        known = self.prior.slots
        self._fits = [_Fit(s) for s in ((known,) if known is not None else SLOT_CANDIDATES)]
        self._rtt_sum = 0.0
        self._rtt_weight = 0.0
        self._fit_includes_rtt: bool | None = None
        self._log_ratio = 0.0  # decayed sum of log(measured / prior-predicted)
        self._ratio_weight = 0.0
        self.observations = 0  # folded into the fits
        self._sampler = FitSampler()
        # What the endpoint's budget learned about its rate limits (Splitter.service_model
        # fills it in), so a saved model starts a new process knowing them too.
        self.limits: dict[str, Any] = {}
        self._cached: ServiceEstimate | None = None
        self._episode: list[tuple[float, float, int, int]] = []
        self._episodes = 0  # episodes ended, scored or not
        # Episodes scored but not yet replayed: each with every count's estimate then.
        self._pending: list[
            tuple[list[tuple[float, float, int, int]], list[tuple[_Fit, ServiceEstimate | None]]]
        ] = []
        self.engine = EngineReadings()  # what the engine tells itself (llama-server's timings)
        self.prefix_cache = PrefixCacheRecord()  # its cost per token and its scope

    def sample(self, booked: float = 0.0) -> bool:
        """Whether the response to a request about to be sent, booking ``booked`` tokens
        (input + max_tokens), is to be folded into the fits (and its queue read by the
        meter): every one until the fits have ``_SETTLED`` observations, then a sample that
        still takes every kind of request not yet learned (:mod:`._fit_sampling`). Every
        response still counts in the episodes replayed to score the slot counts."""
        return self._sampler.choose(booked, self.observations >= _SETTLED)

    def observe(self, obs: Observation) -> None:
        """Fold one response into the model."""
        took = obs.latency if obs.processing is None else obs.processing
        self.engine.observed(obs.input_tokens, obs.output_tokens, obs.concurrency, took)
        if obs.follows and self.prefix_cache.followed(obs.follows, obs.cached_tokens):
            self._cached = None
        if obs.latency <= 0 or not math.isfinite(obs.latency):
            return
        includes_rtt = obs.processing is None
        if self._fit_includes_rtt is None:
            self._fit_includes_rtt = includes_rtt
        if includes_rtt != self._fit_includes_rtt:
            return  # one fit per target; a service reports processing time always or never
        fresh = obs.input_tokens - obs.cached_tokens  # a cached prefix is priced apart
        if obs.fit:
            self._fold(obs, includes_rtt, fresh)
        if obs.started is not None:
            self._episode.append((obs.started, obs.latency, fresh, obs.output_tokens))
            if obs.idle or len(self._episode) >= _EPISODE_CAP:
                self._episodes += 1
                if self._episodes <= _SCORED_FIRST or self._episodes % _SCORE_EVERY == 0:
                    self._score_slots()
                else:
                    self._episode = []

    def _fold(self, obs: Observation, includes_rtt: bool, fresh: int) -> None:
        """Fold ``obs`` into the speed ratio, the cache's cost and every candidate's fit."""
        target = obs.latency if includes_rtt else float(obs.processing or 0.0)
        if not includes_rtt:
            self._rtt_sum = self._rtt_sum * _DECAY + max(0.0, obs.latency - target)
            self._rtt_weight = self._rtt_weight * _DECAY + 1
        queue = obs.queue or {}
        rtt = self._rtt_sum / self._rtt_weight if self._rtt_weight else 0.0
        no_limit = queue.get(None, ((0.0, obs.concurrency),))[0]
        if obs.cached_tokens > 0:
            self._learn_cached(obs, target, queue, None if includes_rtt else rtt)
        extra = no_limit[1] - 1
        x = (1.0, fresh, obs.output_tokens, obs.output_tokens * extra, fresh * extra)
        predicted = _dot(x, self._prior_theta(includes_rtt))
        if target > 0 and predicted > 0:
            self._log_ratio = self._log_ratio * _DECAY + math.log(target / predicted)
            self._ratio_weight = self._ratio_weight * _DECAY + 1
        for fit in self._fits:
            # What the engine spent on it if the server ran ``fit.slots`` at once: the time
            # it would have queued is not the engine's, and only the sequences holding a
            # slot shared its decode. Where the readings of its queueing differ, the one
            # nearer what this fit predicts for it wins.
            fallback = ((0.0, min(obs.concurrency, fit.slots or obs.concurrency)),)
            served: list[tuple[float, float]] = []
            for wait, running in queue.get(fit.slots, fallback):
                if not includes_rtt:
                    # The wait was timed on our clock, from sending to the response that
                    # freed the slot; at the server it began half a round trip after we
                    # sent and ended half a round trip before that response reached us.
                    wait = max(0.0, wait - rtt)
                served.append((max(0.0, target - wait), running))
            if len(served) > 1:
                theta = fit.choosing(self.observations, self._ridge)
                served.sort(key=lambda r: _misfit(theta, obs, r))
            fit.add(float(fresh), float(obs.output_tokens), served[0][1], served[0][0])
        self.observations += 1
        self._cached = None

    def _learn_cached(
        self,
        obs: Observation,
        target: float,
        queue: Mapping[int | None, tuple[Reading, ...]],
        rtt: float | None,
    ) -> None:
        """What a cached prompt token costs: the time the model (before this response)
        leaves unexplained once the wait for an engine slot, the uncached prompt, the answer
        and the fixed terms are paid, against the cached tokens (``PrefixCacheRecord.cost``).
        The wait: of the meter's readings for the slot count learned, the shorter, so the
        cache is credited only with what every reading leaves; ``rtt`` is taken off a wait
        timed on our clock (None: ``target`` is the whole latency)."""
        e = self.estimate()
        readings = queue.get(e.slots) or ((0.0, obs.concurrency),)
        wait, running = min(readings)
        if rtt is not None:
            wait = max(0.0, wait - rtt)
        if e.slots is not None:
            running = min(running, e.slots)
        fresh = obs.input_tokens - obs.cached_tokens
        shared = 1 + e.prefill_share * max(0.0, running - 1)
        known = (
            wait + e.ttft0 + fresh / e.prefill_rate * shared + obs.output_tokens * e.tpot(running)
        )
        self.prefix_cache.cost(obs.cached_tokens, max(0.0, target - known))
        self._cached = None

    def _score_slots(self) -> None:
        """Replay the requests that overlapped since the service was last idle under each
        candidate slot count, and charge each count its error on their latencies.

        Per-request fits cannot choose the count: the fewer the slots, the more of each
        latency is put down to queueing, which that fit then need not explain. The replay
        predicts the queueing too, so every count answers for the whole latency.

        Each count's estimate is taken now; the replays, the costly part, wait until the
        slot count is next read (:meth:`estimate`, :meth:`dumps`) or ``_PENDING_EPISODES``
        episodes are waiting: off the path of the response that ended the episode, and
        never run for a model no one reads again (the same errors either way).
        """
        episode, self._episode = sorted(self._episode), []
        if len(episode) < 2 or len(self._fits) < 2:
            return
        theta0, lams = self._ridge()
        peak = _peak_overlap(episode)
        estimates: list[tuple[_Fit, ServiceEstimate | None]] = []
        for fit in reversed(self._fits):  # "no limit" first
            if estimates and fit.slots is not None and fit.slots >= peak:
                # Never binding here: it predicts what "no limit" predicts.
                estimates.append((fit, None))
            else:
                estimates.append((fit, self._estimate_from(fit.solve(theta0, lams), fit.slots)))
        self._pending.append((episode, estimates))
        if len(self._pending) >= _PENDING_EPISODES:
            self._replay_pending()

    def _replay_pending(self) -> None:
        """Charge each count its error on the episodes waiting, in the order they ended."""
        pending, self._pending = self._pending, []
        for episode, estimates in pending:
            first = episode[0][0]
            ready = [sent - first for sent, *_ in episode]
            inputs = [i for *_, i, _ in episode]
            outputs = [o for *_, o in episode]
            fade = _DECAY ** len(episode)
            measured = sorted(latency for _, latency, *_ in episode)
            unlimited = 0.0
            for fit, estimate in estimates:
                error = unlimited
                if estimate is not None:
                    starts, finishes = simulate(inputs, outputs, ready, estimate, len(episode))
                    # Sorted, as the server's admission order is its own: compared is the
                    # spread of latencies (who waited), not which request it was.
                    predicted = sorted(f - s for s, f in zip(starts, finishes, strict=True))
                    error = sum(
                        math.log(p / m) ** 2
                        for p, m in zip(predicted, measured, strict=True)
                        if p > 0 and m > 0
                    )
                    if fit.slots is None:
                        unlimited = error
                fit.error = fit.error * fade + error
        self._cached = None

    @property
    def slot_candidates(self) -> tuple[int | None, ...]:
        """The server slot counts this model weighs (None: no limit)."""
        return tuple(fit.slots for fit in self._fits)

    def estimate(self) -> ServiceEstimate:
        """The current parameters (the prior until data arrives), with what the engine told
        in place of what was inferred (``_engine_readings``)."""
        if self._pending:
            self._replay_pending()
        if self.engine.news() or self._cached is None:
            self._cached = self.engine.applied(self._solve())
        return self._cached

    def _prior_theta(self, includes_rtt: bool | None) -> Theta:
        p = self.prior
        ttft0 = p.ttft0 + (p.rtt if includes_rtt else 0.0)
        inv_prefill = 1 / p.prefill_rate
        return (ttft0, inv_prefill, p.tpot1, p.tpot1 * p.beta, inv_prefill * p.prefill_share)

    def _ridge(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The prior's parameters rescaled to the measured speed, and each one's pull."""
        speed = math.exp(self._log_ratio / self._ratio_weight) if self._ratio_weight else 1.0
        theta0 = tuple(v * speed for v in self._prior_theta(self._fit_includes_rtt))
        typical = _dot(_TYPICAL_REQUEST, theta0)
        fade = 1 + self.observations
        # How far each parameter may plausibly move: its own size, except the concurrency
        # slopes, which may be anywhere from 0 to about tpot1 (beta from 0 to 1) and to
        # 1 / prefill_rate (the prefill share from 0 to 1).
        reach = (theta0[0], theta0[1], theta0[2], theta0[2], theta0[1])
        lams = tuple(
            self.prior.weight * (typical / 2) ** 2 / max(r, 1e-12) ** 2 / fade for r in reach
        )
        return theta0, lams

    def _solve(self) -> ServiceEstimate:
        fit = self._fits[-1]  # "no limit", or the prior's known count
        told = [f for f in self._fits if f.slots is not None and f.slots == self.engine.slots]
        if told:
            fit = told[0]  # the server said how many it runs at once
        elif self.prior.slots is None:
            best = min(self._fits[:-1], key=lambda f: f.error)
            if best.error < _SLOTS_EVIDENCE * fit.error:
                fit = best
        return self._estimate_from(fit.solve(*self._ridge()), fit.slots)

    def _estimate_from(self, theta: Theta, slots: int | None) -> ServiceEstimate:
        ttft0, inv_prefill, tpot1, slope, prefill_slope = theta
        tpot1 = max(tpot1, 1e-6)
        if self._fit_includes_rtt:
            rtt = 0.0
        elif self._rtt_weight:
            rtt = self._rtt_sum / self._rtt_weight
        else:
            rtt = self.prior.rtt
        prefill_rate = 1 / inv_prefill if inv_prefill > 1e-9 else 1e9
        share = min(1.0, max(0.0, prefill_slope * prefill_rate))
        return ServiceEstimate(
            rtt=rtt,
            ttft0=max(0.0, ttft0),
            prefill_rate=prefill_rate,
            tpot1=tpot1,
            beta=min(2.0, max(0.0, slope / tpot1)),
            slots=slots,
            prefill_share=share if share >= _MIN_SHARE else 0.0,
            cached_rate=self.prefix_cache.rate(prefill_rate, self.prior.cached_rate),
            cache_per_slot=self.prefix_cache.per_slot,
        )

    # -- persistence ---------------------------------------------------------------------

    def dumps(self) -> str:
        """What was learned, as JSON (see :meth:`loads`)."""
        self._replay_pending()
        return json.dumps(
            {
                "fits": [fit.dump() for fit in self._fits],
                "rtt": [self._rtt_sum, self._rtt_weight],
                "fit_includes_rtt": self._fit_includes_rtt,
                "ratio": [self._log_ratio, self._ratio_weight],
                "observations": self.observations,
                "prior": self.prior.model_dump(),
                "limits": self.limits,
                **self.prefix_cache.dump(),
            }
        )

    @classmethod
    def loads(cls, text: str) -> ServiceModel:
        data = json.loads(text)
        model = cls(ServicePrior(**data["prior"]))
        saved = {fit["slots"]: fit for fit in data["fits"]}
        for fit in model._fits:
            if fit.slots not in saved:
                raise ValueError(f"saved service model has no fit for slots={fit.slots}")
            row = saved[fit.slots]
            # A model saved before the prefill share was fitted has four features: the
            # fifth starts empty (the prior's share until observations arrive).
            pad = FEATURES - len(row["xty"])
            fit.xtx = [[float(v) for v in r] + [0.0] * pad for r in row["xtx"]]
            fit.xtx += [[0.0] * FEATURES for _ in range(pad)]
            fit.xty = [float(v) for v in row["xty"]] + [0.0] * pad
            fit.yy = float(row["yy"])
            fit.error = float(row["error"])
        model._rtt_sum, model._rtt_weight = (float(v) for v in data["rtt"])
        model._fit_includes_rtt = data["fit_includes_rtt"]
        model._log_ratio, model._ratio_weight = (float(v) for v in data["ratio"])
        model.observations = int(data["observations"])
        model.limits = dict(data.get("limits") or {})
        model.prefix_cache = PrefixCacheRecord.load(data)
        return model

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps())

    @classmethod
    def load(cls, path: str | Path) -> ServiceModel:
        return cls.loads(Path(path).read_text())


def _peak_overlap(episode: Sequence[tuple[float, float, int, int]]) -> int:
    """Most requests of ``episode`` (sent at, latency, ...) in flight at one moment."""
    edges = sorted(
        [(sent, 1) for sent, *_ in episode] + [(sent + lat, -1) for sent, lat, *_ in episode],
        key=lambda e: (e[0], e[1]),
    )
    peak = count = 0
    for _, step in edges:
        count += step
        peak = max(peak, count)
    return peak


def _misfit(theta: Theta, obs: Observation, reading: tuple[float, float]) -> float:
    """How far a reading's served time is from what ``theta`` predicts for it (log ratio)."""
    served, running = reading
    fresh = obs.input_tokens - obs.cached_tokens
    extra = max(1.0, running) - 1
    x = (1.0, fresh, obs.output_tokens, obs.output_tokens * extra, fresh * extra)
    predicted = _dot(x, theta)
    if served <= 0 or predicted <= 0:
        return math.inf
    return abs(math.log(served / predicted))
