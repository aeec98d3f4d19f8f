"""Splitter's own overhead: throughput of ``Splitter.aask_many`` against the raw openai client.

Both arms send the same N trivial chat completions (default 256), all at once, to one
``SimService("instant")`` (zero simulated latency: what is left is the cost of the
client side) over real loopback HTTP (uvicorn on 127.0.0.1):

* raw: an anyio task group firing N ``client.chat.completions.create(...)`` calls;
* splitter: ``Splitter(client, policy=Policy(strategy="fanout",
  limits=Limits(max_concurrency=N))).aask_many`` with N questions: one request a question,
  checked (the planner still plans; under ``"auto"`` it may merge questions to a server
  that answers at once, and fewer requests would read as less overhead).

Both use one ``openai.AsyncOpenAI`` (``max_retries=0``, a pool of ``max(N, 256)``
connections). Sharing it keeps the warm pool identical for the two arms; with a client
each, a connection could sit idle through the other arm's round until uvicorn's 5 s
keep-alive closed it under the next request.

The server runs as a subprocess by default (``python -m splitter.sim --profile instant
--port P``): on 2 cores it then has its own core and GIL, the run is client-bound (the
client process is ~100% busy, the server ~10%), and the client CPU per request column is
the client alone. ``--server thread`` runs ``splitter.sim.serve`` in a thread of this
process instead, for comparison; ``--server mock`` sends no HTTP at all: the client's httpx
transport (``httpx.MockTransport``) answers every request with one canned completion, so
all the CPU measured is the client's (openai, httpx, splitter), without sockets or a server
competing for the cores: the steadiest figure of splitter's own cost on a loaded machine.

After one warm-up round per arm, ``--rounds`` rounds are run, alternating which arm goes
first. Reported per arm: median requests/s with its min-max spread and the median client
CPU ms per request; then the ratio of the median throughputs splitter/raw (target >= 0.95)
and splitter's own CPU microseconds per request: the median over rounds of the splitter
round's client CPU minus that of the raw round run beside it, per request, and the same
without the time either spent in the garbage collector.
Each arm's time in the garbage collector is printed beside its CPU (median per round, per
request; in brackets the part in full collections, whose cost grows with the whole heap)
and its full collections in all rounds: which arm's round meets one depends on both
arms' earlier rounds (a full collection runs once enough objects have survived two younger
ones, counted since the last), so the sum over both arms is the figure to compare.
The load average (``os.getloadavg()``) is printed before and after: on a shared machine,
a busy neighbour moves both arms' CPU per request.
``--freeze`` runs ``gc.collect(); gc.freeze()`` after the warm-up, as an application that
sends at this rate may do once it has imported and warmed up: the long-lived heap is left
out of every later collection (``docs/throughput.md``).
``--objects`` instead counts, for each arm, the objects the garbage collector tracks that
are alive per request while all N are in flight (no HTTP: the transport holds every reply
until the last request is in): the objects that a young collection carries towards the
oldest generation, whose growth sets off the full collections. A count, not a timing, so
the same on a loaded machine.
``--profile N`` instead runs N splitter rounds under cProfile (after the warm-up) and prints
splitter's own functions by time per request (a profile, not a measurement: the profiler
adds its own cost to every call).
It is a measurement: the exit status is 0 whatever the ratio, non-zero only on an error
(such as a failed request).

Run from the repository root::

    python bench/overhead.py [--requests 256] [--rounds 7] [--json PATH]
    python bench/overhead.py --requests 1024 --profile 2
    python bench/overhead.py --objects
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import pstats
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import openai

from splitter import Limits, Policy, Splitter
from splitter._compat import http_module
from splitter.sim import SimService, serve

MODEL = "instant"
TARGET = 0.95
_STARTUP_TIMEOUT = 20.0
_KEEPALIVE = 4.0  # seconds; below uvicorn's default timeout_keep_alive of 5 s

Arm = Callable[[openai.AsyncOpenAI, int], Awaitable[float]]


@dataclass(frozen=True, slots=True)
class Round:
    """One arm's round: wall time, this process's CPU time and the time its garbage
    collections took (full collections apart), in seconds."""

    wall: float
    cpu: float
    gc: float = 0.0
    gc_full: float = 0.0
    full_collections: int = 0


class GcTimer:
    """Time spent in the garbage collector while it is installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.total = self.full = 0.0
        self.full_count = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        self.total += took
        if info["generation"] == 2:
            self.full += took
            self.full_count += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


