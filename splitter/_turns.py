"""The plan's order of starts: each request takes its concurrency slot only after the one
before it in the plan has taken (or given up) its own."""

from __future__ import annotations

import anyio

__all__ = ["Started", "Turns"]


class Turns:
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


class Started:
    """A request's place in the plan's order: it waits for its turn before taking a
    concurrency slot, and passes the turn on once it holds one — or when it ends without
    ever needing one (refused before sending, cancelled). Cheaper than starting each task
    only after the one before, which serialises the event loop's work."""

    def __init__(self, turns: Turns | None, ticket: int) -> None:
        self._turns = turns
        self._ticket = ticket
        self._fired = False

    async def turn(self) -> None:
        if not self._fired and self._turns is not None:
            await self._turns.wait(self._ticket)

    def fire(self) -> None:
        if not self._fired:
            self._fired = True
            if self._turns is not None:
                self._turns.done(self._ticket)

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.fire()
