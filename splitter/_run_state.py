"""The bookkeeping of one batch in flight: an answer slot per question, the counters, the
error that stops the batch, and which answer streams live; at the end, the ``BatchResult``.

Each answer is written into the slot of its question's index, so responses that finish out
of order, retries, repairs and failures can never move an answer to another question.
Anything not answered when the deadline passes is marked with ``DeadlineExceededError``:
no question is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from ._budget import Budget
from ._endpoint import Endpoint
from ._estimate import count_tokens
from ._events import Emitter
from ._exceptions import DeadlineExceededError, SplitterError
from ._openai import OpenAIBackend
from ._planner import Plan
from ._policy import Policy
from ._questions import Answer, BatchResult, Question, RunStats
from ._request_spec import RequestSpec
from ._stream import Relay

__all__ = ["RunState", "Stopped"]


class Stopped(Exception):
    """The batch met an error every request would meet: nothing more is sent."""

    def __init__(self, *, sent: bool) -> None:
        super().__init__()
        self.sent = sent  # the attempt that met it had gone out (it counts as an attempt)


@dataclass(slots=True)
class Counters:
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    repaired: int = 0
    canaries: int = 0
    canary_disagreements: int = 0


class RunState:
    """The state of one batch in flight."""

    def __init__(
        self,
        backend: OpenAIBackend,
        policy: Policy,
        endpoint: Endpoint,
        questions: Sequence[Question],
        spec: RequestSpec,
        plan: Plan,
        on_answer: Callable[[Answer], None] | None = None,
        positions: Sequence[int] = (),
        events: Emitter | None = None,
    ):
        self.policy = policy
        self.events = events if events is not None else Emitter()
        self.backend = backend
        self.endpoint = endpoint
        self.questions = questions
        self.spec = spec
        self.items = {item.index: item for item in plan.items}
        # Read once from the plan's snapshot: a budget read per request would cost a Redis
        # round trip on the hot path for a shared budget.
        self.token_capacity = plan.budget.token_capacity
        self.slots: list[Answer | None] = [None] * len(questions)
        self.limiter = endpoint.concurrency
        self.budget: Budget | None = endpoint.budget if policy.limits.enforce else None
        # Batches planned while this one books its requests see the room less these.
        groups = plan.chosen.groups
        booked = sum(g.input_tokens + (g.max_tokens or g.output_tokens) for g in groups)
        self.claim = endpoint.claim(len(groups), booked)
        # What a canary may spend without making the plan wait for the rate limit.
        self.spare_requests = _spare(plan.budget.remaining_requests, len(groups))
        self.spare_tokens = _spare(plan.budget.remaining_tokens, booked)
        self.fatal: SplitterError | None = None  # met by one request, it stops the batch
        self.base_url = backend.base_url
        self.counters = Counters()
        self.on_answer = on_answer
        self.relay: Relay | None = None
        self.positions = positions  # the caller's index of each question of this run
        self.plan_groups = groups
        self.canary_after = plan.chosen.canary_after  # canaries go once their reply is back
        self.head: int | None = None  # the answer the others wait for (streamed or primed)
        self.head_started: anyio.Event | None = None
        # Prompt tokens the requests sent after the head's first token share with it (the
        # system message); what the cache serves of them teaches its scope.
        self.follows = 0
        self.preamble = plan.preamble_tokens  # the batch's system message, in tokens
        if plan.chosen.primed and len(groups) > 1:
            # Primed fan-out: the others go at the first's first token (its prefill done),
            # so the engine's prefix cache holds the shared prefix when they reach it.
            self.head = groups[0].indexes[0]
            self.head_started = anyio.Event()
            self.follows = self.preamble

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
            self.follows = self.preamble

    def reserve_single(self, index: int) -> int:
        """Tokens one question's request books in the budget: input + max_tokens, the
        input with the system message it is sent with (its own, or the batch's system
        prompt and shared context: a plan item counts its question alone, and a fan-out
        request with a 1,450-token document booked 39 tokens)."""
        item = self.items.get(index)
        if item is None:  # pragma: no cover - every planned question has an item
            return count_tokens(self.questions[index].text, self.spec.model)
        head = self.preamble if item.preamble is None else item.preamble
        return head + item.input_tokens + (item.max_tokens or item.output_tokens)

    def store(self, answer: Answer) -> None:
        self.slots[answer.index] = answer
        if self.on_answer is not None:
            self.on_answer(answer)

    def stopped(self) -> bool:
        # A call, not `self.fatal is not None` inline: after an await another task may
        # have set it, which a type checker's narrowing from the earlier check would deny.
        return self.fatal is not None

    def stop(self, error: SplitterError) -> None:
        if self.fatal is None:
            self.fatal = error
        raise Stopped(sent=True) from error

    def result(self, plan: Plan, wall_time: float) -> BatchResult:
        """The batch's answers in input order (the unanswered failed by the deadline)."""
        answers = tuple(
            answer or Answer(i, self.questions[i], None, error=_deadline_error(self.policy))
            for i, answer in enumerate(self.slots)
        )
        counters = self.counters
        stats = RunStats(
            wall_time=wall_time,
            requests=counters.requests,
            retries=counters.retries,
            rate_limited=counters.rate_limited,
            failed=sum(not a.ok for a in answers),
            repaired=counters.repaired,
            canaries=counters.canaries,
            canary_disagreements=counters.canary_disagreements,
            predicted_wall_time=plan.predicted_latency,
        )
        return BatchResult(answers, stats, plan)


def _spare(remaining: float | None, planned: float) -> float:
    return math.inf if remaining is None else remaining - planned


def _deadline_error(policy: Policy) -> DeadlineExceededError:
    return DeadlineExceededError(f"not answered within the batch deadline of {policy.deadline:g}s")
