"""Splitter's default budget against a zoo of rate limiters, each met from a cold process.

Every cell answers N short questions (default 200) with splitter's default policy::

    client = openai.AsyncOpenAI(base_url=URL, api_key="sk-bench", max_retries=0)
    await splitter.Splitter(client=client).aask_many(questions, model="gpt-4o-mini")

in a fresh ``python`` process (nothing learned carries over from one cell to the next), over
real loopback HTTP to a simulator started for the cell (``python -m splitter.sim --profile
instant --answer-tokens 5 --limiter ...``, its own process: the service answers at once, so
the wall time is the limiter's). The ``nginx`` cells put a real nginx ``limit_req ...
nodelay; limit_req_status 429`` (tests/nginx_support.py) between the client and an unlimited
simulator. Some cells tell splitter the limit (``Policy(limits=Limits(rpm=R))``, R the
limiter's long-run rate in real requests per minute); the others leave it to the budget.

The limiters run in simulated time; each cell's time scale S (real seconds per simulated
second) is chosen so that the cell's ideal lasts about 10 real seconds (nginx runs in real
time, S = 1, about 40 s a cell). All cells, ``--n 200``:

=====================  =================================================  =====  ==========
cell                   limiter (simulated seconds)                        S      ideal, real
=====================  =================================================  =====  ==========
openai-120rpm          token_bucket rpm=120 (OpenAI, refusals count)      0.25   10 s
fixed-10/2s            fixed_window limit=10 window=2                     0.25   9.5 s
fixed-60/60s           fixed_window limit=60 window=60 ("per minute")     0.05   9 s
sliding-10/2s          sliding_log limit=10 window=2                      0.25   9.5 s
sliding-10/2s+count    the same, refusals logged (count_rejected)         0.25   9.5 s
azure-120rpm           azure rpm=120 (20 per 10 s sub-window)             0.1    9 s
leaky-5r/s             leaky_bucket rate=5 burst=0 (nginx, simulated)     0.25   10 s
leaky-5r/s-b5          leaky_bucket rate=5 burst=5                        0.25   9.7 s
leaky-5r/s+count       leaky_bucket rate=5, refusals fill the bucket      0.25   10 s
nginx-5r/s             real nginx limit_req rate=5r/s nodelay             1      40 s
nginx-5r/s-b5          real nginx limit_req rate=5r/s burst=5 nodelay     1      39 s
*+told                 a cell above, with Limits(rpm=R) told up front
=====================  =================================================  =====  ==========

(The simulated leaky bucket at S = 0.25 is 20 r/s in real time: splitter's own backoff after
a 429 without ``retry-after`` is real seconds, so it weighs four times more there, in
simulated seconds, than against the real nginx at 5 r/s.)

Reported per cell, from the client's own record of every HTTP request (an httpx event hook
and httpcore's ``trace`` extension: the moment its headers are written, status): requests
sent; the share of them answered 429; the achieved rate
(accepted requests per simulated second of wall time) over the limiter's long-run rate
(rpm / 60, limit / window, rpm // 6 / 10, rate; a full bucket or window at the start lets a
short run exceed 1); the wall time over the ideal wall time, the ideal being when the
limiter would let the N-th request through if every request came at the earliest moment it
allows, starting when the cell's first request did (the limiter's own model, computed
here; for nginx, the simulator's model of it); the same for only as many requests as were
answered (``/ideal(acc)``: the default policy may merge up to 4 questions in a request, and
then needs fewer than N, so ``wall/ideal`` can fall below 1 while the budget still wastes
time; this column is the budget's own efficiency); questions answered; questions failed (an
error answer) and lost (neither, which must be 0). Wall time runs from just before
``aask_many`` to its return (the first process's to the last's: every client process has
started Python, imported openai and splitter and made its client before any is let go, so
no process's imports are in another's wall; what ``aask_many`` does cold, the tokenizer
and the Redis client, is). A measurement: the exit status is 0 whatever the numbers.

``--redis``: instead, 4 cold processes ask N / 4 questions each at once, sharing one budget
through a fresh redis-server (``Limits(shared=SharedBudget(url=...))``), against
fixed-10/2s and leaky-5r/s; under each row, its rate and wall counted from the cell's first
request instead (the shared budget's own, without the four processes' cold start, which
on a small machine they pay at once). ``--quick``: 20 questions, 2 cells (openai-120rpm,
leaky-5r/s).
``--strategy fanout`` sends one request per question (the budget alone, N requests);
the default ``auto`` is splitter's default policy, which merges under tight limits.
``--scale S`` runs every simulated cell at time scale S instead of its own (``--scale 1``:
real time, as the nginx cells; a 5 r/s leaky bucket then spaces requests 200 ms apart, not
50 ms, so a loaded machine's scheduling delays weigh a quarter as much).
``--timings`` prints, under each row, every client process's start phase by phase
(Python up, imported, ``aask_many``, the tokenizer, the first Redis transaction, the first
booking, the first real send, ...) in real seconds from the wall's start.
``--json PATH`` writes every number and every request's send time and status; ``--plot PATH``
(matplotlib, the ``bench`` extra) draws, for fixed-10/2s and nginx-5r/s when they ran, the
achieved request rate over time against the limiter's rate, 429s marked.

Run from the repository root::

    python bench/limiters.py [--n 200] [--cells NAME,...] [--json PATH] [--plot PATH]
    python bench/limiters.py --redis
    python bench/limiters.py --quick
    python bench/limiters.py --redis --strategy fanout --cells leaky-5r/s --scale 1
    python bench/limiters.py --redis --strategy fanout --timings
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

_ENTERED = time.monotonic()  # a worker process's first moment (CLOCK_MONOTONIC: system-wide)

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "budget")]

from splitter.sim import SimLimits  # noqa: E402  (after the path set-up above)
from splitter.sim._limits import RateLimiter  # noqa: E402

MODEL = "gpt-4o-mini"
ANSWER_TOKENS = 5
DEFAULT_N = 200
QUICK_N = 20
WORKERS = 4  # --redis


@dataclass(frozen=True, slots=True)
class Cell:
    """One limiter to meet: a simulated one (``limits``) or a real nginx (``nginx_burst``)."""

    name: str
    limits: SimLimits
    scale: float  # real seconds per simulated second
    nginx_burst: int | None = None  # a real nginx limit_req in front, at limits.rate r/s
    told: bool = False  # Limits(rpm=...) told to splitter


def _openai(rpm: int) -> SimLimits:
    return SimLimits(rpm=rpm)


def _leaky(burst: int = 0, count: bool | None = None) -> SimLimits:
    return SimLimits(kind="leaky_bucket", rate=5, burst=burst, count_rejected=count)


FIXED_10 = SimLimits(kind="fixed_window", limit=10, window=2)
SLIDING_10 = SimLimits(kind="sliding_log", limit=10, window=2)
AZURE_120 = SimLimits(kind="azure", rpm=120)
CELLS = [
    Cell("openai-120rpm", _openai(120), 0.25),
    Cell("fixed-10/2s", FIXED_10, 0.25),
    Cell("fixed-60/60s", SimLimits(kind="fixed_window", limit=60, window=60), 0.05),
    Cell("sliding-10/2s", SLIDING_10, 0.25),
    Cell("sliding-10/2s+count", SLIDING_10.model_copy(update={"count_rejected": True}), 0.25),
    Cell("azure-120rpm", AZURE_120, 0.1),
    Cell("leaky-5r/s", _leaky(), 0.25),
    Cell("leaky-5r/s-b5", _leaky(burst=5), 0.25),
    Cell("leaky-5r/s+count", _leaky(count=True), 0.25),
    Cell("nginx-5r/s", _leaky(), 1.0, nginx_burst=0),
    Cell("nginx-5r/s-b5", _leaky(burst=5), 1.0, nginx_burst=5),
    Cell("fixed-10/2s+told", FIXED_10, 0.25, told=True),
    Cell("azure-120rpm+told", AZURE_120, 0.1, told=True),
    Cell("leaky-5r/s+told", _leaky(), 0.25, told=True),
    Cell("nginx-5r/s+told", _leaky(), 1.0, nginx_burst=0, told=True),
]
QUICK_CELLS = ("openai-120rpm", "leaky-5r/s")
REDIS_CELLS = ("fixed-10/2s", "leaky-5r/s")
PLOT_CELLS = ("fixed-10/2s", "nginx-5r/s")


def long_run_rate(limits: SimLimits) -> float:
    """The limiter's sustained requests per simulated second."""
    if limits.kind in ("fixed_window", "sliding_log"):
        assert limits.limit is not None
        assert limits.window is not None
        return limits.limit / limits.window
    if limits.kind == "azure":
        return (limits.rpm or 0) // 6 / 10
    if limits.kind == "leaky_bucket":
        return limits.rate or 0.0
    return (limits.rpm or 0) / 60


