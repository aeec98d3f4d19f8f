"""Streaming answers back in the caller's order while they are produced concurrently.

The questions run exactly as in ``aask_many``; what changes is delivery. In order (the
default), the question being delivered streams live, piece by piece as its tokens arrive;
the others keep what they receive in a buffer until their turn, when it comes out in one
piece and they go on live. A merged request's answers arrive whole. Out of order, each
answer is delivered whole as soon as it is final.

Retries stay safe: a buffered stream that fails is retried with its buffer dropped, but
once a question's text has been delivered, a break in its stream ends it with a
``StreamInterruptedError`` rather than a second attempt whose text would not continue
what was already shown.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._questions import Answer, BatchResult
from ._sync import iterate_sync

__all__ = ["AnswerStream", "Relay", "StreamEvent", "SyncAnswerStream"]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A piece of one question's answer.

    ``delta`` is text to append to question ``index``'s answer so far. The last event of
    each question carries its final ``answer`` (with any error; ``delta`` is then whatever
    text had not been delivered yet, often empty).
    """

    index: int
    delta: str
    answer: Answer | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None


class Relay:
    """Receives pieces and answers from the run (any order) and emits events (ours).

    Every method is synchronous and called from the run's event loop.
    """

    def __init__(self, size: int, send: MemoryObjectSendStream[StreamEvent], ordered: bool):
        self._send = send
        self._ordered = ordered
        self._size = size
        self._next = 0  # the question being delivered, in order
        self._buffers: dict[int, list[str]] = {}
        self._shown: set[int] = set()  # questions with text already delivered
        self._final: dict[int, Answer] = {}

    @property
    def ordered(self) -> bool:
        return self._ordered

    def delivering(self, index: int) -> bool:
        """Is ``index`` the question whose text goes out live now?"""
        return self._ordered and index == self._next

    def committed(self, index: int) -> bool:
        """Has part of ``index``'s text been delivered? Then it must not be re-asked."""
        return index in self._shown

    def attempt(self, index: int) -> None:
        """A new attempt for ``index`` starts: what an earlier one left unshown is void."""
        self.abandon(index)

    def abandon(self, index: int) -> None:
        """An attempt for ``index`` failed: what it buffered is void at once, so that its
        turn, should it come before the next attempt, cannot deliver that text."""
        if index not in self._shown:
            self._buffers.pop(index, None)

    def delta(self, index: int, text: str) -> None:
        if not self._ordered or index in self._final:
            return
        if index == self._next:
            self._shown.add(index)
            self._emit(StreamEvent(index, text))
        else:
            self._buffers.setdefault(index, []).append(text)

    def answer(self, answer: Answer) -> None:
        """``answer`` is final (the first final answer of a question wins)."""
        if answer.index in self._final:
            return
        self._final[answer.index] = answer
        if not self._ordered:
            self._emit(StreamEvent(answer.index, answer.text or "", answer))
            return
        while self._next in self._final:
            self._finish(self._next)
            self._next += 1
            if self._next < self._size:
                self._open(self._next)

    def _open(self, index: int) -> None:
        buffered = self._buffers.pop(index, None)
        if buffered and index not in self._final:
            self._shown.add(index)
            self._emit(StreamEvent(index, "".join(buffered)))

    def _finish(self, index: int) -> None:
        answer = self._final[index]
        self._buffers.pop(index, None)
        # A streamed answer's text has gone out piece by piece already; a merged or
        # buffered one goes out whole now.
        rest = "" if index in self._shown else (answer.text or "")
        self._emit(StreamEvent(index, rest, answer))

    def _emit(self, event: StreamEvent) -> None:
        self._send.send_nowait(event)  # unbounded: a batch's text is small beside its cost


Producer = Callable[[Relay], Awaitable[BatchResult]]


class AnswerStream:
    """The events of a streamed batch (``Splitter.astream``).

    Use it as ``async with splitter.astream(...) as events: async for event in events``;
    iterating it directly also works when you read it to the end. Leaving the ``async
    with`` early cancels the questions still running. ``result`` holds the whole
    ``BatchResult`` once the stream is over.
    """

    def __init__(self, size: int, produce: Producer, *, ordered: bool) -> None:
        self._size = size
        self._produce = produce
        self._ordered = ordered
        self._tg: TaskGroup | None = None
        self._receive: MemoryObjectReceiveStream[StreamEvent] | None = None
        self._result: BatchResult | None = None

    @property
    def result(self) -> BatchResult:
        """Every answer in input order; available once the stream has ended."""
        if self._result is None:
            raise RuntimeError("the stream has not ended yet: read it to the end first")
        return self._result

    async def __aenter__(self) -> AnswerStream:
        if self._tg is not None:
            raise RuntimeError("an AnswerStream can be entered only once")
        send, self._receive = anyio.create_memory_object_stream[StreamEvent](math.inf)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run, send)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        assert self._receive is not None
        if self._result is None:
            self._tg.cancel_scope.cancel()  # left early: nobody will read the rest
        self._receive.close()
        if exc is None or isinstance(exc, anyio.get_cancelled_exc_class()):
            # A cancellation may be the task group's own (a task crashed): it decides.
            return await self._tg.__aexit__(exc_type, exc, tb)
        # The reader's own error is not handed to the task group, which would wrap it in
        # an ExceptionGroup: it goes on as raised, once the tasks have ended.
        await self._tg.__aexit__(None, None, None)
        return None

    async def _run(self, send: MemoryObjectSendStream[StreamEvent]) -> None:
        with send:
            relay = Relay(self._size, send, self._ordered)
            result = await self._produce(relay)
            for answer in result:  # answers stored without a callback (deadline, ...)
                relay.answer(answer)
            self._result = result

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._receive is not None:
            return self._receive.__aiter__()
        return self._read_all()

    async def _read_all(self) -> AsyncIterator[StreamEvent]:
        async with self as events:
            async for event in events:
                yield event


class SyncAnswerStream(Iterator[StreamEvent]):
    """The events of a streamed batch, read from sync code (``Splitter.stream``).

    ``for event in splitter.stream(...)``: the questions run on an event loop in a helper
    thread. ``result`` holds the whole ``BatchResult`` once the stream has ended, as
    :attr:`AnswerStream.result` does. ``close()`` (or leaving its ``with`` block) stops
    early and cancels the questions still running.
    """

    def __init__(self, stream: AnswerStream) -> None:
        self._stream = stream
        self._events = iterate_sync(stream)

    @property
    def result(self) -> BatchResult:
        """Every answer in input order; available once the stream has ended."""
        return self._stream.result

    def __iter__(self) -> SyncAnswerStream:
        return self

    def __next__(self) -> StreamEvent:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def __enter__(self) -> SyncAnswerStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
