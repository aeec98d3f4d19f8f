"""Questions' token counts are remembered: a plan and the run after it encode a question
once, and what is remembered stays bounded."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from splitter import Splitter, _estimate, _token_counts
from splitter._token_counts import TokenCounts
from splitter.sim import SimService
from splitter.testing import open_sim_client

MODEL = "gpt-4o-mini"


def _counting_encoder(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every text splitter hands the tokenizer (one tokenizer per model, as the real
    ``encoder_for`` keeps; the real one still encodes)."""
    real = _estimate.encoder_for
    seen: Counter[str] = Counter()
    made: dict[str, Callable[[str], list[int]]] = {}

    def encoder_for(model: str) -> Callable[[str], list[int]]:
        if model not in made:
            encode = real(model)

            def counted(text: str) -> list[int]:
                seen[text] += 1
                return encode(text)

            made[model] = counted
        return made[model]

    monkeypatch.setattr(_estimate, "encoder_for", encoder_for)
    return seen


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_plan_and_the_run_after_it_encode_each_question_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Splitter.plan`` of 40 questions, then ``aask_many`` of the same 40 (one over the
    length the input check counts): each text reaches the tokenizer once in all."""
    seen = _counting_encoder(monkeypatch)
    questions = [f"Plan then run {i}: what is {i} times {i + 3}?" for i in range(39)]
    questions.append("A long one: " + "why is the sky blue? " * 20)
    async with open_sim_client(SimService(MODEL)) as client:
        splitter = Splitter(client, model=MODEL)
        plan = splitter.plan(questions)
        assert sorted(i for g in plan.chosen.groups for i in g.indexes) == list(range(40))
        assert {q: seen[q] for q in questions} == dict.fromkeys(questions, 1)
        result = await splitter.aask_many(questions)
    assert result.stats.failed == 0
    assert {q: seen[q] for q in questions} == dict.fromkeys(questions, 1)


def test_remembered_counts_are_the_tokenizers_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the bound on texts the older half is forgotten: counts stay the tokenizer's,
    a text asked again while remembered is not encoded again, and no more than the bound
    is kept."""
    monkeypatch.setattr(_token_counts, "_MAX_TEXTS", 8)
    encoded: list[str] = []

    def encode(text: str) -> list[int]:
        encoded.append(text)
        return list(range(len(text.split())))

    counts = TokenCounts(encode)
    texts = [" ".join(["w"] * (i + 1)) for i in range(20)]
    assert [counts(t) for t in texts] == list(range(1, 21))
    assert [counts(t) for t in texts[-4:]] == [17, 18, 19, 20]
    assert encoded == texts  # the last four were still remembered
    assert len(counts._counts) <= 8
    assert counts(texts[0]) == 1
    assert encoded[-1] == texts[0]  # the first was forgotten, and is counted again


def test_a_batch_counted_past_the_bound_stays_remembered_for_its_run() -> None:
    """10,000 questions planned while the memory held 10,000 from before: the run after
    the plan finds every count remembered. (Forgetting everything at the bound, the run
    encoded the batch's first 6,384 again.)"""
    encoded: list[str] = []

    def encode(text: str) -> list[int]:
        encoded.append(text)
        return [0]

    counts = TokenCounts(encode)
    for i in range(10_000):
        counts(f"earlier {i}")
    batch = [f"question {i}" for i in range(10_000)]
    for text in batch:  # the plan
        counts(text)
    encoded.clear()
    for text in batch:  # the run that follows it
        counts(text)
    assert encoded == []
    assert len(counts._counts) <= _token_counts._MAX_TEXTS


def test_a_bound_on_characters_forgets_the_older_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts over the characters' bound in all: the memory holds no more than the bound,
    and what it forgets is the oldest."""
    monkeypatch.setattr(_token_counts, "_MAX_CHARS", 100)
    counts = TokenCounts(lambda text: [0] * len(text))
    for i in range(30):
        assert counts(f"{i:02d}" * 10) == 20
        assert sum(map(len, counts._counts)) <= 100
        assert counts._chars == sum(map(len, counts._counts))
        assert f"{i:02d}" * 10 in counts._counts