def ideal_wall(limits: SimLimits, n: int, phase: float) -> float:
    """Simulated seconds from ``phase`` (since the limiter started) until the limiter lets the
    n-th request through, every request sent at the earliest moment it allows."""
    limiter = RateLimiter(limits.model_copy(update={"count_rejected": False}), now=0.0)
    t = phase
    for _ in range(n):
        while not (verdict := limiter.admit(0, t)).allowed:
            t += max(verdict.retry_after, 1e-6)
    return t - phase


# -- one cell's client: a cold process -------------------------------------------------------


def _phase_hooks(phases: dict[str, float]) -> Any:
    """``--timings``: note the first moment of each phase of a worker's start (the tokenizer,
    the first shared-budget transaction) and return an ``on_event`` hook for the batch's."""
    import tiktoken

    import splitter
    from splitter._budget._redis import RedisBudget

    def first(name: str) -> None:
        phases.setdefault(name, time.monotonic())

    get_encoding = tiktoken.get_encoding

    def timed_encoding(name: str) -> Any:
        first("tokenizer_start")
        try:
            return get_encoding(name)
        finally:
            first("tokenizer_end")

    tiktoken.get_encoding = timed_encoding  # type: ignore[assignment]  # diagnostics only
    transact = RedisBudget._transact_sync

    def timed_transact(self: RedisBudget, *args: Any, **kwargs: Any) -> Any:
        first("redis_first_start")
        try:
            return transact(self, *args, **kwargs)
        finally:
            first("redis_first_end")

    RedisBudget._transact_sync = timed_transact  # type: ignore[method-assign]
    from splitter import _runner

    load_encoder = _runner.load_encoder

    async def timed_load_encoder(model: str) -> None:
        await load_encoder(model)
        first("encoder_loaded")

    _runner.load_encoder = timed_load_encoder
    endpoint = _runner.Runner.endpoint

    def timed_endpoint(self: Any, *args: Any) -> Any:
        first("endpoint_start")
        try:
            return endpoint(self, *args)
        finally:
            first("endpoint_end")

    _runner.Runner.endpoint = timed_endpoint  # type: ignore[method-assign]

    def on_event(event: Any) -> None:
        if isinstance(event, splitter.BatchPlanned):
            first("planned")
        elif isinstance(event, splitter.RateLimitWait):
            first("first_budget_wait")
        elif isinstance(event, splitter.RequestStarted):
            first("first_booked")

    return on_event


