"""How good are the planner's calls? Auto's makespan against brute force, cell by cell.

The scenario matrix: network RTT x expected output x RPM headroom x questions per batch, on
the simulator profiles ``gpt-4o-mini`` and ``llama-cpp-cpu`` (each with its ``rtt``
replaced). Every question ends in ``[len=OUT]``, so the simulated answers have exactly OUT
tokens; every request carries ``max_tokens = 2 * OUT + 20`` per question (generous: nothing
is cut). Per cell, the makespan of one ``aask_many`` batch (``result.stats.wall_time``
divided by the time scale, i.e. simulated seconds) is measured for:

* auto: ``Splitter(client, policy=Policy(...))`` (strategy "auto", the default
  ``MergePolicy(max_per_request=4)``), after calibration (below);
* merge: all n questions in one request (strategy "merge", ``max_per_request=n``);
* fanout: one request per question (strategy "fanout");
* s = 2, 3, 4: strategy "merge" with ``max_per_request=s``, i.e. ceil(n/s) balanced groups.
  best = the fastest of s = 1..4 (s = 1 is fanout): the best plan auto may choose with its
  quality cap of 4. Arms whose plans are identical (e.g. s = 2, 3, 4 when n = 2) run once.

regret = auto / best; pred/meas = auto's ``stats.predicted_wall_time / stats.wall_time``.
Targets (printed, never enforced): regret <= 1.10 in every cell and <= 1.05 median; the
prediction within 25% of the measurement.

Calibration (auto learns only from responses): the auto Splitter first runs, on the same
service, one single question and then ``--calibrate`` batches (default 2) of n other
questions of the same length, each sent as its own planner chose (no state is copied in
from elsewhere). The measured batch is a separate, later batch of n fresh questions.

Rate limits: ample is ``SimLimits(rpm=10000)`` (headers sent, never binding); tight is
``SimLimits(rpm=R)`` with R = ceil(n/4): a full bucket admits exactly the ceil(n/4) requests
of the cap-4 plan now, while fanout must wait for refills (R/60 per simulated second). The
planner knows the budget only from the ``x-ratelimit-*`` headers seen in calibration. Before
each calibration batch of n and before the measured batch the bench sleeps until the bucket
is full again: one refill (60 simulated seconds) after the previous batch returned, two if it
drew 429s (a refused request still costs one, so a 429 herd can leave up to a bucketful of
debt, which the headers never show). What auto then believes remains
(``Splitter.plan(...).budget.remaining_requests``) is kept in the JSON. Every forced arm
runs on a fresh ``SimService`` of its own (identical profile and limits, full bucket, idle
engine); in tight cells each forced arm first learns the limits from one response and waits
for a full bucket, as auto does, since the budget paces by what it knows. The
429s each arm drew are counted from its service's log (``RequestRecord.status``).

Before the first cell one throwaway batch on an "instant" service warms the process up (its
first request costs ~40 ms of imports and tokenizer loading, which the first cell's auto
would otherwise learn as network RTT).

Clock: by default every cell runs on virtual time (``splitter.testing.run_virtual``) at
time scale 1: exact, the same on a busy machine, and the 108 cells take seconds. Tight TPM
(``--headroom tpm``: a full bucket holds half of what the batch asks) and few connections
(``--conns``) are further regimes; ``--reduced`` runs the 26 cells ``REDUCED`` (the default
suite checks them: tests/test_planner_matrix.py). ``--clock real`` runs as described next.

Doors and time: the in-process door (``service.async_client()``), no sockets. Each arm gets
a time scale from a rough estimate of its simulated makespan: the cell's scale makes the
fastest arm last about ``--target`` real seconds (default 0.5), within [0.002, 1]; in tight
cells at most ``--tight-max-scale`` (0.1: each bucket refill is 60 simulated seconds of
real sleep). Auto and every arm run at the cell's scale, except arms estimated far slower
(budget-bound fanouts, long merges), which are shrunk to last about 1 s real and are cut
off at 3 times their estimate (shown as ">T"). The client's own CPU per request (~1.5 ms
in-process, mostly the openai client) is real time, so it is magnified by 1/scale in
simulated seconds; the scale is printed per cell. The retry policy's backoff times (not the
service's retry-after, which it reports already scaled) are multiplied by the scale, and
``max_attempts`` is 20 so that 429 herds of budget-bound fanouts mostly end in answers.

Run from the repository root::

    /work/venv/bin/python bench/planner_matrix.py [--profiles gpt-4o-mini,llama-cpp-cpu]
        [--rtts 0.005,0.3,2] [--outputs 5,50,500] [--headroom ample,tight] [--ns 2,5,20]
        [--repeats 1] [--calibrate 2] [--target 0.5] [--tight-max-scale 0.1]
        [--conns 2] [--clock virtual|real] [--reduced] [--json PATH] [--quick]

It is a measurement: the exit status is 0 whatever the regret or prediction, non-zero only
on an error. Unanswered questions are flagged in the row (such an arm cannot be best).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from splitter import BatchResult, Limits, MergePolicy, Policy, Question, RetryPolicy, Splitter
from splitter.sim import PROFILES, Profile, SimLimits, SimService
from splitter.testing import run_virtual

Headroom = Literal["ample", "tight", "tpm"]
ClockKind = Literal["virtual", "real"]
REGRET_CELL = 1.10
REGRET_MEDIAN = 1.05
PREDICTION = 0.25
QUALITY_CAP = 4  # auto's MergePolicy().max_per_request: the brute force covers s = 1..4
AMPLE_RPM = 10_000
MIN_SCALE, MAX_SCALE, TIGHT_MAX_SCALE = 0.002, 1.0, 0.1
SLOW_ARM_REAL = 1.0  # seconds: arms estimated slower than this at the cell's scale shrink
DEADLINE_FACTOR = 3.0  # a forced arm is cut off at this many times its estimate (>= 1 s real)
REFILL = 60.0  # simulated seconds for an empty bucket to fill (per-minute limits)
_MARKER = 5  # tokens of a merged answer's marker line
_PROMPT_PER_QUESTION = 30  # rough prompt tokens per question, for the time estimate only
_RETRY_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class Cell:
    profile: str
    rtt: float
    out: int
    headroom: Headroom
    n: int
    conns: int | None = None  # Limits.max_concurrency; None: the default

    @property
    def rpm(self) -> int:
        if self.headroom == "tight":
            return max(1, math.ceil(self.n / QUALITY_CAP))
        return AMPLE_RPM

    @property
    def tpm(self) -> int | None:
        """Tight TPM: a full bucket holds half of what the batch asks for (input and
        max_tokens), so any plan waits for a refill for the rest; else no TPM limit."""
        if self.headroom != "tpm":
            return None
        asked = self.n * (_PROMPT_PER_QUESTION + 2 * self.out + 20)
        return max(1, math.ceil(asked / 2))

    @property
    def tag(self) -> str:
        conns = "" if self.conns is None else f"/c{self.conns}"
        return f"{self.profile}/{self.rtt * 1000:g}ms/{self.out}t/{self.headroom}/n{self.n}{conns}"


@dataclass(slots=True)
class Arm:
    """One arm's measured runs (simulated seconds) and what they drew."""

    name: str
    k: int  # requests in its plan
    sizes: str  # group sizes, e.g. "4" or "2-3"
    scale: float
    sim_times: list[float] = field(default_factory=list)
    estimate: float = math.nan  # rough simulated makespan the scale was picked by
    rate_limited: int = 0  # 429s, summed over repeats
    failed: int = 0  # questions unanswered, summed over repeats
    repaired: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.sim_times)


