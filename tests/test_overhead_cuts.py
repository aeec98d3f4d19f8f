"""Per-request overhead cuts (issue #21): each keeps what is sent and learned, and does
less work per request; checked by counts, never by elapsed time."""

from __future__ import annotations

import heapq
import random
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from service_support import observe_burst

from splitter import Policy, Splitter, _fit_sampling, _openai, _service_fit, _service_model
from splitter._cost_model import ServiceEstimate, simulate
from splitter._meter import InFlightMeter, Reading
from splitter._service_fit import _Fit
from splitter._service_model import Observation, ServiceModel
from splitter.sim import SimService
from splitter.testing import open_sim_client


@pytest.mark.anyio
async def test_a_new_splitter_reuses_the_platform_its_client_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """openai reads the platform for its headers once per client, in a worker thread; the
    ``with_options`` copy a Splitter sends through starts with what was read already, so a
    burst of first requests starts no thread for it."""
    monkeypatch.setattr(_openai, "_PLATFORM", None, raising=False)
    reads = 0
    real = openai._base_client.get_platform

    def counted() -> openai._base_client.Platform:
        nonlocal reads
        reads += 1
        return real()

    monkeypatch.setattr(openai._base_client, "get_platform", counted)
    async with open_sim_client(SimService("instant")) as client:
        for _ in range(3):
            result = await Splitter(client).aask_many(
                ["What is 1 + 1?", "What is 2 + 2?"], model="instant"
            )
            assert result.stats.failed == 0
    assert reads == 1


def _learn_from_a_six_slot_engine(
    counts: Counter[str], *, sampled: bool = False
) -> ServiceEstimate:
    """60 bursts of 30 requests of mixed lengths (so the two readings of a queue differ) from
    a 6-slot engine, fed to a fresh model; ``counts`` tallies its solves and replays."""
    truth = ServiceEstimate(rtt=0.0, ttft0=0.08, prefill_rate=900, tpot1=0.02, beta=0.3, slots=6)
    rng = random.Random(21)
    model, meter = ServiceModel(), InFlightMeter()
    real_solve, real_simulate, real_add = _Fit.solve, _service_model.simulate, _Fit.add

    def solve(fit: _Fit, *args: Any) -> tuple[float, ...]:
        counts["solve"] += 1
        return real_solve(fit, *args)

    def replay(*args: Any) -> tuple[list[float], list[float]]:
        counts["simulate"] += 1
        return real_simulate(*args)

    def add(fit: _Fit, *args: float) -> None:
        counts["add"] += 1
        real_add(fit, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Fit, "solve", solve)
        patch.setattr(_Fit, "add", add)
        patch.setattr(_service_model, "simulate", replay)
        for burst in range(60):
            t0 = burst * 1000.0
            outputs = [rng.choice([20, 60, 150]) for _ in range(30)]
            ready = sorted(rng.uniform(0, 0.5) for _ in outputs)
            starts, finishes = simulate([40] * 30, outputs, ready, truth, 30)
            observe_burst(model, meter, 40, outputs, starts, finishes, t0, sampled=sampled)
    return model.estimate()


