"""Splitter side by side with what its users would pick instead (issue 21, item 5).

The same questions go through each arm, against the bundled simulator (``python -m
splitter.sim``, a subprocess on a free port, over real loopback HTTP; a fresh one per arm
and round, so that no arm inherits another's drained rate-limit bucket):

* ``splitter``: ``Splitter(client).aask_many(questions)``;
* ``gather``: ``asyncio.gather`` over ``client.chat.completions.create`` with a semaphore
  (the openai client's own retries, ``max_retries=2``);
* ``cookbook``: the OpenAI cookbook's parallel-processor approach, written here from its
  description: a static RPM/TPM capacity (refilled continuously), a request leaves when both
  capacities hold it, a failed request goes back on a retry queue (up to 5 attempts), and a
  429 pauses all sending for 15 s (scaled by the simulator's time scale);
* ``litellm``: ``litellm.Router`` with the deployment's ``rpm``/``tpm`` (optional);
* ``langchain``: ``ChatOpenAI(...).abatch`` with an ``InMemoryRateLimiter`` (optional).

Workloads: (a) ``seeds``: the seeds' 5 questions of 200 answer tokens on the GPU-like
profile (gpt-4o-mini); (b) ``rpm``: 1,000 short questions under a tight RPM (the default
token-bucket limiter, with x-ratelimit headers); (c) ``faults``: 1,000 questions with 20% of
requests failing (10% 500, 10% 503). Requests and 429s are counted at the HTTP layer
(an httpx event hook on the client each arm uses); "wrong" counts answers whose first word
(the simulator's ``answer_tag``) belongs to another question; CPU is this process's CPU
time. Medians over ``--rounds`` rounds, the arms' order rotated each round; each round's wall
time, the most 429s and the fewest answers of any round are shown too (a median hides a
round that went over the limit).

The peers are optional bench dependencies, never runtime ones::

    pip install -e '.[peers]'          # litellm, langchain-openai
    python bench/peers.py [--rounds 3] [--scale 1.0] [--json PATH]

``--scale`` multiplies the question counts of (b) and (c) (0.05 for a smoke run).
``--workloads`` and ``--arms`` pick a subset (one workload per invocation keeps a full-size
run under ~6 minutes on 2 loaded cores: litellm's arm alone takes ~30 s a cell there).
``--why`` adds a table of where splitter's time went, from its events (time to plan, rate
waits, retry backoffs, the tail after the last first attempt); ``--profile DIR`` writes a
cProfile of every cell (which slows every arm: not for the main table). The optional arm
``splitter-scaled`` (``--arms splitter,splitter-scaled,...``) is splitter with its retry
waits multiplied by the simulator's time scale, as the cookbook's 15 s cool-down is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import sim_process

from splitter import Limits, Policy, RetryPolicy, Splitter
from splitter._compat import http_module
from splitter.events import (
    BatchPlanned,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
)
from splitter.sim import answer_tag

MODEL = "gpt-4o-mini"


@dataclass
class Counter:
    """Requests and 429s seen by one arm's HTTP client."""

    requests: int = 0
    too_many: int = 0
    events: list[Any] | None = None  # splitter's events, with --why

    async def hook(self, response: Any) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            self.requests += 1
            if response.status_code == 429:
                self.too_many += 1

    def client(self, module: Any = None, size: int = 512) -> Any:
        """An async HTTP client of ``module`` (default: the one openai's clients subclass)."""
        httpx = module or http_module()
        limits = httpx.Limits(
            max_connections=size, max_keepalive_connections=size, keepalive_expiry=4.0
        )
        return httpx.AsyncClient(
            limits=limits, timeout=httpx.Timeout(120.0), event_hooks={"response": [self.hook]}
        )


@dataclass(frozen=True)
class Workload:
    name: str
    questions: list[str]
    sim_args: list[str]
    rpm: int | None = None
    tpm: int | None = None
    max_tokens: int = 64


@dataclass
class Cell:
    workload: str
    arm: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    too_many: list[int] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    wrong: list[int] = field(default_factory=list)
    why: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None