@dataclass(slots=True)
class CellResult:
    cell: Cell
    rpm: int
    scale: float  # auto's (and the cell's) time scale
    auto: Arm
    plan_label: str
    predicted_over_measured: float
    arms: dict[str, Arm]  # "merge", "s1" (fanout), "s2", "s3", "s4" (shared objects reused)
    best_s: int
    best: float
    regret: float
    explain: str
    real_seconds: float
    believed_remaining: float | None = None  # auto's budget view before its measured batch


# -- estimates and policies ------------------------------------------------------------------


def profile_for(cell: Cell) -> Profile:
    return PROFILES[cell.profile].model_copy(update={"rtt": cell.rtt})


def estimate_sim(profile: Profile, cell: Cell, k: int) -> float:
    """Rough simulated makespan of k balanced groups: only used to pick a time scale and
    a forced arm's deadline."""
    size = math.ceil(cell.n / k)
    out = cell.out if size == 1 else size * (cell.out + _MARKER)
    at_a_time = min(profile.slots, cell.conns or profile.slots)
    waves = math.ceil(k / at_a_time)
    step = profile.step_seconds(min(k, at_a_time))
    prefill = profile.prefill_seconds(_PROMPT_PER_QUESTION * size + 60)
    total = waves * (profile.rtt + prefill + out * step)
    # Budget-bound: the client's paced bucket sends max(1, rpm x burst) at once, then one
    # request per refill of 60/rpm simulated seconds (spent at 97% of the rate); tokens
    # (input + max_tokens) likewise.
    burst = Limits().burst
    at_once = max(1, math.floor(cell.rpm * burst))
    if k > at_once:
        total += (k - at_once) * REFILL / cell.rpm / 0.97
    if cell.tpm is not None:
        asked = cell.n * (_PROMPT_PER_QUESTION + 2 * cell.out + 20) + k * 60
        total += max(0.0, asked - cell.tpm * burst) * REFILL / cell.tpm / 0.97
    return total


