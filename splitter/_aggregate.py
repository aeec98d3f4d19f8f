"""Coalescing concurrent single calls into one planning window per isolation key.

A web service answering one question per user request sends one request per question, so a
tight requests-per-minute budget runs out long before the tokens do. ``Splitter.aask_one``
with ``Policy(aggregate_window_ms=W)`` holds the first call of a batch for W ms; every call
with the same :class:`BatchKey` (isolation key, model, system prompt, keywords) that arrives
meanwhile joins it, and the batch is answered by one ``aask_many`` call, where the planner
may merge questions (fewer requests) or fan them out as the budget and the service make
best. Each caller gets back only its own answer.

The isolation key is the privacy boundary: questions of two keys are never in one batch, so
never in one prompt (a merged prompt would show one user's text to the model answering
another, and a confused answer could repeat it). A call without a key is its own batch.

Where batches live:

* async callers (``aask_one``) share a batch only with callers on the same event loop. A
  batch waits on anyio primitives, which belong to the loop that made them; each
  ``anyio.run`` (and each sync ``ask_many`` call) has its own loop.
* sync callers (``ask_one``) share a batch with sync callers in any thread of the process,
  through ``threading`` primitives: the first caller's thread sleeps the window and runs
  the batch; the others block until it is answered. Sync and async callers never mix.

The first caller of an async batch runs it: it starts a flush task inside its own task
group (there is no long-lived task group to lend one) and waits like everyone else. The
flush runs shielded, so cancelling the first caller does not strand the others; it is
cancelled only when every member has gone. A member cancelled before the window closes
takes its question out of the batch; a first caller cancelled while others still wait
returns (with its cancellation) once the batch is answered.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import anyio
import sniffio

from ._exceptions import SplitterError
from ._questions import Answer, BatchResult, Question

__all__ = ["Aggregator", "BatchKey", "batch_key"]

AsyncRun = Callable[[list[Question]], Awaitable[BatchResult]]
SyncRun = Callable[[list[Question]], BatchResult]


@dataclass(frozen=True, slots=True)
class BatchKey:
    """What calls must share to be answered together: everything that shapes the request."""

    isolation_key: str
    model: str
    system: str | None
    params: str  # the call's keywords as canonical JSON


def batch_key(
    isolation_key: str, model: str, system: str | None, params: Mapping[str, Any]
) -> BatchKey | None:
    """The batch a call may join, or None when its keywords cannot be compared (it then
    runs alone rather than risk joining calls whose requests would differ).

    Keywords are compared as JSON with sorted keys, so ``{"a": 1, "b": 2}`` and
    ``{"b": 2, "a": 1}`` match; a value JSON cannot write is compared by its ``repr``.
    """
    try:
        canonical = json.dumps(dict(params), sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types, or a structure holding itself
        return None
    return BatchKey(isolation_key, model, system, canonical)


@dataclass(eq=False, slots=True)
class _Entry:
    """One caller in a batch: its own question, and the copy that is sent."""

    question: Question
    # Without the caller's id: two callers may use the same id, which one batch would
    # reject as a duplicate. (A validated lone question has no dependencies to keep.)
    sent: Question
    answer: Answer | None = None

    @classmethod
    def of(cls, question: Question) -> _Entry:
        sent = question if question.id is None else question.model_copy(update={"id": None})
        return cls(question, sent)


@dataclass(eq=False)
class _Batch:
    entries: list[_Entry] = field(default_factory=list)
    closed: bool = False  # no one joins any more: the questions are being asked
    error: BaseException | None = None  # what stopped the whole batch, for every member

    def settle(self, result: BatchResult) -> None:
        """Hand each member the answer at its own position (answers are stored by index)."""
        for entry, answer in zip(self.entries, result, strict=True):
            if answer.question != entry.sent:  # never give one caller another's answer
                answer = Answer(
                    0,
                    entry.sent,
                    None,
                    error=SplitterError("the batch returned an answer to another question"),
                )
            entry.answer = replace(answer, index=0, question=entry.question)

    def outcome(self, entry: _Entry) -> Answer:
        if entry.answer is not None:
            return entry.answer
        if self.error is not None:
            raise self.error
        raise SplitterError("the aggregated batch ended without answering this question")


@dataclass(eq=False)
class _AsyncBatch(_Batch):
    done: anyio.Event = field(default_factory=anyio.Event)
    # Entered by the flush task; cancelled when every member has gone.
    scope: anyio.CancelScope = field(default_factory=lambda: anyio.CancelScope(shield=True))
    waiting: int = 0


@dataclass(eq=False)
class _SyncBatch(_Batch):
    done: threading.Event = field(default_factory=threading.Event)


class Aggregator:
    """The open batches of one ``Splitter``: async ones per event loop, sync ones shared.

    Holds no event-loop object beyond an open batch's life, so one aggregator serves every
    thread and loop the ``Splitter`` is used from.
    """

    #: Held while a ``Splitter`` creates its aggregator: two threads making the first calls
    #: at once must share one, or a key's callers would be split between two.
    creation_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the dicts are shared by every thread
        self._open: dict[tuple[object, BatchKey], _AsyncBatch] = {}
        self._open_sync: dict[BatchKey, _SyncBatch] = {}

    async def aanswer(
        self, question: Question, key: BatchKey, window: float, run: AsyncRun
    ) -> Answer:
        """``question``'s answer from the batch open for ``key`` on this loop (or a new one
        that waits ``window`` seconds for company, then is answered by ``run``)."""
        slot = (_event_loop(), key)
        entry = _Entry.of(question)
        with self._lock:
            batch = self._open.get(slot)
            first = batch is None
            if batch is None:
                batch = self._open[slot] = _AsyncBatch()
            batch.entries.append(entry)
            batch.waiting += 1
        if first:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._flush, slot, batch, window, run)
                await self._wait(slot, batch, entry)
        else:
            await self._wait(slot, batch, entry)
        return batch.outcome(entry)

    async def _wait(self, slot: tuple[object, BatchKey], batch: _AsyncBatch, entry: _Entry) -> None:
        try:
            await batch.done.wait()
        except BaseException:  # cancelled: leave, and stop the batch if no one is left
            with self._lock:
                batch.waiting -= 1
                if not batch.closed:
                    batch.entries.remove(entry)
                if batch.waiting == 0 and not batch.done.is_set():
                    self._close(slot, batch)
                    batch.scope.cancel()
            raise

    async def _flush(
        self, slot: tuple[object, BatchKey], batch: _AsyncBatch, window: float, run: AsyncRun
    ) -> None:
        # The scope is entered before the first checkpoint: once started, a task runs to
        # its first checkpoint on both backends, so the batch is shielded from the first
        # caller's cancellation before that can reach it.
        with batch.scope:
            try:
                await anyio.sleep(window)
                with self._lock:
                    self._close(slot, batch)
                if batch.entries:
                    batch.settle(await run([e.sent for e in batch.entries]))
            except Exception as exc:  # the batch's own failure goes to each of its members
                batch.error = exc
            finally:
                with self._lock:
                    self._close(slot, batch)
                batch.done.set()

    def _close(self, slot: tuple[object, BatchKey], batch: _AsyncBatch) -> None:
        """Stop new callers joining ``batch`` (call with the lock held)."""
        batch.closed = True
        if self._open.get(slot) is batch:
            del self._open[slot]

    def answer(self, question: Question, key: BatchKey, window: float, run: SyncRun) -> Answer:
        """The sync twin of :meth:`aanswer`, for callers in any thread."""
        entry = _Entry.of(question)
        with self._lock:
            batch = self._open_sync.get(key)
            first = batch is None
            if batch is None:
                batch = self._open_sync[key] = _SyncBatch()
            batch.entries.append(entry)
        if not first:
            batch.done.wait()
            return batch.outcome(entry)
        try:
            time.sleep(window)
            self._close_sync(key, batch)
            batch.settle(run([e.sent for e in batch.entries]))
        except BaseException as exc:
            # An interrupt belongs to this thread; the others are told the batch stopped.
            batch.error = (
                exc
                if isinstance(exc, Exception)
                else SplitterError(f"the call running this aggregated batch stopped: {exc!r}")
            )
            raise
        finally:
            self._close_sync(key, batch)
            batch.done.set()
        return batch.outcome(entry)

    def _close_sync(self, key: BatchKey, batch: _SyncBatch) -> None:
        with self._lock:
            batch.closed = True
            if self._open_sync.get(key) is batch:
                del self._open_sync[key]


def _event_loop() -> object:
    """The running asyncio loop or trio run: a batch never spans two of them."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token()
    return asyncio.get_running_loop()
