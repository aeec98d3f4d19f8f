"""Speed cuts that must not change a result: each fast path is checked against the plain
version it replaced (kept here as the reference), on fixed random inputs."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import re
import statistics
from collections import Counter, deque
from collections.abc import Callable

import pytest

from splitter import InvalidInputError, MergePolicy, Policy, Splitter, _estimate
from splitter._budget import BudgetSnapshot
from splitter._budget._limit import _OUTSTANDING_FOR, Limit
from splitter._cost_model import ServiceEstimate, simulate
from splitter._estimate import (
    _CUES,
    MESSAGE_OVERHEAD,
    OutputLengths,
    _cue,
    _message_tokens,
    count_tokens,
    plan_items,
    preamble_tokens,
)
from splitter._groups import Repair, _longest_first, _new_group, balanced_requests, new_plan_item
from splitter._merge import ANSWER_MARKER_TOKENS, INSTRUCTION_TOKENS, MARKER_TOKENS
from splitter._meter import InFlightMeter
from splitter._planner import Group, PlanItem, _budget_ready, plan_wave
from splitter._questions import Question
from splitter._request_spec import RequestSpec
from splitter._service_fit import _DECAY, _dot, _Fit, _solve
from splitter.sim import SimService
from splitter.testing import open_sim_client


class _NeverForgets(InFlightMeter):
    """The meter with every return time kept: what pruning must not change."""

    def _forget(self) -> None:
        pass


@pytest.mark.parametrize(("width", "requests"), [(4, 200), (64, 600), (300, 900)])
def test_meter_pruning_changes_no_reading(width: int, requests: int) -> None:
    """Requests of random lengths, ``width`` in flight at a time (some sent at the same
    instant, some returning at the same instant): every finish reads exactly what a meter
    that forgets nothing reads, and the pruned meter keeps fewer return times."""
    rng = random.Random(width)
    pruned, reference = InFlightMeter(), _NeverForgets()
    out: list[tuple[float, int, int]] = []
    now, sent, kept_max = 0.0, 0, 0
    while sent < requests or out:
        if sent < requests and len(out) < width:
            now += rng.choice([0.0, 0.0, 0.5])
            token = pruned.start(now)
            assert reference.start(now) == token
            heapq.heappush(out, (now + rng.choice([1.0, 2.0, rng.uniform(0.5, 30.0)]), token, 0))
            sent += 1
            continue
        finish, token, _ = heapq.heappop(out)
        now = max(now, finish)
        assert pruned.finish(token, now) == reference.finish(token, now)
        kept_max = max(kept_max, len(pruned._returned))
    assert kept_max < len(reference._returned) == requests


def _reference_solve(a: list[list[float]], b: list[float]) -> tuple[float, ...]:
    """The elimination as first written (max() for the pivot, sum() of a generator)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            factor = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= factor * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return tuple(x)


def test_fit_sums_and_solution_match_the_plain_loops() -> None:
    """The decayed least-squares sums and their ridge solution, bit for bit the values of
    the plain double loop and elimination, over 300 random observations (ties in the pivot
    column included: a zero column and repeated rows)."""
    rng = random.Random(7)
    fit = _Fit(None)
    xtx = [[0.0] * 5 for _ in range(5)]
    xty, yy = [0.0] * 5, 0.0
    for n in range(300):
        inputs, outputs = float(rng.randint(1, 900)), float(rng.randint(1, 400))
        running, target = rng.choice([1.0, 0.5, rng.uniform(1, 64)]), rng.uniform(0.01, 20)
        fit.add(inputs, outputs, running, target)
        extra = max(1.0, running) - 1
        x = (1.0, inputs, outputs, outputs * extra, inputs * extra)
        yy = yy * _DECAY + target * target
        for i in range(5):
            xty[i] = xty[i] * _DECAY + x[i] * target
            for j in range(5):
                xtx[i][j] = xtx[i][j] * _DECAY + x[i] * x[j]
        assert (fit.xtx, fit.xty, fit.yy) == (xtx, xty, yy)
        theta0 = tuple(rng.uniform(0, 1) for _ in range(5))
        small = n % 7 == 0 and n > 10  # nearly no ridge
        lams = tuple(1e-9 if small else rng.uniform(0, 5) for _ in range(5))
        a = [
            [v + (lams[i] if i == j else 0.0) for j, v in enumerate(row)]
            for i, row in enumerate(xtx)
        ]
        b = [v + lams[i] * theta0[i] for i, v in enumerate(xty)]
        if n % 11 == 0:
            a[2] = a[1][:]  # a tie for the pivot
            b[2] = b[1]
            a[2][2] += 1.0
        assert _solve([r[:] for r in a], b[:]) == _reference_solve(a, b)
        assert _dot(x, theta0) == sum(p * q for p, q in zip(x, theta0, strict=True))


