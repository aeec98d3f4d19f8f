"""Running a plan: its requests started in the plan's order in one task group, under the
batch deadline; merged requests read back and repaired, single ones streamed when asked.

The pieces, one module each: ``_run_state`` (the batch's answer slots, counters and
result), ``_send`` (one request with its retries, budget, timeout and learning),
``_merged_reply`` (a merged reply read back into answers), ``_turns`` (the plan's order of
starts), ``_request_events`` (what a request tells while it runs).
Every successful response teaches the endpoint's service model and budget.
Each step is told to the batch's ``Emitter`` (request events only when someone listens).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import anyio

from . import _clock
from ._endpoint import Endpoint
from ._events import Emitter
from ._exceptions import SplitterError
from ._merge import build_merged_prompt
from ._merged_reply import alone_may_pass, read_merged
from ._openai import OpenAIBackend
from ._planner import Group, Plan
from ._policy import Policy
from ._questions import Answer, BatchResult, Question, Via
from ._request_spec import RequestSpec
from ._run_state import RunState
from ._send import Outgoing, Sender
from ._stream import Relay
from ._turns import Started, Turns

__all__ = ["Executor", "RequestSpec"]


class Executor:
    """Runs a plan's requests under a policy and collects answers in input order."""

    def __init__(
        self,
        backend: OpenAIBackend,
        policy: Policy,
        endpoint: Endpoint,
    ) -> None:
        self._backend = backend
        self._policy = policy
        self._endpoint = endpoint

    async def run(
        self,
        questions: Sequence[Question],
        plan: Plan,
        spec: RequestSpec,
        *,
        on_answer: Callable[[Answer], None] | None = None,
        relay: Relay | None = None,
        positions: Sequence[int] | None = None,
        events: Emitter | None = None,
    ) -> BatchResult:
        """Send ``plan``; ``on_answer`` sees each answer as it is stored (a repaired
        question's final answer only). With a ``relay``, questions asked alone are streamed
        into it, as question ``positions[i]`` (default: ``i``). ``events`` is the batch's
        emitter: its request events name questions by ``positions`` too."""
        started = _clock.now()
        where = positions if positions is not None else range(len(questions))
        state = RunState(
            self._backend,
            self._policy,
            self._endpoint,
            questions,
            spec,
            plan,
            on_answer,
            where,
            events,
        )
        try:
            if relay is not None:
                state.stream_to(relay, where)
            await _Run(state).all(plan)
            return state.result(plan, _clock.now() - started)
        except BaseExceptionGroup as group:
            # A programming error (a misspelt keyword, a value of the wrong type) fails
            # every request the same way before any is sent: the caller sees it as itself,
            # not as "unhandled errors in a TaskGroup".
            sole = _sole(group)
            if sole is None:
                raise
            raise sole from None
        finally:
            self._endpoint.release(state.claim)


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one error a task group's failures all are (same type, same message), if so."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    first = leaves[0]
    same = all(type(e) is type(first) and str(e) == str(first) for e in leaves)
    return first if same else None


class _Run:
    """A plan's groups in flight: each asked alone or merged, its answers stored."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.sender = Sender(state)

    async def all(self, plan: Plan) -> None:
        """Every group of ``plan``, until the last is answered or the deadline passes."""
        deadline = self.state.policy.deadline
        with anyio.move_on_after(deadline if deadline is not None else math.inf):
            async with anyio.create_task_group() as tg:
                # Each request takes its slot (and then its budget) only after the one
                # before it in the plan has, so the order the planner chose (longest or
                # most-awaited first) holds on any event loop, trio's included.
                turns = Turns()
                for ticket, group in enumerate(plan.chosen.groups):
                    if group.merged:
                        tg.start_soon(self.merged, group, Started(turns, ticket))
                    else:
                        place = Started(turns, ticket)
                        tg.start_soon(self.single, group.indexes[0], "single", place)

    async def single(self, index: int, via: Via, started: Started | None = None) -> None:
        state = self.state
        question = state.questions[index]
        params = state.spec.capped(question.max_tokens)
        try:
            with started or Started.unordered():
                messages = state.spec.messages(question.text)
                out = Outgoing(messages, params, state.reserve_single(index), started, index)
                outcome, attempts = await self.sender.send(out, asks=(index,))
        finally:
            if index == state.head and state.head_started is not None:
                state.head_started.set()  # failed or answered without a token: don't wait
        if isinstance(outcome, SplitterError):
            state.store(Answer(index, question, None, error=outcome, attempts=attempts, via=via))
            return
        state.endpoint.lengths.observe(question.text, outcome.usage.completion_tokens)
        state.store(
            Answer(
                index,
                question,
                outcome.text,
                usage=outcome.usage,
                attempts=attempts,
                request_id=outcome.request_id,
                finish_reason=outcome.finish_reason,
                via=via,
            )
        )

    async def merged(self, group: Group, started: Started) -> None:
        state = self.state
        prompt = build_merged_prompt([state.questions[i].text for i in group.indexes])
        params = state.spec.capped(group.max_tokens)
        reserve = group.input_tokens + (group.max_tokens or group.output_tokens)
        with started:
            out = Outgoing(state.spec.messages(prompt.text), params, reserve, started)
            outcome, attempts = await self.sender.send(out, asks=group.indexes)
        if isinstance(outcome, SplitterError):
            if state.fatal is None and alone_may_pass(outcome):
                await self._repair(group.indexes)
                return
            for index in group.indexes:
                error = state.fatal or outcome
                state.store(Answer(index, state.questions[index], None, error=error, via="merged"))
            return
        reply = read_merged(
            outcome, prompt, group.indexes, state.questions, state.endpoint, attempts
        )
        for answer in reply.answers:
            state.store(answer)
        await self._repair(reply.missing)

    async def _repair(self, indexes: Sequence[int]) -> None:
        self.state.counters.repaired += len(indexes)
        async with anyio.create_task_group() as tg:
            for index in indexes:
                tg.start_soon(self.single, index, "repair")
