"""The planner's cost model: a snapshot of the service's parameters (:class:`ServiceEstimate`)
and the event simulation of a plan on it (:func:`simulate`). The fit that produces the
snapshot is :mod:`splitter._service_model`. Nothing here does I/O."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CACHE_SPEEDUP", "ServiceEstimate", "simulate"]

CACHE_SPEEDUP = 1000.0  # a cached token is at most this many times cheaper than another


@dataclass(frozen=True, slots=True)
class ServiceEstimate:
    """A snapshot of the cost model's parameters, for the planner."""

    rtt: float
    ttft0: float
    prefill_rate: float
    tpot1: float
    beta: float
    slots: int | None = None  # sequences the server runs at once; None: no limit seen
    # Concurrent prefills share the engine's compute: with p prefilling at once each goes
    # 1 + prefill_share * (p - 1) times slower (0: independent, 1: compute-bound).
    prefill_share: float = 0.0
    # Prompt tokens per second for a prefix the engine's cache holds; None: no cache seen
    # (cached tokens cost what the others do).
    cached_rate: float | None = None
    # The cache is per slot (llama-server's): a prefix is reused only by a request that
    # takes the slot holding it, never by one sent beside the request that holds it.
    cache_per_slot: bool = False

    def prefill(self, input_tokens: float, cached_tokens: float = 0.0) -> float:
        """Seconds one request's prefill takes alone, ``cached_tokens`` of its input
        served from the engine's prefix cache. A cached token never costs more than an
        uncached one: a cached rate learned below the prefill rate (the time a response's
        queueing left unexplained, shared over a few cached tokens) is the prefill rate."""
        if self.cached_rate is None or cached_tokens <= 0:
            return self.ttft0 + input_tokens / self.prefill_rate
        fresh = max(0.0, input_tokens - cached_tokens)
        rate = max(self.cached_rate, self.prefill_rate)
        return self.ttft0 + fresh / self.prefill_rate + cached_tokens / rate

    def prefill_work(self, input_tokens: float, cached_tokens: float) -> float:
        """One request's prefill in tokens at the uncached rate (what :func:`simulate`
        reads), ``cached_tokens`` of its input served from the cache."""
        if cached_tokens <= 0:
            return float(input_tokens)
        seconds = self.prefill(input_tokens, min(cached_tokens, input_tokens)) - self.ttft0
        return seconds * self.prefill_rate

    def tpot(self, concurrency: float) -> float:
        """Seconds per output token while ``concurrency`` sequences decode together."""
        return self.tpot1 * (1 + self.beta * max(0.0, concurrency - 1))

    def latency(self, input_tokens: float, output_tokens: float, concurrency: float) -> float:
        """Predicted seconds for one request while ``concurrency`` are in flight."""
        prefill = self.ttft0 + input_tokens / self.prefill_rate
        # Past the slot count a request also waits, on average, for (m - slots) / slots
        # services ahead of it.
        running, queued = concurrency, 1.0
        if self.slots is not None and concurrency > self.slots:
            running, queued = self.slots, concurrency / self.slots
        return self.rtt + (prefill + output_tokens * self.tpot(running)) * queued


