"""ask_many end to end: the real openai client, over both doors of the simulated service."""

from __future__ import annotations

import itertools

import anyio
import openai
import pytest

from splitter import (
    APITimeoutError,
    DeadlineExceededError,
    Limits,
    PartialFailure,
    Policy,
    QuotaExceededError,
    RetryPolicy,
    ServerError,
    Splitter,
    aask_many,
)
from splitter.sim import PROFILES, Faults, SimService, answer_tag
from splitter.testing import assert_answers_match, open_sim_client

pytestmark = pytest.mark.anyio

FAST_RETRY = RetryPolicy(max_attempts=6, initial_wait=0.001, max_wait=0.01, jitter=0.001)


async def test_answers_keep_input_order_when_they_finish_out_of_order(door: str) -> None:
    """Longer answers first: they finish out of input order, yet each answer sits at its
    question's index. (Real time: 500 against 100 tokens is ~0.5 s apart at this scale, and
    only "not in input order" is required of the finish, which a loaded machine's stalls
    do not undo; the exact reverse order was asserted before and failed under load.)"""
    questions = [f"Question {i} [len={500 - 100 * i}]" for i in range(5)]
    service = SimService("gpt-4o-mini", time_scale=0.1)
    policy = Policy(limits=Limits(slow_start=False))  # sent together, the longest ends last
    async with open_sim_client(service, door=door) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="gpt-4o-mini")
    finish_order = [r.user_text for r in sorted(service.log, key=lambda r: r.finished)]
    assert finish_order != questions
    assert finish_order[-1] != questions[-1]  # the shortest did not finish last
    assert [a.question.text for a in result] == questions
    assert_answers_match(result)
    assert [a.usage.completion_tokens for a in result] == [500, 400, 300, 200, 100]


@pytest.mark.virtual_time
async def test_fan_out_takes_about_one_answer_not_five() -> None:
    """5 x 200 tokens on a batching API: fan-out takes one answer's decode at a batch of
    five, under half of one merged request's five answers in a row."""
    questions = [f"Independent question {i}" for i in range(5)]
    merged_prompt = "Answer separately:\n" + "\n".join(
        f"{i}. {q}" for i, q in enumerate(questions, 1)
    )
    profile = PROFILES["gpt-4o-mini"]
    service = SimService(profile, default_answer_tokens=200)
    # The five requests are meant to leave together: no slow-start waves on this cold endpoint.
    policy = Policy(limits=Limits(slow_start=False))
    async with open_sim_client(service) as client:
        started = anyio.current_time()
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": merged_prompt}]
        )
        merged = anyio.current_time() - started
        result = await Splitter(client, policy=policy).aask_many(questions, model="gpt-4o-mini")
    assert result.ok
    one_big, *singles = service.log
    assert [r.completion_tokens for r in singles] == [200] * 5
    assert merged == pytest.approx(
        profile.rtt
        + profile.prefill_seconds(one_big.prompt_tokens)
        + one_big.completion_tokens * profile.step_seconds(1),
        abs=1e-6,
    )
    assert result.stats.wall_time == pytest.approx(
        profile.rtt
        + profile.prefill_seconds(singles[0].prompt_tokens)
        + 200 * profile.step_seconds(5),
        abs=1e-6,
    )
    assert result.stats.wall_time < 0.5 * merged


async def test_injected_faults_lose_nothing_and_misplace_nothing() -> None:
    """20% faults over 500 questions: every question answered once or carrying its error."""
    faults = Faults(
        rate_429=0.05, rate_500=0.04, rate_502=0.04, rate_503=0.03, rate_reset=0.04, retry_after=0.1
    )
    service = SimService("gpt-4o-mini", time_scale=0.001, faults=faults, seed=7)
    questions = [f"Soak question number {i}?" for i in range(500)]
    policy = Policy(retry=FAST_RETRY, limits=Limits(max_concurrency=64))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert len(result) == 500
    assert [a.index for a in result] == list(range(500))
    assert all(a.ok or a.error is not None for a in result)
    assert_answers_match(result)
    answered_by_service = [r.user_text for r in service.log if r.status == 200]
    assert sorted(answered_by_service) == sorted(a.question.text for a in result if a.ok)
    assert result.stats.retries > 50
    assert result.stats.requests == len(service.log)
    assert result.stats.rate_limited == sum(r.status == 429 for r in service.log)


async def test_retry_after_is_honoured(door: str) -> None:
    """After a 429 with retry-after, the retry of that question is not sent before it expires."""
    faults = Faults(rate_429=0.5, retry_after=5.0)
    service = SimService("instant", time_scale=0.01, faults=faults, seed=3)
    questions = [f"q{i}" for i in range(12)]
    policy = Policy(retry=RetryPolicy(max_attempts=10, initial_wait=0, max_wait=0, jitter=0))
    async with open_sim_client(service, door=door) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert result.ok
    gaps_checked = 0
    for question in questions:
        tries = sorted((r for r in service.log if r.user_text == question), key=lambda r: r.arrived)
        for earlier, later in itertools.pairwise(tries):
            assert earlier.status == 429
            assert later.arrived - earlier.finished >= 0.05 * 0.95  # 5 s sim = 50 ms real
            gaps_checked += 1
    assert gaps_checked > 0