async def _ask(spec: dict[str, Any]) -> dict[str, Any]:
    phases: dict[str, float] = {"entered": _ENTERED}
    import anyio.to_thread
    import openai

    import splitter

    phases["imported"] = time.monotonic()
    on_event = _phase_hooks(phases) if spec.get("timings") else None
    sent: dict[int, float] = {}
    records: list[list[float]] = []

    async def on_request(request: Any) -> None:
        key = id(request)
        sent[key] = time.monotonic()

        async def trace(name: str, info: dict[str, Any]) -> None:
            # The real write (httpcore's trace; called after splitter's gate at the wire).
            if name.endswith("send_request_headers.started") and key in sent:
                sent[key] = time.monotonic()

        request.extensions["trace"] = trace

    async def on_response(response: Any) -> None:
        records.append([sent.pop(id(response.request)), time.monotonic(), response.status_code])

    hooks = {"request": [on_request], "response": [on_response]}
    http_client = openai.DefaultAsyncHttpxClient(event_hooks=hooks)
    shared = None
    if spec["redis"]:
        shared = splitter.SharedBudget(url=spec["redis"], namespace=spec["namespace"])
    limits = splitter.Limits(rpm=spec["rpm"], shared=shared)
    policy = splitter.Policy(limits=limits, strategy=spec.get("strategy", "auto"))
    questions = [f"What is {i} + {i}?" for i in range(spec["first"], spec["first"] + spec["n"])]
    async with openai.AsyncOpenAI(
        base_url=spec["base_url"], api_key="sk-bench", max_retries=0, http_client=http_client
    ) as client:
        # Imported and ready: wait for the cell's other processes (see _run_workers).
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        started = time.monotonic()
        result = await splitter.Splitter(client=client, policy=policy).aask_many(
            questions, model=MODEL, on_event=on_event
        )
        ended = time.monotonic()
    records += [[t, ended, 0] for t in sent.values()]  # never answered (connection errors)
    return {
        "started": started,
        "ended": ended,
        "answered": sum(a.ok for a in result),
        "failed": sum(a.error is not None for a in result),
        "returned": len(result),
        "records": sorted(records),
        "phases": phases,
    }


