"""The estimate stage: each question as the planner sees it."""

from __future__ import annotations

from splitter import Question
from splitter._estimate import (
    MESSAGE_OVERHEAD,
    OutputLengths,
    count_tokens,
    plan_items,
    preamble_tokens,
)
from splitter._request_spec import RequestSpec


def test_items_count_tokens_in_and_expect_tokens_out_within_the_cap() -> None:
    """Input: the question's tokens plus a message's overhead; output: the caller's
    expectation, else history, never above the cap (the question's own cap first)."""
    lengths = OutputLengths(default=200)
    questions = [
        Question(text="Name a prime number."),
        Question(text="Write an essay.", expected_tokens=900),
        Question(text="Say hi.", max_tokens=5),
    ]
    spec = RequestSpec("gpt-4o-mini", None, {"max_tokens": 300})
    items = plan_items(questions, spec, lengths)
    assert [i.index for i in items] == [0, 1, 2]
    assert items[0].input_tokens == count_tokens(questions[0].text, "gpt-4o-mini") + 4
    assert MESSAGE_OVERHEAD == 4
    assert [i.output_tokens for i in items] == [200, 300, 5]
    assert [i.max_tokens for i in items] == [300, 300, 5]


def test_items_take_their_positions_and_learned_lengths() -> None:
    """``indexes`` name each item's place in the caller's list; a length observed for a
    kind of question is what the next one of that kind expects."""
    lengths = OutputLengths(default=200)
    lengths.observe("Name a prime number.", 7)
    spec = RequestSpec("m", None, {"max_completion_tokens": 50})
    items = plan_items([Question(text="Name a prime number.")], spec, lengths, [5])
    assert (items[0].index, items[0].output_tokens, items[0].max_tokens) == (5, 7, 50)


def test_the_preamble_is_the_system_prompt_or_nothing() -> None:
    assert preamble_tokens(RequestSpec("m", None, {})) == 0
    system = "You are terse."
    assert preamble_tokens(RequestSpec("m", system, {})) == count_tokens(system, "m") + 4
