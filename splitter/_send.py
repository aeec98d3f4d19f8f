"""One logical request of a batch, with its retries: its turn in the plan's order, a
concurrency slot, its place in the rate-limit budget, the call under the policy's timeout
(streamed into the relay when its answer is shown live), what the response or the error
teaches the budget, the concurrency limit and the service model, and the errors that stop
the whole batch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from . import _clock
from ._budget import Budget, Kind, Reservation
from ._budget import _wire as wire
from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    BudgetError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    SplitterError,
    StreamInterruptedError,
)
from ._headers import parse_count
from ._meter import Reading
from ._openai import Completion
from ._request_events import RequestTold
from ._retry import Retry, call_with_retries
from ._run_state import RunState, Stopped
from ._service_model import Observation
from ._turns import Started

__all__ = ["Outgoing", "Sender"]

_OVERLOADED = frozenset({503, 529})  # the service says it is overloaded: send less at once
# Failures every request of the batch would meet: a bad key, no access, no such model.
_BATCH_WIDE_STATUS = frozenset({401, 403, 404})


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One logical request as every attempt sends it. ``reserve``: the tokens it books in
    the budget; ``started`` fires once its first attempt holds a concurrency slot;
    ``streamed`` is the question whose answer it streams to the relay, if there is one."""

    messages: list[dict[str, Any]]
    params: dict[str, Any]
    reserve: int
    started: Started | None = None
    streamed: int | None = None