Answers = list[str | None]
Arm = Callable[[str, Workload, Counter, float], Coroutine[Any, Any, Answers]]


def _openai(base_url: str, counter: Counter, retries: int) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=base_url, api_key="sim", max_retries=retries, http_client=counter.client()
    )


async def arm_splitter(base_url: str, w: Workload, counter: Counter, scale: float) -> Answers:
    return await _splitter(base_url, w, counter, Policy(limits=Limits(max_concurrency=64)))


async def arm_splitter_scaled(
    base_url: str, w: Workload, counter: Counter, scale: float
) -> Answers:
    """Splitter with its retry waits scaled by the simulator's time scale, as the cookbook's
    cool-down is (not a default arm: ``--arms splitter-scaled``)."""
    d = RetryPolicy()
    retry = RetryPolicy(
        initial_wait=d.initial_wait * scale, max_wait=d.max_wait * scale, jitter=d.jitter * scale
    )
    policy = Policy(limits=Limits(max_concurrency=64), retry=retry)
    return await _splitter(base_url, w, counter, policy)


async def _splitter(base_url: str, w: Workload, counter: Counter, policy: Policy) -> Answers:
    client = _openai(base_url, counter, 0)
    hook = None if counter.events is None else counter.events.append
    splitter = Splitter(client, policy=policy, on_event=hook)
    result = await splitter.aask_many(w.questions, model=MODEL)
    return [a.text for a in result.answers]


async def _create(client: openai.AsyncOpenAI, question: str, w: Workload) -> str | None:
    response = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=w.max_tokens
    )
    return response.choices[0].message.content


async def arm_gather(base_url: str, w: Workload, counter: Counter, scale: float) -> Answers:
    client = _openai(base_url, counter, 2)
    semaphore = asyncio.Semaphore(64)

    async def one(question: str) -> str | None:
        async with semaphore:
            try:
                return await _create(client, question, w)
            except openai.OpenAIError:
                return None

    return list(await asyncio.gather(*(one(q) for q in w.questions)))


async def arm_cookbook(base_url: str, w: Workload, counter: Counter, scale: float) -> Answers:
    """Static RPM/TPM capacity, a retry queue, a 15 s cool-down after a 429."""
    client = _openai(base_url, counter, 0)
    rpm = float(w.rpm or 10_000) / scale  # sim per-minute limits, in real time
    tpm = float(w.tpm or 10_000_000) / scale
    answers: Answers = [None] * len(w.questions)
    queue: list[tuple[int, int]] = [(i, 5) for i in range(len(w.questions))][::-1]
    retry: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    req_cap, tok_cap = rpm, tpm
    last = time.monotonic()
    last_429 = -1e9
    in_flight = 0
    tasks: set[asyncio.Task[None]] = set()

    async def call(index: int, attempts: int) -> None:
        nonlocal in_flight, last_429
        try:
            answers[index] = await _create(client, w.questions[index], w)
        except openai.RateLimitError:
            last_429 = time.monotonic()
            if attempts > 1:
                retry.put_nowait((index, attempts - 1))
        except openai.OpenAIError:
            if attempts > 1:
                retry.put_nowait((index, attempts - 1))
        finally:
            in_flight -= 1

    nxt: tuple[int, int] | None = None
    while True:
        if nxt is None:
            if not retry.empty():
                nxt = retry.get_nowait()
            elif queue:
                nxt = queue.pop()
            elif in_flight == 0 and retry.empty():
                break
        now = time.monotonic()
        req_cap = min(rpm, req_cap + rpm * (now - last) / 60.0)
        tok_cap = min(tpm, tok_cap + tpm * (now - last) / 60.0)
        last = now
        cost = len(w.questions[nxt[0]]) // 4 + w.max_tokens if nxt else 0
        if nxt and now - last_429 >= 15.0 * scale and req_cap >= 1 and tok_cap >= cost:
            req_cap -= 1
            tok_cap -= cost
            in_flight += 1
            task = asyncio.create_task(call(*nxt))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            nxt = None
            continue
        await asyncio.sleep(0.001)
    return answers


