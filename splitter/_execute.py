"""Running a plan: concurrency slots, the retry loop, timeouts, the deadline, merge repair.

Each answer is written into the slot of its question's index, so responses that finish out
of order, retries, repairs and failures can never move an answer to another question.
A merged request's answers are parsed back by their nonce markers; any item that is
missing, ambiguous or cut off is re-asked alone (``via="repair"``). Anything not answered
when the deadline passes is marked with ``DeadlineExceededError``: no question is dropped.
Every successful response teaches the endpoint's service model and budget.
Each step is told to the batch's ``Emitter`` (request events only when someone listens).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from tenacity import RetryCallState

from . import _clock
from ._budget import Budget, Kind, Reservation
from ._endpoint import Endpoint
from ._estimate import count_tokens
from ._events import (
    Emitter,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
    error_kind,
    status_of,
)
from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    BudgetError,
    DeadlineExceededError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    SplitterError,
    StreamInterruptedError,
)
from ._headers import parse_count
from ._merge import ANSWER_MARKER_TOKENS, build_merged_prompt, parse_merged
from ._meter import Reading
from ._openai import Completion, OpenAIBackend
from ._planner import Group, Plan
from ._policy import Policy
from ._questions import Answer, BatchResult, Question, RunStats, Usage, Via
from ._retry import is_retryable, retrying
from ._service_model import Observation
from ._stream import Relay

__all__ = ["Executor", "RequestSpec"]

_OVERLOADED = frozenset({503, 529})  # the service says it is overloaded: send less at once
# Failures every request of the batch would meet: a bad key, no access, no such model.
_BATCH_WIDE_STATUS = frozenset({401, 403, 404})
# A merged request the service refused for its content: alone, its questions may pass.
_CONTENT_STATUS = frozenset({400, 413, 422})


class _Stopped(Exception):
    """The batch met an error every request would meet: nothing more is sent."""

    def __init__(self, *, sent: bool) -> None:
        super().__init__()
        self.sent = sent  # the attempt that met it had gone out (it counts as an attempt)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of a batch is sent with."""

    model: str
    system: str | None
    params: dict[str, Any]

    def messages(self, user: str) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": user}]

    def capped(self, max_tokens: int | None) -> dict[str, Any]:
        """The params with the output cap set (under the caller's own key, if any)."""
        if max_tokens is None:
            return self.params
        key = "max_completion_tokens" if "max_completion_tokens" in self.params else "max_tokens"
        return {**self.params, key: max_tokens}


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    repaired: int = 0