class Sender:
    """Sends a batch's requests, each with its retries, into its ``RunState``."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self._wired = False  # the budget's wire gate installed on the client (once a batch)

    async def send(
        self, out: Outgoing, *, asks: Sequence[int]
    ) -> tuple[Completion | SplitterError, int]:
        """One logical request with its retries: the completion, or the final error, and
        the attempts made; ``asks`` are the questions it asks (for its events)."""
        run = self.run
        request = None
        if run.events.detailed:
            indexes = tuple(map(run.positions.__getitem__, asks))  # no closure cell for run
            request = RequestTold(run.events, run.events.next_request(), indexes)
        tries = _Tries(self, out, request)
        try:
            self._check_fits(out.reserve)
            completion = await call_with_retries(
                tries, run.policy.retry, before_sleep=tries.before_sleep
            )
        except Stopped as stopped:
            assert run.fatal is not None
            return run.fatal, tries.made if stopped.sent else tries.made - 1
        except SplitterError as exc:
            return exc, tries.made
        return completion, tries.made

    def _check_fits(self, reserve: int) -> None:
        cap = self.run.token_capacity
        if cap is not None and reserve > cap and self.run.policy.limits.oversized == "error":
            raise BudgetError(
                f"the request books {reserve} tokens (input + max_tokens), more than the whole "
                f"token budget of {cap:.0f}; lower max_tokens or shorten the question"
            )

    async def _attempt(
        self, out: Outgoing, request: RequestTold | None, attempt: int
    ) -> Completion:
        """Attempt number ``attempt``; ``request`` is the request its events name (None: no
        one listens)."""
        run = self.run
        reserve, started, streamed = out.reserve, out.started, out.streamed
        shown = self._shown(streamed)
        if shown is not None:
            raise StreamInterruptedError(
                f"the stream of questions[{shown}] broke off after part of its answer was "
                "delivered; it is not re-asked"
            )
        if run.fatal is not None:
            raise Stopped(sent=False)
        budget, concurrency = run.budget, run.endpoint.concurrency
        # The slot is held only while a request is out or about to go, never across a
        # backoff. Taking it before the budget means that while the limits are still
        # unknown, only one slot-full of requests goes out before the headers teach them.
        if started is not None:
            await started.turn()
        if run.head_started is not None and streamed != run.head:
            await run.head_started.wait()  # after the head's turn: it holds its slot
        await self._take_slot()
        try:
            if started is not None:
                started.fire()
            # Every attempt, retries included, waits for its own place in the budget.
            on_wait = None if request is None else request.rate_wait
            reservation = await budget.acquire(reserve, on_wait) if budget is not None else None
            run.claim.booked(reserve)
            if run.stopped():  # met by another request while this one waited
                if budget is not None and reservation is not None:
                    await budget.settle(reservation, {}, lost=True)
                raise Stopped(sent=False)
            run.counters.requests += 1
            if request is not None:
                request.started(attempt, reserve)
            sent_at = _clock.now()
            fit = run.endpoint.service.sample(reserve)  # its queue read and learned from
            token = run.endpoint.meter.start(sent_at, read=fit)
            if not self._wired and budget is not None:
                # The budget's last gate, just before the HTTP write (see _budget._wire).
                wire.install(getattr(run.backend, "_client", None))
                self._wired = True
            try:
                with wire.departing(budget, reservation):
                    completion = await self._checked_call(out.messages, out.params, streamed)
            except BaseException as exc:
                if request is not None:
                    request.finished(attempt, sent_at, error=exc)
                await self._failed(exc, budget, reservation)
                raise
            finally:
                shared = run.endpoint.meter.finish(token, _clock.now())
        finally:
            run.limiter.release()
        run.endpoint.answered = True
        if request is not None:
            request.finished(attempt, sent_at, usage=completion.usage)
        concurrency.on_success()
        if budget is not None and reservation is not None:
            used = completion.usage.total_tokens
            await budget.settle(reservation, completion.headers, used_tokens=used)
        follows = run.follows if run.head_started is not None and streamed != run.head else 0
        self._learn(completion, shared, sent_at, fit, follows)
        return completion

    async def _failed(
        self, exc: BaseException, budget: Budget | None, reservation: Reservation | None
    ) -> None:
        """Tell the budget what a failed attempt's response said; stop the batch on an
        error every request would meet."""
        run = self.run
        if isinstance(exc, APIStatusError):
            run.endpoint.answered = True
            if budget is not None and reservation is not None:
                limited: Kind | None = None
                if isinstance(exc, RateLimitError) and not isinstance(exc, QuotaExceededError):
                    limited = "tokens" if exc.type == "tokens" else "requests"
                await budget.settle(
                    reservation, exc.rate_headers, limited=limited, retry_after=exc.retry_after
                )
            if isinstance(exc, QuotaExceededError) or exc.status_code in _BATCH_WIDE_STATUS:
                run.stop(exc)
        else:
            if budget is not None and reservation is not None:
                with anyio.CancelScope(shield=True):
                    await budget.settle(reservation, {}, lost=True)
            # (A timeout is no sign of a wrong URL: the server may be slow.)
            unreachable = isinstance(exc, APIConnectionError) and not isinstance(
                exc, APITimeoutError
            )
            if unreachable and not run.endpoint.answered:
                run.stop(
                    APIConnectionError(
                        f"{run.base_url} has never answered ({exc}); check the base URL and "
                        "that the server is up (connection errors are retried only once an "
                        "endpoint has answered)"
                    )
                )

    async def _checked_call(
        self, messages: list[dict[str, Any]], params: dict[str, Any], streamed: int | None
    ) -> Completion:
        """The call under the policy's timeout; overload and 429s told to the concurrency
        limit and the budget."""
        timeout = self.run.policy.timeout
        concurrency = self.run.endpoint.concurrency
        try:
            if timeout is None:  # no cancel scope to open and close per request
                return await self._call(messages, params, streamed)
            # As anyio.fail_after, without its two generator-based context managers per
            # request: only the deadline cancels this scope, and it then returns here.
            with anyio.CancelScope(deadline=anyio.current_time() + timeout):
                return await self._call(messages, params, streamed)
            raise TimeoutError
        except TimeoutError as exc:
            concurrency.on_overload()
            limit = math.inf if timeout is None else timeout
            raise APITimeoutError(f"no answer within the {limit:g}s timeout") from exc
        except RateLimitError:
            # The budget learns the rate; fewer requests in flight would not send slower.
            self.run.counters.rate_limited += 1
            raise
        except ServerError as exc:
            if exc.status_code in _OVERLOADED:
                concurrency.on_overload()
            raise

    async def _take_slot(self) -> None:
        """A concurrency slot; without yielding to the event loop when one is free, so the
        next request in the plan's order can take its turn at once."""
        limiter = self.run.limiter
        if not limiter.try_acquire():
            await limiter.acquire()

    def _shown(self, streamed: int | None) -> int | None:
        """The caller's index of ``streamed`` if part of its answer was already delivered."""
        run = self.run
        if streamed is None or run.relay is None:
            return None
        at = run.positions[streamed]
        return at if run.relay.committed(at) else None

    def _call(
        self, messages: list[dict[str, Any]], params: dict[str, Any], streamed: int | None
    ) -> Awaitable[Completion]:
        """The backend's call (no coroutine of its own in between, issue #21), or, for an
        answer shown live, :meth:`_relayed`."""
        run = self.run
        model = run.spec.model
        if streamed is None or run.relay is None:
            if streamed is not None and streamed == run.head and run.head_started is not None:
                # Primed fan-out: the head is streamed only to learn when its prefill is
                # done; its first piece of text lets the others go.
                first = functools.partial(_first_then, run.head_started, _dropped)
                return run.backend.chat_stream(
                    model=model, messages=messages, on_delta=first, **params
                )
            return run.backend.chat(model=model, messages=messages, **params)
        return self._relayed(messages, params, streamed)

    async def _relayed(
        self, messages: list[dict[str, Any]], params: dict[str, Any], streamed: int
    ) -> Completion:
        run = self.run
        model = run.spec.model
        assert run.relay is not None
        relay, at = run.relay, run.positions[streamed]
        relay.attempt(at)
        on_delta = functools.partial(relay.delta, at)
        if streamed == run.head and run.head_started is not None:
            on_delta = functools.partial(_first_then, run.head_started, on_delta)
        try:
            return await run.backend.chat_stream(
                model=model, messages=messages, on_delta=on_delta, **params
            )
        except SplitterError as exc:
            if relay.committed(at):
                raise StreamInterruptedError(
                    f"the stream of questions[{at}] broke off after part of its answer was "
                    f"delivered ({exc}); it is not re-asked"
                ) from exc
            relay.abandon(at)
            raise
        except BaseException:  # a timeout or a cancellation: the attempt is over all the same
            relay.abandon(at)
            raise

    def _learn(
        self,
        completion: Completion,
        shared: Mapping[int | None, tuple[Reading, ...]],
        sent_at: float,
        fit: bool,
        follows: int,
    ) -> None:
        endpoint = self.run.endpoint
        processing_ms = parse_count(completion.headers.get("openai-processing-ms"))
        processing = None if processing_ms is None else processing_ms / 1000
        if processing is not None and completion.headers_after is not None:
            # A stream's headers tell the service's time to them; the rest of the stream
            # is the service's too (taken as round trip, three streamed 300-token answers
            # taught a 4 ms engine a round trip of 3.03 s: tests/test_stream_round_trip.py).
            processing += max(0.0, completion.elapsed - completion.headers_after)
        endpoint.service.observe(
            Observation(
                input_tokens=completion.usage.prompt_tokens,
                output_tokens=completion.usage.completion_tokens,
                cached_tokens=min(completion.usage.cached_tokens, completion.usage.prompt_tokens),
                latency=completion.elapsed,
                concurrency=shared[None][0][1],
                queue=shared,
                started=sent_at,
                idle=endpoint.meter.in_flight == 0,
                processing=processing,
                fit=fit,
                follows=follows,
            )
        )


class _Tries:
    """One logical request's attempts, as the retry loop makes and tells them (a plain
    object rather than closures: fewer objects alive per request in flight)."""

    __slots__ = ("made", "out", "request", "sender")

    def __init__(self, sender: Sender, out: Outgoing, request: RequestTold | None) -> None:
        self.sender, self.out, self.request = sender, out, request
        self.made = 0

    def __call__(self) -> Awaitable[Completion]:
        """The next attempt (called, not bound: no method object, and no coroutine of its
        own, alive per request in flight)."""
        self.made += 1
        return self.sender._attempt(self.out, self.request, self.made)

    def before_sleep(self, retry: Retry) -> None:
        self.sender.run.counters.retries += 1
        if self.request is not None:
            self.request.retry_scheduled(retry)


def _first_then(event: anyio.Event, deliver: Callable[[str], None], text: str) -> None:
    """Deliver a piece of the head's answer, and let the others go at its first."""
    event.set()
    deliver(text)


def _dropped(text: str) -> None:
    """Nothing to deliver: the answer is kept whole, as an unstreamed one is."""
