"""The service model: the learned speed curve, the server's slot count, save and load."""

from __future__ import annotations

from pathlib import Path

import pytest
from service_support import observe_burst

from splitter import Limits, Policy, ServicePrior, Splitter
from splitter._cost_model import ServiceEstimate, simulate
from splitter._meter import InFlightMeter
from splitter._service_model import Observation, ServiceModel
from splitter.sim import SimService
from splitter.testing import open_sim_client


def burst(
    model: ServiceModel, meter: InFlightMeter, finishes: list[float], out: int, t0: float = 0.0
) -> None:
    """Feed one burst: every request sent at t0, request k returning finishes[k] later."""
    tokens = [meter.start(t0) for _ in finishes]
    for k in sorted(range(len(finishes)), key=lambda k: finishes[k]):
        shared = meter.finish(tokens[k], t0 + finishes[k])
        model.observe(
            Observation(
                input_tokens=20,
                output_tokens=out,
                latency=finishes[k],
                concurrency=shared[None][0][1],
                queue=shared,
                started=t0,
                idle=meter.in_flight == 0,
            )
        )


def test_meter_replays_a_fifo_server_per_slot_count() -> None:
    """Six requests sent together to a server running two at once, each served in 1 s: as
    the 2-slot server sees them they queued 0, 0, 1, 1, 2, 2 s; with no limit none queued."""
    meter = InFlightMeter((2,))
    tokens = [meter.start(0.0) for _ in range(6)]
    views = [meter.finish(token, 1.0 + k // 2) for k, token in enumerate(tokens)]
    assert [v[2] for v in views] == [((w, pytest.approx(2.0)),) for w in (0, 0, 1, 1, 2, 2)]
    assert [[wait for wait, _ in v[None]] for v in views] == [[0]] * 6


def test_meter_admits_first_come_first_served_with_mixed_lengths() -> None:
    """A 2-slot server gets a 4 s request, then three 1 s ones: first come, first served,
    the long one holds its slot from the start and the others queue 0, 1, 2 s. Counting back
    two responses reads the long one as queued 2 s and the second short one as not queued:
    both readings are kept where they differ."""
    meter = InFlightMeter((2,))
    long, *short = [meter.start(0.0) for _ in range(4)]
    views = [meter.finish(token, 1.0 + k) for k, token in enumerate(short)]
    assert [v[2][0][0] for v in views] == [0, 1, 2]
    assert [v[2][-1][0] for v in views] == [0, 0, 1]  # by response order
    first_come, by_order = meter.finish(long, 4.0)[2]
    assert first_come == (0.0, pytest.approx(1.75))  # 7 s of 2 slots in 4 s
    assert by_order == (2.0, pytest.approx(1.5))


def test_a_long_merged_request_among_singles_leaves_the_slot_count_learned() -> None:
    """A single answer, then bursts on a 5-slot engine each led by one merged request of
    twice the length: the model still names 5 slots and the engine's own speed curve."""
    truth = ServiceEstimate(rtt=0.0, ttft0=0.05, prefill_rate=400, tpot1=0.027, beta=0.42, slots=5)
    model, meter = ServiceModel(), InFlightMeter()
    for t0, outputs in ((0.0, [500]), (100.0, [1000] + [500] * 18), (300.0, [1000] + [500] * 18)):
        n = len(outputs)
        starts, finishes = simulate([40] * n, outputs, [0.0] * n, truth, 32)
        observe_burst(model, meter, 40, outputs, starts, finishes, t0)
    learned = model.estimate()
    assert learned.slots == 5
    assert learned.tpot1 == pytest.approx(truth.tpot1, rel=0.1)
    assert learned.beta == pytest.approx(truth.beta, rel=0.1)


def test_a_queueing_server_is_recognised_by_its_waves() -> None:
    """Twelve equal answers from a 4-slot engine finish in three waves; the model names 4
    slots and predicts the burst's waves rather than one slow batch of twelve."""
    model, meter = ServiceModel(), InFlightMeter()
    wave = 50 * 0.03 * (1 + 0.4 * 3)  # 50 tokens at tpot(4)
    for t0 in (0, 100, 200):
        burst(model, meter, [wave * (1 + k // 4) for k in range(12)], out=50, t0=t0)
        burst(model, meter, [50 * 0.03], out=50, t0=t0 + 50)
    learned = model.estimate()
    assert learned.slots == 4
    assert learned.latency(20, 50, 4) == pytest.approx(wave, rel=0.15)
    # Twelve kept in flight: each waits for two services of four before its own.
    assert learned.latency(20, 50, 12) == pytest.approx(3 * wave, rel=0.15)


def test_a_batching_server_is_not_given_a_slot_limit() -> None:
    """Twelve answers that finish together (a GPU batch) leave no sign of a queue."""
    model, meter = ServiceModel(), InFlightMeter()
    for t0, n in enumerate((1, 12, 4, 12)):
        together = 50 * 0.012 * (1 + 0.02 * (n - 1))
        burst(model, meter, [together] * n, out=50, t0=10.0 * t0)
    assert model.estimate().slots is None


def test_a_known_slot_count_is_taken_from_the_prior() -> None:
    model = ServiceModel(ServicePrior(slots=7))
    assert model.slot_candidates == (7,)
    assert model.estimate().slots == 7


def test_saved_model_loads_with_what_it_learned(tmp_path: Path) -> None:
    model, meter = ServiceModel(), InFlightMeter()
    burst(model, meter, [1.5 * (1 + k // 4) for k in range(12)], out=50)
    model.save(tmp_path / "service.json")
    loaded = ServiceModel.load(tmp_path / "service.json")
    assert loaded.estimate() == model.estimate()
    assert loaded.observations == model.observations


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_cpu_engine_slots_are_learned_and_the_plan_predicted() -> None:
    """Fan-outs of 20 on the 5-slot CPU-engine profile: the model learns the slots, and
    the next batch's predicted wall time is within 25% of the measured one."""
    service = SimService("llama-cpp-cpu", default_answer_tokens=50)
    # Each fan-out is meant to leave at once: no slow-start waves on this cold endpoint.
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=32, slow_start=False))
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=policy)
        for n in (1, 3, 20):
            await splitter_.aask_many([f"calibrate {n}-{i}" for i in range(n)], model="m")
        result = await splitter_.aask_many([f"measured {i}" for i in range(20)], model="m")
    slots = splitter_.service_model("m").estimate().slots
    assert slots is not None
    assert 4 <= slots <= 8  # the engine has 5; 8 with a flatter curve fits nearly as well
    assert result.stats.predicted_wall_time is not None
    assert 0.75 < result.stats.predicted_wall_time / result.stats.wall_time < 1.25
