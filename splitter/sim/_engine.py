"""Continuous batching, simulated exactly and lazily.

A sequence is queued (FIFO, waiting for one of the profile's ``slots``), then prefills for
``ttft0 + uncached_input / prefill_rate`` without slowing anyone (or, with the profile's
``shared_prefill``, its fixed ``ttft0`` first, its own, then its tokens sharing the prefill
throughput equally with every other prefill past its fixed part: llama-server batches
concurrent prompts into one pass, so five short prompts at once take about their tokens'
time, not five times one alone), then decodes, then is done. A profile's ``prefix_cache``
(``_cache``) says how many input tokens are already computed when the sequence takes its
slot.
While ``m`` sequences decode, each advances at ``1 / (tpot1 * (1 + beta * (m - 1)))`` tokens
per simulated second: a fluid model of a server's step loop.

There is no background task: the engine must run inside whichever event loop awaits it (the
caller's, on asyncio or trio, or uvicorn's thread), and no task group exists to own one.
Instead the state is advanced on demand: ``_advance(now)`` replays every event up to ``now``
in time order, moving decode progress piecewise-linearly between events. A waiter sleeps until
the earlier of its own target and the next global event, or until an arrival or departure
changes the schedule (a shared ``anyio.Event``), then advances and checks again.

One engine serves one event loop at a time: it may be used from the uvicorn thread's loop or
from the caller's loop, but never from both at once (nothing here is locked).
"""

from __future__ import annotations

import math
from collections import deque
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING

import anyio

from splitter import _clock
from splitter.sim._cache import SharedCache, SlotCache

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator

    from splitter.sim._profiles import Profile

__all__ = ["Engine", "SeqState", "Sequence"]

# Progress is floating point; a sequence this close to a token boundary has reached it.
_EPS = 1e-6
# An event this close (simulated seconds) is due now, and so is one closer than the clock
# can express (a few units in the last place of its reading, divided by the time scale): a
# virtual clock moves only by the wait asked of it, and a waiter must never ask for a step
# the clock cannot take, or it would wait for it forever.
_DUE = 1e-9


class SeqState(Enum):
    """Where a sequence is in its life."""

    QUEUED = "queued"
    PREFILL = "prefill"
    DECODING = "decoding"
    DONE = "done"
    REMOVED = "removed"