@dataclass(frozen=True, slots=True)
class ArmResult:
    """One arm's per-round throughputs (requests/s) and their summary."""

    name: str
    rates: list[float]
    median: float
    low: float
    high: float
    cpu_ms_per_request: float
    gc_us_per_request: float = 0.0  # median over rounds; of it, in full collections:
    gc_full_us_per_request: float = 0.0
    full_collections: int = 0  # in all its rounds


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(base_url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"splitter.sim exited early with status {proc.returncode}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{base_url}/models", timeout=1.0),
        ):
            return
        time.sleep(0.05)
    raise RuntimeError("splitter.sim did not start in time")


@contextlib.contextmanager
def subprocess_server(profile: str = MODEL, time_scale: float = 1.0) -> Iterator[str]:
    """Run ``python -m splitter.sim --profile PROFILE`` on a free port; yield its /v1 URL.

    Its own process: a server thread in the measuring process would compete with the client
    for the GIL, adding milliseconds to whatever is being timed."""
    with sim_process(["--profile", profile, "--time-scale", str(time_scale)]) as base_url:
        yield base_url


@contextlib.contextmanager
def sim_process(args: list[str]) -> Iterator[str]:
    """``python -m splitter.sim ARGS`` on a free port, in its own process; yield its /v1 URL."""
    port = _free_port()
    cmd = [sys.executable, "-m", "splitter.sim", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, proc)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


MOCK_URL = "http://mock.invalid/v1"
_CANNED = json.dumps(
    {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "2"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }
).encode()


async def _canned(request: Any) -> Any:
    """``--server mock``: every request answered at once with the same completion (after
    one pass of the event loop, as a reply read from a socket would be)."""
    await anyio.sleep(0)
    return http_module().Response(
        200, content=_CANNED, headers={"content-type": "application/json"}
    )


@contextlib.contextmanager
def sim_server(kind: str) -> Iterator[str]:
    """The instant simulator over loopback HTTP, as a subprocess or in a thread here; or
    no server (``mock``: the client's transport answers)."""
    if kind == "mock":
        yield MOCK_URL
    elif kind == "subprocess":
        with subprocess_server() as url:
            yield url
    else:
        with serve(SimService(MODEL)) as url:
            yield url


def make_client(base_url: str, requests: int) -> openai.AsyncOpenAI:
    """An AsyncOpenAI with no retries and a pool that holds every request at once.

    Idle connections are dropped after ``_KEEPALIVE`` seconds, before uvicorn's 5 s
    keep-alive can close one under a request (with ``max_retries=0``, a failed request).
    """
    if base_url == MOCK_URL:
        transport = http_module().MockTransport(_canned)
        http_client = http_module().AsyncClient(transport=transport)
        return openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-bench", max_retries=0, http_client=http_client
        )
    size = max(requests, 256)
    limits = http_module().Limits(
        max_connections=size, max_keepalive_connections=size, keepalive_expiry=_KEEPALIVE
    )
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="sk-bench",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
    )


def _questions(requests: int) -> list[str]:
    return [f"What is {i} + {i}?" for i in range(requests)]


async def run_raw(client: openai.AsyncOpenAI, requests: int) -> float:
    """Fire ``requests`` creates at once; return the wall time in seconds."""
    questions = _questions(requests)

    async def one(text: str) -> None:
        completion = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}]
        )
        if not completion.choices[0].message.content:
            raise RuntimeError("raw arm: a response without answer text")

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for text in questions:
            tg.start_soon(one, text)
    return time.perf_counter() - started


async def run_splitter(client: openai.AsyncOpenAI, requests: int) -> float:
    """One ``aask_many`` of ``requests`` questions; return the wall time in seconds."""
    # One request a question, as the raw arm sends: under "auto" the planner, having
    # learned that this server answers at once, may merge some of them, and a round of
    # fewer requests would read as a faster SDK (rounds at 2.7x the raw arm were seen).
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=requests))
    splitter = Splitter(client, policy=policy)
    questions = _questions(requests)
    started = time.perf_counter()
    result = await splitter.aask_many(questions, model=MODEL)
    elapsed = time.perf_counter() - started
    if result.stats.failed:
        first = next(a.error for a in result.answers if a.error is not None)
        raise RuntimeError(f"splitter arm: {result.stats.failed} failed; first: {first!r}")
    if result.stats.requests != requests:
        raise RuntimeError(f"splitter arm: {result.stats.requests} requests for {requests}")
    return elapsed


