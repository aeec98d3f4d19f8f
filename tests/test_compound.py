"""Compound prompts put back together: one reassembly, one text for a part with no answer."""

from __future__ import annotations

import pytest

from splitter import Answer, BatchResult, Question, ServerError, Usage, decompose
from splitter._compound import Parts, no_answer

PROMPT = "1. What is HTTP?\n2. What is DNS?\n3. What is TLS?"


def parts_of(prompt: str) -> Parts:
    return Parts(prompt, decompose(prompt), "heuristic", Usage())


def answered(parts: Parts, texts: list[str | None]) -> BatchResult:
    questions = parts.questions
    error = ServerError("boom", status_code=500)
    return BatchResult(
        tuple(
            Answer(i, q, text, error=None if text is not None else error)
            for i, (q, text) in enumerate(zip(questions, texts, strict=True))
        )
    )


def test_answers_go_under_the_prompts_own_labels_in_its_order() -> None:
    """Each part's answer under its label, parts a blank line apart."""
    parts = parts_of(PROMPT)
    result = answered(parts, ["Hypertext.", "Names.", "Crypto."])
    assert parts.text(result) == "1. Hypertext.\n\n2. Names.\n\n3. Crypto."


def test_a_part_with_no_answer_reads_as_the_one_no_answer_text() -> None:
    """A failed part keeps its place and label, its text the shared ``no_answer`` form."""
    parts = parts_of(PROMPT)
    result = answered(parts, ["Hypertext.", None, "Crypto."])
    error = result[1].error
    assert parts.text(result) == f"1. Hypertext.\n\n2. {no_answer(error)}\n\n3. Crypto."
    assert no_answer(error) == f"[no answer: {error}]"


def test_headings_are_what_a_stream_writes_before_each_part() -> None:
    """Joining each part's heading and body gives the whole text: a stream and ``ask``
    cannot disagree on the layout."""
    parts = parts_of(PROMPT)
    result = answered(parts, ["a", "b", "c"])
    streamed = "".join(
        parts.heading(k, first=k == 0) + (a.text or "") for k, a in enumerate(result)
    )
    assert streamed == parts.text(result)
    assert parts.heading(2, first=False) == "\n\n3. "


def test_a_prompt_that_is_one_question_is_its_answer_alone() -> None:
    """No label, no heading: the answer is the text."""
    parts = parts_of("What is HTTP?")
    assert parts.decomposition.single
    assert parts.questions == [Question(text="What is HTTP?")]
    assert parts.heading(0, first=True) == ""
    assert parts.text(answered(parts, ["Hypertext."])) == "Hypertext."


def test_a_result_that_does_not_match_the_parts_is_refused() -> None:
    """Reassembling answers of another batch would put them under the wrong labels."""
    parts = parts_of(PROMPT)
    other = answered(parts_of("1. A?\n2. B?"), ["x", "y"])
    with pytest.raises(ValueError, match="zip"):
        parts.text(other)
