"""Running questions that depend on each other: each starts as soon as what it needs is
answered, with those answers filled into its prompt.

The questions ready at the start are planned and sent together (wave 0). Every answer that
arrives may make more questions ready; those are planned together and sent at once, without
waiting for the rest of their wave (their wave number is one more than the latest wave they
waited for). A question whose dependency failed is not sent: its answer carries a
``DependencyError``. Among questions sent together, those with the longest chains waiting
on them go first, so a short rate-limit budget is spent on the critical path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence

import anyio

from . import _clock
from ._dag import Graph, ancestors, critical_path, fill_in, question_ids
from ._events import Emitter
from ._exceptions import DeadlineExceededError, DependencyError
from ._planner import Plan
from ._questions import Answer, BatchResult, Question, RunStats

__all__ = ["run_graph"]

PlanFn = Callable[[list[Question]], Plan]
# (the questions sent together, their plan, where each answer goes, their input positions)
ExecuteFn = Callable[
    [list[Question], Plan, Callable[[Answer], None], list[int]], Awaitable[BatchResult]
]


async def run_graph(
    questions: Sequence[Question],
    deps: Graph,
    *,
    plan: PlanFn,
    execute: ExecuteFn,
    deadline: float | None,
    on_answer: Callable[[Answer], None] | None = None,
    events: Emitter | None = None,
) -> BatchResult:
    """Answer ``questions`` in dependency order; ``on_answer`` sees each final answer
    (those of questions never asked included) as soon as it is known; ``events`` is told
    each wave's plan."""
    run = _GraphRun(questions, deps, plan, execute, on_answer, events)
    started = _clock.now()
    with anyio.move_on_after(deadline if deadline is not None else math.inf):
        async with anyio.create_task_group() as tg:
            run.tg = tg
            run.launch(run.ready(), wave=0)
    answers = tuple(
        answer
        or Answer(
            i,
            questions[i],
            None,
            error=DeadlineExceededError(f"not answered within the batch deadline of {deadline}s"),
        )
        for i, answer in enumerate(run.answers)
    )
    stats = RunStats(
        wall_time=_clock.now() - started,
        requests=sum(s.requests for s in run.stats),
        retries=sum(s.retries for s in run.stats),
        rate_limited=sum(s.rate_limited for s in run.stats),
        failed=sum(not a.ok for a in answers),
        repaired=sum(s.repaired for s in run.stats),
        canaries=sum(s.canaries for s in run.stats),
        canary_disagreements=sum(s.canary_disagreements for s in run.stats),
        predicted_wall_time=run.plans[0].predicted_latency if len(run.plans) == 1 else None,
    )
    first = run.plans[0] if run.plans else None
    return BatchResult(answers, stats, first, tuple(run.plans))


class _GraphRun:
    def __init__(
        self,
        questions: Sequence[Question],
        deps: Graph,
        plan: PlanFn,
        execute: ExecuteFn,
        on_answer: Callable[[Answer], None] | None,
        events: Emitter | None = None,
    ) -> None:
        self.questions = questions
        self.events = events
        self.on_answer = on_answer
        self.deps = deps
        self.plan_fn = plan
        self.execute = execute
        self.ids = question_ids(questions)
        self.critical = critical_path(deps)
        self.answers: list[Answer | None] = [None] * len(questions)
        self.texts: dict[int, str] = {}
        self.launched: set[int] = set()
        self.plans: list[Plan] = []
        self.stats: list[RunStats] = []
        self.tg: anyio.abc.TaskGroup | None = None

    def ready(self) -> list[int]:
        return [
            i
            for i in range(len(self.questions))
            if i not in self.launched and all(j in self.texts for j in self.deps[i])
        ]

    def launch(self, indexes: list[int], wave: int) -> None:
        if not indexes:
            return
        assert self.tg is not None
        self.launched.update(indexes)
        self.tg.start_soon(self._wave, indexes, wave)

    async def _wave(self, indexes: list[int], wave: int) -> None:
        sent = [
            self.questions[i].model_copy(
                update={
                    "text": fill_in(self.questions[i].text, i, self.deps, self.texts, self.ids),
                    "depends_on": (),
                }
            )
            for i in indexes
        ]
        plan = _critical_first(self.plan_fn(sent), [self.critical[i] for i in indexes])
        self.plans.append(plan)
        if self.events is not None:
            self.events.planned(plan, wave, indexes)

        def on_answer(answer: Answer) -> None:
            self._record(indexes[answer.index], answer, wave)

        result = await self.execute(sent, plan, on_answer, indexes)
        self.stats.append(result.stats)
        for answer in result:  # deadline errors are stored without a callback
            self._record(indexes[answer.index], answer, wave)

    def _record(self, i: int, answer: Answer, wave: int) -> None:
        if self.answers[i] is not None:
            return
        self.answers[i] = dataclasses.replace(
            answer, index=i, question=self.questions[i], wave=wave
        )
        self._tell(i)
        if answer.ok and answer.text is not None:
            self.texts[i] = answer.text
            ready = self.ready()
            if ready:
                waited = max(self._wave_of(j) for k in ready for j in self.deps[k])
                self.launch(ready, wave=waited + 1)
            return
        for j in range(len(self.questions)):
            if j not in self.launched and i in ancestors(self.deps, j):
                self.launched.add(j)
                self.answers[j] = Answer(
                    j,
                    self.questions[j],
                    None,
                    error=DependencyError(
                        f"questions[{j}] was not asked: questions[{i}], whose answer it "
                        f"needs, failed ({type(answer.error).__name__})",
                        needs=i,
                    ),
                )
                self._tell(j)

    def _tell(self, i: int) -> None:
        answer = self.answers[i]
        if self.on_answer is not None and answer is not None:
            self.on_answer(answer)

    def _wave_of(self, i: int) -> int:
        answer = self.answers[i]
        return answer.wave if answer is not None else 0


def _critical_first(plan: Plan, critical: Sequence[int]) -> Plan:
    """``plan`` with the requests holding the longest waiting chains sent first."""
    chosen = plan.chosen
    indexes = chosen.requests.indexes
    order = sorted(
        range(chosen.k),
        key=lambda g: (-max(critical[i] for i in indexes[g]), g),
    )
    if order == list(range(chosen.k)):
        return plan
    reordered = dataclasses.replace(
        chosen,
        requests=chosen.requests.reordered(order),
        starts=tuple(chosen.starts[g] for g in order),
        finishes=tuple(chosen.finishes[g] for g in order),
    )
    candidates = tuple(reordered if c is chosen else c for c in plan.candidates)
    return dataclasses.replace(plan, chosen=reordered, candidates=candidates)