@dataclass(slots=True)
class _Request:
    """A logical request as its events name it: its number in the batch and its questions
    (the caller's indexes)."""

    number: int
    indexes: tuple[int, ...]


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
        run = _Run(self, questions, spec, plan, on_answer, where, events)
        try:
            return await self._run(run, questions, plan, relay, where, started)
        except BaseExceptionGroup as group:
            # A programming error (a misspelt keyword, a value of the wrong type) fails
            # every request the same way before any is sent: the caller sees it as itself,
            # not as "unhandled errors in a TaskGroup".
            sole = _sole(group)
            if sole is None:
                raise
            raise sole from None
        finally:
            self._endpoint.release(run.claim)

    async def _run(
        self,
        run: _Run,
        questions: Sequence[Question],
        plan: Plan,
        relay: Relay | None,
        where: Sequence[int],
        started: float,
    ) -> BatchResult:
        if relay is not None:
            run.stream_to(relay, where)
        deadline = self._policy.deadline if self._policy.deadline is not None else math.inf
        with anyio.move_on_after(deadline):
            async with anyio.create_task_group() as tg:
                # Each request takes its slot (and then its budget) only after the one
                # before it in the plan has, so the order the planner chose (longest or
                # most-awaited first) holds on any event loop, trio's included.
                turns = _Turns()
                for ticket, group in enumerate(plan.chosen.groups):
                    if group.merged:
                        tg.start_soon(run.merged, group, _Started(turns, ticket))
                    else:
                        place = _Started(turns, ticket)
                        tg.start_soon(run.single, group.indexes[0], "single", place)
        answers = tuple(
            answer or Answer(i, questions[i], None, error=_deadline_error(self._policy))
            for i, answer in enumerate(run.slots)
        )
        wall = _clock.now() - started
        stats = RunStats(
            wall_time=wall,
            requests=run.counters.requests,
            retries=run.counters.retries,
            rate_limited=run.counters.rate_limited,
            failed=sum(not a.ok for a in answers),
            repaired=run.counters.repaired,
            predicted_wall_time=plan.predicted_latency,
        )
        return BatchResult(answers, stats, plan)


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
    """The state of one batch in flight."""

    def __init__(
        self,
        executor: Executor,
        questions: Sequence[Question],
        spec: RequestSpec,
        plan: Plan,
        on_answer: Callable[[Answer], None] | None = None,
        positions: Sequence[int] = (),
        events: Emitter | None = None,
    ):
        self.policy = executor._policy
        self.events = events if events is not None else Emitter()
        self.backend = executor._backend
        self.endpoint = executor._endpoint
        self.questions = questions
        self.spec = spec
        self.items = {item.index: item for item in plan.items}
        # Read once from the plan's snapshot: a budget read per request would cost a Redis
        # round trip on the hot path for a shared budget.
        self.token_capacity = plan.budget.token_capacity
        self.slots: list[Answer | None] = [None] * len(questions)
        self.limiter = self.endpoint.concurrency
        self.budget: Budget | None = self.endpoint.budget if self.policy.limits.enforce else None
        # Batches planned while this one books its requests see the room less these.
        groups = plan.chosen.groups
        booked = sum(g.input_tokens + (g.max_tokens or g.output_tokens) for g in groups)
        self.claim = self.endpoint.claim(len(groups), booked)
        self.fatal: SplitterError | None = None  # met by one request, it stops the batch
        self.base_url = executor._backend.base_url
        self.counters = _Counters()
        self.on_answer = on_answer
        self.relay: Relay | None = None
        self.positions = positions  # the caller's index of each question of this run
        self.plan_groups = plan.chosen.groups
        self.head: int | None = None  # the live answer the others wait for, when streaming
        self.head_started: anyio.Event | None = None

    def stream_to(self, relay: Relay, positions: Sequence[int]) -> None:
        self.relay, self.positions = relay, positions
        groups = self.plan_groups
        if (
            len(groups) > 1
            and not groups[0].merged
            and relay.delivering(positions[groups[0].indexes[0]])
        ):
            # The answer being delivered live goes first (the planner put it first) and
            # the others wait for its first token: sent beside it, their prefill would
            # compete with its own and delay the first token the reader sees. They are
            # buffered until it has finished anyway, so starting them a TTFT later
            # seldom delays what is shown.
            self.head = groups[0].indexes[0]
            self.head_started = anyio.Event()

    def _reserve_single(self, index: int) -> int:
        """Tokens one question's request books in the budget: input + max_tokens."""
        item = self.items.get(index)
        if item is None:  # pragma: no cover - every planned question has an item
            return count_tokens(self.questions[index].text, self.spec.model)
        return item.input_tokens + (item.max_tokens or item.output_tokens)

    async def single(self, index: int, via: Via, started: _Started | None = None) -> None:
        question = self.questions[index]
        params = self.spec.capped(question.max_tokens)
        try:
            with started or _Started.unordered():
                outcome, attempts = await self._send(
                    self.spec.messages(question.text),
                    params,
                    self._reserve_single(index),
                    started,
                    streamed=index,
                    asks=(index,),
                )
        finally:
            if index == self.head and self.head_started is not None:
                self.head_started.set()  # failed or answered without a token: don't wait
        if isinstance(outcome, SplitterError):
            self._store(Answer(index, question, None, error=outcome, attempts=attempts, via=via))
            return
        self.endpoint.lengths.observe(question.text, outcome.usage.completion_tokens)
        self._store(
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

    def _store(self, answer: Answer) -> None:
        self.slots[answer.index] = answer
        if self.on_answer is not None:
            self.on_answer(answer)

    async def merged(self, group: Group, started: _Started) -> None:
        prompt = build_merged_prompt([self.questions[i].text for i in group.indexes])
        params = self.spec.capped(group.max_tokens)
        reserve = group.input_tokens + (group.max_tokens or group.output_tokens)
        with started:
            outcome, attempts = await self._send(
                self.spec.messages(prompt.text), params, reserve, started, asks=group.indexes
            )
        if isinstance(outcome, SplitterError):
            if self.fatal is None and _alone_may_pass(outcome):
                await self._repair(group.indexes)
                return
            for index in group.indexes:
                error = self.fatal or outcome
                self._store(Answer(index, self.questions[index], None, error=error, via="merged"))
            return
        parsed = parse_merged(outcome.text, prompt, truncated=outcome.finish_reason == "length")
        found = {group.indexes[k - 1]: text for k, text in parsed.answers.items()}
        self.endpoint.merges.observe(len(group.indexes), len(found))
        for (index, text), usage in zip(
            found.items(), _usage_shares(outcome.usage, found), strict=True
        ):
            question = self.questions[index]
            # The service's own count shared out by length (less the marker), the same unit
            # as a single answer's usage: a local tokenizer may count unlike the model's.
            own = max(1, usage.completion_tokens - ANSWER_MARKER_TOKENS)
            self.endpoint.lengths.observe(question.text, own)
            self._store(
                Answer(
                    index,
                    question,
                    text,
                    usage=usage,
                    attempts=attempts,
                    request_id=outcome.request_id,
                    finish_reason="stop",
                    via="merged",
                )
            )
        await self._repair([group.indexes[k - 1] for k in parsed.missing])

    async def _repair(self, indexes: Sequence[int]) -> None:
        self.counters.repaired += len(indexes)
        async with anyio.create_task_group() as tg:
            for index in indexes:
                tg.start_soon(self.single, index, "repair")

    async def _send(
        self,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        reserve: int,
        started: _Started | None = None,
        streamed: int | None = None,
        *,
        asks: Sequence[int],
    ) -> tuple[Completion | SplitterError, int]:
        """One logical request with its retries: the completion, or the final error.
        ``started`` fires once its first attempt holds a concurrency slot; ``streamed`` is
        the question whose answer it streams to the relay, if there is one; ``asks`` are
        the questions it asks (for its events)."""
        attempts = 0
        request = None
        if self.events.detailed:
            indexes = tuple(self.positions[i] for i in asks)
            request = _Request(self.events.next_request(), indexes)

        def before_sleep(state: RetryCallState) -> None:
            self.counters.retries += 1
            if request is not None:
                self._retry_scheduled(request, state)

        try:
            self._check_fits(reserve)
            async for attempt in retrying(self.policy.retry, before_sleep=before_sleep):
                with attempt:
                    attempts += 1
                    completion = await self._attempt(
                        messages, params, reserve, started, streamed, (request, attempts)
                    )
                    return completion, attempts
        except _Stopped as stopped:
            assert self.fatal is not None
            return self.fatal, attempts if stopped.sent else attempts - 1
        except SplitterError as exc:
            return exc, attempts
        raise AssertionError(
            "unreachable: tenacity either returns or re-raises"
        )  # pragma: no cover

    def _retry_scheduled(self, request: _Request, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        self.events.emit(
            RetryScheduled(
                batch=self.events.batch,
                request=request.number,
                indexes=request.indexes,
                attempt=state.attempt_number,
                error=error_kind(exc) if exc is not None else "unknown",
                status_code=status_of(exc),
                wait=wait,
            )
        )

    def _check_fits(self, reserve: int) -> None:
        cap = self.token_capacity
        if cap is not None and reserve > cap and self.policy.limits.oversized == "error":
            raise BudgetError(
                f"the request books {reserve} tokens (input + max_tokens), more than the whole "
                f"token budget of {cap:.0f}; lower max_tokens or shorten the question"
            )

    async def _attempt(
        self,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        reserve: int,
        started: _Started | None = None,
        streamed: int | None = None,
        told: tuple[_Request | None, int] = (None, 0),
    ) -> Completion:
        """One attempt; ``told`` is the request its events name (None: no one listens) and
        the attempt's number."""
        shown = self._shown(streamed)
        if shown is not None:
            raise StreamInterruptedError(
                f"the stream of questions[{shown}] broke off after part of its answer was "
                "delivered; it is not re-asked"
            )
        if self.fatal is not None:
            raise _Stopped(sent=False)
        budget, concurrency = self.budget, self.endpoint.concurrency
        # The slot is held only while a request is out or about to go, never across a
        # backoff. Taking it before the budget means that while the limits are still
        # unknown, only one slot-full of requests goes out before the headers teach them.
        if started is not None:
            await started.turn()
        if self.head_started is not None and streamed != self.head:
            await self.head_started.wait()  # after the head's turn: it holds its slot
        await self._take_slot()
        try:
            if started is not None:
                started.fire()
            # Every attempt, retries included, waits for its own place in the budget.
            request, attempt = told
            on_wait = None if request is None else functools.partial(self._rate_wait, request)
            reservation = await budget.acquire(reserve, on_wait) if budget is not None else None
            self.claim.booked(reserve)
            if self._stopped():  # met by another request while this one waited
                if budget is not None and reservation is not None:
                    await budget.settle(reservation, {}, lost=True)
                raise _Stopped(sent=False)
            self.counters.requests += 1
            if request is not None:
                self._request_started(request, attempt, reserve)
            sent_at = _clock.now()
            token = self.endpoint.meter.start(sent_at)
            try:
                completion = await self._checked_call(messages, params, streamed)
            except BaseException as exc:
                if request is not None:
                    self._request_finished(request, attempt, sent_at, error=exc)
                await self._failed(exc, budget, reservation)
                raise
            finally:
                shared = self.endpoint.meter.finish(token, _clock.now())
        finally:
            self.limiter.release()
        self.endpoint.answered = True
        if request is not None:
            self._request_finished(request, attempt, sent_at, usage=completion.usage)
        concurrency.on_success()
        if budget is not None and reservation is not None:
            used = completion.usage.total_tokens
            await budget.settle(reservation, completion.headers, used_tokens=used)
        self._learn(completion, shared, sent_at)
        return completion

    async def _failed(
        self, exc: BaseException, budget: Budget | None, reservation: Reservation | None
    ) -> None:
        """Tell the budget what a failed attempt's response said; stop the batch on an
        error every request would meet."""
        if isinstance(exc, APIStatusError):
            self.endpoint.answered = True
            if budget is not None and reservation is not None:
                limited: Kind | None = None
                if isinstance(exc, RateLimitError) and not isinstance(exc, QuotaExceededError):
                    limited = "tokens" if exc.type == "tokens" else "requests"
                await budget.settle(
                    reservation, exc.rate_headers, limited=limited, retry_after=exc.retry_after
                )
            if isinstance(exc, QuotaExceededError) or exc.status_code in _BATCH_WIDE_STATUS:
                self._stop(exc)
        else:
            if budget is not None and reservation is not None:
                with anyio.CancelScope(shield=True):
                    await budget.settle(reservation, {}, lost=True)
            # (A timeout is no sign of a wrong URL: the server may be slow.)
            unreachable = isinstance(exc, APIConnectionError) and not isinstance(
                exc, APITimeoutError
            )
            if unreachable and not self.endpoint.answered:
                self._stop(
                    APIConnectionError(
                        f"{self.base_url} has never answered ({exc}); check the base URL and "
                        "that the server is up (connection errors are retried only once an "
                        "endpoint has answered)"
                    )
                )

    def _stopped(self) -> bool:
        # A call, not `self.fatal is not None` inline: after an await another task may
        # have set it, which a type checker's narrowing from the earlier check would deny.
        return self.fatal is not None

    def _stop(self, error: SplitterError) -> None:
        if self.fatal is None:
            self.fatal = error
        raise _Stopped(sent=True) from error

    async def _checked_call(
        self, messages: list[dict[str, Any]], params: dict[str, Any], streamed: int | None
    ) -> Completion:
        """The call under the policy's timeout; overload and 429s told to the concurrency
        limit and the budget."""
        timeout = self.policy.timeout if self.policy.timeout is not None else math.inf
        concurrency = self.endpoint.concurrency
        try:
            with anyio.fail_after(timeout):
                return await self._call(messages, params, streamed)
        except TimeoutError as exc:
            concurrency.on_overload()
            raise APITimeoutError(f"no answer within the {timeout:g}s timeout") from exc
        except RateLimitError:
            # The budget learns the rate; fewer requests in flight would not send slower.
            self.counters.rate_limited += 1
            raise
        except ServerError as exc:
            if exc.status_code in _OVERLOADED:
                concurrency.on_overload()
            raise

    def _rate_wait(self, request: _Request, seconds: float, limit: Kind) -> None:
        self.events.emit(
            RateLimitWait(
                batch=self.events.batch,
                request=request.number,
                indexes=request.indexes,
                seconds=seconds,
                limit=limit,
            )
        )

    def _request_started(self, request: _Request, attempt: int, reserve: int) -> None:
        self.events.emit(
            RequestStarted(
                batch=self.events.batch,
                request=request.number,
                indexes=request.indexes,
                attempt=attempt,
                reserved_tokens=reserve,
            )
        )

    def _request_finished(
        self,
        request: _Request,
        attempt: int,
        sent_at: float,
        *,
        usage: Usage | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.events.emit(
            RequestFinished(
                batch=self.events.batch,
                request=request.number,
                indexes=request.indexes,
                attempt=attempt,
                latency=_clock.now() - sent_at,
                usage=usage if usage is not None else Usage(),
                error=None if error is None else error_kind(error),
                status_code=status_of(error),
            )
        )

    async def _take_slot(self) -> None:
        """A concurrency slot; without yielding to the event loop when one is free, so the
        next request in the plan's order can take its turn at once."""
        if not self.limiter.try_acquire():
            await self.limiter.acquire()

    def _shown(self, streamed: int | None) -> int | None:
        """The caller's index of ``streamed`` if part of its answer was already delivered."""
        if streamed is None or self.relay is None:
            return None
        at = self.positions[streamed]
        return at if self.relay.committed(at) else None

    async def _call(
        self, messages: list[dict[str, Any]], params: dict[str, Any], streamed: int | None
    ) -> Completion:
        if streamed is None or self.relay is None:
            return await self.backend.chat(model=self.spec.model, messages=messages, **params)
        at = self.positions[streamed]
        self.relay.attempt(at)
        on_delta = functools.partial(self.relay.delta, at)
        if streamed == self.head and self.head_started is not None:
            on_delta = functools.partial(_first_then, self.head_started, on_delta)
        try:
            return await self.backend.chat_stream(
                model=self.spec.model, messages=messages, on_delta=on_delta, **params
            )
        except SplitterError as exc:
            if self.relay.committed(at):
                raise StreamInterruptedError(
                    f"the stream of questions[{at}] broke off after part of its answer was "
                    f"delivered ({exc}); it is not re-asked"
                ) from exc
            self.relay.abandon(at)
            raise
        except BaseException:  # a timeout or a cancellation: the attempt is over all the same
            self.relay.abandon(at)
            raise

    def _learn(
        self,
        completion: Completion,
        shared: Mapping[int | None, tuple[Reading, ...]],
        sent_at: float,
    ) -> None:
        processing_ms = parse_count(completion.headers.get("openai-processing-ms"))
        self.endpoint.service.observe(
            Observation(
                input_tokens=completion.usage.prompt_tokens,
                output_tokens=completion.usage.completion_tokens,
                latency=completion.elapsed,
                concurrency=shared[None][0][1],
                queue=shared,
                started=sent_at,
                idle=self.endpoint.meter.in_flight == 0,
                processing=None if processing_ms is None else processing_ms / 1000,
            )
        )


def _first_then(event: anyio.Event, deliver: Callable[[str], None], text: str) -> None:
    """Deliver a piece of the head's answer, and let the others go at its first."""
    event.set()
    deliver(text)


class _Turns:
    """Hands out turns in ticket order: ticket n goes once every ticket before it is done.

    A ticket may be done before its turn (a request refused before it needed a slot); the
    turn then passes over it when it comes, never before.
    """

    def __init__(self) -> None:
        self._next = 0
        self._done: set[int] = set()
        self._waiting: dict[int, anyio.Event] = {}

    async def wait(self, ticket: int) -> None:
        if ticket > self._next:
            event = self._waiting[ticket] = anyio.Event()
            await event.wait()

    def done(self, ticket: int) -> None:
        self._done.add(ticket)
        while self._next in self._done:
            self._done.discard(self._next)
            self._next += 1
        event = self._waiting.pop(self._next, None)
        if event is not None:
            event.set()


class _Started:
    """A request's place in the plan's order: it waits for its turn before taking a
    concurrency slot, and passes the turn on once it holds one — or when it ends without
    ever needing one (refused before sending, cancelled). Cheaper than starting each task
    only after the one before, which serialises the event loop's work."""

    def __init__(self, turns: _Turns | None, ticket: int) -> None:
        self._turns = turns
        self._ticket = ticket
        self._fired = False

    @classmethod
    def unordered(cls) -> _Started:
        return cls(None, 0)

    async def turn(self) -> None:
        if not self._fired and self._turns is not None:
            await self._turns.wait(self._ticket)

    def fire(self) -> None:
        if not self._fired:
            self._fired = True
            if self._turns is not None:
                self._turns.done(self._ticket)

    def __enter__(self) -> _Started:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.fire()


def _usage_shares(total: Usage, texts: dict[int, str]) -> list[Usage]:
    """Split a merged request's usage over its answers: prompt evenly, completion by length;
    the shares add up to the total exactly."""
    n = len(texts)
    prompts = _apportion(total.prompt_tokens, [1.0] * n)
    completions = _apportion(total.completion_tokens, [max(1, len(t)) for t in texts.values()])
    return [Usage(p, c) for p, c in zip(prompts, completions, strict=True)]


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    if not weights:
        return []
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: shares[i] - exact[i])
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _alone_may_pass(error: SplitterError) -> bool:
    """A merged request failed: may its questions, asked alone, still be answered?"""
    if isinstance(error, APIStatusError) and not is_retryable(error):
        return error.status_code in _CONTENT_STATUS  # e.g. too long together
    return True


def _deadline_error(policy: Policy) -> DeadlineExceededError:
    return DeadlineExceededError(f"not answered within the batch deadline of {policy.deadline:g}s")
