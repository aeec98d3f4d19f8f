"""Questions that need other answers: sent as soon as those arrive, answers filled in."""

from __future__ import annotations

import pytest

from splitter import (
    DependencyError,
    Limits,
    Policy,
    Question,
    RetryPolicy,
    ServerError,
    Splitter,
)
from splitter.sim import Faults, SimService, answer_tag
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


def sent_text(service: SimService, containing: str) -> str:
    (text,) = [r.user_text for r in service.log if containing in r.user_text]
    return text


async def test_a_chain_of_three_runs_in_three_waves_with_answers_filled_in() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions = [
        "Which country has the largest area? [len=8]",
        "What is the capital of {answer:0}? [len=8]",
        Question(text="How many people live there? [len=8]", depends_on=(1,)),
    ]
    async with open_sim_client(service) as client:
        result = await Splitter(client).aask_many(questions, model="m")
    assert result.ok
    assert [a.wave for a in result] == [0, 1, 2]
    assert len(result.plans) == 3
    assert len(service.log) == 3
    first, second, third = result.texts
    assert first is not None
    assert second is not None
    assert third is not None
    # The placeholder became the first answer; the third got the chain as context.
    second_sent = sent_text(service, "What is the capital of")
    assert second_sent == f"What is the capital of {first}? [len=8]"
    third_sent = sent_text(service, "How many people")
    assert first in third_sent
    assert second in third_sent
    # Each answer is the service's answer to the text that was sent for it.
    assert second.startswith(answer_tag(second_sent))
    assert third.startswith(answer_tag(third_sent))
    assert first.startswith(answer_tag(questions[0]))  # type: ignore[arg-type]


async def test_five_independent_and_one_dependent_run_in_two_waves() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions: list[str | Question] = [f"Independent question {i}? [len=20]" for i in range(5)]
    questions.append(Question(text="Translate the answer above into French.", depends_on=(2,)))
    async with open_sim_client(service) as client:
        result = await Splitter(client).aask_many(questions, model="m")
    assert result.ok
    assert [a.wave for a in result] == [0, 0, 0, 0, 0, 1]
    assert len(result.plans) == 2
    assert sorted(i for g in result.plans[0].chosen.groups for i in g.indexes) == [0, 1, 2, 3, 4]
    assert result[2].text is not None
    assert result[2].text in sent_text(service, "Translate the answer above")


async def test_a_dependent_starts_when_its_dependency_answers_not_when_the_wave_ends() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.02)
    questions = [
        "Short one? [len=5]",
        "Long one? [len=300]",
        Question(text="Follow-up to the short one. [len=5]", depends_on=(0,)),
    ]
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=Policy(strategy="fanout")).aask_many(
            questions, model="m"
        )
    assert result.ok
    (long_request,) = [r for r in service.log if "Long one" in r.user_text]
    (follow_up,) = [r for r in service.log if "Follow-up" in r.user_text]
    assert follow_up.finished < long_request.finished


async def test_a_failed_dependency_is_not_asked_on_and_says_why() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01, faults=Faults(rate_500=1.0))
    questions = ["Will fail?", Question(text="Needs the failed one", depends_on=(0,)), "Other?"]
    policy = Policy(retry=RetryPolicy(max_attempts=1))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert isinstance(result[0].error, ServerError)
    assert isinstance(result[1].error, DependencyError)
    assert result[1].error.needs == 0
    assert "questions[0]" in str(result[1].error)
    assert not any("Needs the failed one" in r.user_text for r in service.log)
    assert isinstance(result[2].error, ServerError)  # asked, independently


async def test_plan_covers_only_what_can_be_sent_now() -> None:
    service = SimService("instant")
    async with open_sim_client(service) as client:
        plan = Splitter(client, model="m").plan(["a", Question(text="b", depends_on=(0,)), "c"])
    assert sorted(i for g in plan.chosen.groups for i in g.indexes) == [0, 2]
    assert service.log == []


async def test_the_longest_chain_is_sent_first_when_only_one_request_fits() -> None:
    """One request at a time: the question two others wait on goes before the free ones."""
    service = SimService("gpt-4o-mini", time_scale=0.01)
    questions: list[str | Question] = [
        "Free one? [len=5]",
        "Free two? [len=5]",
        "Head of the chain? [len=5]",
        Question(text="Middle of the chain. [len=5]", depends_on=(2,)),
        Question(text="End of the chain. [len=5]", depends_on=(3,)),
    ]
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=1))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert result.ok
    assert "Head of the chain" in service.log[0].user_text
