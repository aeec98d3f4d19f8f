"""The events one logical request tells while it runs: started, finished, a retry
scheduled, a wait for the rate-limit budget. Made only when someone listens
(``Emitter.detailed``); each names the request's number in the batch and its questions."""

from __future__ import annotations

from dataclasses import dataclass

from . import _clock
from ._budget import Kind
from ._events import (
    Emitter,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
    error_kind,
    status_of,
)
from ._questions import Usage
from ._retry import Retry

__all__ = ["RequestTold"]


@dataclass(slots=True)
class RequestTold:
    """A logical request as its events name it: its number in the batch and its questions
    (the caller's indexes), and the emitter it tells."""

    events: Emitter
    number: int
    indexes: tuple[int, ...]

    def rate_wait(self, seconds: float, limit: Kind) -> None:
        self.events.emit(
            RateLimitWait(
                batch=self.events.batch,
                request=self.number,
                indexes=self.indexes,
                seconds=seconds,
                limit=limit,
            )
        )

    def started(self, attempt: int, reserve: int) -> None:
        self.events.emit(
            RequestStarted(
                batch=self.events.batch,
                request=self.number,
                indexes=self.indexes,
                attempt=attempt,
                reserved_tokens=reserve,
            )
        )

    def finished(
        self,
        attempt: int,
        sent_at: float,
        *,
        usage: Usage | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.events.emit(
            RequestFinished(
                batch=self.events.batch,
                request=self.number,
                indexes=self.indexes,
                attempt=attempt,
                latency=_clock.now() - sent_at,
                usage=usage if usage is not None else Usage(),
                error=None if error is None else error_kind(error),
                status_code=status_of(error),
            )
        )

    def retry_scheduled(self, retry: Retry) -> None:
        exc, wait = retry.error, retry.wait
        self.events.emit(
            RetryScheduled(
                batch=self.events.batch,
                request=self.number,
                indexes=self.indexes,
                attempt=retry.attempt,
                error=error_kind(exc),
                status_code=status_of(exc),
                wait=wait,
            )
        )
