"""Splitter.aask_one / ask_one: concurrent single calls of one isolation key planned together.

Every async test runs on asyncio and on trio. The simulator's log shows what was sent: which
questions shared a request (``RequestRecord.questions``) and the prompt itself
(``user_text``), so batching and isolation are checked on the wire, not on splitter's say.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import anyio
import openai
import pytest

from splitter import (
    Answer,
    InvalidInputError,
    Limits,
    Policy,
    Question,
    ServicePrior,
    Splitter,
)
from splitter._aggregate import batch_key
from splitter.sim import PROFILES, SimLimits, SimService, answer_tag, serve
from splitter.testing import open_sim_client

# Async tests run on virtual time: the windows, sleeps and latencies below are exact, so the
# order of arrivals they arrange holds however busy the machine is.
pytestmark = [pytest.mark.anyio, pytest.mark.virtual_time]

MODEL = "gpt-4o-mini"
WINDOW_MS = 50.0
# Every question of a batch in one request, so a batch is visible as one logged request.
MERGE = Policy(strategy="merge", aggregate_window_ms=WINDOW_MS)


def own_answer(answer: Answer, question: str) -> bool:
    """The simulator's answer to ``question`` (and no other), shaped like a one-question
    result."""
    return (
        answer.ok
        and answer.index == 0
        and answer.question.text == question
        and (answer.text or "").startswith(answer_tag(question))
    )


async def ask_all(splitter: Splitter, calls: Sequence[tuple[str, str | None]]) -> dict[str, Answer]:
    """``(question, isolation_key)`` calls made at once; answers by question."""
    answers: dict[str, Answer] = {}

    async def one(question: str, key: str | None) -> None:
        answers[question] = await splitter.aask_one(question, isolation_key=key)

    async with anyio.create_task_group() as tg:
        for question, key in calls:
            tg.start_soon(one, question, key)
    return answers


async def test_concurrent_calls_of_one_key_are_planned_as_one_batch() -> None:
    """Three calls within the window, one key: one aask_many, so (forced to merge) one
    request holding all three questions."""
    service = SimService(MODEL, time_scale=0.01)
    questions = ["What is DNS?", "What is TLS?", "What is BGP?"]
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=MERGE, model=MODEL)
        answers = await ask_all(splitter, [(q, "acme") for q in questions])
    (request,) = service.log
    assert sorted(request.questions) == sorted(questions)
    assert all(own_answer(answers[q], q) for q in questions)
    assert {a.via for a in answers.values()} == {"merged"}


async def test_different_keys_are_never_in_one_prompt() -> None:
    """Two tenants asking at once under a forced merge: one request per tenant, each prompt
    holding only its own tenant's questions."""
    service = SimService(MODEL, time_scale=0.01)
    calls = [
        (f"{tenant}: question {i}?", tenant) for tenant in ("acme", "globex") for i in range(3)
    ]
    async with open_sim_client(service) as client:
        answers = await ask_all(Splitter(client, policy=MERGE, model=MODEL), calls)
    assert len(service.log) == 2
    for request in service.log:
        assert ("acme" in request.user_text) != ("globex" in request.user_text)
        assert len(request.questions) == 3
    assert all(own_answer(answers[q], q) for q, _ in calls)


async def test_without_a_key_every_call_is_its_own_request() -> None:
    """The default isolation_key=None merges a call with no one, window or not."""
    service = SimService(MODEL, time_scale=0.01)
    questions = ["What is DNS?", "What is TLS?", "What is BGP?"]
    async with open_sim_client(service) as client:
        answers = await ask_all(
            Splitter(client, policy=MERGE, model=MODEL), [(q, None) for q in questions]
        )
    assert sorted(r.user_text for r in service.log) == sorted(questions)
    assert all(own_answer(answers[q], q) and answers[q].via == "single" for q in questions)


async def test_without_a_window_a_key_changes_nothing() -> None:
    """Policy.aggregate_window_ms=None (the default) is off: one request per call."""
    service = SimService(MODEL, time_scale=0.01)
    questions = ["What is DNS?", "What is TLS?"]
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=Policy(strategy="merge"), model=MODEL)
        answers = await ask_all(splitter, [(q, "acme") for q in questions])
    assert len(service.log) == 2
    assert all(own_answer(answers[q], q) for q in questions)


