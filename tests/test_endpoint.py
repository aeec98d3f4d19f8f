"""One owner per endpoint: one concurrency limit and one learned state for every user of it."""

from __future__ import annotations

import logging

import anyio
import pytest

import splitter
from splitter import Limits, MergePolicy, Policy, Splitter
from splitter._endpoint import endpoint_for
from splitter.sim import SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


def _peak_in_flight(service: SimService) -> int:
    """The most requests the service held at once, from its own log."""
    edges = sorted(
        [(r.arrived, 1) for r in service.log] + [(r.finished, -1) for r in service.log],
        key=lambda edge: (edge[0], edge[1]),  # a departure before an arrival at one instant
    )
    peak = level = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


async def test_concurrent_batches_splitters_and_clones_share_one_concurrency_limit() -> None:
    """Four batches on two Splitters and two wrapped clones: never more than 3 in flight."""
    service = SimService("gpt-4o-mini", time_scale=0.02, seed=1)
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=3))
    questions = [f"Question {i}?" for i in range(6)]
    async with open_sim_client(service) as client:
        first, second = Splitter(client, policy=policy), Splitter(client, policy=policy)
        wrapped = splitter.wrap(client, policy=policy)
        clone = wrapped.with_options(timeout=30)

        async def ask(which: Splitter) -> None:
            result = await which.aask_many(questions, model="m")
            assert result.ok

        async def single(client_: object, i: int) -> None:
            await client_.chat.completions.create(  # type: ignore[attr-defined]
                model="m", messages=[{"role": "user", "content": f"Alone {i}?"}]
            )

        async with anyio.create_task_group() as tg:
            for which in (first, second, first, second):
                tg.start_soon(ask, which)
            for i in range(4):
                tg.start_soon(single, wrapped if i % 2 else clone, i)
    assert len(service.log) == 4 * 6 + 4
    assert _peak_in_flight(service) <= 3


async def test_a_wrong_key_stops_the_batch_after_the_first_answers() -> None:
    """300 questions with a key the service refuses: at most max_concurrency requests are
    sent, and every question carries the 401."""
    service = SimService("instant", time_scale=0.01, api_key="sk-right")
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=8))
    async with open_sim_client(service) as client:  # its key is not "sk-right"
        result = await Splitter(client, policy=policy).aask_many(
            [f"Question {i}?" for i in range(300)], model="m"
        )
    assert len(service.log) <= 8
    assert [a.ok for a in result] == [False] * 300
    assert {type(a.error).__name__ for a in result} == {"APIStatusError"}
    assert all("401" in str(a.error) for a in result)


async def test_a_base_url_that_never_answered_fails_at_once_naming_it() -> None:
    """Nothing listens: the batch fails after one attempt, each error naming the URL."""
    import openai

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="sk", max_retries=0)
    async with client:
        with anyio.fail_after(30):
            result = await Splitter(client).aask_many(["One?", "Two?", "Three?"], model="m")
    assert [a.ok for a in result] == [False] * 3
    assert all("http://127.0.0.1:1/v1" in str(a.error) for a in result)
    assert result.stats.requests == 1


async def test_what_is_learned_survives_with_options() -> None:
    """A wrapped client's clone talks to the same endpoint owner: nothing is relearned."""
    service = SimService("instant", time_scale=0.01)
    async with open_sim_client(service) as client:
        wrapped = splitter.wrap(client)
        await wrapped.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "What is 2 + 2? What is 3 + 3?"}]
        )
        clone = wrapped.with_options(timeout=10)
        from splitter._wrap._owner import _splitter_for

        before = _splitter_for(wrapped)._endpoint(_splitter_for(wrapped)._client, "m")
        after = _splitter_for(clone)._endpoint(_splitter_for(clone)._client, "m")
    assert before is after
    assert before.service.observations > 0