async def measure(
    base_url: str, requests: int, rounds: int, *, freeze: bool = False
) -> dict[str, list[Round]]:
    """Warm up each arm once, then ``rounds`` rounds of each, alternating who goes first.
    ``freeze``: ``gc.collect(); gc.freeze()`` after the warm-up (see ``--freeze``)."""
    arms: dict[str, Arm] = {"raw": run_raw, "splitter": run_splitter}
    results: dict[str, list[Round]] = {name: [] for name in arms}
    async with make_client(base_url, requests) as client:
        for arm in arms.values():  # warm-up: connections, lazy imports, the tokenizer
            await arm(client, requests)
        if freeze:  # what an application may do once it has imported and warmed up
            gc.collect()
            gc.freeze()
        for round_no in range(rounds):
            order = ["raw", "splitter"] if round_no % 2 == 0 else ["splitter", "raw"]
            for name in order:
                cpu_started = time.process_time()
                with GcTimer() as collected:
                    wall = await arms[name](client, requests)
                cpu = time.process_time() - cpu_started
                results[name].append(
                    Round(wall, cpu, collected.total, collected.full, collected.full_count)
                )
    return results


async def count_in_flight(requests: int) -> dict[str, float]:
    """``--objects``: per arm, the objects the garbage collector tracks that are alive per
    request while all ``requests`` are in flight, after two warm-up rounds each. No HTTP:
    the client's transport holds every reply until the last request has reached it, then
    counts (``len(gc.get_objects())`` after a collection, less the count before the round).
    Each such object that outlives two young collections is carried into the oldest
    generation, whose growth sets off the full collections: a count, so the same on a
    loaded machine as on an idle one."""
    hold: dict[str, Any] = {"arrived": 0, "all_in": None, "counted": 0}

    async def held(request: Any) -> Any:
        hold["arrived"] += 1
        all_in = hold["all_in"]
        if all_in is not None:
            if hold["arrived"] == requests:
                gc.collect()
                hold["counted"] = len(gc.get_objects())
                all_in.set()
            else:
                await all_in.wait()
        return await _canned(request)

    http_client = http_module().AsyncClient(transport=http_module().MockTransport(held))
    arms: dict[str, Arm] = {"raw": run_raw, "splitter": run_splitter}
    alive: dict[str, float] = {}
    async with openai.AsyncOpenAI(
        base_url=MOCK_URL, api_key="sk-bench", max_retries=0, http_client=http_client
    ) as client:
        for _ in range(2):
            for arm in arms.values():
                await arm(client, requests)
        for name, arm in arms.items():
            gc.collect()
            before = len(gc.get_objects())
            hold.update(arrived=0, all_in=anyio.Event())
            with anyio.fail_after(120):  # not all in flight at once (a limit held some back)
                await arm(client, requests)
            hold["all_in"] = None
            alive[name] = (hold["counted"] - before) / requests
    return alive


async def profile_splitter(base_url: str, requests: int, rounds: int) -> cProfile.Profile:
    """Warm up both arms, then ``rounds`` splitter rounds under cProfile."""
    profiler = cProfile.Profile()
    async with make_client(base_url, requests) as client:
        await run_raw(client, requests)
        await run_splitter(client, requests)
        profiler.enable()
        for _ in range(rounds):
            await run_splitter(client, requests)
        profiler.disable()
    return profiler


def print_own_costs(profiler: cProfile.Profile, requests: int, top: int = 25) -> None:
    """Splitter's own functions (its package's files), by own time per request."""
    package = str(Path(__file__).resolve().parent.parent / "splitter")
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    own = [
        (tottime, cumtime, calls, f"{Path(path).relative_to(package)}:{line}({name})")
        for (path, line, name), (_, calls, tottime, cumtime, _callers) in stats.items()
        if path.startswith(package)
    ]
    total = sum(row[0] for row in own)
    print(f"splitter's own functions: {total / requests * 1e6:.0f} us per request in all")
    print(f"{'own us/req':>11}{'cum us/req':>11}{'calls/req':>10}  function")
    for tottime, cumtime, calls, where in sorted(own, reverse=True)[:top]:
        print(
            f"{tottime / requests * 1e6:>11.1f}{cumtime / requests * 1e6:>11.1f}"
            f"{calls / requests:>10.1f}  {where}"
        )


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def summarize(name: str, rounds: Sequence[Round], requests: int) -> ArmResult:
    """Median and spread of the throughput; median client CPU per request."""
    rates = [requests / r.wall for r in rounds]
    cpu_ms = statistics.median(r.cpu for r in rounds) / requests * 1000
    gc_us = statistics.median(r.gc for r in rounds) / requests * 1e6
    full_us = statistics.median(r.gc_full for r in rounds) / requests * 1e6
    fulls = sum(r.full_collections for r in rounds)
    return ArmResult(
        name, rates, statistics.median(rates), min(rates), max(rates), cpu_ms, gc_us, full_us, fulls
    )