def cell_scale(estimate: float, headroom: Headroom, target: float, tight_cap: float) -> float:
    top = tight_cap if headroom != "ample" else MAX_SCALE
    return min(top, max(MIN_SCALE, target / estimate))


def arm_scale(base: float, estimate: float) -> float:
    return max(MIN_SCALE, min(base, SLOW_ARM_REAL / estimate))


def policy(
    scale: float,
    *,
    strategy: str = "auto",
    per_request: int = QUALITY_CAP,
    deadline: float | None = None,
    conns: int | None = None,
) -> Policy:
    """The same policy for every arm but its strategy: backoff times in simulated seconds."""
    retry = RetryPolicy(
        max_attempts=_RETRY_ATTEMPTS,
        initial_wait=0.5 * scale,
        max_wait=30.0 * scale,
        jitter=0.5 * scale,
    )
    return Policy(
        strategy=strategy,  # type: ignore[arg-type]
        # No canaries: the simulator's merged answers are its solo ones, and canaries'
        # extra requests are a quality check the planner does not price; this matrix
        # measures the planner's choice and prediction (docs/planner.md, canaries).
        merge=MergePolicy(max_per_request=per_request, canaries=False),
        retry=retry,
        deadline=deadline,
        limits=Limits() if conns is None else Limits(max_concurrency=conns),
    )


def questions(cell: Cell, batch: str, count: int) -> list[Question]:
    # No cue words ("list", "briefly", "in detail", ...): the planner must learn the length.
    return [
        Question(text=f"Batch {batch}, question {i}: what happens to sample {i}? [len={cell.out}]")
        for i in range(count)
    ]


def service_for(cell: Cell, scale: float) -> SimService:
    return SimService(
        profile_for(cell),
        time_scale=scale,
        limits=SimLimits(rpm=cell.rpm, tpm=cell.tpm),
        default_answer_tokens=cell.out,
    )


def count_429(service: SimService, since: int) -> int:
    """429s among the requests logged from position ``since`` on."""
    return sum(1 for r in service.log[since:] if r.status == 429)


# -- running ---------------------------------------------------------------------------------


async def ask(splitter: Splitter, items: list[Question], out: int) -> BatchResult:
    return await splitter.aask_many(items, model="sim", max_tokens=2 * out + 20)


async def timed(splitter: Splitter, items: list[Question], out: int) -> tuple[BatchResult, float]:
    """The batch's result and its makespan in real seconds of the event loop's clock (on
    virtual time, the virtual seconds; the run's own ``wall_time`` is the executor's)."""
    start = anyio.current_time()
    result = await ask(splitter, items, out)
    return result, anyio.current_time() - start


async def run_forced(cell: Cell, arm: Arm, pol: Policy, repeat: int) -> None:
    """One measured batch of a forced arm, on a fresh service with a full bucket."""
    service = service_for(cell, arm.scale)
    async with service.async_client(max_retries=0) as client:
        splitter = Splitter(client, policy=pol, model="sim")
        if cell.headroom != "ample":
            # The budget paces what it knows: give every arm auto's knowledge of the limits
            # (one response's headers), then a full bucket, so plans are compared, not luck.
            await ask(splitter, questions(cell, f"{arm.name}-probe-{repeat}", 1), cell.out)
            await wait_for_full_bucket(splitter, service, cell, arm.scale, 0)
        since = len(service.log)
        batch = questions(cell, f"{arm.name}-{repeat}", cell.n)
        result, wall = await timed(splitter, batch, cell.out)
    arm.sim_times.append(wall / arm.scale)
    arm.rate_limited += count_429(service, since)
    arm.failed += result.stats.failed
    arm.repaired += result.stats.repaired