def _reference_simulate(
    inputs: list[int],
    outputs: list[int],
    ready: list[float],
    estimate: ServiceEstimate,
    concurrency: int,
) -> tuple[list[float], list[float]]:
    """The event simulation as first written, calling ``estimate.tpot`` at every event."""
    half_rtt = estimate.rtt / 2
    server_slots = estimate.slots if estimate.slots is not None else len(inputs)
    starts, finishes = [0.0] * len(inputs), [0.0] * len(inputs)
    events: list[tuple[float, int, int]] = []
    decoding: list[tuple[float, int]] = []
    queue: deque[int] = deque()
    now = produced = 0.0
    free, upcoming, engine_free = concurrency, 0, server_slots

    def admit(i: int) -> None:
        prefill = estimate.ttft0 + inputs[i] / estimate.prefill_rate
        heapq.heappush(events, (now + prefill, 0, i))

    while upcoming < len(inputs) or events or decoding:
        t_start = max(now, ready[upcoming]) if free and upcoming < len(inputs) else math.inf
        t_event = events[0][0] if events else math.inf
        tpot = estimate.tpot(len(decoding))
        t_decoded = now + (decoding[0][0] - produced) * tpot if decoding else math.inf
        t_next = min(t_start, t_event, t_decoded)
        if decoding:
            produced += (t_next - now) / tpot
        now = t_next
        if t_next == t_decoded:
            _, i = heapq.heappop(decoding)
            heapq.heappush(events, (now + half_rtt, 1, i))
            if queue:
                admit(queue.popleft())
            else:
                engine_free += 1
        elif t_next == t_event:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                heapq.heappush(decoding, (produced + outputs[i], i))
            elif kind == 1:
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
            heapq.heappush(events, (now + half_rtt, 2, i))
    return starts, finishes


def test_simulate_matches_the_plain_event_loop() -> None:
    """200 random schedules (slot limits, client limits, ready times, beta 0 to 1): the same
    start and finish times, exactly, as the loop that asked the estimate for TPOT each event."""
    rng = random.Random(19)
    for _ in range(200):
        n = rng.randint(1, 120)
        estimate = ServiceEstimate(
            rtt=rng.choice([0.0, 0.05]),
            ttft0=rng.uniform(0, 0.3),
            prefill_rate=rng.uniform(500, 20000),
            tpot1=rng.uniform(0.001, 0.05),
            beta=rng.choice([0.0, 0.02, 0.4, 1.0]),
            slots=rng.choice([None, 1, 4, 32]),
        )
        inputs = [rng.randint(1, 900) for _ in range(n)]
        outputs = [rng.choice([1, 50, rng.randint(1, 400)]) for _ in range(n)]
        ready = sorted(rng.choice([0.0, rng.uniform(0, 10)]) for _ in range(n))
        concurrency = rng.choice([1, 8, n])
        assert simulate(inputs, outputs, ready, estimate, concurrency) == _reference_simulate(
            inputs, outputs, ready, estimate, concurrency
        )