def worker(spec_json: str) -> int:
    """Run one client process's share of a cell; print its outcome as one JSON line."""
    import anyio

    print(json.dumps(anyio.run(_ask, json.loads(spec_json))), flush=True)
    return 0


# -- the parent: servers, cells, the table ---------------------------------------------------


@dataclass(slots=True)
class CellResult:
    """One cell's outcome; times in simulated seconds unless named real."""

    name: str
    kind: str
    scale: float
    told_rpm: int | None
    n: int
    sent: int = 0
    rejected: int = 0
    accepted: int = 0
    wall: float = 0.0
    ideal: float = 0.0  # for n requests, one per question
    ideal_accepted: float = 0.0  # for the requests that were answered (merging needs fewer)
    rate_ratio: float = 0.0
    answered: int = 0
    failed: int = 0
    lost: int = 0
    timed_out: bool = False
    limit_rate: float = 0.0  # requests per simulated second
    first_send: float = 0.0  # real seconds from the wall's start to the first request
    records: list[list[float]] = field(default_factory=list)  # [sent, done, status], real s


class Simulator:
    """``python -m splitter.sim`` in its own process; ``origin`` is when its limiter began."""

    def __init__(self, limits: SimLimits | None, scale: float) -> None:
        args = [sys.executable, "-m", "splitter.sim", "--port", "0", "--profile", "instant"]
        args += ["--answer-tokens", str(ANSWER_TOKENS), "--time-scale", str(scale)]
        if limits is not None:
            args += _limit_options(limits)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        banner = self.process.stdout.readline().strip()
        self.origin = time.monotonic()  # the service (and its limiter) was made just before
        if not banner.startswith("splitter.sim serving"):
            self.stop()
            raise RuntimeError(f"simulator did not start: {banner!r}")
        self.base_url = banner.rsplit(" ", 1)[-1]
        self.port = int(self.base_url.rsplit(":", 1)[1].split("/", 1)[0])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _limit_options(limits: SimLimits) -> list[str]:
    options = ["--limiter", limits.kind]
    for name in ("rpm", "tpm", "limit", "window", "rate", "burst"):
        value = getattr(limits, name)
        if value is not None:
            options += [f"--{name}", str(value)]
    if limits.count_rejected is not None:
        options.append("--count-rejected" if limits.count_rejected else "--no-count-rejected")
    return options


