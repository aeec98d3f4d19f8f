"""Dependency detection through ``_Earlier``'s index gives exactly what the plain search of
every earlier part gives (the search it replaced, kept here as the reference): on every
prompt of the decompose corpora, on generated prompts full of references, and noun by noun."""

from __future__ import annotations

import importlib.util
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from splitter import decompose
from splitter._decompose import _dependencies
from splitter._decompose._dependencies import _Earlier
from splitter._decompose._rules import _is_cjk
from splitter._decompose._types import Part

DATA = Path(__file__).parent / "data"
CORPORA = sorted(DATA.glob("decompose*.jsonl"))


def _mentions(noun: str, earlier: Sequence[str]) -> int | None:
    """The latest earlier part (``earlier``: their texts, lowercased) holding ``noun`` (or
    its stem), as first written: a pattern per stem, every earlier part in turn."""
    if not noun:
        return None
    alphabetic = noun.isascii() or (noun.isalpha() and not _is_cjk(noun))
    stem = noun[: max(3, len(noun) - 3)]
    at_word_start = re.compile(rf"\b{re.escape(stem)}") if len(stem) >= 3 else None
    for i in range(len(earlier) - 1, -1, -1):
        words = earlier[i]
        if alphabetic:
            if noun in words or (at_word_start and stem in words and at_word_start.search(words)):
                return i
        elif any(noun[:k] in words for k in range(len(noun), 0, -1)):
            return i
    return None


class _PlainEarlier(_Earlier):
    """The per-part search as first written: every earlier part, for every reference."""

    def named(self, key: str, j: int) -> set[int]:
        return {
            i
            for i in range(j)
            if self.labels[i] == key or (self.labels[i] is None and key == str(i + 1))
        }

    def mentioning(self, noun: str, j: int) -> int | None:
        return _mentions(noun, self.lowered[:j])


def _bench() -> ModuleType:
    """``bench/planner_speed.py``, whose prompts pointing back are the ones timed there."""
    path = Path(__file__).resolve().parents[1] / "bench" / "planner_speed.py"
    spec = importlib.util.spec_from_file_location("planner_speed", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pointing_prompt = _bench().pointing_prompt


def _plain_decompose(prompt: str, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as patched:
        patched.setattr(_dependencies, "_Earlier", _PlainEarlier)
        return decompose(prompt)


@pytest.mark.parametrize("corpus", CORPORA, ids=[c.stem for c in CORPORA])
def test_every_corpus_prompt_decomposes_as_with_the_plain_search(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every prompt of the corpus: the same parts, the same dependencies."""
    rows = [json.loads(line) for line in corpus.read_text("utf-8").splitlines() if line.strip()]
    assert rows
    for row in rows:
        assert decompose(row["prompt"]) == _plain_decompose(row["prompt"], monkeypatch), row["id"]


@pytest.mark.parametrize("listed", [True, False], ids=["list", "sentences"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_prompts_full_of_references_decompose_as_with_the_plain_search(
    listed: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated prompts of 400 questions pointing back in every way the detector reads:
    the same dependencies, and many of them (the prompts do exercise the lookups)."""
    prompt = pointing_prompt(400, seed=seed, listed=listed)
    fast = decompose(prompt)
    assert fast == _plain_decompose(prompt, monkeypatch)
    waiting = [p for p in fast.parts if p.depends_on]
    assert len(fast.parts) > 300
    assert len(waiting) > len(fast.parts) // 2
    assert any(p.depends_on and p.depends_on[0] < i - 1 for i, p in enumerate(fast.parts))


def test_mentioning_answers_as_the_plain_search_noun_by_noun() -> None:
    """Every earlier position, near and far, for nouns as the patterns capture them (word
    characters, lowercased): whole words, word starts, middles of words, stems, accented,
    Turkish, CJK, absent, and lowered from a capital that lowers to two characters."""
    rng = random.Random(21)
    texts = [
        pointing_prompt(1, seed=s, listed=False) + rng.choice(["", " İstanbul'un", " Straße"])
        for s in range(120)
    ]
    parts = [Part(t, None, 0.9) for t in texts]
    fast, plain = _Earlier(parts), _PlainEarlier(parts)
    nouns = ["tower", "towers", "designed", "esign", "gebäudes", "dağı", "河", "川は", "ひ"]
    nouns += ["i̇stanbul'un", "i̇stanbul", "straße", "population", "zzz", "cit", "città", "7"]
    words = re.findall(r"\w+", " ".join(texts).lower())[:200:2]
    nouns += [w[a:b] for w in words for a, b in [(0, 5), (1, 4)] if w[a:b]]
    compared = found = 0
    for noun in nouns:
        for j in range(len(parts) + 1):
            expected = plain.mentioning(noun, j)
            assert fast.mentioning(noun, j) == expected, (noun, j)
            compared += 1
            found += expected is not None
    assert found > compared // 3