# The cue patterns as first written (each alternative with its own \b).
_PLAIN_CUE_PATTERNS = {
    "word": re.compile(
        r"\b(?:in|with) (?:one|a single) word\b|\bone[- ]word\b|\byes or no\b"
        r"|一个词|一个字|是或否|tek kelime",
        re.I,
    ),
    "list": re.compile(
        r"\b(?:list|name|give)(?: me)? (\d{1,3})\b|(\d{1,3}) (?:items|examples"
        r"|reasons|ways|ideas)\b",
        re.I,
    ),
    "short": re.compile(
        r"\b(?:one|a single|1) sentence\b|\bbriefly\b|\bin short\b|\bshort "
        r"answer\b|简短|简要|kısaca",
        re.I,
    ),
    "long": re.compile(
        r"\bin detail\b|\bdetailed\b|\bthoroughly\b|\bessay\b|\bstep[- ]by[- ]"
        r"step\b|\bcomprehensive\b|详细|ayrıntılı",
        re.I,
    ),
}


def _reference_cue(text: str) -> tuple[str | None, int | None]:
    """The cue search with no word filter in front: every pattern as first written, in
    order."""
    for cue in _CUES:
        match = _PLAIN_CUE_PATTERNS[cue.kind].search(text)
        if match:
            if cue.per_item:
                count = next(int(g) for g in match.groups() if g)
                return cue.kind, cue.tokens * max(1, count)
            return cue.kind, cue.tokens
    return None, None


_CUED = [
    "Answer in one word: is it blue?",
    "Yes or No: is 7 prime?",
    "LIST 12 fruits",
    "name me 3 rivers",
    "Give 4 examples",
    "5 Ideas for a party",
    "Explain it in ONE sentence.",
    "Briefly, why?",
    "In short: what is DNS?",
    "Describe TCP in detail.",
    "A detailed plan, please",
    "Step-by-step: bake bread",
    "Write an essay on rain.",
    "A comprehensive answer",
    "Thoroughly compare A and B",
    "简短回答：天空为什么是蓝色的？",
    "Kısaca anlat",
    "KISACA ANLAT",
    "tek kelimeyle: evet mi?",
    "AYRINTILI anlat",
    "ayrIntIlI anlat",
    "ONE-WORD answer",
    "What is 2+2?",
    "Name the capital of France.",
    "Stepwise? No: one step at a time",
    "𝔖𝔥𝔬𝔯𝔱 answer in one word",
]


def test_cue_word_filter_changes_no_cue() -> None:
    """Cued and uncued texts, in mixed case, ASCII and not: the filtered search finds what
    the full search finds, for each text and for its upper- and lower-cased forms."""
    texts = [*_CUED, *(f"What is {i} plus {i * 7}?" for i in range(20))]
    cued = 0
    for text in texts:
        for form in (text, text.upper(), text.lower()):
            assert _cue(form) == _reference_cue(form), form
            cued += _reference_cue(form)[0] is not None
    assert cued > 30  # the set exercises the patterns, not only the filter


_CUE_PIECES = [
    *("with a single word", "in one word", "one-word", "yes or no", "tek kelime", "list 7"),
    *("give me 12", "name 3", "4 items", "9 examples", "2 reasons", "6 ways", "3 ideas"),
    *("a single sentence", "1 sentence", "briefly", "in short", "short answer", "kisaca"),
    *("in detail", "detailed", "thoroughly", "essay", "step by step", "step-by-step"),
    *("comprehensive", "ayrintili", "wordy", "listing", "named", "giver", "itemize"),
    *("brevity", "shortly", "details", "steps", "reasonable", "sentences", "x", "the"),
    *("120 examples", "12 items", "give me 123", "list me 45", "999 reasons", "1"),
]


