"""A streamed response's ``openai-processing-ms`` is the service's time to its headers, sent
before the body: the rest of the stream is the service's time too, not the network's. Taken
as round trip, three streamed 300-token answers taught a 4 ms engine a round trip of 3.03 s
(the decode of an answer: this test on the code before the fix), and every plan after them
was priced with that.

On the simulator on virtual time: its headers carry the processing time as OpenAI's do."""

from __future__ import annotations

import pytest

from splitter import Limits, Policy, ServicePrior, Splitter
from splitter.sim import Profile, SimService
from splitter.testing import open_sim_client

pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

ENGINE = dict(rtt=0.004, ttft0=0.02, prefill_rate=1_000.0, tpot1=0.01, beta=0.05, slots=8)


async def test_a_streamed_answer_teaches_the_round_trip_not_its_decode() -> None:
    """Three streamed 300-token answers (3 s of decode each): the round trip learned is the
    engine's 4 ms, within a few ms, and the next plan is priced within 10% of its wall."""
    profile = Profile(name="m", context_window=100_000, **ENGINE)  # type: ignore[arg-type]
    policy = Policy(
        prior=ServicePrior(rtt=0.1, weight=1.0, **{k: v for k, v in ENGINE.items() if k != "rtt"}),  # type: ignore[arg-type]
        limits=Limits(slow_start=False),
        strategy="fanout",
    )
    async with open_sim_client(SimService(profile)) as client:
        asker = Splitter(client, policy=policy, model="m")
        for i in range(3):
            async with asker.astream([f"Tell me about {i}. [len=300]"]) as events:
                text = "".join([event.delta async for event in events])
            assert text
        rtt = asker.service_model("m").estimate().rtt
        result = await asker.aask_many([f"Question {i}? [len=300]" for i in range(4)])
    assert rtt == pytest.approx(0.004, abs=0.005)
    assert result.stats.predicted_wall_time is not None
    assert result.stats.predicted_wall_time == pytest.approx(result.stats.wall_time, rel=0.10)
