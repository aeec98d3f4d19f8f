"""The end-anchored rules searched from their tail (``splitter._decompose._rules``): each
helper answers what the full pattern's search from every position answers. Checked on
every text of the decompose corpora, the bench's prompts, and texts built from the
patterns' own words (in every case, glued to neighbours, with trailing spaces and
newlines, words that merely end in a rule's word: "brand" is not "and")."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from test_decompose_gates import _bench_texts, _corpus_texts

from splitter._decompose._rules import (
    _DANGLING,
    _VERB_LAST_REQUEST,
    _dangles,
    _ends_question,
    _ends_sentence,
    _verb_last_request,
)

TAILS: dict[str, tuple[re.Pattern[str], Callable[[str], bool]]] = {
    "dangling": (_DANGLING, _dangles),
    "verb last": (_VERB_LAST_REQUEST, _verb_last_request),
    "question end": (re.compile(r"[?？؟]\s*$"), _ends_question),
    "sentence end": (re.compile(r"[.!?。！？؟।]\s*$"), _ends_sentence),
}


def _words_of(pattern: re.Pattern[str]) -> list[str]:
    source = re.sub(r"\\[A-Za-z]", " ", pattern.pattern)  # "\bne" is "ne", not "bne"
    words = set(re.findall(r"[^\W\d_]+", source))
    return sorted(words | {w.replace("ı", "i") for w in words} | {"?", "？", ".", "!", "。"})


def _generated(rng: random.Random, words: list[str], n: int) -> list[str]:
    glue = [" ", "", "-", "x", "b", "'", ".", "!", "?", "\u3000", "한"]
    ends = ["", " ", "  ", "\n", " \n ", "\t", "?", ".", "!"]
    texts = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 5)):
            word = rng.choice(words)
            case = rng.random()
            word = word.upper() if case < 0.2 else word.title() if case < 0.4 else word
            pieces.append(rng.choice(glue) + word)
        texts.append("".join(pieces) + rng.choice(ends))
    return texts


@pytest.mark.parametrize("name", sorted(TAILS))
def test_a_tail_search_answers_what_the_full_search_answers(name: str) -> None:
    """Same answer on every text, and both answers occur (the texts exercise the rule)."""
    pattern, helper = TAILS[name]
    rng = random.Random(name)
    texts = [*_corpus_texts(), *_bench_texts(), *_generated(rng, _words_of(pattern), 8000)]
    answers = set()
    for text in texts:
        expected = pattern.search(text) is not None
        assert helper(text) is expected, (name, text)
        answers.add(expected)
    assert answers == {True, False}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("dangling", "Tell me about the bridge and", True),
        ("dangling", "Tell me about the brand", False),  # "and" ends it, no word starts there
        ("dangling", "Compare it with  \n", True),
        ("verb last", "Bu metni özetle.", True),
        ("verb last", "Şu iki şehri karşılaştır!  ", True),  # the longest word, and a mark
        ("verb last", "Please summarise the overview.", False),
        ("question end", "Is it safe? \n", True),
        ("sentence end", "Finally stop。", True),
    ],
)
def test_a_tail_search_on_the_shapes_it_must_see(name: str, text: str, expected: bool) -> None:
    pattern, helper = TAILS[name]
    assert (pattern.search(text) is not None) is expected
    assert helper(text) is expected