async def arm_litellm(base_url: str, w: Workload, counter: Counter, scale: float) -> Answers:
    litellm: Any = importlib.import_module("litellm")

    litellm.aclient_session = counter.client(httpx)
    params: dict[str, Any] = {
        "model": f"openai/{MODEL}",
        "api_base": base_url,
        "api_key": "sim",
    }
    deployment: dict[str, Any] = {"model_name": MODEL, "litellm_params": params}
    if w.rpm:
        params["rpm"] = int(w.rpm / scale)
    if w.tpm:
        params["tpm"] = int(w.tpm / scale)
    router = litellm.Router(model_list=[deployment], num_retries=2)

    async def one(question: str) -> str | None:
        try:
            r = await router.acompletion(
                model=MODEL,
                messages=[{"role": "user", "content": question}],
                max_tokens=w.max_tokens,
            )
            return str(r.choices[0].message.content)
        except Exception:
            return None

    semaphore = asyncio.Semaphore(64)

    async def bounded(question: str) -> str | None:
        async with semaphore:
            return await one(question)

    return list(await asyncio.gather(*(bounded(q) for q in w.questions)))


async def arm_langchain(base_url: str, w: Workload, counter: Counter, scale: float) -> Answers:
    limiters: Any = importlib.import_module("langchain_core.rate_limiters")
    chat_openai: Any = importlib.import_module("langchain_openai").ChatOpenAI

    limiter = None
    if w.rpm:
        limiter = limiters.InMemoryRateLimiter(requests_per_second=w.rpm / scale / 60.0)
    chat = chat_openai(
        model=MODEL,
        base_url=base_url,
        api_key="sim",
        max_tokens=w.max_tokens,
        max_retries=2,
        rate_limiter=limiter,
        http_async_client=counter.client(),
    )
    results = await chat.abatch(
        list(w.questions), config={"max_concurrency": 64}, return_exceptions=True
    )
    return [r.content if hasattr(r, "content") else None for r in results]


ARMS: dict[str, Arm] = {
    "splitter": arm_splitter,
    "splitter-scaled": arm_splitter_scaled,
    "gather": arm_gather,
    "cookbook": arm_cookbook,
    "litellm": arm_litellm,
    "langchain": arm_langchain,
}


def available_arms() -> list[str]:
    names = ["splitter", "gather", "cookbook"]
    for name, module in (("litellm", "litellm"), ("langchain", "langchain_openai")):
        try:
            __import__(module)
        except ImportError:
            print(f"# {name}: not installed (pip install -e '.[peers]'), skipped")
        else:
            names.append(name)
    return names


def workloads(scale: float, time_scale: float) -> list[Workload]:
    n = max(10, int(1000 * scale))
    seeds = [f"Seed question {i}: explain topic {i} in detail. [len=200]" for i in range(5)]
    short = [f"Short question {i}: what is {i} plus one?" for i in range(n)]
    base = ["--profile", MODEL, "--time-scale", str(time_scale), "--answer-tokens", "20"]
    return [
        Workload("seeds", seeds, ["--profile", MODEL], max_tokens=400),
        Workload("rpm", short, [*base, "--rpm", "600", "--tpm", "10000000"], rpm=600),
        Workload("faults", short, [*base, "--fault-500", "0.1", "--fault-503", "0.1"]),
    ]


@contextlib.contextmanager
def sim(args: list[str]) -> Iterator[str]:
    with sim_process(["--seed", "1", *args]) as url:
        yield url


def score(w: Workload, answers: Answers) -> tuple[int, int]:
    """(answered with its own tag, answered with another question's tag)."""
    right = wrong = 0
    for question, text in zip(w.questions, answers, strict=True):
        if not text:
            continue
        if text.split(maxsplit=1)[0] == answer_tag(question):
            right += 1
        elif text.startswith("ans-"):
            wrong += 1
    return right, wrong


