"""A merged reply read back: one answer per question found, usage shared out exactly,
what was missing named for repair, and what was read taught to the endpoint."""

from __future__ import annotations

import pytest

from splitter import APIStatusError, InvalidResponseError, Policy, Question, ServerError, Usage
from splitter._endpoint import endpoint_for
from splitter._merge import build_merged_prompt
from splitter._merged_reply import alone_may_pass, read_merged
from splitter._openai import Completion


def completion(text: str, usage: Usage, finish_reason: str = "stop") -> Completion:
    return Completion(text, finish_reason, usage, "req_1", {}, 0.5)


def test_each_found_answer_goes_to_its_question_and_the_rest_are_named_for_repair() -> None:
    """Items 1 and 3 answered, item 2's marker lost: 1 is suspect (its text may hold 2's),
    so only 3 is kept and the questions at 1 and 2 are re-asked."""
    questions = [Question(text=f"Q{i}?") for i in range(5)]
    indexes = (4, 0, 2)  # the group asks questions 4, 0, 2 in that order
    prompt = build_merged_prompt([questions[i].text for i in indexes], nonce="n0")
    text = "@@ n0 answer 1 @@\nfour\n@@ n0 answer 3 @@\ntwo"
    endpoint = endpoint_for(Policy(), base_url="http://merged-reply.test/1", api_key="k", model="m")
    before = endpoint.merges.markers.success
    reply = read_merged(completion(text, Usage(30, 10)), prompt, indexes, questions, endpoint, 2)
    assert endpoint.merges.markers.success < before  # one of three read: merging looks worse
    assert [(a.index, a.text, a.via, a.attempts) for a in reply.answers] == [
        (2, "two", "merged", 2)
    ]
    assert reply.missing == [4, 0]
    assert reply.answers[0].question is questions[2]


def test_usage_is_shared_out_to_the_token_and_lengths_are_learned() -> None:
    """Prompt tokens evenly, completion tokens by length; the shares add up to the
    reply's usage exactly, and the endpoint learns each answer's own length."""
    questions = [Question(text="Name a colour."), Question(text="Name a fruit.")]
    prompt = build_merged_prompt([q.text for q in questions], nonce="n1")
    text = "@@ n1 answer 1 @@\nred\n@@ n1 answer 2 @@\na very long answer about apples"
    endpoint = endpoint_for(Policy(), base_url="http://merged-reply.test/2", api_key="k", model="m")
    reply = read_merged(completion(text, Usage(101, 37)), prompt, (0, 1), questions, endpoint, 1)
    shares = [a.usage for a in reply.answers]
    assert sum(u.prompt_tokens for u in shares) == 101
    assert sum(u.completion_tokens for u in shares) == 37
    assert shares[0].completion_tokens < shares[1].completion_tokens
    assert reply.missing == []


def test_a_reply_cut_at_its_cap_loses_its_last_item_to_repair() -> None:
    """finish_reason "length": the last answer found may be cut, so it is re-asked."""
    questions = [Question(text="A?"), Question(text="B?")]
    prompt = build_merged_prompt([q.text for q in questions], nonce="n2")
    text = "@@ n2 answer 1 @@\nfirst\n@@ n2 answer 2 @@\nsec"
    endpoint = endpoint_for(Policy(), base_url="http://merged-reply.test/3", api_key="k", model="m")
    reply = read_merged(
        completion(text, Usage(20, 8), "length"), prompt, (0, 1), questions, endpoint, 1
    )
    assert [a.text for a in reply.answers] == ["first"]
    assert reply.missing == [1]


@pytest.mark.parametrize(
    ("error", "alone"),
    [
        pytest.param(APIStatusError("too long", status_code=413), True, id="413-content"),
        pytest.param(APIStatusError("bad", status_code=400), True, id="400-content"),
        pytest.param(APIStatusError("no key", status_code=401), False, id="401-batch-wide"),
        pytest.param(ServerError("down", status_code=503), True, id="503-retryable"),
        pytest.param(InvalidResponseError("empty"), True, id="not-a-status"),
    ],
)
def test_which_failed_merged_requests_are_asked_again_alone(error: Exception, alone: bool) -> None:
    """Refused for its content (or failing for a passing reason): alone may pass; refused
    for what every request would meet: it may not."""
    assert alone_may_pass(error) is alone  # type: ignore[arg-type]