def test_two_limits_for_one_endpoint_the_stricter_holds_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second Splitter stating other limits tightens the endpoint's, and says so once."""
    loose = Policy(limits=Limits(rpm=6000, max_concurrency=64))
    strict = Policy(limits=Limits(rpm=60, max_concurrency=4))
    where = {"base_url": "http://svc/v1", "api_key": "sk", "model": "m"}
    owner = endpoint_for(loose, **where)
    with caplog.at_level(logging.WARNING, logger="splitter"):
        assert endpoint_for(strict, **where) is owner
        endpoint_for(strict, **where)
    assert (owner.limits.rpm, owner.concurrency.ceiling) == (60, 4)
    assert owner.budget.snapshot().requests_per_second == pytest.approx(60 / 60 * 0.97)
    warnings = [r for r in caplog.records if "two Limits" in r.getMessage()]
    assert len(warnings) == 1
    assert "rpm=6000" in warnings[0].getMessage()
    assert "rpm=60 " in warnings[0].getMessage()


async def test_an_empty_quota_stops_the_batch_and_every_question_carries_it() -> None:
    """insufficient_quota on every request: one wave goes, nothing more, and each of the 100
    questions fails with QuotaExceededError, none re-asked."""
    from splitter import QuotaExceededError
    from splitter.sim import Faults

    service = SimService("instant", time_scale=0.01, faults=Faults(rate_quota=1.0))
    policy = Policy(strategy="merge", limits=Limits(max_concurrency=4))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            [f"Question {i}?" for i in range(100)], model="m"
        )
    assert len(service.log) <= 4
    assert all(isinstance(a.error, QuotaExceededError) for a in result)
    assert result.stats.repaired == 0


async def test_a_batch_planned_beside_another_sees_the_room_less_its_plan() -> None:
    """Two batches planned at the same moment: the second prices its plan on the room the
    first left, not on the whole of it (each would otherwise fan out into the same ten)."""
    endpoint = endpoint_for(Policy(), base_url="http://claims.test/v1", api_key="k", model="m")
    reservation = await endpoint.budget.acquire(10)
    headers = {
        "x-ratelimit-limit-requests": "11",
        "x-ratelimit-remaining-requests": "10",
        "x-ratelimit-reset-requests": "60s",
    }
    await endpoint.budget.settle(reservation, headers)
    assert endpoint.budget_snapshot().remaining_requests == pytest.approx(10)
    claim = endpoint.claim(8, 800)
    assert endpoint.budget_snapshot().remaining_requests == pytest.approx(2)
    claim.booked(100)
    assert endpoint.budget_snapshot().remaining_requests == pytest.approx(3)
    endpoint.release(claim)
    assert endpoint.budget_snapshot().remaining_requests == pytest.approx(10)


@pytest.mark.virtual_time
async def test_two_batches_at_once_on_a_tight_window_merge_instead_of_both_fanning_out() -> None:
    """A fixed window of 12 requests per minute, learned from a first call; two batches of
    8 questions at once: 16 single requests would wait a minute for the next window, so the
    second batch, seeing the first's 8 planned, merges."""
    from splitter.sim import SimLimits

    limits = SimLimits(kind="fixed_window", limit=12, window=60)
    service = SimService("gpt-4o-mini", limits=limits, seed=2)
    async with open_sim_client(service) as client:
        # Canaries off: this counts the plans' own requests (canaries spend the window too).
        policy = Policy(merge=MergePolicy(canaries=False))
        asker = Splitter(client, model="m", policy=policy)
        await asker.aask_one("warm-up")  # the window's headers are read
        batches = [[f"Batch {b} question {i}?" for i in range(8)] for b in range(2)]
        results = []

        async def ask(questions: list[str]) -> None:
            results.append(await asker.aask_many(questions))

        async with anyio.create_task_group() as tg:
            for questions in batches:
                tg.start_soon(ask, questions)
    assert all(result.ok for result in results)
    asked = [r for r in service.log if r.user_text != "warm-up"]
    assert len(asked) <= 11, [len(r.questions) for r in asked]
    assert service.log[-1].arrived - service.log[0].arrived < 60  # all in the first window
