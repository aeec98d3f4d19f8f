"""What an engine tells about its own work, where it does: llama-server's ``timings`` in
every response body (and a stream's last chunk) and the ``total_slots`` of its ``GET
/props``. The service model uses these readings in place of what it would otherwise infer
from latencies alone, and works as before where a service tells nothing.

* **prefill**: ``prompt_ms`` over ``prompt_n`` (the prompt tokens computed, the cached
  ``cache_n`` left out) is the engine's time per uncached prompt token. Concurrent prefills
  share the engine's compute, so readings of requests that had the service to themselves are
  used while there are any; otherwise all readings (a slower rate than the engine's alone).
* **prefill share**: the same per-token prefill time fitted on the concurrency the request
  saw, ``t1 * (1 + share * (m - 1))``, says how much concurrent prefills slow each other
  (``ServiceEstimate.prefill_share``: 0 independent, 1 compute-bound). Requests in flight
  are not all prefilling at once, and llama-server starts a request's ``prompt_ms`` only
  when its first tokens enter a shared batch (the wait for the others' chunks before it is
  in no timing), so this reads low rather than high: measured on SmolLM2 with 4 concurrent
  ~1,200-token prompts, 0.27 where the wall time (22 s for four against 6.8 s alone) says
  ~0.75. The latency fit (``_service_model``) learns the share from the wall; this reading
  only raises it, and is told only once readings at two concurrencies at least a request
  apart exist.
* **decode**: ``predicted_per_token_ms`` is the time per output token at the concurrency the
  request saw; a fit of it on that concurrency, ``tpot1 * (1 + beta * (m - 1))``, gives the
  decode terms, pulled towards the latency fit's values where the readings cannot tell
  (all at one concurrency, say). llama-server decodes a sequence in the same batches as
  the other slots' prompt chunks, so beside a long prefill a token takes the chunk's time
  (SmolLM2 beside ~1,500-token prompts: 220-780 ms a token against ~20 ms alone): a reading
  taken with others in flight counts only while it is within what a beta of 2 allows over
  decode alone (timed by the readings alone, or while there are none by the fastest
  reading); beyond it the time is the others' prefill, which the latency fit's prefill
  share prices.
* **slots**: ``total_slots`` is how many sequences the server runs at once (``-np``).
* **prefix cache**: ``cache_n`` prompt tokens were reused, and ``prompt_ms`` timed only the
  other ``prompt_n``: once a reading has reused a prefix longer than the few tokens of a
  system prompt (``_MIN_PREFILL_TOKENS``), a cached token is taken to cost nothing the
  engine times (``ServiceEstimate.cached_rate`` at its bound).

The latency fit's fixed term (``ttft0``) is then moved by what the told terms change in the
fit's prediction of a typical request (the readings' mean prompt, answer and concurrency):
the fit's total is what was measured, and the readings only say how it divides. A move up
stops at what requests that had the engine alone took beyond their own ``prompt_ms`` and
``predicted_ms`` (the fixed part measured, not inferred): what the told terms leave of a
concurrent request's time is the concurrency's (the others' prefill chunks between its
tokens, the queue for a slot), which a fixed term would charge every queued request and a
primed plan's first again in full (on SmolLM2 with 16-token answers, 6-8 in flight, it moved
0.36-0.75 s into ``ttft0`` where lone requests showed ~10 ms, and fan-out was predicted
at 1.22 of its measured time: bench/engine_matrix.py, docs/benchmarks.md).

A reading arrives with its response, before the service model's observation of the same
request (which knows the concurrency): it waits for that observation, found by its token
counts (``prompt_n + cache_n`` prompt tokens, ``predicted_n`` completion tokens).
Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass

from ._cost_model import CACHE_SPEEDUP, ServiceEstimate

__all__ = ["EngineReadings", "EngineTimings", "slots_of", "timings_of"]

_DECAY = 0.98  # per reading, as the latency fit decays its observations
_MIN_PREFILL_TOKENS = 32  # fewer computed tokens time the request's overhead, not prefill
_ALONE = 1.5  # time-averaged requests in flight up to which a request had the engine alone
_MIN_SPREAD = 0.25  # variance of the concurrencies (in requests²) the prefill share needs
_PENDING = 256  # readings kept waiting for their observation at most
_MAX_BETA = 2.0  # the most decode slows per extra sequence (the service model's bound)
_DECODE_KEPT = 128  # decode readings kept (older ones weigh under 0.98 ** 128 < 0.08)
# The latency fit's decode terms' weight in the decode fit: little, as it only has to settle
# what the readings cannot tell apart (a ridge keeps an unseen direction at the prior).
_PULL = 0.01


@dataclass(frozen=True, slots=True)
class EngineTimings:
    """llama-server's ``timings`` of one response (times in milliseconds)."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float


