"""The dependency patterns' word gates (``splitter._decompose._gates``): a gate that says no
must never hide a match. Checked on every text of the decompose corpora, on the bench's
prompts, and on texts built from the patterns' own vocabulary (each alternative's words
in every case, glued to neighbours, split by punctuation, with the Turkish dotless "ı"
written as an ASCII "i")."""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from splitter._decompose._dependencies import (
    _DEMONSTRATIVE,
    _EXPLICIT_REF,
    _POSSESSIVE_IN_LANGUAGE,
    _PREVIOUS_REF,
    _PRONOUN,
)
from splitter._decompose._gates import Words
from splitter._decompose._rules import _masked

DATA = Path(__file__).parent / "data"
GATES: dict[str, tuple[re.Pattern[str], Callable[[Words], bool]]] = {
    "explicit": (_EXPLICIT_REF, Words.may_name),
    "previous": (_PREVIOUS_REF, Words.may_point_back),
    "demonstrative": (_DEMONSTRATIVE, Words.may_point_at_noun),
    "pronoun": (_PRONOUN, Words.may_refer),
    # Only the possessives are gated: a text holding none cannot match either language's pair.
    "possessive": (
        re.compile("|".join(word.pattern for _, word in _POSSESSIVE_IN_LANGUAGE), re.I),
        Words.may_possess,
    ),
}


def _corpus_texts() -> list[str]:
    texts: list[str] = []
    for path in sorted(DATA.glob("decompose_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for value in row.values():
                if isinstance(value, str):
                    texts.append(value)
                    texts.extend(value.splitlines())
                    texts.extend(re.split(r"(?<=[?.!])\s+", value))
    return texts


def _bench_texts() -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    try:
        import planner_speed
    finally:
        sys.path.pop(0)
    prompt = planner_speed.pointing_prompt(400) + "\n" + planner_speed.unnamed_prompt(50)
    return [*prompt.splitlines(), *planner_speed.questions(300)]


def _vocabulary(pattern: re.Pattern[str]) -> list[str]:
    """The runs of letters, digits and the punctuation the patterns name, from the pattern's
    own source: every word an alternative is written with."""
    # Escapes out first: "\\bsus?" is the word "sus", not "bsus".
    source = re.sub(r"\\[A-Za-z]", " ", pattern.pattern)
    words = set(re.findall(r"[A-Za-z\u00c0-\u024f]+", source))
    words |= {w.replace("ı", "i") for w in words}
    return sorted(words)


def _generated(rng: random.Random, vocabulary: list[str], n: int) -> list[str]:
    glue = [" ", "  ", "-", "'", "’", "(", ")", "#", "?", ".", ", ", "", "\t", "_", "1", "b"]
    filler = ["the", "what", "is", "a", "capital", "Lisbon", "How", "tall", "2", "(a)", "to"]
    texts = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 7)):
            word = rng.choice(vocabulary if rng.random() < 0.6 else filler)
            case = rng.random()
            word = word.upper() if case < 0.15 else word.title() if case < 0.35 else word
            pieces.append(word + rng.choice(glue))
        texts.append("".join(pieces).strip())
    return texts


@pytest.mark.parametrize("name", sorted(GATES))
def test_a_gate_that_says_no_hides_no_match(name: str) -> None:
    """Every text whose gate says no has no match of the pattern; and the gate does say no
    for most of the bench's plain questions (it would be no cut otherwise)."""
    pattern, gate = GATES[name]
    rng = random.Random(name)
    texts = [*_corpus_texts(), *_bench_texts(), *_generated(rng, _vocabulary(pattern), 6000)]
    closed = 0
    for text in texts:
        masked = _masked(text)
        if not gate(Words(masked)):
            closed += 1
            assert pattern.search(masked) is None, (name, text)
    assert closed > len(texts) // 10, (name, closed, len(texts))


def test_text_that_is_not_ascii_always_goes_to_the_pattern() -> None:
    words = Words("Wie alt ist dieses Gebäude?")
    assert words.words is None
    assert all(gate(words) for _, gate in GATES.values())


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("explicit", "Use the answer to question 3."),
        ("explicit", "What about faq 2?"),  # no word boundary before the keyword
        ("previous", "Summarise the results you just wrote."),
        ("previous", "Use the previously chosen value."),
        ("previous", "Bu yukaridaki sonuc mu?"),  # "ı" folds to "i"
        ("demonstrative", "How tall is that tower?"),
        ("demonstrative", "Wie alt ist dieses Haus?"),
        ("pronoun", "Who discovered them?"),
        ("pronoun", "Quand a-t-il ouvert?"),
        ("pronoun", "How does this work?"),
        ("possessive", "Quelle est sa capitale?"),
        ("possessive", "¿Dónde está SUS oficinas?"),
    ],
)
def test_a_gate_lets_each_kind_of_match_through(name: str, text: str) -> None:
    """Matches of each pattern, of each of its shapes, pass the gate."""
    pattern, gate = GATES[name]
    masked = _masked(text)
    assert pattern.search(masked) is not None
    assert gate(Words(masked))