class Sequence:
    """One request's generation: its sizes, state and progress (in simulated seconds)."""

    __slots__ = (
        "admitted_at",
        "cached",
        "done_at",
        "fixed_until",
        "input_tokens",
        "output_tokens",
        "prefill_end",
        "prefill_left",
        "produced",
        "prompt",
        "setting_up",
        "slot",
        "state",
    )

    def __init__(
        self, input_tokens: int, output_tokens: int, prompt: tuple[Hashable, ...] = ()
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.prompt = prompt
        self.state = SeqState.QUEUED
        self.admitted_at = math.inf
        self.cached = 0  # prompt tokens the prefix cache served
        self.slot: int | None = None
        self.prefill_left = 0.0  # alone-seconds of prefill still to do (shared prefill)
        # Shared prefill: the request's fixed part (ttft0) comes first and is its own, run
        # beside the others' (llama-server batches concurrent prompts into one pass), until
        # ``fixed_until``; then its tokens share the engine's throughput.
        self.setting_up = False
        self.fixed_until = math.inf
        self.prefill_end = math.inf
        self.produced = 0.0
        self.done_at = math.inf

    @property
    def tokens(self) -> int:
        """Whole output tokens produced so far."""
        if self.state is SeqState.DONE:
            return self.output_tokens
        return min(self.output_tokens, math.floor(self.produced + _EPS))


class Engine:
    """The batching state of one simulated deployment."""

    def __init__(
        self,
        profile: Profile,
        *,
        time_scale: float = 1.0,
        clock: Callable[[], float] = _clock.now,
    ) -> None:
        """``clock`` returns real seconds; simulated time is real time / ``time_scale``.

        The default is splitter's clock (``time.monotonic``, or the virtual time of a
        ``splitter.testing`` run) rather than ``anyio.current_time``: trio's clock restarts
        at a random offset in every run, and an engine outlives event loops.
        """
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.profile = profile
        self._clock = clock
        # (real origin, time_scale) in one tuple: a rescale from another thread (a test
        # beside a server) swaps both at once, so no reading mixes an old and a new one.
        self._pace = (clock(), time_scale)
        self._sim_now = 0.0
        self._queue: deque[Sequence] = deque()
        self._prefilling: list[Sequence] = []
        self._decoding: list[Sequence] = []
        self._changed: anyio.Event | None = None
        self._slots = SlotCache(profile.slots) if profile.prefix_cache == "slot" else None
        shared = profile.prefix_cache == "shared"
        self._shared = SharedCache(profile.cache_capacity) if shared else None

    # -- public surface -------------------------------------------------------------------

    def now(self) -> float:
        """Current simulated time, in seconds since the engine was made."""
        return self.at(self._clock())

    def at(self, clock_time: float) -> float:
        """The simulated time at ``clock_time`` (a reading of the engine's clock)."""
        origin, time_scale = self._pace
        return (clock_time - origin) / time_scale

    @property
    def time_scale(self) -> float:
        """Real seconds per simulated second."""
        return self._pace[1]

    def rescale(self, time_scale: float) -> None:
        """Run on at ``time_scale`` real seconds per simulated second from now: simulated
        time goes on from where it is. A wait already begun ends at its old pace and then
        re-reckons."""
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self._pace = (self._clock() - self.now() * time_scale, time_scale)

    def advance(self) -> None:
        """Bring the state up to the clock's present."""
        self._advance(max(self.now(), self._sim_now))

    @property
    def active(self) -> int:
        """Sequences holding a slot (prefilling or decoding)."""
        return len(self._prefilling) + len(self._decoding)

    @property
    def queued(self) -> int:
        """Sequences waiting for a slot."""
        return len(self._queue)

    def submit(
        self, input_tokens: int, output_tokens: int, prompt: tuple[Hashable, ...] = ()
    ) -> Sequence:
        """Add a sequence now; it starts prefill at once when a slot is free. ``prompt``
        (one key per input token) is what a prefix cache matches."""
        self.advance()
        seq = Sequence(input_tokens, output_tokens, prompt)
        self._queue.append(seq)
        self._admit(self._sim_now)
        self._advance(self._sim_now)  # zero-length prefill/decoding completes right away
        self._notify()
        return seq

    def release(self, seq: Sequence) -> None:
        """Take a sequence out (finished or abandoned), freeing its slot for the queue."""
        self.advance()
        if seq.state is SeqState.DONE or seq.state is SeqState.REMOVED:
            return
        for pool in (self._queue, self._prefilling, self._decoding):
            if seq in pool:
                pool.remove(seq)
        self._free_slot(seq)
        seq.state = SeqState.REMOVED
        self._admit(self._sim_now)
        self._advance(self._sim_now)
        self._notify()

    @contextmanager
    def sequence(
        self, input_tokens: int, output_tokens: int, prompt: tuple[Hashable, ...] = ()
    ) -> Iterator[Sequence]:
        """Submit a sequence and make sure it leaves the engine however the block ends."""
        seq = self.submit(input_tokens, output_tokens, prompt)
        try:
            yield seq
        finally:
            self.release(seq)

    async def wait_tokens(self, seq: Sequence, n: int) -> None:
        """Return once ``seq`` has produced at least ``n`` tokens (or is finished)."""
        n = min(n, seq.output_tokens)
        while True:
            self.advance()
            if seq.tokens >= n or seq.state in (SeqState.DONE, SeqState.REMOVED):
                return
            wake = min(self._eta(seq, n), self._next_event()[0])
            # Take the event before sleeping: an arrival from here on will set this one.
            changed = self._event()
            delay = max(0.0, wake - self._sim_now) * self.time_scale
            with anyio.move_on_after(delay):
                await changed.wait()

    # -- the simulation -------------------------------------------------------------------

    def _event(self) -> anyio.Event:
        # Made lazily so it belongs to the loop that waits on it.
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _admit(self, at: float) -> None:
        while self._queue and self.active < self.profile.slots:
            seq = self._queue.popleft()
            seq.state = SeqState.PREFILL
            seq.admitted_at = at
            if self._slots is not None:
                seq.slot, seq.cached = self._slots.take(seq.prompt)
            elif self._shared is not None:
                seq.cached = self._shared.lookup(seq.prompt)
            work = self.profile.prefill_seconds(seq.input_tokens - seq.cached)
            if self.profile.shared_prefill:
                seq.prefill_left = work - self.profile.ttft0  # the tokens' part, shared
                seq.setting_up = self.profile.ttft0 > 0
                seq.fixed_until = at + self.profile.ttft0
                seq.prefill_end = math.inf
            else:
                seq.prefill_end = at + work
            self._prefilling.append(seq)

    def _free_slot(self, seq: Sequence) -> None:
        if self._slots is not None and seq.slot is not None:
            self._slots.give_back(seq.slot)
            seq.slot = None

    def _prefill_at(self, seq: Sequence, sharing: int) -> float:
        """When ``seq``'s prefill ends if nothing changes (``sharing``: :meth:`_sharing`)."""
        if not self.profile.shared_prefill:
            return seq.prefill_end
        if seq.setting_up:
            return seq.fixed_until  # not its end: its tokens then begin to share the engine
        return self._sim_now + max(0.0, seq.prefill_left) * sharing

    def _sharing(self) -> int:
        """Prefills sharing the engine's throughput now (their fixed parts done)."""
        return sum(1 for seq in self._prefilling if not seq.setting_up)

    def _rate(self) -> float:
        step = self.profile.step_seconds(len(self._decoding))
        return math.inf if step == 0 else 1 / step

    def _next_event(self) -> tuple[float, Sequence | None]:
        """The earliest pending prefill end or decode completion, and whose it is."""
        best: tuple[float, Sequence | None] = (math.inf, None)
        sharing = self._sharing() if self.profile.shared_prefill else 0
        for seq in self._prefilling:
            at = self._prefill_at(seq, sharing)
            if at < best[0]:
                best = (at, seq)
        if self._decoding:
            rate = self._rate()
            seq = min(self._decoding, key=lambda s: s.output_tokens - s.produced)
            left = max(0.0, seq.output_tokens - seq.produced)
            at = self._sim_now if math.isinf(rate) else self._sim_now + left / rate
            if at < best[0]:
                best = (at, seq)
        return best

    def _eta(self, seq: Sequence, n: int) -> float:
        """When ``seq`` reaches ``n`` tokens if nothing changes; inf unless decoding."""
        if seq.state is not SeqState.DECODING:
            return math.inf
        rate = self._rate()
        if math.isinf(rate):
            return self._sim_now
        return self._sim_now + max(0.0, n - seq.produced) / rate

    def _advance(self, now: float) -> None:
        due = max(_DUE, 4 * math.ulp(self._clock()) / self.time_scale)
        # Each pass fires exactly one event, so the loop always terminates.
        while True:
            at, seq = self._next_event()
            if seq is None or at > now + due:
                self._progress(now)
                return
            self._progress(at)
            self._fire(seq)

    def _progress(self, until: float) -> None:
        if until <= self._sim_now:
            return
        if self.profile.shared_prefill and self._prefilling:
            sharing = self._sharing()
            if sharing:
                share = (until - self._sim_now) / sharing
                for seq in self._prefilling:
                    if not seq.setting_up:
                        seq.prefill_left -= share
        if self._decoding:
            gained = (until - self._sim_now) * self._rate()
            for seq in self._decoding:
                seq.produced = min(float(seq.output_tokens), seq.produced + gained)
        self._sim_now = until

    def _fire(self, seq: Sequence) -> None:
        if seq.state is SeqState.PREFILL:
            if seq.setting_up:  # its fixed part done: its tokens join the shared prefill
                seq.setting_up = False
                return
            self._prefilling.remove(seq)
            seq.state = SeqState.DECODING
            seq.prefill_end = self._sim_now
            if self._shared is not None:
                self._shared.store(seq.prompt)
            self._decoding.append(seq)
            return
        self._decoding.remove(seq)
        self._free_slot(seq)
        seq.produced = float(seq.output_tokens)
        seq.state = SeqState.DONE
        seq.done_at = self._sim_now
        self._admit(self._sim_now)