async def test_each_caller_gets_its_own_answer_and_question_back() -> None:
    """Answers are handed back by position in the batch: each caller's is its own, with its
    own Question (id included, even when callers use the same id), merged or not."""
    service = SimService(MODEL, time_scale=0.01)
    questions = [Question(text=f"Question {i} [len={10 + i}]", id="mine") for i in range(8)]
    answers: dict[int, Answer] = {}
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=MERGE, model=MODEL)  # two merged requests of four

        async def one(i: int) -> None:
            answers[i] = await splitter.aask_one(questions[i], isolation_key="acme")

        async with anyio.create_task_group() as tg:
            for i in range(len(questions)):
                tg.start_soon(one, i)
    for i, question in enumerate(questions):
        assert answers[i].question is question
        assert answers[i].id == "mine"
        assert own_answer(answers[i], question.text)
        assert len((answers[i].text or "").split()) == 10 + i
    assert sorted(len(r.questions) for r in service.log) == [4, 4]


async def test_different_keywords_are_different_batches() -> None:
    """Calls whose requests would differ (here temperature) are not batched together."""
    service = SimService(MODEL, time_scale=0.01)
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=MERGE, model=MODEL)

        async def one(question: str, temperature: float) -> None:
            await splitter.aask_one(question, isolation_key="acme", temperature=temperature)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "What is DNS?", 0)
            tg.start_soon(one, "What is TLS?", 1)
            tg.start_soon(one, "What is BGP?", 0)
    assert sorted(len(r.questions) for r in service.log) == [1, 2]


def test_keywords_are_compared_by_value_not_by_dict_order() -> None:
    """The batch key normalises nested dicts; keywords JSON cannot order run alone."""
    one = batch_key("a", "m", None, {"extra_body": {"x": 1, "y": [1, 2]}, "temperature": 0})
    two = batch_key("a", "m", None, {"temperature": 0, "extra_body": {"y": [1, 2], "x": 1}})
    assert one is not None
    assert one == two
    assert batch_key("b", "m", None, {"temperature": 0}) != batch_key(
        "a", "m", None, {"temperature": 0}
    )
    assert batch_key("a", "m", None, {"extra_body": {1: "x", "y": 2}}) is None


async def test_a_bad_question_fails_only_its_own_caller() -> None:
    """A blank question is an InvalidInputError to its caller alone; its batch-mates are
    answered together as if it had never come."""
    service = SimService(MODEL, time_scale=0.01)
    outcomes: dict[str, Answer | Exception] = {}
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=MERGE, model=MODEL)

        async def one(question: str) -> None:
            try:
                outcomes[question] = await splitter.aask_one(question, isolation_key="acme")
            except InvalidInputError as exc:
                outcomes[question] = exc

        async with anyio.create_task_group() as tg:
            for question in ("What is DNS?", "   ", "What is TLS?"):
                tg.start_soon(one, question)
    assert isinstance(outcomes["   "], InvalidInputError)
    (request,) = service.log
    assert sorted(request.questions) == ["What is DNS?", "What is TLS?"]
    for question in ("What is DNS?", "What is TLS?"):
        answer = outcomes[question]
        assert isinstance(answer, Answer)
        assert own_answer(answer, question)


async def test_a_cancelled_first_caller_leaves_the_others_answered() -> None:
    """The first caller of a batch runs it; cancelled during the window, its own question
    leaves the batch, and the others are still asked and answered."""
    service = SimService(MODEL, time_scale=0.01)
    answers: dict[str, Answer] = {}
    policy = Policy(strategy="merge", aggregate_window_ms=200)
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=policy, model=MODEL)
        first = anyio.CancelScope()

        async def one(question: str) -> None:
            answers[question] = await splitter.aask_one(question, isolation_key="acme")

        async def first_caller() -> None:
            with first:
                await one("What is DNS?")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_caller)
            await anyio.sleep(0.02)  # it has opened the batch
            tg.start_soon(one, "What is TLS?")
            tg.start_soon(one, "What is BGP?")
            await anyio.sleep(0.02)
            first.cancel()
    (request,) = service.log
    assert sorted(request.questions) == ["What is BGP?", "What is TLS?"]
    assert set(answers) == {"What is BGP?", "What is TLS?"}
    assert all(own_answer(a, q) for q, a in answers.items())


async def test_a_batch_every_caller_left_sends_nothing() -> None:
    """Cancelled alone in the window: the batch is dropped, nothing is sent, and the key is
    free for the next call."""
    service = SimService(MODEL, time_scale=0.01)
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=Policy(aggregate_window_ms=200), model=MODEL)
        started = anyio.current_time()
        with anyio.move_on_after(0.02):
            await splitter.aask_one("What is DNS?", isolation_key="acme")
        assert anyio.current_time() - started < 0.15  # it did not wait out the window
        await anyio.sleep(0.25)
        assert service.log == []
        answer = await splitter.aask_one("What is TLS?", isolation_key="acme")
    assert own_answer(answer, "What is TLS?")
    assert [r.user_text for r in service.log] == ["What is TLS?"]