def simulate(
    inputs: Sequence[float],
    outputs: Sequence[int],
    ready: Sequence[float],
    estimate: ServiceEstimate,
    concurrency: int,
    queued_inputs: Sequence[float] | None = None,
) -> tuple[list[float], list[float]]:
    """Event simulation of the cost model: each request's start and finish time.

    Requests are sent in the given order, each once a client slot is free (``concurrency``)
    and not before its ``ready`` time.

    A request holds a client slot from its start to its response; at the server it waits
    for one of the engine's ``slots`` (FIFO), prefills, then decodes. Decoding sequences
    share one rate, so progress is tracked as one running count of tokens per sequence
    (``produced``); a sequence that joins at ``produced = p`` with O tokens finishes when
    ``produced`` reaches ``p + O``. Each event is O(log k).

    ``inputs`` are in tokens prefilled at ``prefill_rate`` (a cached prefix counted as what
    it costs at that rate). ``queued_inputs``, where given, is what each costs instead if it
    waits at the server for an engine slot: the slot it gets was freed by another of the
    plan's requests, so a prefix they share is in the engine's cache (in a slot's own cache,
    as llama-server keeps them, as in a shared one). With ``prefill_share`` > 0, concurrent
    prefills share the engine's compute (:func:`_simulate_shared`).
    """
    if estimate.prefill_share > 0:
        return _simulate_shared(inputs, outputs, ready, estimate, concurrency, queued_inputs)
    queued_cost = inputs if queued_inputs is None else queued_inputs
    n = len(inputs)
    half_rtt = estimate.rtt / 2
    server_slots = estimate.slots if estimate.slots is not None else n
    ttft0, prefill_rate = estimate.ttft0, estimate.prefill_rate
    tpot1, beta = estimate.tpot1, estimate.beta
    # TPOT(m) for every batch size m that can occur, as ServiceEstimate.tpot computes it.
    tpots = [tpot1 * (1 + beta * max(0.0, m - 1)) for m in range(n + 1)]
    push, pop, inf = heapq.heappush, heapq.heappop, math.inf
    starts = [0.0] * n
    finishes = [0.0] * n
    # (time, kind, request): 0 = joins decode, 1 = response received, 2 = reaches the server
    events: list[tuple[float, int, int]] = []
    decoding: list[tuple[float, int]] = []  # (produced at which it finishes, request)
    queue: deque[int] = deque()  # at the server, waiting for an engine slot
    now = produced = 0.0
    free, upcoming, engine_free = concurrency, 0, server_slots

    while upcoming < n or events or decoding:
        t_start = max(now, ready[upcoming]) if free and upcoming < n else inf
        t_event = events[0][0] if events else inf
        tpot = tpots[len(decoding)]
        t_decoded = now + (decoding[0][0] - produced) * tpot if decoding else inf
        t_next = min(t_start, t_event, t_decoded)
        if decoding:
            produced += (t_next - now) / tpot
        now = t_next
        if t_next == t_decoded:
            _, i = pop(decoding)
            push(events, (now + half_rtt, 1, i))
            if queue:
                j = queue.popleft()
                push(events, (now + (ttft0 + queued_cost[j] / prefill_rate), 0, j))
            else:
                engine_free += 1
        elif t_next == t_event:
            _, kind, i = pop(events)
            if kind == 0:
                push(decoding, (produced + outputs[i], i))
            elif kind == 1:
                finishes[i] = now
                free += 1
            elif engine_free:
                engine_free -= 1
                push(events, (now + (ttft0 + inputs[i] / prefill_rate), 0, i))
            else:
                queue.append(i)
        else:
            i, upcoming, free = upcoming, upcoming + 1, free - 1
            starts[i] = now
            push(events, (now + half_rtt, 2, i))
    return starts, finishes


def _simulate_shared(
    inputs: Sequence[float],
    outputs: Sequence[int],
    ready: Sequence[float],
    estimate: ServiceEstimate,
    concurrency: int,
    queued_inputs: Sequence[float] | None = None,
) -> tuple[list[float], list[float]]:
    """:func:`simulate` with compute-bound prefill: the prefills under way advance together,
    each at ``1 / (1 + prefill_share * (p - 1))`` of its alone speed while p run. Tracked as
    decode is, by one running count of alone-seconds of prefill per sequence (``primed``)."""
    n = len(inputs)
    half_rtt = estimate.rtt / 2
    server_slots = estimate.slots if estimate.slots is not None else n
    share = estimate.prefill_share
    tpots = [estimate.tpot(m) for m in range(n + 1)]
    push, pop, inf = heapq.heappush, heapq.heappop, math.inf
    starts = [0.0] * n
    finishes = [0.0] * n
    events: list[tuple[float, int, int]] = []  # (time, 1 = response / 2 = at the server, i)
    decoding: list[tuple[float, int]] = []
    prefilling: list[tuple[float, int]] = []  # (primed at which its prefill ends, request)
    queue: deque[int] = deque()
    now = produced = primed = 0.0
    free, upcoming, engine_free = concurrency, 0, server_slots

    queued_cost = inputs if queued_inputs is None else queued_inputs

    def admit(i: int, cost: Sequence[float] = inputs) -> None:
        push(prefilling, (primed + estimate.ttft0 + cost[i] / estimate.prefill_rate, i))

    while upcoming < n or events or decoding or prefilling:
        t_start = max(now, ready[upcoming]) if free and upcoming < n else inf
        t_event = events[0][0] if events else inf
        tpot = tpots[len(decoding)]
        t_decoded = now + (decoding[0][0] - produced) * tpot if decoding else inf
        slow = 1 + share * (len(prefilling) - 1)
        t_prefilled = now + (prefilling[0][0] - primed) * slow if prefilling else inf
        t_next = min(t_start, t_event, t_decoded, t_prefilled)
        if decoding:
            produced += (t_next - now) / tpot
        if prefilling:
            primed += (t_next - now) / slow
        now = t_next
        if t_next == t_prefilled:
            _, i = pop(prefilling)
            push(decoding, (produced + outputs[i], i))
        elif t_next == t_decoded:
            _, i = pop(decoding)
            push(events, (now + half_rtt, 1, i))
            if queue:
                admit(queue.popleft(), queued_cost)
            else:
                engine_free += 1
        elif t_next == t_event:
            _, kind, i = pop(events)
            if kind == 1:
                finishes[i] = now
                free += 1
            elif engine_free:
                engine_free -= 1
                admit(i)
            else:
                queue.append(i)
        else:
            i, upcoming, free = upcoming, upcoming + 1, free - 1
            starts[i] = now
            push(events, (now + half_rtt, 2, i))
    return starts, finishes