def own_us_per_request(
    rounds: dict[str, list[Round]], requests: int, *, without_gc: bool = False
) -> float:
    """Splitter's own client CPU per request, in microseconds: per round, the splitter arm's
    CPU minus the raw arm's beside it (the same requests through the same client), median;
    ``without_gc``: each arm's time in the garbage collector taken out first."""
    diffs = [
        (s.cpu - r.cpu) - ((s.gc - r.gc) if without_gc else 0.0)
        for s, r in zip(rounds["splitter"], rounds["raw"], strict=True)
    ]
    return statistics.median(diffs) / requests * 1e6


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/overhead.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=256, help="concurrent requests a round")
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds per arm")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write results")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="profile N splitter rounds instead of measuring; print splitter's own costs",
    )
    parser.add_argument(
        "--server",
        choices=("subprocess", "thread", "mock"),
        default="subprocess",
        help="where the simulator runs (default: a subprocess); mock: no HTTP, a canned reply",
    )
    parser.add_argument(
        "--objects",
        action="store_true",
        help="count instead of measuring: tracked objects alive per request with all in "
        "flight, each arm (no HTTP; the same on a loaded machine)",
    )
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="gc.collect(); gc.freeze() after the warm-up: the long-lived heap (openai, "
        "pydantic, httpx) left out of every later collection, as an application may do",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table and the ratio line, optionally write JSON."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.requests < 1 or args.rounds < 1:
        parser.error("--requests and --rounds must be at least 1")
    if args.profile > 0:
        with sim_server(args.server) as base_url:
            profiler = asyncio.run(profile_splitter(base_url, args.requests, args.profile))
        print(f"{args.requests} concurrent requests, {args.profile} profiled splitter rounds")
        print_own_costs(profiler, args.requests * args.profile)
        return 0
    if args.objects:
        alive = asyncio.run(count_in_flight(args.requests))
        print(
            f"tracked objects alive per request, all {args.requests} in flight (the transport "
            "holding every reply until the last request is in):"
        )
        print(
            f"raw {alive['raw']:.1f}, splitter {alive['splitter']:.1f}, "
            f"splitter's own {alive['splitter'] - alive['raw']:.1f}"
        )
        if args.json is not None:
            args.json.write_text(json.dumps({"requests": args.requests, **alive}) + "\n")
        return 0
    load_before = _load()
    with sim_server(args.server) as base_url:
        rounds = asyncio.run(measure(base_url, args.requests, args.rounds, freeze=args.freeze))
    load_after = _load()
    frozen = gc.get_freeze_count()  # 0 unless --freeze froze the heap after the warm-up
    raw = summarize("raw", rounds["raw"], args.requests)
    split = summarize("splitter", rounds["splitter"], args.requests)
    ratio = split.median / raw.median
    own_us = own_us_per_request(rounds, args.requests)
    own_no_gc = own_us_per_request(rounds, args.requests, without_gc=True)
    print(
        f"{args.requests} concurrent requests, {args.rounds} rounds per arm after 1 warm-up, "
        f"server: {args.server}"
        + (f", heap frozen after the warm-up ({frozen} objects)" if args.freeze else "")
    )
    print(f"{load_before} before, {load_after} after ({os.cpu_count()} CPUs)")
    print(
        f"{'arm':<10}{'median req/s':>14}{'min':>9}{'max':>9}{'client CPU ms/req':>20}"
        f"{'GC us/req (full)':>18}{'full GCs':>10}"
    )
    for arm in (raw, split):
        print(
            f"{arm.name:<10}{arm.median:>14.1f}{arm.low:>9.1f}{arm.high:>9.1f}"
            f"{arm.cpu_ms_per_request:>20.2f}"
            f"{arm.gc_us_per_request:>11.0f} ({arm.gc_full_us_per_request:.0f})"
            f"{arm.full_collections:>10}"
        )
    print(f"overhead: splitter/raw throughput = {ratio:.2f} (target >= {TARGET:.2f})")
    print(
        f"splitter's own client CPU: {own_us:.0f} us per request (median of round pairs); "
        f"{own_no_gc:.0f} without the GC's time"
    )
    if args.json is not None:
        payload: dict[str, Any] = {
            "requests": args.requests,
            "rounds": args.rounds,
            "server": args.server,
            "freeze": args.freeze,
            "frozen_objects": frozen,
            "raw": asdict(raw),
            "splitter": asdict(split),
            "ratio": ratio,
            "own_us_per_request": own_us,
            "own_us_per_request_without_gc": own_no_gc,
            "target": TARGET,
            "load_before": load_before,
            "load_after": load_after,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
