"""The service model: the learned speed curve, the server's slot count, save and load."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitter import Limits, Policy, ServicePrior, Splitter
from splitter._service_model import InFlightMeter, Observation, ServiceModel
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
                concurrency=shared[None][1],
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
    assert [v[2][0] for v in views] == [0, 0, 1, 1, 2, 2]
    assert all(v[2][1] == pytest.approx(2.0) for v in views[:4])
    assert [v[None][0] for v in views] == [0] * 6


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
async def test_cpu_engine_slots_are_learned_and_the_plan_predicted() -> None:
    """Fan-outs of 20 on the 5-slot CPU-engine profile: the model learns the slots, and
    the next batch's predicted wall time is within 25% of the measured one."""
    scale = 0.05  # ms of client noise are 1/scale sim ms: keep it small beside the engine
    service = SimService("llama-cpp-cpu", time_scale=scale, default_answer_tokens=50)
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=32))
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