async def test_doomed_errors_are_not_retried() -> None:
    """insufficient_quota fails once and is reported; no further request is sent for it,
    nor for the question that had not gone yet (an empty quota stops the batch)."""
    service = SimService("instant", faults=Faults(rate_quota=1.0))
    async with open_sim_client(service) as client:
        result = await Splitter(client).aask_many(["a", "b"], model="m")
    assert [type(a.error) for a in result] == [QuotaExceededError, QuotaExceededError]
    assert sorted(a.attempts for a in result) == [0, 1]  # slow start: one went first
    assert len(service.log) == 1


async def test_raise_on_error_carries_every_answer() -> None:
    """raise_on_error=True raises one PartialFailure holding all answers, failed ones marked."""
    service = SimService("instant", faults=Faults(rate_500=1.0))
    policy = Policy(retry=RetryPolicy(max_attempts=2, initial_wait=0, jitter=0))
    async with open_sim_client(service) as client:
        with pytest.raises(PartialFailure) as info:
            await Splitter(client, policy=policy).aask_many(
                ["a", "b"], model="m", raise_on_error=True
            )
    assert [a.question.text for a in info.value.result] == ["a", "b"]
    assert all(isinstance(a.error, ServerError) and a.attempts == 2 for a in info.value.failed)


async def test_stalled_request_times_out_and_is_retried() -> None:
    """A stalled response hits the per-request timeout and the retry gets the answer."""
    faults = Faults(rate_stall=0.5, stall_seconds=100.0)
    service = SimService("instant", time_scale=0.01, faults=faults, seed=1)
    policy = Policy(timeout=0.2, retry=FAST_RETRY)
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            [f"q{i}" for i in range(6)], model="m"
        )
    assert result.ok
    assert_answers_match(result)
    assert any(r.error_code == "stall" for r in service.log)
    assert result.stats.retries >= 1


async def test_timeout_without_retries_is_reported_on_the_answer() -> None:
    """With one attempt, a stall ends as APITimeoutError on that answer only."""
    service = SimService("instant", time_scale=0.01, faults=Faults(rate_stall=1.0))
    policy = Policy(timeout=0.1, retry=RetryPolicy(max_attempts=1))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(["q"], model="m")
    assert isinstance(result[0].error, APITimeoutError)


async def test_deadline_marks_unanswered_questions() -> None:
    """Past the batch deadline, unanswered questions carry DeadlineExceededError; none vanish."""
    service = SimService("serial", time_scale=0.05, default_answer_tokens=400)
    questions = ["quick [len=1]", "slow one", "slow two"]
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=Policy(deadline=0.3)).aask_many(questions, model="m")
    assert result[0].ok
    assert [type(a.error) for a in result[1:]] == [DeadlineExceededError] * 2
    assert service.in_flight == 0


async def test_cancelling_the_caller_cancels_every_request() -> None:
    """Cancelling aask_many leaves no request running on the service."""
    service = SimService("gpt-4o-mini", time_scale=0.05, default_answer_tokens=2000)
    policy = Policy(limits=Limits(slow_start=False))  # all 20 are out when it is cancelled
    async with open_sim_client(service) as client:
        with anyio.move_on_after(0.3) as scope:
            await Splitter(client, policy=policy).aask_many([f"q{i}" for i in range(20)], model="m")
        assert scope.cancelled_caught
        assert service.in_flight == 0
    assert len(service.log) == 20
    assert all(r.status == 499 for r in service.log)


async def test_concurrency_limit_is_respected() -> None:
    """No more than max_concurrency requests are ever on the service at once."""
    service = SimService("gpt-4o-mini", time_scale=0.01)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, service.in_flight)
            await anyio.sleep(0.001)

    async with open_sim_client(service) as client, anyio.create_task_group() as tg:
        tg.start_soon(watch)
        policy = Policy(limits=Limits(max_concurrency=3))
        result = await Splitter(client, policy=policy).aask_many(
            [f"q{i}" for i in range(12)], model="m"
        )
        tg.cancel_scope.cancel()
    assert result.ok
    assert 1 <= peak <= 3


async def test_request_keywords_reach_every_request() -> None:
    """max_tokens and system= are sent with each request; a Question's own cap wins."""
    from splitter import Question

    service = SimService("instant", default_answer_tokens=50)
    async with open_sim_client(service) as client:
        result = await aask_many(
            ["plain", Question(text="capped", max_tokens=2)],
            model="m",
            client=client,
            system="Be brief.",
            max_tokens=10,
            temperature=0,
        )
    assert [a.finish_reason for a in result] == ["length", "length"]
    assert [a.usage.completion_tokens for a in result] == [10, 2]
    assert result.usage.completion_tokens == 12
    system_tokens = {r.prompt_tokens for r in service.log}
    assert min(system_tokens) > 8  # the system message was counted, not just the question


async def test_sync_client_and_sync_api_over_loopback() -> None:
    """The sync API with a sync OpenAI client works, even called from inside a running loop."""
    from splitter.sim import serve

    service = SimService("instant")
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="k") as client:
        result = Splitter(client).ask_many(["one", "two", "three"], model="m")
    assert [a.text.split()[0] for a in result if a.text] == [
        answer_tag(q) for q in ("one", "two", "three")
    ]


async def test_empty_input_sends_nothing() -> None:
    """An empty list is an empty result and no request."""
    service = SimService("instant")
    async with open_sim_client(service) as client:
        result = await Splitter(client).aask_many([], model="m")
    assert (len(result), service.log) == (0, [])
