"""What a batch tells while it runs: the events an ``on_event`` hook receives.

``from splitter.events import RequestFinished`` — the same classes are importable from
``splitter`` itself. See docs/events.md for what each event carries and when it comes.
"""

from __future__ import annotations

from ._events import (
    AnswerDone,
    AnswerFailed,
    BatchFinished,
    BatchPlanned,
    BatchStarted,
    Event,
    EventHook,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
)

__all__ = [
    "AnswerDone",
    "AnswerFailed",
    "BatchFinished",
    "BatchPlanned",
    "BatchStarted",
    "Event",
    "EventHook",
    "RateLimitWait",
    "RequestFinished",
    "RequestStarted",
    "RetryScheduled",
]
