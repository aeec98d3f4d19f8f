"""The endpoint's one concurrency limit (``_budget/_adaptive.AdaptiveConcurrency``) on its
own: at most ``current`` in flight, slots granted first come first served, no slot lost to a
cancelled waiter (even one granted a slot in the same instant), one limit shared by event
loops in different threads, and the AIMD rule (halve on overload at most once a second,
regrow by 1/limit per success, never above the ceiling)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from splitter import _clock
from splitter._budget._adaptive import AdaptiveConcurrency


class _Holders:
    """Tasks that take a slot and hold it until told to let go."""

    def __init__(self, limit: AdaptiveConcurrency) -> None:
        self.limit = limit
        self.holding: set[str] = set()
        self.ever_held: set[str] = set()
        self._let_go: dict[str, anyio.Event] = {}

    async def hold(self, name: str) -> None:
        self._let_go[name] = anyio.Event()
        await self.limit.acquire()
        self.holding.add(name)
        self.ever_held.add(name)
        assert self.limit.in_flight <= self.limit.current
        await self._let_go[name].wait()
        self.holding.remove(name)
        self.limit.release()

    def let_go(self, name: str) -> None:
        self._let_go[name].set()


@pytest.mark.anyio
async def test_at_most_the_limit_in_flight_and_slots_go_in_arrival_order() -> None:
    limit = AdaptiveConcurrency(2)
    holders = _Holders(limit)
    async with anyio.create_task_group() as tg:
        await _arrive(tg, holders, "abcde")
        assert holders.holding == {"a", "b"}
        assert limit.in_flight == 2
        for released, expected in (("a", {"b", "c"}), ("c", {"b", "d"}), ("b", {"d", "e"})):
            holders.let_go(released)
            await _settle()
            assert holders.holding == expected
            assert limit.in_flight == 2
        holders.let_go("d")
        holders.let_go("e")
    assert limit.in_flight == 0


@pytest.mark.anyio
async def test_a_waiter_cancelled_before_its_turn_loses_no_slot() -> None:
    limit = AdaptiveConcurrency(1)
    holders = _Holders(limit)
    async with anyio.create_task_group() as tg:
        tg.start_soon(holders.hold, "a")
        await _settle()
        waiting = anyio.CancelScope()
        tg.start_soon(_cancellable_hold, holders, "b", waiting)
        await _settle()
        tg.start_soon(holders.hold, "c")
        await _settle()
        waiting.cancel()
        await _settle()
        holders.let_go("a")
        await _settle()
        assert holders.holding == {"c"}
        assert limit.in_flight == 1
        holders.let_go("c")
    assert holders.ever_held == {"a", "c"}
    assert limit.in_flight == 0


@pytest.mark.anyio
async def test_a_waiter_granted_a_slot_and_cancelled_at_once_passes_it_on() -> None:
    """The release grants the slot to b, and b's cancellation comes before b runs again:
    the slot goes to c, not lost and not held twice."""
    limit = AdaptiveConcurrency(1)
    holders = _Holders(limit)
    await limit.acquire()  # this test's own slot
    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancellable_hold, holders, "b", scope)
        await _settle()
        tg.start_soon(holders.hold, "c")
        await _settle()
        limit.release()  # granted to b...
        scope.cancel()  # ...which is cancelled before it wakes
        await _settle()
        assert holders.holding == {"c"}
        assert limit.in_flight == 1
        holders.let_go("c")
    assert holders.ever_held == {"c"}
    assert limit.in_flight == 0


async def _arrive(tg: anyio.abc.TaskGroup, holders: _Holders, names: str) -> None:
    """Start a holder for each of ``names``, one at a time, so the arrival order is known."""
    for name in names:
        tg.start_soon(holders.hold, name)
        await _settle()


async def _settle() -> None:
    """Until every task is blocked again. A slot is handed over through a thread-safe wake
    (``call_soon_threadsafe`` / ``run_sync_soon``), a callback or two before the woken task
    is runnable, which ``wait_all_tasks_blocked`` alone does not wait for."""
    for _ in range(10):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()


async def _cancellable_hold(holders: _Holders, name: str, scope: anyio.CancelScope) -> None:
    with scope:
        await holders.hold(name)


def test_one_limit_is_shared_by_event_loops_in_two_threads() -> None:
    """The sync API runs each call on a loop of its own in a worker thread: an asyncio loop
    and a trio loop, four tasks each, never hold more than the limit between them."""
    limit = AdaptiveConcurrency(3)
    lock = threading.Lock()
    state = {"in_flight": 0, "peak": 0, "done": 0}

    async def one() -> None:
        await limit.acquire()
        with lock:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        await anyio.sleep(0.01)
        with lock:
            state["in_flight"] -= 1
            state["done"] += 1
        limit.release()

    async def many() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(one)

    errors: list[BaseException] = []

    def loop(backend: str) -> None:
        try:
            anyio.run(many, backend=backend)
        except BaseException as exc:  # a thread cannot raise into the test: kept for it
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(b,)) for b in ("asyncio", "trio")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert state["done"] == 8
    assert 1 <= state["peak"] <= 3
    assert limit.in_flight == 0


@pytest.fixture
def clock() -> Iterator[list[float]]:
    """Splitter's clock pointed at a number the test moves by hand."""
    now = [100.0]
    with _clock.use_clock(lambda: now[0]):
        yield now


