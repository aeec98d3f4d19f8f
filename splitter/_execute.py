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

import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence

import anyio

from . import _clock
from ._canary import agrees
from ._endpoint import Endpoint
from ._events import Emitter
from ._exceptions import InvalidResponseError, SplitterError
from ._merge import build_merged_prompt, holds_marker_lines
from ._merged_reply import alone_may_pass, note_schema_refusal, read_merged
from ._openai import OpenAIBackend
from ._planner import Group, Plan
from ._policy import Policy
from ._questions import Answer, BatchResult, Question, Usage, Via
from ._request_spec import RequestSpec
from ._run_state import RunState
from ._send import Outgoing, Sender
from ._stream import Relay
from ._structured import TEXT_ANSWERS, Structured, merged_format
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
            self._endpoint.canaries.count_requests(state.counters.requests, self._policy.merge)


def _validated(answer: Answer, structured: Structured) -> Answer:
    """``answer`` with its ``parsed`` value, or failed with the reason it does not validate."""
    if not answer.ok:
        return answer
    try:
        return dataclasses.replace(answer, parsed=structured.parse(answer.text))
    except ValueError as exc:
        error = InvalidResponseError(
            f"the answer to {_named(answer.question)} does not match the response_format "
            f"schema: {exc}",
            request_id=answer.request_id,
        )
        return dataclasses.replace(answer, error=error)