async def wait_for_full_bucket(
    splitter: Splitter, service: SimService, cell: Cell, scale: float, since: int
) -> float | None:
    """Sleep until the service's bucket is full again; returns the requests auto then believes
    remain (its own view, from the headers: reported, not waited for)."""
    if cell.headroom == "ample":
        return None
    # A batch's last debit comes before it returns, and a bucket with no debt is full one
    # refill later. A refused request still costs one, so after 429s the bucket may be up to
    # a whole bucketful in debt (the headers, floored at 0, never show it): two refills.
    refills = 2 if count_429(service, since) else 1
    await anyio.sleep(refills * REFILL * scale * 1.02)
    probe = questions(cell, "probe", cell.n)
    return splitter.plan(probe, max_tokens=2 * cell.out + 20).budget.remaining_requests


async def run_auto(
    cell: Cell, scale: float, repeats: int, calibrate: int
) -> tuple[Arm, BatchResult, list[float], float | None]:
    """Calibrate an auto Splitter on one service, then measure ``repeats`` later batches."""
    service = service_for(cell, scale)
    arm = Arm("auto", 0, "", scale)
    ratios: list[float] = []
    believed: float | None = None
    last: BatchResult | None = None
    async with service.async_client(max_retries=0) as client:
        splitter = Splitter(client, policy=policy(scale, conns=cell.conns), model="sim")
        await ask(splitter, questions(cell, "cal-single", 1), cell.out)
        since = 0
        for c in range(calibrate):
            # Tight: each calibration batch too starts from a full bucket, as the measured one
            # will; from a drained one it would only wait out a refill (or draw 429s).
            await wait_for_full_bucket(splitter, service, cell, scale, since)
            since = len(service.log)
            await ask(splitter, questions(cell, f"cal-{c}", cell.n), cell.out)
        for r in range(repeats):
            believed = await wait_for_full_bucket(splitter, service, cell, scale, since)
            since = len(service.log)
            result, wall = await timed(splitter, questions(cell, f"auto-{r}", cell.n), cell.out)
            arm.sim_times.append(wall / scale)
            arm.rate_limited += count_429(service, since)
            arm.failed += result.stats.failed
            arm.repaired += result.stats.repaired
            if result.stats.predicted_wall_time is not None:
                ratios.append(result.stats.predicted_wall_time / wall)
            last = result
    assert last is not None
    assert last.plan is not None
    chosen = last.plan.chosen
    arm.k = chosen.k
    arm.sizes = _sizes([len(g.indexes) for g in chosen.groups])
    return arm, last, ratios, believed


def _sizes(sizes: Sequence[int]) -> str:
    low, high = min(sizes), max(sizes)
    return str(low) if low == high else f"{low}-{high}"


def forced_plans(cell: Cell) -> dict[str, tuple[int, Policy, str, int]]:
    """name -> (group size cap, policy at scale 1, size label, k); merge is s = n."""
    out: dict[str, tuple[int, Policy, str, int]] = {}
    caps = [*range(1, QUALITY_CAP + 1), cell.n]
    for s in caps:
        name = "merge" if s == cell.n and s > QUALITY_CAP else f"s{s}"
        if s > cell.n:
            continue
        pol = policy(1.0, strategy="fanout" if s == 1 else "merge", per_request=s, conns=cell.conns)
        plan = Splitter(policy=pol, model="sim").plan(
            questions(cell, "shape", cell.n), max_tokens=2 * cell.out + 20
        )
        sizes = sorted(len(g.indexes) for g in plan.chosen.groups)
        out[name] = (s, pol, _sizes(sizes), plan.chosen.k)
    return out


async def warm_up() -> None:
    """Pay the process's one-off costs (imports, the tokenizer, openai's first request: ~40 ms)
    before any cell, so they are not learned as the first cell's network RTT."""
    service = SimService("instant", default_answer_tokens=5)
    async with service.async_client(max_retries=0) as client:
        for strategy in ("fanout", "merge"):
            splitter = Splitter(client, policy=Policy(strategy=strategy), model="sim")
            await splitter.aask_many([f"Warm-up question {i}? [len=5]" for i in range(3)])