def timings_of(raw: object) -> EngineTimings | None:
    """A response's ``timings`` object read, or None when it is absent or unreadable."""
    if not isinstance(raw, dict):
        return None
    counts = [_count(raw.get(k)) for k in ("cache_n", "prompt_n", "predicted_n")]
    times = [_ms(raw.get(k)) for k in ("prompt_ms", "predicted_ms", "predicted_per_token_ms")]
    cache_n, prompt_n, predicted_n = counts
    prompt_ms, predicted_ms, per_token = times
    if prompt_n is None or predicted_n is None or prompt_ms is None or predicted_ms is None:
        return None
    if per_token is None:
        per_token = predicted_ms / predicted_n if predicted_n else 0.0
    return EngineTimings(cache_n or 0, prompt_n, prompt_ms, predicted_n, predicted_ms, per_token)


def slots_of(props: object) -> int | None:
    """``total_slots`` of a ``GET /props`` body, when it holds a positive count."""
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None


def _fold_line(xtx: list[list[float]], xty: list[float], x1: float, y: float) -> None:
    """Fold the point (x1, y) into decayed least-squares sums on x = (1, x1)."""
    x = (1.0, x1)
    for i in range(2):
        xty[i] = xty[i] * _DECAY + x[i] * y
        for j in range(2):
            xtx[i][j] = xtx[i][j] * _DECAY + x[i] * x[j]


def _engine_time(estimate: ServiceEstimate, prompt: float, answer: float, running: float) -> float:
    """Prefill and decode seconds ``estimate`` predicts for a request (fixed terms apart),
    its prefill slowed by the others' where prefills share the engine."""
    if estimate.slots is not None:
        running = min(running, estimate.slots)
    shared = 1 + estimate.prefill_share * max(0.0, running - 1)
    return prompt / estimate.prefill_rate * shared + answer * estimate.tpot(running)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) and value >= 0 else None