def test_sampled_learning_matches_the_unsampled_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once settled, the solution that picks between two readings of a queue is reused for
    ``_CHOICE_REFIT`` observations and one episode in ``_SCORE_EVERY`` is scored: after
    1,800 responses from a 6-slot engine the model names the same slot count, its
    parameters within 0.1% of learning from every response in full (1e-4 seen), for under
    a fifth of the solves and under a third of the replays."""
    sampled_counts: Counter[str] = Counter()
    sampled = _learn_from_a_six_slot_engine(sampled_counts)
    monkeypatch.setattr(_service_fit, "_SETTLED", 10**9)
    monkeypatch.setattr(_service_model, "_SCORED_FIRST", 10**9)
    full_counts: Counter[str] = Counter()
    full = _learn_from_a_six_slot_engine(full_counts)
    assert (sampled.slots, full.slots) == (6, 6)
    for name in ("ttft0", "prefill_rate", "tpot1", "beta"):
        assert getattr(sampled, name) == pytest.approx(getattr(full, name), rel=1e-3), name
    assert sampled_counts["solve"] * 3 < full_counts["solve"]
    assert sampled_counts["simulate"] * 3 < full_counts["simulate"]


def test_sampled_responses_learn_what_every_response_teaches() -> None:
    """Once settled, one response in ``_FIT_EVERY`` has its queue read and is folded into
    the fits (the rest count only in the replayed episodes): after 1,800 responses from a
    6-slot engine the model names the same slot count and predicts every latency of the
    burst's shape within 5% of fitting every response (4.2% seen, at 1 running; both
    fits miss the truth by up to 30% there, the same way), for under a third of the fits."""
    sampled_counts: Counter[str] = Counter()
    sampled = _learn_from_a_six_slot_engine(sampled_counts, sampled=True)
    full_counts: Counter[str] = Counter()
    full = _learn_from_a_six_slot_engine(full_counts)
    assert (sampled.slots, full.slots) == (6, 6)
    for out in (20, 60, 150):
        for running in (1, 3, 6):
            predicted = [
                e.ttft0 + 40 / e.prefill_rate + out * e.tpot(running) for e in (sampled, full)
            ]
            assert predicted[0] == pytest.approx(predicted[1], rel=0.05), (out, running)
    assert sampled_counts["add"] * 3 < full_counts["add"]


def test_a_settled_model_fits_every_request_of_a_size_it_has_not_learned() -> None:
    """Once settled, requests of a size the fits know (booked tokens within a power of two)
    are fitted one in ``_FIT_EVERY``; the first ``_SETTLED_PER_SIZE`` of a new size (a long
    document after short questions) each are, then one in ``_FIT_EVERY`` of those too."""
    model = ServiceModel()
    short = [model.sample(60) for _ in range(_service_fit._SETTLED)]
    assert all(short)  # unsettled: every one
    model.observations = _service_fit._SETTLED
    assert sum(model.sample(60) for _ in range(400)) == 400 // _fit_sampling._FIT_EVERY
    first = [model.sample(1_500) for _ in range(_fit_sampling._SETTLED_PER_SIZE)]
    assert all(first)
    assert sum(model.sample(1_500) for _ in range(400)) == 400 // _fit_sampling._FIT_EVERY
    same_power_of_two = sum(model.sample(1_900) for _ in range(400))
    assert same_power_of_two == 400 // _fit_sampling._FIT_EVERY


def test_an_unread_request_costs_the_meter_nothing_per_request_in_flight() -> None:
    """A request whose queue is not read (``read=False``) records no list of the requests
    ahead of it, and its finish gives only the "no limit" reading: the same one a read
    request gets."""
    read, unread = InFlightMeter(), InFlightMeter()
    for meter in (read, unread):
        for k in range(50):
            meter.start(k * 0.01)
    tokens = [unread.start(0.5, read=False), read.start(0.5)]
    assert unread._flights[tokens[0]][2] is None
    assert read._flights[tokens[1]][2] == tuple(range(50))
    full, alone = read.finish(tokens[1], 1.5), unread.finish(tokens[0], 1.5)
    assert alone == {None: full[None]}


class _PlainMeter(InFlightMeter):
    """``finish`` as first written (a generic loop over each count's admissions): the
    reference the unrolled one must match."""

    def finish(self, token: int, now: float) -> Mapping[int | None, tuple[Reading, ...]]:
        self._advance(now)
        started, start_areas, earlier = self._flights.pop(token)
        self._count -= 1
        returned = self._returned
        returns = sorted((returned[t] for t in earlier if t in returned), key=lambda r: r[0])
        view: dict[int | None, tuple[Reading, ...]] = {}
        for i, cap in enumerate(self._caps):
            admissions = [(started, start_areas)]
            if cap is not None:
                k = len(earlier) - cap
                first_come = returns[k] if 0 <= k < len(returns) else None
                by_order = self._finished[-cap] if len(self._finished) >= cap else None
                admissions = [
                    (started, start_areas) if at is None or not started < at[0] < now else at
                    for at in (first_come, by_order)
                ]
            readings: list[Reading] = []
            for when, areas in admissions:
                served = now - when
                running = (self._areas[i] - areas[i]) / served if served > 0 else 1.0
                if (when - started, running) not in readings:
                    readings.append((when - started, running))
            view[cap] = tuple(readings)
        snapshot = (now, tuple(self._areas))
        self._finished.append(snapshot)
        self._returned[token] = snapshot
        self._sent_by_return[token] = self._sent
        self._forget()
        return view


@pytest.mark.parametrize(("width", "requests"), [(3, 300), (40, 800), (300, 1200)])
def test_meter_readings_match_the_plain_loop(width: int, requests: int) -> None:
    """Requests of random lengths, ``width`` in flight (some sent or returning at the same
    instant): every finish reads exactly, bit for bit, what the plain loop reads."""
    rng = random.Random(width)
    fast, plain = InFlightMeter(), _PlainMeter()
    out: list[tuple[float, int]] = []
    now, sent = 0.0, 0
    while sent < requests or out:
        if sent < requests and len(out) < width:
            now += rng.choice([0.0, 0.0, 0.3])
            token = fast.start(now)
            assert plain.start(now) == token
            heapq.heappush(out, (now + rng.choice([1.0, rng.uniform(0.1, 20.0)]), token))
            sent += 1
            continue
        finish, token = heapq.heappop(out)
        now = max(now, finish)
        assert fast.finish(token, now) == plain.finish(token, now)


@pytest.mark.anyio
@pytest.mark.parametrize(("timeout", "scopes"), [(None, 0), (30.0, 3)])
async def test_a_request_without_a_timeout_opens_no_cancel_scope(
    monkeypatch: pytest.MonkeyPatch, timeout: float | None, scopes: int
) -> None:
    """Without ``Policy.timeout`` the sender opens no cancel scope per request (one
    ``fail_after(inf)`` each before); with one, each request runs under its own deadline,
    a plain ``CancelScope`` (no ``fail_after``: two generator-based context managers)."""
    opened: Counter[str] = Counter()
    real_fail_after, real_scope = anyio.fail_after, anyio.CancelScope

    def counted(delay: float | None, shield: bool = False) -> Any:
        opened["fail_after " + Path(sys._getframe(1).f_code.co_filename).name] += 1
        return real_fail_after(delay, shield)

    def scope(**kwargs: Any) -> anyio.CancelScope:
        if kwargs.get("deadline") is not None:
            opened["deadline " + Path(sys._getframe(1).f_code.co_filename).name] += 1
        return real_scope(**kwargs)

    monkeypatch.setattr(anyio, "fail_after", counted)
    monkeypatch.setattr(anyio, "CancelScope", scope)
    async with open_sim_client(SimService("instant")) as client:
        splitter = Splitter(client, policy=Policy(timeout=timeout))
        result = await splitter.aask_many(["What is 1 + 1?"] * 3, model="instant")
    assert result.stats.failed == 0
    assert (opened["deadline _send.py"], opened["fail_after _send.py"]) == (scopes, 0)


def _feed_bursts(model: ServiceModel, read_each: bool) -> None:
    """Ten bursts of 24 mixed-length requests from a 4-slot engine; with ``read_each``, the
    model's estimate is read after every response (so no replay ever waits)."""
    truth = ServiceEstimate(rtt=0.0, ttft0=0.05, prefill_rate=700, tpot1=0.03, beta=0.2, slots=4)
    rng = random.Random(4)
    meter = InFlightMeter()
    for burst in range(10):
        outputs = [rng.choice([10, 40, 90]) for _ in range(24)]
        starts, finishes = simulate([30] * 24, outputs, [0.0] * 24, truth, 24)
        read = model.estimate if read_each else None
        observe_burst(model, meter, 30, outputs, starts, finishes, burst * 500.0, read)


def test_deferred_slot_replays_charge_the_same_errors() -> None:
    """Replays that wait until the slot count is read leave every count's error, and so
    the estimate and the saved model, exactly as replaying at each episode's end does."""
    eager, lazy = ServiceModel(), ServiceModel()
    _feed_bursts(eager, read_each=True)
    _feed_bursts(lazy, read_each=False)
    assert lazy.estimate() == eager.estimate()
    assert lazy.estimate().slots is not None  # a queue was learned (its count: 3 or 4)
    assert lazy.dumps() == eager.dumps()


def test_a_model_no_one_reads_replays_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An episode's replay waits until the slot count is read: none for the response that
    ended it, one per candidate count once :meth:`ServiceModel.estimate` is called."""
    replays = 0
    real = _service_model.simulate

    def counted(*args: Any) -> tuple[list[float], list[float]]:
        nonlocal replays
        replays += 1
        return real(*args)

    monkeypatch.setattr(_service_model, "simulate", counted)
    model, meter = ServiceModel(), InFlightMeter()
    tokens = [meter.start(0.0) for _ in range(8)]
    for k, token in enumerate(tokens):
        shared = meter.finish(token, 1.0 + k // 2)
        model.observe(
            Observation(
                20, 50, 1.0 + k // 2, shared[None][0][1], queue=shared, started=0.0,
                idle=meter.in_flight == 0,
            )
        )  # fmt: skip
    assert replays == 0
    model.estimate()
    assert replays == len([s for s in model.slot_candidates if s is None or s < 8])
