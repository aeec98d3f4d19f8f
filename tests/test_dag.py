"""The dependency graph: references, placeholders, clear errors, answers filled in."""

from __future__ import annotations

import pytest

from splitter import InvalidInputError, Question
from splitter._dag import ancestors, build_graph, critical_path, fill_in, question_ids


def qs(*items: Question | str) -> list[Question]:
    return [q if isinstance(q, Question) else Question(text=q) for q in items]


def test_depends_on_takes_positions_and_ids_and_placeholders_add_edges() -> None:
    questions = qs(
        Question(text="Which country is largest?", id="country"),
        Question(text="Its capital?", depends_on=("country",)),
        Question(text="Population of {answer:1}?"),
        Question(text="Summarise", depends_on=(0, 2)),
    )
    assert build_graph(questions) == ((), (0,), (1,), (0, 2))


def test_unknown_reference_names_the_question_and_the_reference() -> None:
    with pytest.raises(InvalidInputError, match=r"questions\[1\] depends on 'nope'"):
        build_graph(qs("a", Question(text="b", depends_on=("nope",))))
    with pytest.raises(InvalidInputError, match=r"questions\[0\] depends on 7"):
        build_graph(qs(Question(text="a", depends_on=(7,))))
    with pytest.raises(InvalidInputError, match=r"questions\[0\] depends on 'x'"):
        build_graph(qs("uses {answer:x}"))


def test_a_cycle_is_named_in_full() -> None:
    questions = qs(
        Question(text="a", depends_on=(2,)),
        Question(text="b", depends_on=(0,)),
        Question(text="c", depends_on=(1,)),
    )
    with pytest.raises(
        InvalidInputError,
        match=r"cycle: questions\[0\] -> questions\[2\] -> "
        r"questions\[1\] -> questions\[0\]",
    ):
        build_graph(questions)
    with pytest.raises(InvalidInputError, match="depends on itself"):
        build_graph(qs(Question(text="a", depends_on=(0,))))


def test_dollar_amounts_are_not_placeholders() -> None:
    assert build_graph(qs("What is 3 x $2?", "And $1?", "x")) == ((), (), ())


def test_placeholders_are_filled_and_other_answers_given_as_context() -> None:
    questions = qs("First?", "Second, after {answer:0}?", Question(text="Third", depends_on=(1,)))
    deps = build_graph(questions)
    answers = {0: "ONE", 1: "TWO"}
    ids = question_ids(questions)
    assert fill_in(questions[1].text, 1, deps, answers, ids) == "Second, after ONE?"
    third = fill_in(questions[2].text, 2, deps, answers, ids)
    assert "ONE" in third
    assert "TWO" in third
    assert third.endswith("Third")
    assert ancestors(deps, 2) == [0, 1]


def test_critical_path_counts_the_chain_waiting_on_each_question() -> None:
    deps = build_graph(
        qs("a", Question(text="b", depends_on=(0,)), Question(text="c", depends_on=(1,)), "d")
    )
    assert critical_path(deps) == [2, 1, 0, 0]
