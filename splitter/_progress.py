"""A progress bar fed by splitter's events (tqdm, from the ``progress`` extra).

One ``Progress`` may follow many batches (``map``'s windows, a CLI run): it is just an event
hook. It counts questions answered and failed, questions waiting to retry, retries, billed
tokens and the rate-limit wait in progress, and renders them at most every ``mininterval``
seconds (to stderr unless told otherwise), so a batch of 100k questions costs a few
thousand redraws, not a million.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Never, TextIO

from . import _clock
from ._events import (
    AnswerDone,
    AnswerFailed,
    BatchFinished,
    BatchStarted,
    Event,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
)
from ._exceptions import InvalidInputError

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["Progress", "progress_bar"]

_MISSING_TQDM = "a progress bar needs tqdm: pip install 'splitter-llm[progress]'"


class Progress:
    """Shows a batch's (or many batches') progress as it runs: a tqdm bar of the questions
    that ended, with answered / failed / retrying counts, retries, tokens and the current
    rate-limit wait.

    Pass it as ``aask_many(progress=Progress())`` (or ``on_event=``); ``progress=True``
    makes one and closes it when the call returns. A ``Progress`` you make yourself stays
    open across calls until you ``close()`` it (or leave its ``with`` block). ``total`` fixes
    the bar's length (otherwise each batch adds its questions when it starts); ``initial``
    counts questions already answered before (a resumed run). Needs tqdm: without it,
    ``ImportError`` names the ``progress`` extra.
    """

    def __init__(
        self,
        *,
        total: int | None = None,
        initial: int = 0,
        file: TextIO | None = None,
        desc: str = "splitter",
        mininterval: float = 0.1,
    ) -> None:
        try:
            from tqdm import tqdm
        except ImportError as exc:
            raise ImportError(_MISSING_TQDM) from exc
        self.total = total if total is not None else initial
        self.answered = initial
        self.failed = 0
        self.retries = 0
        self.tokens = 0
        self._fixed_total = total is not None
        self._retrying: dict[tuple[int, int], int] = {}  # (batch, request) -> its questions
        self._waits: dict[tuple[int, int], float] = {}  # (batch, request) -> until, _clock
        self._mininterval = mininterval
        self._shown_at = -float("inf")
        self._lock = threading.Lock()
        self._closed = False
        self._bar: tqdm[Never] = tqdm(
            total=self.total or None,  # unknown until the first batch starts
            initial=initial,
            file=file if file is not None else sys.stderr,
            desc=desc,
            unit="q",
            mininterval=0,
            miniters=1,
            leave=True,
        )

    @property
    def retrying(self) -> int:
        """Questions whose request failed and waits for its next attempt."""
        return sum(self._retrying.values())

    @property
    def waiting(self) -> float:
        """Seconds left of the longest rate-limit wait in progress (0 when none)."""
        now = _clock.now()
        return max((until - now for until in self._waits.values()), default=0.0)

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._count(event)
            now = _clock.now()
            if now - self._shown_at >= self._mininterval and not self._closed:
                self._show(now)

    def _count(self, event: Event) -> None:
        match event:
            case AnswerDone():
                self.answered += 1
            case AnswerFailed():
                self.failed += 1
            case RequestStarted():
                key = (event.batch, event.request)
                self._retrying.pop(key, None)
                self._waits.pop(key, None)
            case RequestFinished():
                self.tokens += event.usage.total_tokens
            case RetryScheduled():
                self.retries += 1
                self._retrying[event.batch, event.request] = len(event.indexes)
            case RateLimitWait():
                self._waits[event.batch, event.request] = event.at + event.seconds
            case BatchStarted() if not self._fixed_total:
                self.total += event.questions
            case BatchFinished():
                for pending in (self._retrying, self._waits):
                    for key in [k for k in pending if k[0] == event.batch]:
                        del pending[key]

    def _show(self, now: float, *, draw: bool = True) -> None:
        self._shown_at = now
        bar = self._bar
        if bar.total != self.total:
            bar.total = self.total
        bar.set_postfix_str(self.summary(), refresh=False)
        ended = self.answered + self.failed
        if not draw:
            bar.n = ended
        elif ended > bar.n:
            bar.update(ended - bar.n)
        else:
            bar.refresh()

    def summary(self) -> str:
        """The counts as the bar shows them."""
        text = (
            f"ok={self.answered} failed={self.failed} retrying={self.retrying} "
            f"retries={self.retries} tokens={self.tokens}"
        )
        wait = self.waiting
        return f"{text} rate-wait={wait:.1f}s" if wait > 0 else text

    def close(self) -> None:
        """Draw the final counts and release the bar (again: nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._waits.clear()
            self._show(_clock.now(), draw=False)
            self._bar.close()  # draws the final counts once

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Progress({self.answered + self.failed}/{self.total}: {self.summary()})"


def progress_bar(
    progress: object, *, total: int | None = None, initial: int = 0
) -> Progress | None:
    """The bar ``progress=`` asks for: a new one for True, of ``total`` from ``initial``."""
    if not isinstance(progress, bool | Progress):
        raise InvalidInputError(
            f"progress must be True, False or a splitter.Progress, not {type(progress).__name__}"
        )
    return Progress(total=total, initial=initial) if progress is True else progress or None
