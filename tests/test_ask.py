"""Splitter.ask: one compound prompt in, the parts answered and put back together."""

from __future__ import annotations

import json

import pytest

from splitter import DecomposePolicy, InvalidInputError, Policy, ServicePrior, Splitter
from splitter._llm_decompose import INSTRUCTION
from splitter.sim import SimService, answer_tag
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


async def test_a_compound_prompt_comes_back_in_its_own_numbering() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    prompt = "Please answer separately:\n1. Why is the sky blue?\n2) How many legs has a spider?"
    async with open_sim_client(service) as client:
        answer = await Splitter(client).aask(prompt, model="m")
    assert answer.ok
    assert answer.decomposed_by == "heuristic"
    first, second = answer.parts
    assert answer.text == f"1. {first.text}\n\n2) {second.text}"
    # Each part was sent with the shared preamble, and answered as itself.
    sent = sorted(r.user_text for r in service.log)
    assert sent == [
        "Please answer separately:\n\nHow many legs has a spider?",
        "Please answer separately:\n\nWhy is the sky blue?",
    ]
    assert first.text is not None
    assert first.text.startswith(answer_tag("Please answer separately:\n\nWhy is the sky blue?"))


async def test_a_single_question_is_one_request_unchanged() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    prompt = "Compare Python, Java and Go for backend services."
    async with open_sim_client(service) as client:
        answer = await Splitter(client).aask(prompt, model="m")
    assert [r.user_text for r in service.log] == [prompt]
    assert answer.text == answer.parts[0].text
    assert answer.decomposition.single


async def test_detected_dependencies_wait_for_their_answers() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.01)
    prompt = (
        "1. Which country is the largest in South America?\n"
        "2. What is the capital of that country?\n"
        "3. How many bones does a cat have?"
    )
    async with open_sim_client(service) as client:
        answer = await Splitter(client).aask(prompt, model="m")
    assert [a.wave for a in answer.parts] == [0, 1, 0]
    assert answer.parts[0].text is not None
    assert answer.parts[0].text in sent_text(service, "capital of that country")


def sent_text(service: SimService, containing: str) -> str:
    (text,) = [r.user_text for r in service.log if containing in r.user_text]
    return text


LONG_CONTEXT = "We run a small bakery with twelve staff and two ovens. " * 30
LLM_PROMPT = LONG_CONTEXT + "How should we schedule shifts and what oven should we buy next"
# What the decomposition call is answered with: the model found two questions.
LLM_REPLY = json.dumps(
    {
        "parts": [
            {"text": "How should we schedule shifts", "depends_on": []},
            {"text": "what oven should we buy next", "depends_on": []},
        ]
    }
)
# Answers are long beside the prompt, so a decomposition call is worth its price.
LLM_POLICY = Policy(
    decompose=DecomposePolicy(mode="llm", min_prompt_tokens=50, max_share=0.5),
    expected_output_tokens=4000,
    prior=ServicePrior(rtt=0.0, ttft0=0.0),
)


async def test_llm_decomposer_is_used_when_priced_worth_it() -> None:
    service = SimService("gpt-4o-mini", time_scale=0.001, scripted={INSTRUCTION[:60]: LLM_REPLY})
    async with open_sim_client(service) as client:
        answer = await Splitter(client, policy=LLM_POLICY).aask(LLM_PROMPT, model="m")
    assert answer.decomposed_by == "llm"
    assert [p.text for p in answer.decomposition.parts] == [
        "How should we schedule shifts",
        "what oven should we buy next",
    ]
    assert answer.decomposition.preamble == LONG_CONTEXT.strip()
    assert answer.decompose_usage.total_tokens > 0
    assert len(service.log) == 3  # the decomposition call, then the two parts


async def test_unusable_llm_decomposition_falls_back_to_the_rules() -> None:
    service = SimService(
        "gpt-4o-mini", time_scale=0.001, scripted={INSTRUCTION[:60]: "Sure! Here are the parts"}
    )
    async with open_sim_client(service) as client:
        answer = await Splitter(client, policy=LLM_POLICY).aask(LLM_PROMPT, model="m")
    assert answer.decomposed_by == "heuristic"
    assert answer.decomposition.single
    assert answer.decompose_usage.total_tokens > 0  # the failed call is still accounted


async def test_llm_decomposer_is_skipped_when_not_worth_its_price() -> None:
    """Short answers expected: the call would cost more than splitting could save."""
    service = SimService("gpt-4o-mini", time_scale=0.001, scripted={INSTRUCTION[:60]: LLM_REPLY})
    policy = LLM_POLICY.model_copy(update={"expected_output_tokens": 20})
    async with open_sim_client(service) as client:
        answer = await Splitter(client, policy=policy).aask(LLM_PROMPT, model="m")
    assert answer.decomposed_by == "heuristic"
    assert not any(INSTRUCTION[:60] in r.user_text for r in service.log)


async def test_bad_prompts_are_clear_errors() -> None:
    async with open_sim_client(SimService("instant")) as client:
        with pytest.raises(InvalidInputError, match="blank"):
            await Splitter(client).aask("   ", model="m")
        with pytest.raises(InvalidInputError, match="str"):
            await Splitter(client).aask(["a", "b"], model="m")  # type: ignore[arg-type]


def test_sync_ask() -> None:
    service = SimService("instant")
    client = service.async_client()
    answer = Splitter(client).ask("1. What is DNS?\n2. What is TLS?", model="m")
    assert len(answer.parts) == 2
    assert answer.ok
