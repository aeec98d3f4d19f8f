"""Merged prompts and the parser that maps a merged answer back to its questions."""

from __future__ import annotations

import json

import pytest

from splitter._merge import MergedPrompt, build_merged_prompt, parse_merged


def _prompt(count: int = 3) -> MergedPrompt:
    return build_merged_prompt([f"q{i}" for i in range(1, count + 1)], nonce="n0nce")


def _marked(*pairs: tuple[int, str], nonce: str = "n0nce") -> str:
    return "\n".join(f"@@ {nonce} answer {k} @@\n{text}" for k, text in pairs)


def test_prompt_holds_every_question_under_its_marker() -> None:
    """Each question sits under a nonce marker, in order, after an optional preamble."""
    prompt = build_merged_prompt(["a?", "b?"], preamble="Be terse.", nonce="xyz")
    assert prompt.text.startswith("Be terse.\n\n")
    assert "@@ xyz question 1 @@\na?\n@@ xyz question 2 @@\nb?" in prompt.text
    assert (prompt.count, prompt.nonce) == (2, "xyz")


def test_nonce_is_random_per_prompt() -> None:
    """Two prompts never share a nonce, so one cannot fake the other's markers."""
    assert build_merged_prompt(["a"]).nonce != build_merged_prompt(["a"]).nonce


def test_markers_map_answers_by_number() -> None:
    """Well-formed markers give each item its own text, even out of order."""
    parsed = parse_merged(_marked((2, "two"), (1, "one"), (3, "three")), _prompt())
    assert (parsed.answers, parsed.missing, parsed.method) == (
        {1: "one", 2: "two", 3: "three"},
        (),
        "markers",
    )


def test_fake_markers_with_another_nonce_are_plain_text() -> None:
    """A marker with a different nonce (e.g. echoed from a question) does not split answers."""
    text = _marked((1, "one\n@@ evil answer 2 @@\nX"), (2, "two"), (3, "three"))
    parsed = parse_merged(text, _prompt())
    assert parsed.answers[2] == "two"
    assert "@@ evil answer 2 @@" in parsed.answers[1]


def test_dropped_answer_is_missing_and_its_neighbour_suspect() -> None:
    """A lost marker: that item and the one before it (which may hold its text) are re-asked."""
    parsed = parse_merged(_marked((1, "one"), (3, "three")), _prompt())
    assert parsed.answers == {3: "three"}
    assert (parsed.missing, parsed.suspects) == ((1, 2), (1,))


def test_duplicate_numbers_are_not_trusted() -> None:
    """An item answered twice is ambiguous: both are dropped and it is re-asked."""
    parsed = parse_merged(_marked((1, "a"), (2, "b"), (2, "c"), (3, "d")), _prompt())
    assert 2 not in parsed.answers
    assert 2 in parsed.missing


def test_truncation_drops_the_last_answer_only() -> None:
    """finish_reason=length: the last answer may be cut, the ones after it are missing."""
    parsed = parse_merged(_marked((1, "one"), (2, "tw")), _prompt(), truncated=True)
    assert (parsed.answers, parsed.missing, parsed.suspects) == ({1: "one"}, (2, 3), ())


@pytest.mark.parametrize(
    ("text", "method"),
    [
        pytest.param("1. one\n2. two\n3. three", "numbered", id="numbered"),
        pytest.param("1) one\n2) two\n3) three", "numbered", id="paren"),
        pytest.param("**1.** one\n**2.** two\n**3.** three", "numbered", id="bold"),
        pytest.param("Answer 1: one\nAnswer 2: two\nAnswer 3: three", "headings", id="headings"),
        pytest.param(
            "### Answer 1\none\n### Answer 2\ntwo\n### Answer 3\nthree",
            "headings",
            id="md-headings",
        ),
        pytest.param(json.dumps(["one", "two", "three"]), "json", id="json"),
        pytest.param(
            "```json\n" + json.dumps(["one", "two", "three"]) + "\n```", "json", id="json-fence"
        ),
    ],
)
def test_common_deviations_are_accepted(text: str, method: str) -> None:
    """Formats models fall back to are parsed when they hold exactly items 1..n in order."""
    parsed = parse_merged(text, _prompt())
    assert (parsed.answers, parsed.method) == ({1: "one", 2: "two", 3: "three"}, method)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1. one\n2. two", id="too-few"),
        pytest.param("1. one\n1. steps\n2. two\n3. three", id="nested-list"),
        pytest.param("Here you go: one, two, three.", id="prose"),
        pytest.param(json.dumps(["one", "two"]), id="short-json"),
    ],
)
def test_ambiguous_fallbacks_are_re_asked_whole(text: str) -> None:
    """Without markers, anything but an exact 1..n sequence attributes nothing."""
    parsed = parse_merged(text, _prompt())
    assert (parsed.answers, parsed.missing, parsed.method) == ({}, (1, 2, 3), "none")


def test_numbered_lines_inside_marked_answers_are_never_read_by_position() -> None:
    """Once the response uses this request's markers, a numbered list inside one answer
    is that answer's text, even when every marker is untrustworthy (here each is written
    twice): nothing is attributed, everything is re-asked."""
    answer_1 = "@@ n0 answer 1 @@\n@@ n0 answer 2 @@\n1. X\n2. Z"
    text = f"@@ n0 answer 1 @@\n{answer_1}\n@@ n0 answer 2 @@\nY"
    parsed = parse_merged(text, build_merged_prompt(["a", "b"], nonce="n0"))
    assert (parsed.answers, parsed.missing) == ({}, (1, 2))


def test_numbers_alone_on_their_lines_head_items() -> None:
    """A numbered response with each number on its own line is read as such, so a list
    inside the last answer adds items and the whole is re-asked instead of being read from
    that list."""
    plain = parse_merged("1.\none\n2.\ntwo\n3.\nthree", _prompt())
    assert (plain.answers, plain.method) == ({1: "one", 2: "two", 3: "three"}, "numbered")
    listed = parse_merged("1.\none\n2.\ntwo\n3.\nthree:\n1. a\n2. b\n3. c", _prompt())
    assert (listed.answers, listed.missing) == ({}, (1, 2, 3))


def test_item_numbers_of_thousands_of_digits_are_text() -> None:
    """A marker or list number too long for int() is not a marker: no ValueError escapes."""
    huge = "9" * 5000
    parsed = parse_merged(f"@@ n0 answer {huge} @@\nx\n{huge}. y", _prompt())
    assert (parsed.answers, parsed.missing) == ({}, (1, 2, 3))


def test_a_layout_a_question_uses_is_not_read_by_position() -> None:
    """A question holding a numbered list: a marker-less numbered reply may be the model
    answering that list, so it is not read as the items; "Answer N" headings still are."""
    prompt = build_merged_prompt(["Rank these:\n1. tea\n2. coffee", "Why?"], nonce="n0")
    numbered = parse_merged("1. coffee first\n2. because", prompt)
    assert (numbered.answers, numbered.missing) == ({}, (1, 2))
    headings = parse_merged("Answer 1: coffee\nAnswer 2: because", prompt)
    assert headings.answers == {1: "coffee", 2: "because"}
