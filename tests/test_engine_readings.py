"""Reading what engines tell: llama-server's ``timings`` (whole responses and a stream's last
chunk) and ``GET /props``'s ``total_slots``, used by the service model where present; the
model works as before where they are absent.

The engine is the simulator with ``Profile(timings=True)`` (llama-server's fields), reached
in-process on virtual time; the readings alone are tested with readings built by hand."""

from __future__ import annotations

import dataclasses

import pytest

from splitter import Policy, ServiceModel, Splitter
from splitter._cost_model import ServiceEstimate
from splitter._engine_readings import EngineReadings, EngineTimings, slots_of, timings_of
from splitter.sim import Profile, SimService

MODEL = "llama"
DOC = "The quarterly report covers revenue, costs and the outlook for next year. " * 60
LLAMA = Profile(
    name=MODEL, rtt=0.002, ttft0=0.05, prefill_rate=400, tpot1=0.027, beta=0.42, slots=5,
    context_window=100_000, timings=True,
)  # fmt: skip


def _timings(**update: object) -> dict[str, object]:
    base: dict[str, object] = {
        "cache_n": 10, "prompt_n": 200, "prompt_ms": 500.0, "prompt_per_token_ms": 2.5,
        "prompt_per_second": 400.0, "predicted_n": 50, "predicted_ms": 1350.0,
        "predicted_per_token_ms": 27.0, "predicted_per_second": 37.0,
    }  # fmt: skip
    return {**base, **update}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(_timings(), EngineTimings(10, 200, 500.0, 50, 1350.0, 27.0), id="whole"),
        pytest.param(
            _timings(cache_n=None, predicted_per_token_ms=None),
            EngineTimings(0, 200, 500.0, 50, 1350.0, 27.0),
            id="older-server",
        ),
        pytest.param(_timings(prompt_ms=-1), None, id="negative"),
        pytest.param(_timings(prompt_n="200"), None, id="string"),
        pytest.param(_timings(predicted_ms=float("nan")), None, id="nan"),
        pytest.param([1, 2], None, id="not-an-object"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_timings_are_read_or_ignored(raw: object, expected: EngineTimings | None) -> None:
    """A timings object is read field by field; anything unreadable is no reading."""
    assert timings_of(raw) == expected


def test_total_slots_are_read_from_props() -> None:
    """/props' total_slots when it is a positive int; nothing otherwise."""
    assert slots_of({"total_slots": 5}) == 5
    assert [slots_of(v) for v in ({"total_slots": 0}, {"total_slots": True}, {}, "5")] == [None] * 4


def _reading(prompt_n: int, prompt_ms: float, per_token_ms: float) -> EngineTimings:
    return EngineTimings(0, prompt_n, prompt_ms, 40, per_token_ms * 40, per_token_ms)


def test_readings_give_prefill_decode_and_slots() -> None:
    """Prefill from requests that ran alone; tpot1 and beta from the per-token times at
    two concurrencies; slots as told. A reading counts once its observation arrives."""
    readings = EngineReadings()
    wrong = ServiceEstimate(rtt=0.0, ttft0=5.0, prefill_rate=9999.0, tpot1=0.05, beta=0.0)
    for prompt_n, running, per_token in ((1000, 1.0, 20.0), (500, 1.0, 20.0), (1000, 4.0, 38.0)):
        prompt_ms = prompt_n * 2.0 * (4 if running > 1 else 1)  # alone: 500 tokens/s
        readings.told(_reading(prompt_n, prompt_ms, per_token))
        readings.observed(prompt_n, 40, running)
        assert readings.applied(wrong).prefill_rate == pytest.approx(500.0)
    assert readings.applied(wrong).slots is None
    readings.told_slots(4)
    applied = readings.applied(wrong)
    assert applied.prefill_rate == pytest.approx(500.0)
    assert applied.slots == 4
    assert applied.tpot1 == pytest.approx(0.020, rel=0.1)
    assert applied.tpot1 * applied.beta * 3 == pytest.approx(0.018, rel=0.15)
    # The fixed term takes up what the told terms change for a typical request (the
    # readings' decayed means), so the fit's prediction of it stands.
    weights = (0.98**2, 0.98, 1.0)
    prompt, running = (
        sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)
        for values in ((1000, 500, 1000), (1.0, 1.0, 4.0))
    )

    def predicted(e: ServiceEstimate) -> float:
        shared = 1 + e.prefill_share * (min(running, e.slots or 99) - 1)
        prefill = prompt / e.prefill_rate * shared
        return e.ttft0 + prefill + 40 * e.tpot(min(running, e.slots or 99))

    # Prefill took 4x as long per token with 4 in flight: compute-bound (issue #19).
    assert applied.prefill_share == pytest.approx(1.0)
    assert predicted(applied) == pytest.approx(predicted(wrong))
    assert applied.ttft0 < wrong.ttft0