def test_cue_search_from_its_words_changes_no_cue() -> None:
    """Random texts of cue phrases, near misses and filler, in random case, long and
    short: the search from each cue's first word finds what every pattern in order finds."""
    rng = random.Random(21)
    cued = 0
    for _ in range(3000):
        pieces = [rng.choice(_CUE_PIECES) for _ in range(rng.randint(1, 12))]
        filler = " " * rng.randint(0, 40)
        text = rng.choice([" ", ", ", "-", "", filler]).join(pieces)
        text = "".join(c.upper() if rng.random() < 0.2 else c for c in text)
        assert _cue(text) == _reference_cue(text), text
        cued += _reference_cue(text)[0] is not None
    assert 1000 < cued < 2900  # most cued, some not


def _counting_encoder(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every text splitter hands the tokenizer (the real one still encodes it)."""
    real = _estimate.encoder_for
    seen: Counter[str] = Counter()

    def encoder_for(model: str) -> Callable[[str], list[int]]:
        encode = real(model)

        def counted(text: str) -> list[int]:
            seen[text] += 1
            return encode(text)

        return counted

    monkeypatch.setattr(_estimate, "encoder_for", encoder_for)
    return seen


def test_plan_encodes_each_question_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Splitter.plan`` of 50 questions: each question's text reaches the tokenizer once
    (the input check does not encode a text too short to be over the limit)."""
    seen = _counting_encoder(monkeypatch)
    questions = [f"What is {i} plus {i * 7}? Answer briefly." for i in range(50)]
    plan = Splitter(model="gpt-4o-mini").plan(questions)
    assert sorted(plan.chosen.groups[0].indexes + plan.chosen.groups[-1].indexes)  # planned
    assert {q: seen[q] for q in questions} == dict.fromkeys(questions, 1)


def test_an_over_long_question_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text long enough to be over ``max_question_tokens`` is still counted and refused."""
    seen = _counting_encoder(monkeypatch)
    text = "word " * 40
    with pytest.raises(InvalidInputError, match=r"over max_question_tokens=30"):
        Splitter(model="gpt-4o-mini", policy=Policy(max_question_tokens=30)).plan([text])
    assert seen[text] == 1


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_batch_encodes_each_question_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``aask_many`` of 30 questions on the simulated service: each question's text is
    encoded once from the input check to the last answer (the run reuses the plan's counts)."""
    seen = _counting_encoder(monkeypatch)
    questions = [f"Question number {i}: what is {i} squared?" for i in range(30)]
    async with open_sim_client(SimService("gpt-4o-mini")) as client:
        result = await Splitter(client).aask_many(questions, model="gpt-4o-mini")
    assert result.stats.failed == 0
    assert {q: seen[q] for q in questions} == dict.fromkeys(questions, 1)


def _reference_steady(
    order: list[Group], ready: list[float], estimate: ServiceEstimate, concurrency: int
) -> tuple[list[float], list[float]]:
    """List scheduling as first written: a pop and a push per request."""
    width = min(len(order), concurrency, estimate.slots or len(order))
    tpot, fixed = estimate.tpot(width), estimate.rtt + estimate.ttft0
    free_at = [0.0] * width
    starts, finishes = [], []
    for g, allowed in zip(order, ready, strict=True):
        start = max(heapq.heappop(free_at), allowed)
        finish = start + fixed + g.input_tokens / estimate.prefill_rate + g.output_tokens * tpot
        heapq.heappush(free_at, finish)
        starts.append(start)
        finishes.append(finish)
    return starts, finishes


@pytest.mark.parametrize("n", [5, 30, 200, 700])
def test_planner_candidates_keep_their_order_groups_and_schedule(n: int) -> None:
    """Random waves under a tight budget and none: in every candidate each group lists its
    questions in input order with the sums of their tokens, the groups run longest first
    (ties by first question), and a steady schedule is the pop-and-push one."""
    rng = random.Random(n)
    items = [
        PlanItem(i, rng.randint(1, 500), rng.choice([7, rng.randint(1, 600)]), None)
        for i in range(n)
    ]
    rng.shuffle(items)
    by_index = {it.index: it for it in items}
    estimate = ServiceEstimate(rtt=0.06, ttft0=0.2, prefill_rate=4000, tpot1=0.01, beta=0.1)
    tight = BudgetSnapshot(
        remaining_requests=50, requests_per_second=5, remaining_tokens=20000, tokens_per_second=2e3
    )
    for budget in (BudgetSnapshot(), tight):
        plan = plan_wave(items, estimate=estimate, budget=budget, concurrency=16, policy=Policy())
        for c in plan.candidates:
            for g in c.groups:
                assert list(g.indexes) == sorted(g.indexes)
                assert g.input_tokens >= sum(by_index[i].input_tokens for i in g.indexes)
            keys = [(-g.output_tokens, g.indexes[0]) for g in c.groups]
            assert keys == sorted(keys)
            ready = _reference_ready(list(c.groups), budget)
            assert _budget_ready(c.requests, budget) == ready
            if c.k > 128:  # past the event simulation: the steady schedule
                expected = _reference_steady(list(c.groups), ready, estimate, 16)
                assert (list(c.starts), list(c.finishes)) == expected


def _reference_ready(order: list[Group], budget: BudgetSnapshot) -> list[float]:
    """The budget's wait per request as first written: one request at a time."""
    ready, reserved = [], 0.0
    for nth, group in enumerate(order):
        reserved += group.input_tokens + (group.max_tokens or group.output_tokens)
        ready.append(max(budget.request_ready(nth), budget.tokens_ready(reserved)))
    return ready


def test_a_candidate_makes_its_groups_once_from_its_columns() -> None:
    """A candidate's Groups are made when first read, from its columns, and the same tuple
    is read after; reordered (critical chains first), it makes them anew in the new order;
    the plan stays hashable."""
    items = [PlanItem(i, 10 + i, 5 + (i * 7) % 30, None) for i in range(40)]
    estimate = ServiceEstimate(rtt=0.06, ttft0=0.2, prefill_rate=4000, tpot1=0.01, beta=0.1)
    plan = plan_wave(
        items, estimate=estimate, budget=BudgetSnapshot(), concurrency=16, policy=Policy()
    )
    for c in plan.candidates:
        r = c.requests
        made = c.groups
        assert c.groups is made
        assert [(g.indexes, g.input_tokens, g.output_tokens, g.max_tokens) for g in made] == list(
            zip(r.indexes, r.input_tokens, r.output_tokens, r.max_tokens, strict=True)
        )
    hash(plan)  # a Plan, its candidates' columns included, is hashable as it was
    chosen = plan.chosen
    order = list(reversed(range(chosen.k)))
    moved = dataclasses.replace(chosen, requests=chosen.requests.reordered(order))
    assert moved.groups == tuple(chosen.groups[g] for g in order)


def test_fast_made_groups_and_items_are_the_dataclasses() -> None:
    """Made through their slots, a Group and a PlanItem are equal to the dataclass's own,
    field for field, and set every field there is (a field added later would fail here)."""
    group_args = ((3, 9), 120, 40, None)
    assert _new_group(*group_args) == Group(*group_args)
    assert [f.name for f in dataclasses.fields(Group)] == [
        "indexes",
        "input_tokens",
        "output_tokens",
        "max_tokens",
    ]
    item_args = (7, 30, 12, 64, ("own", 1), 18)
    assert new_plan_item(*item_args) == PlanItem(*item_args)
    assert [f.name for f in dataclasses.fields(PlanItem)] == [
        "index",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "shape",
        "preamble",
    ]


def test_longest_first_is_the_order_of_the_pair_key() -> None:
    """Shuffled questions with many equal outputs: the two one-attribute sorts give the
    order of the key ``(-output_tokens, index)``."""
    rng = random.Random(2)
    items = [PlanItem(i, 1, rng.choice([1, 7, 7, 50, rng.randint(1, 900)])) for i in range(500)]
    rng.shuffle(items)
    expected = sorted(items, key=lambda it: (-it.output_tokens, it.index))
    assert _longest_first(items) == expected


def _reference_groups(
    longest_first: list[PlanItem], k: int, policy: Policy, preamble: int, repair: Repair
) -> list[Group]:
    """The balancing as first written: pop the lightest group, push it back while open, and
    each group's sums taken with max() and a call per member."""
    if k == len(longest_first):
        return [
            Group(
                (it.index,),
                (preamble if it.preamble is None else it.preamble) + it.input_tokens,
                it.output_tokens,
                it.max_tokens,
            )
            for it in longest_first
        ]
    cap = policy.merge.max_per_request
    heap = [(0, g) for g in range(k)]
    members: list[list[PlanItem]] = [[] for _ in range(k)]
    for item in longest_first:
        load, g = heapq.heappop(heap)
        members[g].append(item)
        if len(members[g]) < cap:
            heapq.heappush(heap, (load + item.output_tokens, g))
    floor, margin = policy.merge.min_answer_tokens, policy.merge.answer_margin
    out = []
    for m in (m for m in members if m):
        if len(m) == 1:
            (it,) = m
            pre = preamble if it.preamble is None else it.preamble
            out.append(Group((it.index,), pre + it.input_tokens, it.output_tokens, it.max_tokens))
            continue
        pre = preamble if m[0].preamble is None else m[0].preamble
        caps = sum(
            it.max_tokens
            if it.max_tokens is not None
            else max(floor, math.ceil(it.output_tokens * margin))
            for it in m
        )
        markers = ANSWER_MARKER_TOKENS * len(m)
        out.append(
            Group(
                tuple(sorted(it.index for it in m)),
                pre
                + INSTRUCTION_TOKENS
                + sum(it.input_tokens for it in m)
                + MARKER_TOKENS * len(m),
                sum(it.output_tokens for it in m) + markers + repair.tokens(m),
                caps + markers,
            )
        )
    return out


@pytest.mark.parametrize(("n", "least"), [(3, 1), (40, 1), (333, 1), (1000, 1), (60, 0), (500, 0)])
def test_balanced_groups_are_the_plain_balancing_s(n: int, least: int) -> None:
    """Random waves (equal outputs for ties, caps or none, own system prompts or none,
    outputs from 1 or from 0), every k a candidate may take, merge caps 2..8, answers
    always or not always read back: the same groups, member for member and token for
    token."""
    rng = random.Random(n)
    items = [
        PlanItem(
            i,
            rng.randint(1, 500),
            rng.choice([7, 7, 100, rng.randint(least, 900), least]),
            rng.choice([None, None, rng.randint(1, 300)]),
            preamble=rng.choice([None, None, rng.randint(0, 50)]),
        )
        for i in range(n)
    ]
    longest_first = sorted(items, key=lambda it: (-it.output_tokens, it.index))
    for cap in (2, 3, 8):
        policy = Policy(merge=MergePolicy(max_per_request=cap, answer_margin=1.3))
        for repair in (Repair(), Repair(0.8, 30.0)):
            for k in sorted({math.ceil(n / size) for size in range(1, cap + 1)}):
                expected = _reference_groups(longest_first, k, policy, 12, repair)
                made = list(balanced_requests(longest_first, k, policy, 12, repair).groups())
                assert made == expected, (cap, k)


def test_guessed_lengths_are_the_plain_medians_between_observations() -> None:
    """Guesses interleaved with answers of every cue kind (and none): each is the plain
    median of its kind's history, else the cue's own guess, else every answer's median,
    else the default, as if nothing were remembered between calls."""
    rng = random.Random(5)
    texts = ["What is 2+2?", "Explain this briefly.", "List 4 reasons.", "Describe X in detail."]
    lengths = OutputLengths(123)

    def plain(text: str) -> int:
        kind, cued = _cue(text)
        seen = lengths._history.get(kind)
        if seen:
            return int(statistics.median(seen))
        if cued is not None:
            return cued
        everything = [x for h in lengths._history.values() for x in h]
        return int(statistics.median(everything)) if everything else lengths.default

    distinct = set()
    for step in range(400):
        text = rng.choice(texts)
        if step > 20 and rng.random() < 0.3:
            lengths.observe(text, rng.randint(1, 700))
        guess = lengths.estimate(text)
        assert guess == plain(text), step
        distinct.add(guess)
    assert len(distinct) > 20


def _reference_plan_items(
    items: list[Question], spec: RequestSpec, lengths: OutputLengths
) -> list[PlanItem]:
    """``plan_items`` as first written: every question through ``spec.of()``."""
    planned = []
    for i, q in enumerate(items):
        own = spec.of(q)
        cap = q.max_tokens or own.cap
        history = sum(_message_tokens(m, spec.model) for m in own.history)
        planned.append(
            PlanItem(
                index=i,
                input_tokens=count_tokens(q.text, spec.model) + MESSAGE_OVERHEAD + history,
                output_tokens=lengths.estimate(q.text, expected=q.expected_tokens, cap=cap),
                max_tokens=cap,
                shape=spec.shape(q, i),
                preamble=preamble_tokens(own) if own.head != spec.head else None,
            )
        )
    return planned


@pytest.mark.parametrize(
    "params", [{}, {"max_tokens": 90}, {"temperature": 0.2}], ids=["none", "cap", "temperature"]
)
@pytest.mark.parametrize("system", [None, "Be brief."], ids=["no-system", "system"])
def test_plan_items_are_the_plain_per_question_specs(
    params: dict[str, object], system: str | None
) -> None:
    """Questions with and without a request of their own (a system prompt, the batch's
    system prompt again, history, keywords, caps, expected lengths), under a batch with and
    without a system prompt and a cap: the same items as through ``spec.of()`` each."""
    rng = random.Random(len(params) + len(system or ""))
    spec = RequestSpec("gpt-4o-mini", system, dict(params))
    lengths = OutputLengths(200)
    lengths.observe("Explain this briefly.", 33)
    questions = []
    for i in range(300):
        own: dict[str, object] = rng.choice(
            [
                {},
                {},
                {"system": "You are terse."},
                {"system": system or ""},
                {
                    "messages": [
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello"},
                    ]
                },
                {"params": {"max_tokens": 40}},
                {"params": {"temperature": 0.9}},
            ]
        )
        caps = rng.choice([{}, {}, {"max_tokens": 25}, {"expected_tokens": 70}])
        text = rng.choice(["What is {i}?", "Explain {i} briefly.", "Give me 3 reasons for {i}."])
        questions.append(Question(text=text.format(i=i), **own, **caps))
    planned = plan_items(questions, spec, lengths)
    assert planned == _reference_plan_items(questions, spec, lengths)
    assert {it.shape is None for it in planned} == {True, False}
    assert {it.max_tokens for it in planned} >= {25, 40}


def test_the_outstanding_record_reads_as_the_whole_list_filter() -> None:
    """A limit's record of requests on their way (kept off the room until answered), kept
    by pruning its front and removing by bisection: after every send and answer, in random
    order, some never answered and going stale, it holds exactly what filtering the whole
    list at each send did, and reads the same ``pending()``."""
    rng = random.Random(3)
    limit = Limit()
    reference: list[list[float]] = []
    unanswered: list[float] = []
    now = 0.0
    for _ in range(3000):
        now += rng.choice([0.0, 0.01, 0.5, 7.0])
        if unanswered and rng.random() < 0.45:
            mark = unanswered.pop(rng.randrange(len(unanswered)))
            limit.answered(mark)
            reference = [o for o in reference if o[0] != mark]
        else:
            amount = rng.choice([1.0, 1.0, 250.0, 0.0])
            limit.take(amount, now)
            reference = [o for o in reference if now - o[2] < _OUTSTANDING_FOR]
            reference.append([limit.booked, amount, now])
            if rng.random() < 0.9:  # the rest are never answered: they go stale
                unanswered.append(limit.booked)
        assert limit.out == reference
        assert limit.pending() == sum(o[1] for o in reference)
