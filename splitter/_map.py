"""Answering an input of any length with bounded memory (``Splitter.amap`` / ``map``).

The input is read lazily. At most ``window`` questions are held at once: a question is held
from the moment it is read until its answer has been handed to the reader and the batch it
was sent with has finished. Questions read while the window has room are planned and sent
together as one batch (the usual planner and executor), so a slow reader, or in order a
slow first answer, stops the reading instead of growing a buffer. The window refills in
steps of a quarter, so batches stay big enough to plan.

Each answer is handed out once, with its input position as ``Answer.index``: a batch's
answers are stored under their own positions, never another question's. If reading the
input fails (the iterable raises, or an item is not a valid question), nothing more is read;
the answers to everything read before are still handed out, then the error is raised.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from ._questions import Answer, BatchResult, Question

__all__ = ["DEFAULT_WINDOW", "MappedAnswers", "RunBatch"]

DEFAULT_WINDOW = 256
# Send one batch: its questions, the input position of its first, and where each answer
# goes as soon as it is final.
RunBatch = Callable[[list[Question], int, Callable[[Answer], None]], Awaitable[BatchResult]]


@dataclasses.dataclass(slots=True)
class _Batch:
    """Questions sent together; ``start`` is the input position of the first."""

    start: int
    questions: list[Question]
    arrived: set[int] = dataclasses.field(default_factory=set)  # local indexes
    handed: int = 0  # answers handed out while the batch still ran
    done: bool = False


class MappedAnswers:
    """The answers of ``Splitter.amap``, as they finish (in input order by default).

    ``async with splitter.amap(questions, model=...) as answers: async for answer in
    answers``. Leaving the ``async with`` early cancels what is in flight; iterating it
    directly also works when you read it to the end.
    """

    def __init__(
        self,
        source: Iterable[object] | AsyncIterable[object],
        *,
        window: int,
        ordered: bool,
        check: Callable[[int, object], Question],
        batches: AbstractAsyncContextManager[RunBatch],
    ) -> None:
        self._source = source
        self._window = window
        self._refill = max(1, window // 4)
        self._ordered = ordered
        self._check = check
        self._batches = batches
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._changed = anyio.Event()
        self._pending: list[Question] = []
        self._read = 0  # items read from the source
        self._launched = 0
        self._held = 0
        self._handed = 0
        self._exhausted = False
        self._error: Exception | None = None
        self._over = False
        self._ready: dict[int, tuple[Answer, _Batch]] = {}  # ordered: by input position
        self._queue: deque[tuple[Answer, _Batch]] = deque()  # unordered: as finished

    async def __aenter__(self) -> MappedAnswers:
        if self._stack is not None:
            raise RuntimeError("the answers of amap can be entered only once")
        self._stack = AsyncExitStack()
        async with AsyncExitStack() as entering:
            run_batch = await entering.enter_async_context(self._batches)
            tg = anyio.create_task_group()
            await tg.__aenter__()
            self._stack = entering.pop_all()
        self._tg = tg
        tg.start_soon(self._intake)
        tg.start_soon(self._launch, run_batch)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        assert self._tg is not None
        if not self._over:
            self._tg.cancel_scope.cancel()  # left early: nobody will read the rest
        # The reader's own error is not handed to the task group, which would wrap it in
        # an ExceptionGroup: it goes on as raised, after the tasks have ended.
        try:
            await self._tg.__aexit__(None, None, None)
        except BaseException as crashed:
            await self._stack.__aexit__(type(crashed), crashed, crashed.__traceback__)
            raise
        return await self._stack.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> AsyncIterator[Answer]:
        if self._tg is not None:
            return self
        return self._read_all()

    async def _read_all(self) -> AsyncIterator[Answer]:
        async with self as answers:
            async for answer in answers:
                yield answer

    async def __anext__(self) -> Answer:
        if self._tg is None:
            raise RuntimeError("enter the answers first: async with splitter.amap(...) as a")
        while True:
            ready = self._next_ready()
            if ready is not None:
                return self._hand_out(*ready)
            if self._exhausted and self._handed == self._read:
                self._over = True
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                raise StopAsyncIteration
            await self._wait()

    def _next_ready(self) -> tuple[Answer, _Batch] | None:
        if self._ordered:
            return self._ready.pop(self._handed, None)
        return self._queue.popleft() if self._queue else None

    def _hand_out(self, answer: Answer, batch: _Batch) -> Answer:
        self._handed += 1
        if batch.done:
            self._release(1)
        else:
            batch.handed += 1
        return answer

    # -- reading the input ----------------------------------------------------------------

    async def _intake(self) -> None:
        try:
            if isinstance(self._source, AsyncIterable):
                items = aiter(self._source)
                while True:
                    await self._room()
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        break
                    self._take(item)
            else:
                for item in self._source:
                    self._take(item)
                    await self._room()
        except Exception as exc:  # raised to the reader once what came before is answered
            self._error = exc
        finally:
            self._exhausted = True
            self._notify()

    async def _room(self) -> None:
        """Wait until the window has room for one more question. A full window
        waits for a quarter of it to free up, so batches stay big enough to plan."""
        if self._held >= self._window:
            while self._held > self._window - self._refill:
                await self._wait()

    def _take(self, item: object) -> None:
        self._pending.append(self._check(self._read, item))
        self._read += 1
        self._held += 1
        self._notify()

    # -- sending ----------------------------------------------------------------------------

    async def _launch(self, run_batch: RunBatch) -> None:
        """Send what has been read as one batch, whenever reading pauses (the window is
        full, or the source has nothing ready yet) or ends."""
        assert self._tg is not None
        while True:
            while not self._pending and not self._exhausted:
                await self._wait()
            if not self._pending:
                return
            batch = _Batch(self._launched, self._pending)
            self._pending = []
            self._launched += len(batch.questions)
            self._tg.start_soon(self._run, run_batch, batch)

    async def _run(self, run_batch: RunBatch, batch: _Batch) -> None:
        def arrive(answer: Answer) -> None:
            self._arrive(batch, answer)

        result = await run_batch(batch.questions, batch.start, arrive)
        for answer in result:  # answers stored without the callback (the deadline's)
            arrive(answer)
        batch.done = True
        self._release(batch.handed)

    def _arrive(self, batch: _Batch, answer: Answer) -> None:
        if answer.index in batch.arrived:
            return  # the first final answer of a question wins
        batch.arrived.add(answer.index)
        at = batch.start + answer.index
        entry = (dataclasses.replace(answer, index=at), batch)
        if self._ordered:
            self._ready[at] = entry
        else:
            self._queue.append(entry)
        self._notify()

    def _release(self, count: int) -> None:
        if count:
            self._held -= count
            self._notify()

    # -- waking up ----------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()

    async def _wait(self) -> None:
        """Until something changes: an item read, an answer stored or handed out."""
        if self._changed.is_set():
            self._changed = anyio.Event()
        await self._changed.wait()