async def run_cell(
    cell: Cell, repeats: int, calibrate: int, target: float, tight_cap: float, clock: ClockKind
) -> CellResult:
    started = time.perf_counter()
    profile = profile_for(cell)
    shapes = forced_plans(cell)
    estimates = {name: estimate_sim(profile, cell, k) for name, (_, _, _, k) in shapes.items()}
    scale = 1.0
    if clock == "real":
        scale = cell_scale(min(estimates.values()), cell.headroom, target, tight_cap)
    # Identical plans (same k and sizes) are measured once and shared.
    arms: dict[str, Arm] = {}
    by_shape: dict[tuple[int, str], Arm] = {}
    for name, (_, _, sizes, k) in shapes.items():
        key = (k, sizes)
        if key not in by_shape:
            arm_at = arm_scale(scale, estimates[name]) if clock == "real" else 1.0
            by_shape[key] = Arm(name, k, sizes, arm_at, estimate=estimates[name])
        arms[name] = by_shape[key]
    auto, last, ratios, believed = await run_auto(cell, scale, repeats, calibrate)
    for arm in by_shape.values():
        pol = shapes[arm.name][1]
        for r in range(repeats):
            await run_forced(cell, arm, _rescaled(pol, arm, cell, clock), r)
    if "merge" not in arms:
        arms["merge"] = arms[f"s{cell.n}"]
    for s in range(1, QUALITY_CAP + 1):
        if f"s{s}" not in arms:  # s > n: the same plan as merge
            arms[f"s{s}"] = arms["merge"]
    eligible = {
        s: arms[f"s{s}"].median for s in range(1, QUALITY_CAP + 1) if not arms[f"s{s}"].failed
    } or {s: arms[f"s{s}"].median for s in range(1, QUALITY_CAP + 1)}  # all cut off: say so
    best_s = min(eligible, key=lambda s: (eligible[s], s))
    best = eligible[best_s]
    assert last.plan is not None
    return CellResult(
        cell=cell,
        rpm=cell.rpm,
        scale=scale,
        auto=auto,
        plan_label=last.plan.chosen.label,
        predicted_over_measured=statistics.median(ratios) if ratios else math.nan,
        arms=arms,
        best_s=best_s,
        best=best,
        regret=auto.median / best,
        explain=last.plan.explain(),
        real_seconds=time.perf_counter() - started,
        believed_remaining=believed,
    )


def _rescaled(pol: Policy, arm: Arm, cell: Cell, clock: ClockKind) -> Policy:
    deadline = DEADLINE_FACTOR * arm.estimate * arm.scale
    return policy(
        arm.scale,
        strategy=pol.strategy,
        per_request=pol.merge.max_per_request,
        deadline=max(1.0, deadline) if clock == "real" else deadline,
        conns=cell.conns,
    )


# The regimes, a few cells each (the default suite runs them: tests/test_planner_matrix.py).
REDUCED: tuple[Cell, ...] = (
    # generation-bound: long answers, short round trips
    Cell("gpt-4o-mini", 0.005, 500, "ample", 2),
    Cell("gpt-4o-mini", 0.005, 500, "ample", 5),
    Cell("gpt-4o-mini", 0.005, 500, "ample", 20),
    Cell("gpt-4o-mini", 0.3, 50, "ample", 20),
    # round-trip-bound, and with few connections
    Cell("gpt-4o-mini", 2.0, 5, "ample", 5),
    Cell("gpt-4o-mini", 2.0, 5, "ample", 20),
    Cell("gpt-4o-mini", 2.0, 5, "ample", 5, conns=2),
    Cell("gpt-4o-mini", 2.0, 5, "ample", 20, conns=2),
    Cell("gpt-4o-mini", 0.3, 50, "ample", 20, conns=2),
    # tight RPM
    Cell("gpt-4o-mini", 0.3, 50, "tight", 5),
    Cell("gpt-4o-mini", 0.3, 50, "tight", 20),
    Cell("llama-cpp-cpu", 0.005, 50, "tight", 5),
    Cell("llama-cpp-cpu", 0.005, 50, "tight", 20),
    Cell("llama-cpp-cpu", 0.005, 500, "tight", 5),
    # tight TPM
    Cell("gpt-4o-mini", 0.3, 50, "tpm", 5),
    Cell("gpt-4o-mini", 0.3, 50, "tpm", 20),
    Cell("gpt-4o-mini", 0.005, 500, "tpm", 5),
    Cell("gpt-4o-mini", 0.005, 500, "tpm", 20),
    # slots: llama.cpp's 5 parallel slots queue the rest
    Cell("llama-cpp-cpu", 0.005, 50, "ample", 5),
    Cell("llama-cpp-cpu", 0.005, 50, "ample", 20),
    Cell("llama-cpp-cpu", 0.005, 500, "ample", 20),
    Cell("llama-cpp-cpu", 0.3, 5, "ample", 20),
    # a serial server: concurrent sequences share one decoder
    Cell("serial", 0.005, 50, "ample", 5),
    Cell("serial", 0.005, 50, "ample", 20),
    Cell("serial", 0.3, 500, "ample", 5),
    Cell("serial", 0.3, 5, "ample", 20),
)


