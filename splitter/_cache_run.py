"""One batch through the response cache: answers found are given at once, identical
questions are sent once and their answer given to each, the rest are planned and sent as
usual, and what came back whole is stored.

Only questions that depend on nothing, and that nothing depends on, come here (a batch with
dependencies is sent as it is: an answer filled into another's prompt is not a cache's to
give). Every answer keeps its question's index and object; a copy of another question's
answer or an answer from the store says so with ``via="cache"``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio.to_thread

from . import _clock
from ._cache import AnswerStore, CacheEntry, answer_key
from ._questions import Answer, BatchResult, Question, Usage
from ._request_spec import RequestSpec

__all__ = ["RunMisses", "run_cached"]

# (the questions to send, their positions in the batch, where each answer goes)
RunMisses = Callable[
    [list[Question], list[int], Callable[[Answer], None] | None], Awaitable[BatchResult]
]


async def run_cached(
    items: Sequence[Question],
    spec: RequestSpec,
    *,
    store: AnswerStore,
    base_url: str,
    run: RunMisses,
    on_answer: Callable[[Answer], None] | None,
) -> BatchResult:
    """Answer ``items`` from ``store`` where it can, by ``run`` where it cannot."""
    started = _clock.now()
    keys = [
        answer_key(
            isolation_key=spec.isolation_key,
            base_url=base_url,
            model=spec.model,
            messages=own.messages(q.text),  # its own system prompt and history included
            params=own.capped(q.max_tokens),
        )
        for q in items
        for own in (spec.of(q),)
    ]
    found = await anyio.to_thread.run_sync(store.get_many, [k for k in keys if k is not None])
    answers: list[Answer | None] = [None] * len(items)

    def give(answer: Answer) -> None:
        answers[answer.index] = answer
        if on_answer is not None:
            on_answer(answer)

    send: list[int] = []  # one question per key not found (and each question with no key)
    copies: dict[int, list[int]] = {}  # a question sent -> the identical ones waiting on it
    sent_for: dict[str, int] = {}
    for i, (question, key) in enumerate(zip(items, keys, strict=True)):
        stored = None if key is None or key not in found else found[key]
        if stored is not None and (hit := _from_entry(i, question, stored, spec)) is not None:
            give(hit)
        elif key is not None and key in sent_for:
            copies[sent_for[key]].append(i)
        else:
            if key is not None:
                sent_for[key] = i
                copies[i] = []
            send.append(i)
    hits = len(items) - len(send)

    result = BatchResult(())
    if send:

        def arrive(answer: Answer) -> None:
            i = send[answer.index]
            if answers[i] is not None:
                return
            give(dataclasses.replace(answer, index=i, question=items[i]))
            for j in copies.get(i, ()):
                give(dataclasses.replace(answer, index=j, question=items[j], via="cache"))

        result = await run([items[i] for i in send], send, arrive)
        for answer in result:  # answers stored without a callback (a deadline's, say)
            arrive(answer)
        fresh = {
            key: _to_entry(got)
            for key, i in sent_for.items()
            if (got := answers[i]) is not None and _keepable(got)
        }
        await anyio.to_thread.run_sync(store.put_many, fresh)

    final = tuple(a for a in answers if a is not None)
    assert len(final) == len(items), "every question has its answer"
    stats = dataclasses.replace(
        result.stats,
        wall_time=_clock.now() - started,
        failed=sum(not a.ok for a in final),
        cache_hits=hits,
    )
    return BatchResult(final, stats, result.plan, result.plans)


def _keepable(answer: Answer) -> bool:
    """Only a whole answer is worth giving again: not an error, not one cut at its cap."""
    return answer.ok and answer.text is not None and answer.finish_reason != "length"


def _to_entry(answer: Answer) -> CacheEntry:
    assert answer.text is not None
    usage = answer.usage
    return CacheEntry(
        answer.text,
        answer.finish_reason,
        usage.prompt_tokens,
        usage.completion_tokens,
        time.time(),
    )


def _from_entry(
    index: int, question: Question, entry: CacheEntry, spec: RequestSpec
) -> Answer | None:
    """The stored answer, read back against the question's schema if it has one (None
    when it no longer validates: the question is sent instead)."""
    parsed = None
    if (structured := spec.of(question).structured) is not None:
        try:
            parsed = structured.parse(entry.text)
        except ValueError:
            return None
    # Nothing is billed for an answer from the store: its usage is zero.
    return Answer(
        index,
        question,
        entry.text,
        usage=Usage(),
        finish_reason=entry.finish_reason,
        via="cache",
        parsed=parsed,
    )