def test_sync_calls_from_several_threads_share_one_batch() -> None:
    """ask_one from threads: the first thread asks the batch, the others wait for it."""
    service = SimService(MODEL, time_scale=0.01)
    questions = [f"Thread question {i}?" for i in range(3)]
    answers: dict[str, Answer] = {}
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="k") as client:
        splitter = Splitter(
            client, policy=Policy(strategy="merge", aggregate_window_ms=300), model=MODEL
        )

        def one(question: str) -> None:
            answers[question] = splitter.ask_one(question, isolation_key="acme")

        threads = [threading.Thread(target=one, args=(q,)) for q in questions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    (request,) = service.log
    assert sorted(request.questions) == questions
    assert all(own_answer(answers[q], q) for q in questions)


def test_async_calls_on_two_event_loops_are_never_batched_together() -> None:
    """A batch belongs to one event loop: two anyio.run calls in two threads, same key and
    window, send two requests."""
    service = SimService(MODEL, time_scale=0.01)
    questions = ["Loop question one?", "Loop question two?"]
    answers: dict[str, Answer] = {}
    with serve(service) as base_url, openai.OpenAI(base_url=base_url, api_key="k") as client:
        splitter = Splitter(
            client, policy=Policy(strategy="merge", aggregate_window_ms=300), model=MODEL
        )

        def one(question: str) -> None:
            async def call() -> Answer:
                return await splitter.aask_one(question, isolation_key="acme")

            answers[question] = anyio.run(call)

        threads = [threading.Thread(target=one, args=(q,)) for q in questions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(r.user_text for r in service.log) == questions
    assert all(own_answer(answers[q], q) for q in questions)


# -- the done-when: 200 single calls from 4 tenants under RPM 60 -------------------

SCALE = 0.01  # one simulated second passes in 10 ms
TENANTS = ("acme", "globex", "initech", "umbrella")
CALLS = 200


def scaled_prior() -> ServicePrior:
    """The gpt-4o-mini profile's timing on the simulator's time scale: what a long-running
    service would have learned about its endpoint."""
    p = PROFILES[MODEL]
    return ServicePrior(
        rtt=p.rtt * SCALE,
        ttft0=p.ttft0 * SCALE,
        prefill_rate=p.prefill_rate / SCALE,
        tpot1=p.tpot1 * SCALE,
        beta=p.beta,
    )


async def two_hundred_calls(window_ms: float | None) -> tuple[float, SimService, int]:
    """CALLS single calls at once, tenant by tenant in turn; returns the wall time, the
    service and how many answers were their own question's."""
    service = SimService(MODEL, time_scale=SCALE, limits=SimLimits(rpm=60))
    policy = Policy(limits=Limits(rpm=60), prior=scaled_prior(), aggregate_window_ms=window_ms)
    calls = [(f"[{TENANTS[i % 4]}] What is {i} + {i}?", TENANTS[i % 4]) for i in range(CALLS)]
    async with open_sim_client(service) as client:
        splitter = Splitter(client, policy=policy, model=MODEL)
        # One call first: the budget reads the service's true refill rate from its headers.
        await splitter.aask_one("warm-up")
        started = anyio.current_time()
        answers = await ask_all(splitter, calls)
        wall = anyio.current_time() - started
    return wall, service, sum(own_answer(answers[q], q) for q, _ in calls)


async def test_two_hundred_calls_of_four_tenants_finish_sooner_aggregated() -> None:
    """Under RPM 60, one request per call waits for the budget; aggregated per tenant, the
    planner merges each tenant's calls into far fewer requests. No prompt mixes tenants."""
    alone, alone_service, alone_ok = await two_hundred_calls(None)
    together, service, together_ok = await two_hundred_calls(WINDOW_MS)
    assert alone_ok == together_ok == CALLS
    assert sum(r.status == 200 for r in alone_service.log) == CALLS + 1  # the warm-up too
    assert len(service.log) < 0.5 * CALLS
    mixed = [r for r in service.log if sum(f"[{t}]" in r.user_text for t in TENANTS) > 1]
    assert mixed == []
    assert together < 0.7 * alone, (together, alone)