# -- output ----------------------------------------------------------------------------------

HEADER = (
    f"{'profile':<14}{'rtt':>6}{'out':>5}{'room':>7}{'n':>4}{'scale':>8}"
    f"{'auto':>9}{'plan':>16}{'merge':>9}{'fanout':>9}{'s2':>9}{'s3':>9}{'s4':>9}"
    f"{'best':>6}{'regret':>8}{'p/m':>7}  429s auto/merge/s1/s2/s3/s4"
)


def _t(seconds: float, cut: bool = False) -> str:
    text = f"{seconds:.2f}" if seconds < 100 else f"{seconds:.0f}"
    return (">" + text) if cut else text


def row(res: CellResult) -> str:
    c, a = res.cell, res.arms
    plan = f"{res.plan_label} k={res.auto.k}"
    times = "".join(
        f"{_t(a[name].median, bool(a[name].failed)):>9}"
        for name in ("merge", "s1", "s2", "s3", "s4")
    )
    r429 = "/".join(
        str(x.rate_limited) for x in (res.auto, a["merge"], a["s1"], a["s2"], a["s3"], a["s4"])
    )
    flag = f" [auto: {res.auto.failed} unanswered]" if res.auto.failed else ""
    if c.conns is not None:
        flag += f" [max_concurrency={c.conns}]"
    return (
        f"{c.profile:<14}{c.rtt * 1000:>5g}m{c.out:>5}{c.headroom:>7}{c.n:>4}{res.scale:>8.4f}"
        f"{_t(res.auto.median):>9}{plan:>16}{times}"
        f"{'s' + str(res.best_s):>6}{res.regret:>8.3f}{res.predicted_over_measured:>7.2f}"
        f"  {r429}{flag}"
    )


def summary(results: Sequence[CellResult]) -> list[str]:
    regrets = [r.regret for r in results]
    off = [abs(r.predicted_over_measured - 1) for r in results]
    over = [r for r in results if r.regret > REGRET_CELL]
    bad_pred = [r for r in results if abs(r.predicted_over_measured - 1) > PREDICTION]
    lines = [
        f"summary: cells={len(results)} max regret={max(regrets):.3f} "
        f"median regret={statistics.median(regrets):.3f} "
        f"cells over {REGRET_CELL:.2f}={len(over)} "
        f"median |pred/meas-1|={statistics.median(off):.3f} "
        f"cells off >{PREDICTION:.0%}={len(bad_pred)}",
        f"targets: regret <= {REGRET_CELL:.2f} every cell and <= {REGRET_MEDIAN:.2f} median; "
        f"pred/meas within {PREDICTION:.0%}",
    ]
    worst = sorted(results, key=lambda r: -r.regret)[:5]
    lines.append("worst regret: " + "; ".join(f"{r.cell.tag} {r.regret:.3f}" for r in worst))
    worst_pred = sorted(results, key=lambda r: -abs(r.predicted_over_measured - 1))[:5]
    lines.append(
        "worst prediction: "
        + "; ".join(f"{r.cell.tag} {r.predicted_over_measured:.2f}" for r in worst_pred)
    )
    return lines


def to_json(res: CellResult) -> dict[str, Any]:
    arms = {name: asdict(arm) | {"median": arm.median} for name, arm in res.arms.items()}
    return {
        "cell": asdict(res.cell),
        "rpm": res.rpm,
        "scale": res.scale,
        "auto": asdict(res.auto) | {"median": res.auto.median},
        "plan_label": res.plan_label,
        "predicted_over_measured": res.predicted_over_measured,
        "arms": arms,
        "best_s": res.best_s,
        "best": res.best,
        "regret": res.regret,
        "explain": res.explain,
        "believed_remaining": res.believed_remaining,
        "real_seconds": res.real_seconds,
    }