def _run_workers(specs: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]] | None:
    """Run one client process per spec; None if they overran ``timeout``.

    Each process starts Python, imports openai and splitter and makes its client, then says
    it is ready and waits; all are let go together, so a cell's wall (from the first
    ``aask_many``) holds no process's interpreter start or imports. (Before, the first of
    four processes started its wall while the others were still importing on the same two
    cores: 4.0-4.2 s to a first send on a 9.5 s ideal, of which one process alone pays
    ~0.3-0.8 s.) What ``aask_many`` does cold (the tokenizer, Redis) stays in the wall."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = str(Path(__file__).resolve())
    procs = []
    for spec in specs:
        spec["spawned"] = time.monotonic()
        args = [sys.executable, script, "--worker", json.dumps(spec)]
        procs.append(
            subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a cell's client process did not start")
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outcomes: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
                other.wait()
            return None
        if proc.returncode != 0:
            raise RuntimeError(f"a cell's client process exited {proc.returncode}")
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    return outcomes


def run_cell(
    cell: Cell,
    n: int,
    workers: int,
    redis_url: str | None,
    strategy: str = "auto",
    timings: bool = False,
) -> CellResult:
    """Start the cell's servers, run its client process(es), and summarise their records."""
    from nginx_support import NginxLimiter

    real_rate = long_run_rate(cell.limits) / cell.scale
    told = round(real_rate * 60) if cell.told else None
    result = CellResult(cell.name, cell.limits.kind, cell.scale, told, n)
    result.limit_rate = long_run_rate(cell.limits)
    simulated = None if cell.nginx_burst is not None else cell.limits
    simulator = Simulator(simulated, cell.scale)
    nginx: NginxLimiter | None = None
    try:
        base_url = simulator.base_url
        if cell.nginx_burst is not None:
            nginx = NginxLimiter(simulator.port, rate=cell.limits.rate or 0, burst=cell.nginx_burst)
            base_url = nginx.start()
        origin = time.monotonic() if nginx is not None else simulator.origin
        share = [n // workers + (i < n % workers) for i in range(workers)]
        # One namespace for the cell's processes: their budget is one Redis key (made per
        # worker, it gave each process a budget of its own; the runs before this fix
        # measured four unshared budgets).
        namespace = f"bench-{cell.name}-{time.time_ns()}"
        specs = [
            {
                "base_url": base_url,
                "n": share[i],
                "first": sum(share[:i]),
                "rpm": told,
                "redis": redis_url,
                "namespace": namespace,
                "strategy": strategy,
                "timings": timings,
            }
            for i in range(workers)
        ]
        ideal_real = ideal_wall(cell.limits, n, 0.0) * cell.scale
        outcomes = _run_workers(specs, timeout=60 + 20 * ideal_real)
    finally:
        if nginx is not None:
            nginx.stop()
        simulator.stop()
    if outcomes is None:
        result.timed_out = True
        return result
    _summarise(result, cell, outcomes, origin)
    if timings:
        print_timings(cell.name, outcomes, [spec["spawned"] for spec in specs])
    return result


PHASES = (  # --timings: a worker's start, in the order the phases come
    ("spawned", "spawned"),
    ("entered", "python up"),
    ("imported", "imported"),
    ("started", "aask_many"),
    ("tokenizer_start", "tok>"),
    ("tokenizer_end", "tok<"),
    ("encoder_loaded", "encoder"),
    ("endpoint_start", "endpoint>"),
    ("endpoint_end", "endpoint<"),
    ("planned", "planned"),
    ("redis_first_start", "redis>"),
    ("redis_first_end", "redis<"),
    ("first_budget_wait", "1st wait"),
    ("first_booked", "1st booked"),
    ("first_sent", "1st sent"),
    ("first_answer", "1st answer"),
    ("last_sent", "last sent"),
    ("ended", "ended"),
)


def print_timings(name: str, outcomes: list[dict[str, Any]], spawned: list[float]) -> None:
    """Each worker's phases in real seconds from the cell's wall start (the first worker's
    ``aask_many``); ``-``: the phase did not happen in that worker."""
    zero = min(o["started"] for o in outcomes)
    print(f"  {name}: real seconds from the first aask_many, per worker")
    print("  " + "".join(f"{label:>11}" for _, label in PHASES))
    for outcome, at in zip(outcomes, spawned, strict=True):
        records = outcome["records"]
        moments = {
            **outcome["phases"],
            "spawned": at,
            "started": outcome["started"],
            "ended": outcome["ended"],
            "first_sent": records[0][0] if records else None,
            "first_answer": min((r[1] for r in records), default=None),
            "last_sent": records[-1][0] if records else None,
        }
        cells = [moments.get(key) for key, _ in PHASES]
        print("  " + "".join("-".rjust(11) if t is None else f"{t - zero:>11.2f}" for t in cells))


def _summarise(
    result: CellResult, cell: Cell, outcomes: list[dict[str, Any]], origin: float
) -> None:
    started = min(o["started"] for o in outcomes)
    ended = max(o["ended"] for o in outcomes)
    records = sorted(r for o in outcomes for r in o["records"])
    result.records = [[s - started, d - started, status] for s, d, status in records]
    result.sent = len(records)
    result.rejected = sum(status == 429 for *_, status in records)
    result.accepted = sum(status == 200 for *_, status in records)
    result.wall = (ended - started) / cell.scale
    first_sent = records[0][0] if records else started
    result.first_send = first_sent - started
    phase = max(0.0, (first_sent - origin) / cell.scale)
    phase = 0.0 if cell.nginx_burst is not None else phase  # nginx's bucket starts at the first
    result.ideal = ideal_wall(cell.limits, result.n, phase)
    result.ideal_accepted = ideal_wall(cell.limits, result.accepted, phase)
    achieved = result.accepted / result.wall if result.wall > 0 else 0.0
    result.rate_ratio = achieved / result.limit_rate
    result.answered = sum(o["answered"] for o in outcomes)
    result.failed = sum(o["failed"] for o in outcomes)
    result.lost = result.n - result.answered - result.failed


HEADER = (
    f"{'cell':<22}{'told rpm':>9}{'sent':>6}{'429 share':>10}{'rate/limit':>11}"
    f"{'wall/ideal':>11}{'/ideal(acc)':>12}"
    f"{'wall (real s)':>14}{'answered':>9}{'failed':>7}{'lost':>5}"
)


def row(r: CellResult) -> str:
    told = str(r.told_rpm) if r.told_rpm else "-"
    if r.timed_out:
        return f"{r.name:<22}{told:>9}  timed out"
    share = r.rejected / r.sent if r.sent else 0.0
    ratio = f"{r.wall / r.ideal:.2f}" if r.ideal > 0 else "-"  # not limited at all
    ratio_acc = f"{r.wall / r.ideal_accepted:.2f}" if r.ideal_accepted > 0 else "-"
    return (
        f"{r.name:<22}{told:>9}{r.sent:>6}{share:>10.2f}{r.rate_ratio:>11.2f}"
        f"{ratio:>11}{ratio_acc:>12}"
        f"{r.wall * r.scale:>14.1f}{r.answered:>9}{r.failed:>7}{r.lost:>5}"
    )


def from_first_send(r: CellResult) -> str:
    """The row's rate and wall counted from the cell's first request instead (the budget's
    own, without the client processes' cold start; printed for several processes)."""
    wall = r.wall - r.first_send / r.scale
    rate = r.accepted / wall / r.limit_rate if wall > 0 else 0.0
    ratio = f"{wall / r.ideal:.2f}" if r.ideal > 0 else "-"
    return (
        f"  {r.name}: from the first request, {r.first_send:.2f} s (real) after the first "
        f"aask_many: rate/limit {rate:.2f}, wall/ideal {ratio}"
    )


def plot(results: list[CellResult], path: Path) -> None:
    """Achieved request rate over time against the limiter's rate, 429s marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is in the bench extra
        raise SystemExit("--plot needs matplotlib: pip install -e '.[bench]'") from exc
    chosen = [r for r in results if r.name in PLOT_CELLS and not r.timed_out] or results[:1]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(8, 3.2 * len(chosen)), squeeze=False)
    for ax, r in zip(axes[:, 0], chosen, strict=True):
        sim = [(s / r.scale, status) for s, _, status in r.records]
        end = max((t for t, _ in sim), default=1.0)
        width = max(end / 40, 1 / r.limit_rate)  # bins of at least one request's share
        bins = [i * width for i in range(math.ceil(end / width) + 1)]
        accepted = [t for t, status in sim if status == 200]
        counts = [sum(b <= t < b + width for t in accepted) / width for b in bins]
        ax.step(bins, counts, where="post", label="accepted requests / s")
        ax.axhline(r.limit_rate, color="grey", linestyle="--", label="limiter's rate")
        rejected = [t for t, status in sim if status == 429]
        ax.plot(rejected, [0] * len(rejected), "rx", markersize=4, label="429")
        ax.set_title(f"{r.name}: {r.sent} requests, {r.rejected} answered 429")
        ax.set_xlabel("simulated seconds since the batch began" if r.scale != 1 else "seconds")
        ax.set_ylabel("requests / s")
        ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/limiters.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--n", type=int, default=None, help=f"questions (default {DEFAULT_N})")
    parser.add_argument("--cells", default=None, help="comma-separated cell names to run")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_N} questions, 2 cells")
    parser.add_argument(
        "--strategy",
        choices=("auto", "fanout"),
        default="auto",
        help="auto (the default policy; it may merge, so fewer requests) or fanout (one "
        "request per question: the budget alone)",
    )
    parser.add_argument("--redis", action="store_true", help=f"{WORKERS} processes, one budget")
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="time scale for every simulated cell (real seconds per simulated second)",
    )
    parser.add_argument(
        "--timings",
        action="store_true",
        help="print each client process's start, phase by phase (tokenizer, first Redis "
        "transaction, first booking, first send), in real seconds from the wall's start",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--plot", type=Path, default=None, metavar="PATH")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cells one after another, print a row each, optionally write JSON and a plot."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker(args.worker)
    n = args.n if args.n is not None else QUICK_N if args.quick else DEFAULT_N
    names = args.cells.split(",") if args.cells else None
    if names is None:
        names = list(QUICK_CELLS if args.quick else REDIS_CELLS if args.redis else [])
    cells = [c for c in CELLS if not names or c.name in names]
    if args.scale is not None:
        if args.scale <= 0:
            parser.error("--scale must be positive")
        cells = [c if c.nginx_burst is not None else replace(c, scale=args.scale) for c in cells]
    unknown = set(names or ()) - {c.name for c in CELLS}
    if unknown or n < 1:
        parser.error(f"unknown cells {sorted(unknown)}" if unknown else "--n must be positive")
    workers = WORKERS if args.redis else 1
    print(
        f"{n} questions per cell, "
        + ("splitter's default policy" if args.strategy == "auto" else "one request a question")
        + ", a cold process per client"
        + (f"; {workers} processes sharing one Redis budget" if args.redis else "")
        + (f"; simulated cells at time scale {args.scale:g}" if args.scale is not None else "")
    )
    print(HEADER, flush=True)
    results = []
    for cell in cells:
        redis = None
        if args.redis:
            from redis_support import RedisServer

            redis = RedisServer()
            redis.start()
        try:
            url = redis.url if redis else None
            result = run_cell(cell, n, workers, url, args.strategy, args.timings)
        finally:
            if redis is not None:
                redis.kill()
        results.append(result)
        print(row(result), flush=True)
        if workers > 1 and not result.timed_out:
            print(from_first_send(result), flush=True)
    if args.json is not None:
        payload = {"n": n, "workers": workers, "cells": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    if args.plot is not None:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