def test_overload_halves_the_limit_at_most_once_a_second(clock: list[float]) -> None:
    limit = AdaptiveConcurrency(8)
    limit.on_overload()
    assert limit.current == 4
    clock[0] += 0.5  # the same burst of overloads: one signal
    limit.on_overload()
    assert limit.current == 4
    clock[0] += 0.5
    limit.on_overload()
    assert limit.current == 2
    for _ in range(5):
        clock[0] += 1.0
        limit.on_overload()
    assert limit.current == 1  # never below one


def test_successes_regrow_the_limit_by_one_over_it_up_to_the_ceiling(clock: list[float]) -> None:
    limit = AdaptiveConcurrency(4)
    limit.on_overload()
    assert limit.current == 2
    limit.on_success()  # 2 + 1/2
    assert limit.current == 2
    limit.on_success()  # 2.5 + 1/2.5 = 2.9
    limit.on_success()  # 2.9 + 1/2.9 > 3
    assert limit.current == 3
    for _ in range(50):
        limit.on_success()
    assert limit.current == 4  # the ceiling, not past it


def test_a_fixed_limit_neither_shrinks_nor_grows(clock: list[float]) -> None:
    limit = AdaptiveConcurrency(4, adaptive=False)
    limit.on_overload()
    limit.on_success()
    assert limit.current == 4


def test_a_stricter_ceiling_lowers_the_limit_for_good(clock: list[float]) -> None:
    limit = AdaptiveConcurrency(8)
    limit.lower_ceiling(3)
    assert limit.current == 3
    limit.lower_ceiling(5)  # a looser one changes nothing
    for _ in range(20):
        limit.on_success()
    assert limit.current == 3


@pytest.mark.anyio
async def test_after_a_cut_a_release_grants_nothing_until_under_the_new_limit() -> None:
    limit = AdaptiveConcurrency(4)
    holders = _Holders(limit)
    async with anyio.create_task_group() as tg:
        await _arrive(tg, holders, "abcde")
        assert holders.holding == {"a", "b", "c", "d"}
        limit.on_overload()  # 4 -> 2, with 4 in flight and e waiting
        assert limit.current == 2
        for name in "ab":  # in flight 3, then 2: not under the new limit yet
            holders.let_go(name)
            await _settle()
            assert holders.holding == set("abcd") - set("ab"[: "ab".index(name) + 1])
        holders.let_go("c")  # in flight 1: under 2, so e gets its slot
        await _settle()
        assert holders.holding == {"d", "e"}
        holders.let_go("d")
        holders.let_go("e")
    assert limit.in_flight == 0