# -- command line ----------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _names(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/planner_matrix.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--profiles", type=_names, default=["gpt-4o-mini", "llama-cpp-cpu"])
    parser.add_argument("--rtts", type=_floats, default=[0.005, 0.3, 2.0], help="seconds")
    parser.add_argument("--outputs", type=_ints, default=[5, 50, 500], help="answer tokens")
    parser.add_argument(
        "--headroom", type=_names, default=["ample", "tight"], help="ample, tight (RPM), tpm"
    )
    parser.add_argument(
        "--conns", type=_ints, default=[], help="Limits.max_concurrency values (default: 64)"
    )
    parser.add_argument("--ns", type=_ints, default=[2, 5, 20], help="questions per batch")
    parser.add_argument("--repeats", type=int, default=1, help="measured batches per arm")
    parser.add_argument("--calibrate", type=int, default=2, help="auto's batches before")
    parser.add_argument(
        "--target", type=float, default=0.5, help="real seconds the fastest arm should take"
    )
    parser.add_argument(
        "--tight-max-scale",
        type=float,
        default=TIGHT_MAX_SCALE,
        help="cap on a tight cell's time scale (each bucket refill sleeps 60 s times it)",
    )
    parser.add_argument(
        "--clock",
        choices=["virtual", "real"],
        default="virtual",
        help="virtual: every cell on virtual time at time scale 1 (exact, load-proof, fast); "
        "real: real sleeps at the time scales above (the client's own CPU costs time)",
    )
    parser.add_argument(
        "--reduced", action="store_true", help=f"the {len(REDUCED)} regime cells of the test"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write results")
    parser.add_argument(
        "--quick", action="store_true", help="two small ample cells, fast (for tests)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every cell, print a row each and the summary, optionally write JSON."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.profiles, args.rtts, args.outputs = ["gpt-4o-mini"], [0.3], [20]
        # Ample only: a tight cell's bucket refills are real sleeps.
        args.headroom, args.ns, args.calibrate, args.target = ["ample"], [2, 5], 1, 0.1
    unknown = [p for p in args.profiles if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profiles {unknown}; known: {sorted(PROFILES)}")
    if any(h not in ("ample", "tight", "tpm") for h in args.headroom):
        parser.error("--headroom takes ample, tight and/or tpm")
    if args.repeats < 1 or args.calibrate < 0 or min(args.ns) < 1 or min(args.outputs) < 1:
        parser.error("--repeats, --ns and --outputs must be at least 1, --calibrate at least 0")
    cells = (
        list(REDUCED)
        if args.reduced
        else [
            Cell(p, rtt, out, h, n, c)
            for p in args.profiles
            for rtt in args.rtts
            for out in args.outputs
            for h in args.headroom
            for n in args.ns
            for c in (args.conns or [None])
        ]
    )
    started = time.perf_counter()
    print(
        f"{len(cells)} cells, {args.repeats} measured batch(es) per arm (median), "
        f"{args.calibrate} calibration batch(es) + 1 single question before auto; "
        f"times in simulated seconds; door: in-process; clock: {args.clock}"
    )
    print("'>T': cut off at the arm's deadline with questions unanswered (never counted best)")
    print(HEADER, flush=True)
    run = functools.partial(run_virtual, backend="asyncio")
    if args.clock == "real":
        run = functools.partial(anyio.run, backend="asyncio")
        run(warm_up)
    results: list[CellResult] = []
    for cell in cells:
        params = (args.repeats, args.calibrate, args.target, args.tight_max_scale, args.clock)
        res = run(run_cell, cell, *params)
        results.append(res)
        print(row(res), flush=True)
    total = time.perf_counter() - started
    for line in summary(results):
        print(line)
    flagged = [
        r
        for r in results
        if r.regret > REGRET_CELL or abs(r.predicted_over_measured - 1) > PREDICTION
    ]
    for r in flagged:
        print(
            f"\n== {r.cell.tag}: regret {r.regret:.3f}, pred/meas "
            f"{r.predicted_over_measured:.2f}, scale {r.scale:g}, rpm {r.rpm}"
        )
        print(r.explain)
    print(f"\ntotal runtime: {total:.1f} s")
    if args.json is not None:
        payload: dict[str, Any] = {
            "args": {k: v for k, v in vars(args).items() if k != "json"},
            "cells": [to_json(r) for r in results],
            "total_seconds": total,
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