def why(log: list[Any]) -> dict[str, float]:
    """Where a splitter run's time went, from its events (``--why``)."""
    first = log[0].at
    planned = next(e for e in log if isinstance(e, BatchPlanned))
    starts = [e for e in log if isinstance(e, RequestStarted)]
    ends = [e.at for e in log if isinstance(e, RequestFinished)]
    waits = [e.seconds for e in log if isinstance(e, RateLimitWait)]
    backoffs = [e.wait for e in log if isinstance(e, RetryScheduled)]
    last_first = max((e.at for e in starts if e.attempt == 1), default=first)
    return {
        "planned requests": planned.requests,
        "plan s": planned.at - first,
        "first start s": starts[0].at - first if starts else 0.0,
        "start spread s": last_first - (starts[0].at if starts else first),
        "rate waits": len(waits),
        "rate wait sum s": sum(waits),
        "retries": len(backoffs),
        "backoff sum s": sum(backoffs),
        "tail s": max(ends, default=last_first) - last_first,
    }


def run_cell(
    cell: Cell,
    w: Workload,
    arm: Arm,
    time_scale: float,
    *,
    explain: bool = False,
    profile: Path | None = None,
) -> None:
    scale = time_scale if w.name != "seeds" else 1.0
    counter = Counter(events=[] if explain and cell.arm.startswith("splitter") else None)
    profiler = cProfile.Profile() if profile is not None else None
    with sim(w.sim_args) as url:
        cpu0, t0 = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        answers = asyncio.run(arm(url, w, counter, scale))
        if profiler is not None:
            profiler.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if profiler is not None and profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile / f"{w.name}-{cell.arm}-{len(cell.wall)}.prof")
    if counter.events:
        cell.why.append(why(counter.events))
    right, wrong = score(w, answers)
    cell.wall.append(wall)
    cell.cpu.append(cpu)
    cell.requests.append(counter.requests)
    cell.too_many.append(counter.too_many)
    cell.answered.append(right)
    cell.wrong.append(wrong)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="question-count multiplier")
    parser.add_argument("--time-scale", type=float, default=0.1, help="sim time scale")
    parser.add_argument("--arms", default="", help="comma-separated subset")
    parser.add_argument("--workloads", default="", help="comma-separated subset")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--why", action="store_true", help="splitter's events: where its time went")
    parser.add_argument(
        "--profile", type=Path, help="cProfile each cell into this folder (slows every arm)"
    )
    args = parser.parse_args(argv)
    names = args.arms.split(",") if args.arms else available_arms()
    cells: list[Cell] = []
    chosen = args.workloads.split(",") if args.workloads else None
    for w in workloads(args.scale, args.time_scale):
        if chosen is not None and w.name not in chosen:
            continue
        row = {name: Cell(w.name, name) for name in names}
        cells += row.values()
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                if row[name].error:
                    continue
                try:
                    run_cell(
                        row[name],
                        w,
                        ARMS[name],
                        args.time_scale,
                        explain=args.why,
                        profile=args.profile,
                    )
                except Exception as exc:
                    row[name].error = f"{type(exc).__name__}: {exc}"[:120]
    med = statistics.median
    print(f"openai {openai.__version__}; n={len(workloads(args.scale, 1)[1].questions)}")
    print(
        "| workload | arm | wall s | requests | 429s | answered | wrong owner | CPU s "
        "| wall s, each round | 429s, most | answered, fewest |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for c in cells:
        if c.error or not c.wall:
            print(f"| {c.workload} | {c.arm} | error: {c.error} |||||||||")
            continue
        print(
            f"| {c.workload} | {c.arm} | {med(c.wall):.2f} | {med(c.requests):.0f} "
            f"| {med(c.too_many):.0f} | {med(c.answered):.0f} | {med(c.wrong):.0f} "
            f"| {med(c.cpu):.2f} | {' '.join(f'{x:.2f}' for x in c.wall)} "
            f"| {max(c.too_many)} | {min(c.answered)} |"
        )
    explained = [c for c in cells if c.why]
    if explained:
        keys = list(explained[0].why[0])
        print()
        print("| splitter, medians | " + " | ".join(keys) + " |")
        print("|---|" + "---:|" * len(keys))
        for c in explained:
            values = [med([r[k] for r in c.why]) for k in keys]
            print(f"| {c.workload} {c.arm} | " + " | ".join(f"{v:.2f}" for v in values) + " |")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
