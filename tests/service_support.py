"""Feeding a service model what a meter saw of a simulated burst (shared by the service
model's tests and the overhead tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from splitter._meter import InFlightMeter
from splitter._service_model import Observation, ServiceModel


def observe_burst(
    model: ServiceModel,
    meter: InFlightMeter,
    prompt: int,
    outputs: Sequence[int],
    starts: Sequence[float],
    finishes: Sequence[float],
    t0: float = 0.0,
    after_each: Callable[[], object] | None = None,
    *,
    sampled: bool = False,
) -> None:
    """Request k (``prompt`` tokens in, ``outputs[k]`` out) started on ``meter`` at
    ``t0 + starts[k]`` and observed by ``model`` at ``t0 + finishes[k]``, in the order they
    finish; ``after_each`` runs after every observation. ``sampled``: as the sender does,
    the model chooses (:meth:`ServiceModel.sample`) which responses' queues are read and
    fitted; otherwise every one is."""
    fits = [model.sample(prompt + out) if sampled else True for out in outputs]
    tokens = [meter.start(t0 + s, read=fit) for s, fit in zip(starts, fits, strict=True)]
    for k in sorted(range(len(starts)), key=lambda k: finishes[k]):
        shared = meter.finish(tokens[k], t0 + finishes[k])
        model.observe(
            Observation(
                prompt,
                outputs[k],
                finishes[k] - starts[k],
                shared[None][0][1],
                queue=shared,
                started=t0 + starts[k],
                idle=meter.in_flight == 0,
                fit=fits[k],
            )
        )
        if after_each is not None:
            after_each()