def _ms(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


class EngineReadings:
    """The readings one service has given, folded into what they say about its engine."""

    def __init__(self) -> None:
        self._pending: deque[EngineTimings] = deque(maxlen=_PENDING)
        self.slots: int | None = None  # the server's total_slots, once read
        self.props_asked = False  # GET /props tried (once per service)
        self.readings = 0
        self._news = False  # something was learned since the service model last asked
        # Decayed sums: prefill (tokens, ms) of requests alone and of all requests.
        self._alone = [0.0, 0.0]
        self._all = [0.0, 0.0]
        # The latest (concurrency, per-token seconds) decode readings, oldest first.
        self._decode_points: deque[tuple[float, float]] = deque(maxlen=_DECODE_KEPT)
        self._typical = [0.0, 0.0, 0.0, 0.0]  # decayed sums of 1, prompt, answer, concurrency
        # The same for prefill's per-token ms (the prefill share's fit).
        self._pxtx = [[0.0, 0.0], [0.0, 0.0]]
        self._pxty = [0.0, 0.0]
        self.cache_reused = False  # a reading reused a prefix of _MIN_PREFILL_TOKENS or more
        # Decayed sums of 1 and of what a lone request took beyond its prompt_ms and
        # predicted_ms (seconds): the fixed part, measured.
        self._lone_fixed = [0.0, 0.0]

    def told_slots(self, slots: int) -> None:
        """The server's ``total_slots`` (``GET /props``)."""
        self.slots, self._news = slots, True

    def news(self) -> bool:
        """Whether anything was learned since the last call (the estimate is then redone)."""
        news, self._news = self._news, False
        return news

    def told(self, timings: EngineTimings) -> None:
        """A response's timings; used once its request's observation arrives."""
        self._pending.append(timings)

    def observed(
        self,
        input_tokens: int,
        output_tokens: int,
        running: float,
        took: float | None = None,
    ) -> None:
        """The request that took ``input_tokens`` and gave ``output_tokens`` returned while
        ``running`` requests were in flight on average, ``took`` seconds after it was sent
        (what the latency fit explains: the whole latency, or the service's processing
        time where it reports one): its reading, if one waits, counts."""
        for timings in self._pending:
            if (timings.prompt_n + timings.cache_n, timings.predicted_n) == (
                input_tokens,
                output_tokens,
            ):
                self._pending.remove(timings)
                self._fold(timings, max(1.0, running), took)
                return

    @property
    def lone_fixed(self) -> float | None:
        """Seconds a request alone took beyond the engine's timings of it (its decayed
        mean); None until such a request was seen."""
        count, seconds = self._lone_fixed
        return max(0.0, seconds / count) if count > 0 else None

    def _fold(self, t: EngineTimings, running: float, took: float | None = None) -> None:
        self.readings += 1
        self._news = True
        if t.cache_n >= _MIN_PREFILL_TOKENS:
            self.cache_reused = True
        # The latency fit it is shifted against counts uncached prompt tokens, as these do.
        seen = (1.0, t.prompt_n, t.predicted_n, running)
        self._typical = [s * _DECAY + x for s, x in zip(self._typical, seen, strict=True)]
        if took is not None and math.isfinite(took) and took > 0 and running <= _ALONE:
            fixed = took - (t.prompt_ms + t.predicted_ms) / 1000
            self._lone_fixed = [
                self._lone_fixed[0] * _DECAY + 1,
                self._lone_fixed[1] * _DECAY + fixed,
            ]
        if t.prompt_n >= _MIN_PREFILL_TOKENS and t.prompt_ms > 0:
            sums = (self._all, self._alone) if running <= _ALONE else (self._all,)
            for s in sums:
                s[0] = s[0] * _DECAY + t.prompt_n
                s[1] = s[1] * _DECAY + t.prompt_ms
            _fold_line(self._pxtx, self._pxty, running - 1.0, t.prompt_ms / t.prompt_n)
        if t.predicted_n > 1 and t.predicted_per_token_ms > 0:
            if self.slots is not None:
                running = min(running, float(self.slots))
            self._decode_points.append((running, t.predicted_per_token_ms / 1000))

    @property
    def prefill_share(self) -> float | None:
        """How much concurrent prefills slow each other (0..1), as the engine timed them;
        None until readings at two concurrencies tell it."""
        a, b = self._pxtx, self._pxty
        det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
        if a[0][0] <= 0 or det <= a[0][0] ** 2 * _MIN_SPREAD:
            return None
        t1 = (b[0] * a[1][1] - a[0][1] * b[1]) / det
        slope = (a[0][0] * b[1] - a[1][0] * b[0]) / det
        return min(1.0, max(0.0, slope / t1)) if t1 > 0 else None

    @property
    def prefill_rate(self) -> float | None:
        """Uncached prompt tokens per second, as the engine timed them; None untold."""
        tokens, ms = self._alone if self._alone[0] > 0 else self._all
        return 1000 * tokens / ms if tokens > 0 and ms > 0 else None

    def applied(self, estimate: ServiceEstimate) -> ServiceEstimate:
        """``estimate`` with what the readings tell in place of what was inferred."""
        rate = self.prefill_rate
        tpot1, beta = self._decode(estimate) or (estimate.tpot1, estimate.beta)
        share = self.prefill_share
        prefill_rate = estimate.prefill_rate if rate is None else rate
        cached_rate = prefill_rate * CACHE_SPEEDUP if self.cache_reused else estimate.cached_rate
        told = dataclasses.replace(
            estimate,
            prefill_rate=prefill_rate,
            cached_rate=cached_rate,
            prefill_share=estimate.prefill_share
            if share is None
            else max(share, estimate.prefill_share),
            tpot1=tpot1,
            beta=beta,
            slots=estimate.slots if self.slots is None else self.slots,
        )
        if not self._typical[0]:
            return told
        count, prompt, answer, running = self._typical
        shift = _engine_time(estimate, prompt / count, answer / count, running / count)
        shift -= _engine_time(told, prompt / count, answer / count, running / count)
        ttft0 = told.ttft0 + shift
        lone = self.lone_fixed
        if shift > 0 and lone is not None:
            ttft0 = min(ttft0, max(told.ttft0, lone))
        return dataclasses.replace(told, ttft0=max(0.0, ttft0))

    def _decode(self, estimate: ServiceEstimate) -> tuple[float, float] | None:
        """(tpot1, beta) from the per-token readings, ridge-pulled towards ``estimate``'s:
        a decayed least-squares fit on x = (1, m - 1) of the readings that can be decode.
        Alone a token's time is decode; with others in flight it counts while within what a
        beta of ``_MAX_BETA`` allows over decode alone (the readings alone, or while there
        are none the fastest reading, which no concurrency made faster than alone)."""
        points = self._decode_points
        if not points:
            return None
        alone = [y for m, y in points if m <= _ALONE]
        base = sum(alone) / len(alone) if alone else min(y for _, y in points)
        a = [[_PULL, 0.0], [0.0, _PULL]]
        b = [_PULL * estimate.tpot1, _PULL * estimate.tpot1 * estimate.beta]
        weight = 1.0
        for m, y in reversed(points):  # newest first, each older one counted decayed more
            if m <= _ALONE or y <= base * (1 + _MAX_BETA * (m - 1)):
                x1 = m - 1.0
                a[0][0] += weight
                a[0][1] += weight * x1
                a[1][1] += weight * x1 * x1
                b[0] += weight * y
                b[1] += weight * x1 * y
                weight *= _DECAY
        a[1][0] = a[0][1]
        det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
        if det <= 0:
            return None
        tpot1 = (b[0] * a[1][1] - a[0][1] * b[1]) / det
        slope = (a[0][0] * b[1] - a[1][0] * b[0]) / det
        if tpot1 <= 0:
            return None
        return tpot1, min(2.0, max(0.0, slope / tpot1))