def _named(question: Question) -> str:
    if question.id is not None:
        return f"question {question.id!r}"
    text = question.text if len(question.text) <= 40 else question.text[:37] + "..."
    return f"{text!r}"


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

    async def single(
        self, index: int, via: Via, started: Started | None = None, spent: Usage | None = None
    ) -> None:
        """Ask question ``index`` alone and store its answer; ``spent`` is usage already
        billed for it (a merged answer it replaces), added to the answer's own."""
        answer = await self.alone(index, via, started)
        if spent is not None:
            answer = dataclasses.replace(answer, usage=answer.usage + spent)
        self.state.store(answer)

    def alone(
        self, index: int, via: Via, started: Started | None = None, *, live: bool = True
    ) -> Awaitable[Answer]:
        """Question ``index`` asked in a request of its own, as an answer (or its error);
        ``live``: streamed to the batch's relay, if it has one. With a JSON schema, the
        answer's ``parsed`` value; a reply that does not validate is asked once more (not
        when streamed: its text may be shown), then failed with ``InvalidResponseError``."""
        state = self.state
        structured = state.spec.of(state.questions[index]).structured
        if structured is None:  # no coroutine of its own per request in flight (issue #21)
            return self._ask(index, via, started, live=live)
        return self._structured(index, via, started, structured, live=live)

    async def _structured(
        self, index: int, via: Via, started: Started | None, structured: Structured, *, live: bool
    ) -> Answer:
        answer = await self._ask(index, via, started, live=live)
        checked = _validated(answer, structured)
        streamed = live and self.state.relay is not None
        if checked.ok or not answer.ok or streamed:
            return checked
        self.state.counters.repaired += 1
        again = await self._ask(index, "repair", live=False)
        again = dataclasses.replace(again, usage=again.usage + answer.usage)
        return _validated(again, structured)

    async def _ask(
        self, index: int, via: Via, started: Started | None = None, *, live: bool = True
    ) -> Answer:
        state = self.state
        question = state.questions[index]
        spec = state.spec.of(question)  # its own system prompt, history and keywords
        try:
            messages = spec.messages(question.text)
            params = spec.capped(question.max_tokens)
            streamed = index if live else None
            out = Outgoing(messages, params, state.reserve_single(index), started, streamed)
            outcome, attempts = await self.sender.send(out, asks=(index,))
        finally:
            if started is not None:  # passes the turn on, if it has not yet (a try, not a
                started.fire()  # ``with``: no bound __exit__ alive per request in flight)
            if index == state.head and state.head_started is not None:
                state.head_started.set()  # failed or answered without a token: don't wait
        if isinstance(outcome, SplitterError):
            return Answer(index, question, None, error=outcome, attempts=attempts, via=via)
        state.endpoint.lengths.observe(question.text, outcome.usage.completion_tokens)
        return Answer(
            index,
            question,
            outcome.text,
            usage=outcome.usage,
            attempts=attempts,
            request_id=outcome.request_id,
            finish_reason=outcome.finish_reason,
            via=via,
        )

    async def merged(self, group: Group, started: Started) -> None:
        state = self.state
        # Merged questions share one request shape (the planner's grouping): the first's.
        spec = state.spec.of(state.questions[group.indexes[0]])
        texts = [state.questions[i].text for i in group.indexes]
        structured = spec.structured or self._text_layout(spec, texts)
        prompt = build_merged_prompt(texts, as_json=structured is not None)
        params = spec.capped(group.max_tokens)
        if structured is not None:
            params = {**params, "response_format": merged_format(structured, len(texts))}
        reserve = group.input_tokens + (group.max_tokens or group.output_tokens)
        # Beside the merged request, the check costs a request, not a wait; where the plan
        # priced it cheaper once the reply is back (a long shared prefix, compute-bound
        # prefill: the cache then serves it), after.
        canary = None if state.canary_after else self._canary_for(group)
        solo: list[Answer] = []
        async with anyio.create_task_group() as tg:
            if canary is not None:
                tg.start_soon(self._ask_canary, canary, solo)
            with started:
                out = Outgoing(spec.messages(prompt.text), params, reserve, started)
                outcome, attempts = await self.sender.send(out, asks=group.indexes)
        alone = solo[0] if solo and solo[0].ok else None
        if isinstance(outcome, SplitterError):
            if structured is TEXT_ANSWERS:
                note_schema_refusal(state.endpoint, outcome)
            if state.fatal is None and alone_may_pass(outcome):
                await self._repair(self._kept(group.indexes, alone))
                return
            for index in group.indexes:
                error = state.fatal or outcome
                state.store(Answer(index, state.questions[index], None, error=error, via="merged"))
            return
        reply = read_merged(
            outcome, prompt, group.indexes, state.questions, state.endpoint, attempts, structured
        )
        answers = {answer.index: answer for answer in reply.answers}
        if state.canary_after and answers:
            canary = self._canary_for(group, among=[i for i in group.indexes if i in answers])
            if canary is not None:
                await self._ask_canary(canary, solo)
                alone = solo[0] if solo[0].ok else None
        replaced: dict[int, Usage] = {}
        if alone is not None and alone.index in answers:
            replaced = self._compare(answers, alone)
        for answer in answers.values():
            state.store(answer)
        await self._repair([*self._kept(reply.missing, alone), *replaced], replaced)

    def _text_layout(self, spec: RequestSpec, texts: Sequence[str]) -> Structured | None:
        """JSON for a merge of plain-text questions where the endpoint's layout is JSON
        (``MergePolicy.format``); a caller's own ``response_format``, or a question holding
        a marker-like line, keeps the markers."""
        if "response_format" in spec.params or holds_marker_lines(texts):
            return None
        layout = self.state.endpoint.merges.choose(self.state.policy.merge.format)
        return TEXT_ANSWERS if layout == "json" else None

    def _canary_for(self, group: Group, among: Sequence[int] | None = None) -> int | None:
        """The item of ``group`` (of ``among`` it, where given) to ask alone as well, if a
        canary is due."""
        state = self.state
        if state.policy.strategy != "auto":
            return None  # a pinned strategy is the caller's decision: nothing to learn for
        record = state.endpoint.canaries
        pool = among if among is not None else group.indexes
        index = pool[(record.sent + 1) % len(pool)]
        reserve = state.reserve_single(index)
        # A canary never makes the batch wait for the rate limit: without a request (and
        # its tokens) to spare beyond the plan's, the check waits for a later request.
        if state.budget is not None and (state.spare_requests < 1 or state.spare_tokens < reserve):
            return None
        if not record.due(state.policy.merge, state.counters.requests):
            return None
        state.spare_requests -= 1
        state.spare_tokens -= reserve
        return index

    async def _ask_canary(self, index: int, into: list[Answer]) -> None:
        self.state.counters.canaries += 1
        # Not streamed: the merged answer may be the one kept.
        into.append(await self.alone(index, "repair", live=False))

    def _kept(self, indexes: Sequence[int], alone: Answer | None) -> list[int]:
        """``indexes`` to re-ask, less the canary's: its solo answer is stored instead."""
        if alone is None or alone.index not in indexes:
            return list(indexes)
        self.state.store(alone)
        return [i for i in indexes if i != alone.index]

    def _compare(self, answers: dict[int, Answer], alone: Answer) -> dict[int, Usage]:
        """Judge the merged answer by its canary, in place: agreeing, it is kept (billed
        the canary's tokens too); disagreeing, the solo answer replaces it and the rest of
        the reply is untrusted: those questions are taken out of ``answers`` and returned,
        with the usage their merged answers were billed, to be re-asked alone."""
        state = self.state
        merged = answers[alone.index]
        agreed = agrees(merged.text or "", alone.text or "", state.policy.merge.canary_overlap)
        state.endpoint.canaries.observe(agreed)
        if agreed:
            answers[alone.index] = dataclasses.replace(merged, usage=merged.usage + alone.usage)
            return {}
        state.counters.canary_disagreements += 1
        del answers[alone.index]
        state.store(dataclasses.replace(alone, usage=alone.usage + merged.usage))
        others = {index: answer.usage for index, answer in answers.items()}
        answers.clear()
        return others

    async def _repair(self, indexes: Sequence[int], spent: dict[int, Usage] | None = None) -> None:
        self.state.counters.repaired += len(indexes)
        spent = spent or {}
        async with anyio.create_task_group() as tg:
            for index in indexes:
                tg.start_soon(self.single, index, "repair", None, spent.get(index))