def test_the_fixed_term_rises_no_higher_than_lone_requests_show() -> None:
    """What the told terms leave of concurrent requests' time is the concurrency's: a fixed
    term holding it would be paid again by every queued request. Traced on SmolLM2 (16-token
    answers, 6-8 in flight): the fit's decode at 80 ms a token against the readings' 36 ms
    moved ~0.7 s into ttft0 where lone requests took ~10 ms beyond their own timings."""
    fit = ServiceEstimate(rtt=0.0, ttft0=0.0, prefill_rate=400.0, tpot1=0.0175, beta=0.9)
    unbounded, bounded = EngineReadings(), EngineReadings()
    for prompt_n in range(25, 35):  # concurrent: 36 ms a token at 5 running
        for readings in (unbounded, bounded):
            readings.told(EngineTimings(0, prompt_n, 80.0, 16, 16 * 36.0, 36.0))
            readings.observed(prompt_n, 16, 5.0, took=1.4)
    for prompt_n in range(40, 43):  # alone: 5.2 ms a token, 10 ms beyond the timings
        bounded.told(EngineTimings(0, prompt_n, 75.0, 16, 16 * 5.2, 5.2))
        bounded.observed(prompt_n, 16, 1.0, took=(75.0 + 16 * 5.2) / 1000 + 0.010)
    assert unbounded.lone_fixed is None
    assert unbounded.applied(fit).ttft0 > 0.3  # the concurrency's time, as a fixed term
    assert bounded.lone_fixed == pytest.approx(0.010)
    assert bounded.applied(fit).ttft0 == pytest.approx(0.010)
    # The bound caps a move up only: a fit's own fixed term above it stands.
    assert bounded.applied(dataclasses.replace(fit, ttft0=0.2)).ttft0 == pytest.approx(0.2)


def test_an_unmatched_observation_adds_nothing() -> None:
    """An observation whose token counts match no reading leaves the estimate alone."""
    readings = EngineReadings()
    readings.told(_reading(1000, 2000.0, 20.0))
    readings.observed(999, 40, 1.0)
    estimate = ServiceEstimate(rtt=0.0, ttft0=0.1, prefill_rate=123.0, tpot1=0.5, beta=0.3)
    assert readings.applied(estimate) == estimate
    assert readings.readings == 0


async def _learn(profile: Profile, *, stream: bool = False) -> tuple[ServiceModel, SimService]:
    """Batches of 1, 3 and 5 questions about DOC, fanned out; what was learned."""
    service = SimService(profile)
    async with service.async_client() as client:
        splitter_ = Splitter(client, policy=Policy(strategy="fanout"), model=MODEL)
        for n in (1, 3, 5, 1, 5):
            questions = [f"Question {n}.{i} about the report?" for i in range(n)]
            if stream:
                async with splitter_.astream(questions, context=DOC) as events:
                    _ = [event async for event in events]
                    assert events.result is not None
                    assert events.result.ok
            else:
                assert (await splitter_.aask_many(questions, context=DOC)).ok
        return splitter_.service_model(), service


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_the_service_model_uses_what_the_engine_tells() -> None:
    """On a llama-server-like engine the estimate takes the engine's prefill rate, decode
    terms and slot count; /props is read once."""
    learned, service = await _learn(LLAMA)
    estimate = learned.estimate()
    assert learned.engine.readings == 15
    assert estimate.slots == 5
    assert estimate.prefill_rate == pytest.approx(400, rel=0.05)
    assert estimate.tpot1 == pytest.approx(0.027, rel=0.15)
    assert estimate.beta == pytest.approx(0.42, rel=0.25)
    assert [r.path for r in service.log].count("/props") == 1
    # What lone requests took beyond their timings, measured from each response's latency
    # (the simulator times its fixed part inside prompt_ms: at most the round trip is left).
    lone = learned.engine.lone_fixed
    assert lone is not None
    assert 0.0 <= lone <= LLAMA.rtt + 0.001


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_stream_s_last_chunk_is_read_too() -> None:
    """Streamed answers: the timings in each stream's last chunk are read (decode terms
    are not asserted: an ordered stream starts the others at the head's first token, so
    requests in flight are not requests decoding)."""
    learned, service = await _learn(LLAMA, stream=True)
    estimate = learned.estimate()
    assert learned.engine.readings == 15
    assert estimate.slots == 5
    assert estimate.prefill_rate == pytest.approx(400, rel=0.05)
    assert [r.path for r in service.log].count("/props") == 1


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_without_timings_the_model_learns_as_before() -> None:
    """The same engine telling nothing: no /props request, no readings, a working estimate."""
    learned, service = await _learn(LLAMA.model_copy(update={"timings": False}))
    estimate = learned.estimate()
    assert learned.engine.readings == 0
    assert "/props" not in [r.path for r in service.log]
    assert estimate.prefill_rate > 0
    assert estimate.tpot1 > 0


def test_decode_beside_others_prefill_is_not_read_as_decode() -> None:
    """llama-server decodes in the batches that carry the other slots' prompt chunks: a
    per-token time far beyond what any beta allows (780 ms, 2 in flight, against a 43 ms
    reading beside it) is the others' prefill, not decode. With no reading alone, the
    fastest reading bounds decode; once readings alone exist, they do."""
    readings = EngineReadings()
    prior = ServiceEstimate(rtt=0.0, ttft0=0.1, prefill_rate=500.0, tpot1=0.05, beta=0.3)
    for prompt_n, per_token in ((1500, 780.0), (1501, 43.0)):  # a fan-out of two documents
        readings.told(_reading(prompt_n, prompt_n * 2.0, per_token))
        readings.observed(prompt_n, 40, 2.0)
    polluted_left_out = readings.applied(prior)
    assert polluted_left_out.tpot1 * (1 + polluted_left_out.beta) == pytest.approx(0.043, rel=0.05)
    for prompt_n, running, per_token in ((100, 1.0, 20.0), (120, 1.0, 20.0), (140, 3.0, 30.0)):
        readings.told(_reading(prompt_n, prompt_n * 2.0, per_token))
        readings.observed(prompt_n, 40, running)
    told = readings.applied(prior)
    readings.told(_reading(1502, 3000.0, 780.0))
    readings.observed(1502, 40, 2.0)
    after = readings.applied(prior)
    assert 0.020 <= told.tpot1 < 0.025  # 20 ms alone; 30 and 43 ms at 3 and 2 in flight
    assert (after.tpot1, after.beta) == (told.tpot1, told.beta)
