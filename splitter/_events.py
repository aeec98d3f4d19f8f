"""Events: what a batch is doing while it does it, for users' own telemetry.

A hook (``Splitter(on_event=...)`` or ``aask_many(on_event=...)``) is called with one small
frozen event at each step: a batch started and planned, a request started and finished, a
retry scheduled, a wait for the rate-limit budget, a question answered or failed, a batch
finished. The same events go to the ``splitter`` logger: per-request detail at DEBUG, batch
summaries at INFO.

Events carry positions, counts, lengths, times and error *kinds* (class names, status
codes), never a question's or an answer's text, never an error's message (a provider may
echo a prompt or a masked key there), never the API key or the endpoint.

A hook is a plain function, called on the event loop's thread, in the order things happen;
what it raises is logged (the first time per hook and batch at WARNING, after that at DEBUG)
and swallowed: a broken hook never loses or changes an answer.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import anyio

from . import _clock
from ._exceptions import APIStatusError, InvalidInputError
from ._planner import Plan
from ._questions import Answer, BatchResult, Usage, Via

__all__ = [
    "AnswerDone",
    "AnswerFailed",
    "BatchFinished",
    "BatchPlanned",
    "BatchStarted",
    "Emitter",
    "Event",
    "EventHook",
    "RateLimitWait",
    "RequestFinished",
    "RequestStarted",
    "RetryScheduled",
    "check_hook",
    "error_kind",
]

_log = logging.getLogger("splitter")
_batch_numbers = itertools.count(1)

LimitKind = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """What every event carries: the batch it belongs to and when it happened.

    ``batch`` numbers the ``aask_many`` calls of this process (1, 2, ...), so a hook shared by
    concurrent batches can tell them apart; ``at`` is splitter's clock
    (``time.monotonic`` in real runs; the virtual time in ``splitter.testing``'s runs).
    """

    batch: int
    at: float = field(default_factory=_clock.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStarted(Event):
    """The questions passed their checks; nothing is sent yet."""

    questions: int
    model: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlanned(Event):
    """A plan was chosen for the questions that can be sent now (``wave`` 0; later waves
    hold questions that waited for other answers). ``groups`` are the requests in the order
    they go out, as the caller's question indexes; ``strategy`` is the chosen candidate
    (``"merge"``, ``"fan-out"`` or ``"k groups"``)."""

    wave: int
    strategy: str
    groups: tuple[tuple[int, ...], ...]
    predicted_latency: float

    @property
    def requests(self) -> int:
        return len(self.groups)


@dataclass(frozen=True, slots=True, kw_only=True)
class _RequestEvent(Event):
    """One logical request of a batch: ``request`` numbers them within the batch (its
    retries keep the number); ``indexes`` are the questions it asks (several: merged)."""

    request: int
    indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestStarted(_RequestEvent):
    """An attempt holds its concurrency slot and its budget and is being sent.
    ``reserved_tokens`` is what it booked in the token budget (input + max_tokens)."""

    attempt: int
    reserved_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFinished(_RequestEvent):
    """An attempt ended: with a completion (``error`` None, ``usage`` billed) or an error
    kind (``"cancelled"`` when the batch's deadline or the caller stopped it)."""

    attempt: int
    latency: float
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    status_code: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled(_RequestEvent):
    """Attempt ``attempt`` failed with a retryable error; the next one goes after ``wait``
    seconds (the service's retry-after when it sent one)."""

    attempt: int
    error: str
    status_code: int | None
    wait: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitWait(_RequestEvent):
    """The attempt waits ``seconds`` for the rate-limit budget before it is sent; ``limit``
    is the bucket that is short (after a 429, the one the 429 named)."""

    seconds: float
    limit: LimitKind


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerDone(Event):
    """Question ``index`` (its ``id``: the caller's, or the index) is answered: ``length``
    characters, its share of the billed ``usage``."""

    index: int
    id: str
    via: Via
    attempts: int
    wave: int
    length: int
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFailed(Event):
    """Question ``index`` ends without an answer; ``error`` is the kind (``Answer.error``'s
    class name), ``status_code`` the service's when it sent one."""

    index: int
    id: str
    via: Via
    attempts: int
    wave: int
    error: str
    status_code: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchFinished(Event):
    """The batch's result is ready (emitted before ``raise_on_error`` raises)."""

    questions: int
    answered: int
    failed: int
    requests: int
    retries: int
    rate_limited: int
    usage: Usage
    wall_time: float


EventHook = Callable[[Event], object]


def check_hook(hook: object, name: str = "on_event") -> EventHook | None:
    """``hook`` if it is a plain callable (or None); async functions are refused up front
    (their coroutine would never run)."""
    if hook is None:
        return None
    if not callable(hook):
        raise InvalidInputError(f"{name} must be callable, not {type(hook).__name__}")
    if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    ):
        raise InvalidInputError(
            f"{name} must be a plain function: it is called on the event loop and not awaited"
        )
    return hook


def error_kind(exc: BaseException) -> str:
    """The name an event gives an error: its class, or "cancelled" on any event loop."""
    if isinstance(exc, Exception):  # cancellation is a BaseException on every loop
        return type(exc).__name__
    try:
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
    except RuntimeError:  # told outside an event loop
        cancelled = False
    return "cancelled" if cancelled else type(exc).__name__


def status_of(exc: BaseException | None) -> int | None:
    return exc.status_code if isinstance(exc, APIStatusError) else None


class Emitter:
    """The events of one batch: numbers it and its requests, sends each event to the hooks
    and the logger, and makes sure every question ends exactly once.

    ``detailed`` is False when there is no hook and DEBUG is off: the executor then builds
    no per-request event at all, so the hot path pays one attribute check.
    """

    def __init__(self, hooks: Iterable[EventHook | None] = ()) -> None:
        self.batch = next(_batch_numbers)
        self._hooks = tuple(h for h in hooks if h is not None)
        self.detailed = bool(self._hooks) or _log.isEnabledFor(logging.DEBUG)
        self.summary = bool(self._hooks) or _log.isEnabledFor(logging.INFO)
        self._requests = itertools.count()
        self._ended: set[int] = set()
        self._hook_failed: set[int] = set()

    def next_request(self) -> int:
        return next(self._requests)

    def emit(self, event: Event) -> None:
        level = logging.INFO if isinstance(event, _SUMMARIES) else logging.DEBUG
        if _log.isEnabledFor(level):
            _log.log(level, "%s", _describe(event), extra={"splitter_event": event})
        for k, hook in enumerate(self._hooks):
            try:
                hook(event)
            except Exception:
                first = k not in self._hook_failed
                self._hook_failed.add(k)
                _log.log(
                    logging.WARNING if first else logging.DEBUG,
                    "the on_event hook %r raised on %s (batch %d); the batch carries on%s",
                    hook,
                    type(event).__name__,
                    self.batch,
                    "" if not first else " (later failures of this hook are logged at DEBUG)",
                    exc_info=True,
                )

    # -- the batch's milestones -----------------------------------------------------------

    def started(self, questions: int, model: str) -> None:
        if self.summary:
            self.emit(BatchStarted(batch=self.batch, questions=questions, model=model))

    def planned(self, plan: Plan, wave: int, positions: Sequence[int] | None = None) -> None:
        if not self.summary:
            return
        groups = tuple(
            tuple(i if positions is None else positions[i] for i in g.indexes)
            for g in plan.chosen.groups
        )
        self.emit(
            BatchPlanned(
                batch=self.batch,
                wave=wave,
                strategy=plan.chosen.label,
                groups=groups,
                predicted_latency=plan.predicted_latency,
            )
        )

    def answer(self, answer: Answer, position: int | None = None) -> None:
        """Question ``position`` (default ``answer.index``: a window's answers may be told
        by their place in the whole input) ended; the first call for a position counts."""
        at = answer.index if position is None else position
        if not self.detailed or at in self._ended:
            return
        self._ended.add(at)
        if answer.ok:
            event: Event = AnswerDone(
                batch=self.batch,
                index=at,
                id=answer.id,
                via=answer.via,
                attempts=answer.attempts,
                wave=answer.wave,
                length=len(answer.text or ""),
                usage=answer.usage,
            )
        else:
            assert answer.error is not None
            event = AnswerFailed(
                batch=self.batch,
                index=at,
                id=answer.id,
                via=answer.via,
                attempts=answer.attempts,
                wave=answer.wave,
                error=error_kind(answer.error),
                status_code=status_of(answer.error),
            )
        self.emit(event)

    def finished(self, result: BatchResult, positions: Sequence[int] | None = None) -> None:
        """The batch's end: answers not yet told (the deadline's) and the summary;
        ``positions`` as given to :meth:`answer` (answer ``i`` is question ``positions[i]``)."""
        for answer in result:
            self.answer(answer, None if positions is None else positions[answer.index])
        if not self.summary:
            return
        stats = result.stats
        self.emit(
            BatchFinished(
                batch=self.batch,
                questions=len(result),
                answered=sum(a.ok for a in result),
                failed=sum(not a.ok for a in result),
                requests=stats.requests,
                retries=stats.retries,
                rate_limited=stats.rate_limited,
                usage=result.usage,
                wall_time=stats.wall_time,
            )
        )


_SUMMARIES = (BatchStarted, BatchPlanned, BatchFinished)


def _describe(event: Event) -> str:
    """One log line; only the event's own fields, which hold no text and no key."""
    b = f"batch {event.batch}"
    match event:
        case BatchStarted():
            return f"{b}: {event.questions} questions for {event.model}"
        case BatchPlanned():
            return (
                f"{b} wave {event.wave}: {event.strategy}, {event.requests} requests, "
                f"predicted {event.predicted_latency:.2f}s"
            )
        case BatchFinished():
            return (
                f"{b} finished: {event.answered} answered, {event.failed} failed, "
                f"{event.requests} requests, {event.retries} retries, {event.rate_limited} "
                f"rate-limited, {event.usage.total_tokens} tokens, {event.wall_time:.2f}s"
            )
        case RequestStarted():
            return (
                f"{b} request {event.request} attempt {event.attempt} sent: questions "
                f"{_span(event.indexes)}, {event.reserved_tokens} tokens booked"
            )
        case RequestFinished():
            outcome = (
                f"{event.usage.total_tokens} tokens"
                if event.ok
                else f"{event.error}{_status(event.status_code)}"
            )
            return (
                f"{b} request {event.request} attempt {event.attempt} finished in "
                f"{event.latency:.3f}s: {outcome}"
            )
        case RetryScheduled():
            return (
                f"{b} request {event.request} attempt {event.attempt} failed with "
                f"{event.error}{_status(event.status_code)}; retrying in {event.wait:.3f}s"
            )
        case RateLimitWait():
            return (
                f"{b} request {event.request} waits {event.seconds:.3f}s for the "
                f"{event.limit} budget"
            )
        case AnswerDone():
            return f"{b} question {event.index} answered ({event.via}, {event.length} chars)"
        case AnswerFailed():
            return f"{b} question {event.index} failed: {event.error}{_status(event.status_code)}"
    return f"{b}: {type(event).__name__}"  # pragma: no cover - every event is described


def _span(indexes: tuple[int, ...]) -> str:
    if len(indexes) <= 8:
        return ",".join(map(str, indexes))
    return f"{indexes[0]}..{indexes[-1]} ({len(indexes)})"


def _status(code: int | None) -> str:
    return "" if code is None else f" ({code})"
