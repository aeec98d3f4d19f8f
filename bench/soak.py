"""Fault soak: many questions through the public API while 30% of requests fail somehow.

N questions (default 10,000) go to one ``SimService("gpt-4o-mini")`` over real loopback
HTTP (uvicorn on 127.0.0.1, in a thread of this process so the service's log can be read
at the end), with per-request faults drawn from a fixed mix that adds up to ``--fault-rate``
(default 0.30) of all requests: 429 ``rate_limit_exceeded`` with ``retry-after``, 500, 502,
503, connection resets, stalls (held ``--stall`` simulated seconds, longer than the
per-request timeout), truncated streams (a non-streamed request is dropped after its answer
is computed) and sloppy multi-question answers (one dropped, two run together, or the
markers ignored; swaps are off, see below). The service also enforces ``--rpm`` requests per
simulated minute, so real 429s with ``x-ratelimit-reset-*`` headers happen when the client
outruns the budget it learns.

The questions are asked in chunks of ``--chunk`` (default 500), ``--parallel`` chunks at a
time (default 4), through ``Splitter.aask_many``; the chunks cycle through the strategies
``auto``, ``merge`` (merged requests of up to 4 questions: the only ones sloppy answers can
garble) and ``fanout``, and every ``--stream-every``-th chunk (default 10th) goes through
``Splitter.astream`` instead, alternately in order and out of order. Every Splitter uses
``Policy(strategy=..., timeout=--timeout)`` and nothing else: the default ``RetryPolicy``
(5 attempts), the default limits (64 in flight, adaptive), the default budget.

Each question's text is unique and the simulator's answer to it is deterministic
(``answer_text``: it starts with the question's ``answer_tag``), so every delivered answer is
checked against the exact text it must be. Per question:

* answered: exactly one delivery, with the exact expected text;
* failed: exactly one delivery, carrying an error (counted by the error's class);
* lost: no delivery at all, or one with neither text nor error (a chunk that raised or hung
  loses the questions it did not deliver);
* duplicated: more than one delivery (two answers at one index, two final stream events,
  an answer at another index);
* wrong owner: an answer that is not its question's (another question's tag, or its own tag
  with text that differs from the expected answer, e.g. a neighbour's answer run into it).

A streamed chunk is also checked event by event: the deltas of a question must add up to its
final text (nothing delivered twice or lost in the relay).

Swapped answers (two neighbours' texts exchanged under markers that stay in order) are off
by default (``Faults(sloppy_swaps=False)``): no reply format can reveal them, so no client
can repair them; ``--swaps`` turns them on to show what they cost (wrong owners).

Printed: answered / failed (by error) / lost / duplicated / wrong owner, with the requests
the service received by outcome, the client's retries and the wall time. The exit status is
1 if any question was lost, duplicated or given a wrong owner, or fewer than
``--min-answered`` (default 0.999) were answered; 0 otherwise.

Run from the repository root::

    /work/venv/bin/python bench/soak.py [--n 10000] [--chunk 500] [--parallel 4]
        [--fault-rate 0.3] [--time-scale 0.05] [--timeout 1.0] [--stall 60] [--rpm 240]
        [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import openai

from splitter import BatchResult, Policy, RetryPolicy, Splitter
from splitter._compat import http_module
from splitter.sim import Faults, SimLimits, SimService, answer_text, serve
from splitter.sim._answers import answer_length

PROFILE = "gpt-4o-mini"
MODEL = "gpt-4o-mini"
STRATEGIES: tuple[Literal["auto", "merge", "fanout"], ...] = ("auto", "merge", "fanout")
ANSWER_TOKENS = 20
#: Each fault's share of the faulty requests (the shares add up to 1).
FAULT_MIX = {
    "rate_429": 0.20,
    "rate_500": 0.10,
    "rate_502": 0.05,
    "rate_503": 0.10,
    "rate_reset": 0.15,
    "rate_stall": 0.10,
    "rate_truncate": 0.15,
    "rate_sloppy": 0.15,
}
_KEEPALIVE = 4.0  # seconds; below uvicorn's default timeout_keep_alive of 5 s


@dataclass(frozen=True, slots=True)
class Config:
    """One soak's settings."""

    n: int
    chunk: int
    parallel: int
    fault_rate: float
    time_scale: float
    timeout: float
    stall: float
    rpm: int | None
    seed: int
    stream_every: int
    swaps: bool
    chunk_timeout: float
    min_answered: float


@dataclass(slots=True)
class Tally:
    """Deliveries per question and what the client reported."""

    n: int
    deliveries: list[list[str]] = field(default_factory=list)  # per question: "answer" / ...
    errors: list[list[str]] = field(default_factory=list)  # per question: error class names
    wrong_owner: set[int] = field(default_factory=set)
    stream_mismatch: set[int] = field(default_factory=set)
    chunk_errors: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # a line per failed question
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    repaired: int = 0
    via: collections.Counter[str] = field(default_factory=collections.Counter)
    # Answers of requests for one question (single, repair): how many attempts each took.
    alone_attempts: collections.Counter[int] = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        self.deliveries = [[] for _ in range(self.n)]
        self.errors = [[] for _ in range(self.n)]


@dataclass(frozen=True, slots=True)
class Summary:
    """The soak's verdict."""

    questions: int
    answered: int
    failed: int
    failed_by_error: dict[str, int]
    lost: int
    duplicated: int
    wrong_owner: int
    stream_mismatch: int
    answered_share: float
    requests: int
    retries: int
    rate_limited: int
    repaired: int
    via: dict[str, int]
    alone_attempts: dict[int, int]
    alone_failure_rate: float
    server: dict[str, int]
    fault_share: float
    chunk_errors: list[str]
    failures: list[str]
    wall: float
    ok: bool


def question_text(i: int) -> str:
    """Question ``i``: unique text, answer length varied with a ``[len=N]`` pin."""
    return f"Soak question {i}: what follows {i * 7919 % 100003}? [len={5 + i % 31}]"


def expected_answer(text: str) -> str:
    """The simulator's exact answer to ``text`` asked alone or merged."""
    return answer_text(text.strip(), answer_length(text, ANSWER_TOKENS))


def make_service(config: Config) -> SimService:
    rates = {name: share * config.fault_rate for name, share in FAULT_MIX.items()}
    faults = Faults(
        **rates,
        stall_seconds=config.stall,
        retry_after=1.0,
        sloppy_swaps=config.swaps,
    )
    return SimService(
        PROFILE,
        time_scale=config.time_scale,
        limits=SimLimits(rpm=config.rpm),
        faults=faults,
        default_answer_tokens=ANSWER_TOKENS,
        seed=config.seed,
    )


def make_client(base_url: str) -> openai.AsyncOpenAI:
    """A client whose idle connections close before uvicorn's keep-alive closes them."""
    limits = http_module().Limits(
        max_connections=256, max_keepalive_connections=256, keepalive_expiry=_KEEPALIVE
    )
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="sk-soak",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
    )


def record(tally: Tally, texts: Sequence[str], first: int, result: BatchResult) -> None:
    """File a chunk's BatchResult: each answer at the question whose index it claims."""
    for answer in result:
        deliver(tally, texts, first, answer.index, answer.text, answer.error, answer.attempts)
        if answer.question.text != texts[answer.index]:
            tally.wrong_owner.add(first + answer.index)
    count(tally, result)


def count(tally: Tally, result: BatchResult) -> None:
    """Add a chunk's client-side counts."""
    for answer in result:
        tally.via[answer.via] += 1
        if answer.via != "merged":
            tally.alone_attempts[answer.attempts] += 1
    stats = result.stats
    tally.requests += stats.requests
    tally.retries += stats.retries
    tally.rate_limited += stats.rate_limited
    tally.repaired += stats.repaired


def deliver(
    tally: Tally,
    texts: Sequence[str],
    first: int,
    index: int,
    text: str | None,
    error: BaseException | None,
    attempts: int = 0,
) -> None:
    if not 0 <= index < len(texts):
        tally.chunk_errors.append(f"an answer at index {index} of a chunk of {len(texts)}")
        return
    at = first + index
    if error is not None:
        tally.deliveries[at].append("error")
        tally.errors[at].append(type(error).__name__)
        tally.failures.append(f"q{at} after {attempts} attempts: {type(error).__name__}: {error}")
    elif text is None:
        tally.deliveries[at].append("empty")  # neither an answer nor an error: lost
    else:
        tally.deliveries[at].append("answer")
        if text.strip() != expected_answer(texts[index]):
            tally.wrong_owner.add(at)


async def ask_chunk(splitter: Splitter, tally: Tally, texts: list[str], first: int) -> None:
    result = await splitter.aask_many(texts, model=MODEL)
    record(tally, texts, first, result)


async def stream_chunk(
    splitter: Splitter, tally: Tally, texts: list[str], first: int, *, ordered: bool
) -> None:
    """A chunk through astream: per question, the deltas must add up to the final text."""
    joined: dict[int, str] = collections.defaultdict(str)
    async with splitter.astream(texts, model=MODEL, ordered=ordered) as events:
        async for event in events:
            joined[event.index] += event.delta
            if event.answer is None:
                continue
            answer = event.answer
            deliver(tally, texts, first, event.index, answer.text, answer.error, answer.attempts)
            if answer.index != event.index:
                tally.wrong_owner.add(first + event.index)
            if answer.ok and joined[event.index] != answer.text:
                tally.stream_mismatch.add(first + event.index)
    count(tally, events.result)


async def run_chunk(
    splitters: Mapping[str, Splitter], tally: Tally, config: Config, number: int
) -> None:
    first = number * config.chunk
    texts = [question_text(i) for i in range(first, min(config.n, first + config.chunk))]
    splitter = splitters[STRATEGIES[number % len(STRATEGIES)]]
    streamed = config.stream_every > 0 and number % config.stream_every == config.stream_every - 1
    try:
        with anyio.fail_after(config.chunk_timeout):
            if streamed:
                ordered = (number // config.stream_every) % 2 == 0
                await stream_chunk(splitter, tally, texts, first, ordered=ordered)
            else:
                await ask_chunk(splitter, tally, texts, first)
    except Exception as exc:  # the soak reports it: the chunk's undelivered questions are lost
        tally.chunk_errors.append(f"chunk {number}: {type(exc).__name__}: {exc}")


async def soak(config: Config, base_url: str) -> tuple[Tally, float]:
    tally = Tally(config.n)
    chunks = -(-config.n // config.chunk)
    limiter = anyio.Semaphore(config.parallel)
    started = time.perf_counter()
    async with make_client(base_url) as client:
        splitters: dict[str, Splitter] = {
            name: Splitter(client, policy=Policy(strategy=name, timeout=config.timeout))
            for name in STRATEGIES
        }

        async def one(number: int) -> None:
            async with limiter:
                await run_chunk(splitters, tally, config, number)

        async with anyio.create_task_group() as tg:
            for number in range(chunks):
                tg.start_soon(one, number)
    return tally, time.perf_counter() - started


def summarize(tally: Tally, service: SimService, config: Config, wall: float) -> Summary:
    answered = failed = lost = duplicated = 0
    by_error: collections.Counter[str] = collections.Counter()
    for at, deliveries in enumerate(tally.deliveries):
        if not deliveries:
            lost += 1
            continue
        if len(deliveries) > 1:
            duplicated += 1
            continue
        if deliveries[0] == "error":
            failed += 1
            by_error[tally.errors[at][0]] += 1
        elif deliveries[0] == "empty":
            lost += 1
        elif at not in tally.wrong_owner:
            answered += 1
    wrong_owner = len(tally.wrong_owner)
    server = collections.Counter(
        str(r.status) if r.error_code is None else r.error_code for r in service.log
    )
    alone = [r for r in service.log if len(r.questions) == 1]
    alone_failed = sum(r.status != 200 or r.error_code is not None for r in alone)
    faulty = sum(
        r.error_code not in (None, "requests", "tokens", "client_disconnected") for r in service.log
    )
    share = answered / config.n if config.n else 1.0
    ok = (
        lost == duplicated == wrong_owner == 0
        and not tally.stream_mismatch
        and share >= config.min_answered
    )
    return Summary(
        questions=config.n,
        answered=answered,
        failed=failed,
        failed_by_error=dict(by_error.most_common()),
        lost=lost,
        duplicated=duplicated,
        wrong_owner=wrong_owner,
        stream_mismatch=len(tally.stream_mismatch),
        answered_share=share,
        requests=tally.requests,
        retries=tally.retries,
        rate_limited=tally.rate_limited,
        repaired=tally.repaired,
        via=dict(tally.via),
        alone_attempts=dict(sorted(tally.alone_attempts.items())),
        alone_failure_rate=alone_failed / len(alone) if alone else 0.0,
        server=dict(server.most_common()),
        fault_share=faulty / len(service.log) if service.log else 0.0,
        chunk_errors=tally.chunk_errors,
        failures=tally.failures,
        wall=wall,
        ok=ok,
    )


def report(summary: Summary, config: Config) -> None:
    s = summary
    print(
        f"soak: {config.n} questions in chunks of {config.chunk} ({config.parallel} at a time), "
        f"{config.fault_rate:.0%} faulty requests, rpm {config.rpm}, time scale "
        f"{config.time_scale:g}, timeout {config.timeout:g}s, stall {config.stall:g} sim s, "
        f"seed {config.seed}"
    )
    errors = ", ".join(f"{k} {v}" for k, v in s.failed_by_error.items()) or "none"
    target = f"target >= {config.min_answered:.1%}"
    print(f"answered      {s.answered} ({s.answered_share:.4%}; {target})")
    print(f"failed        {s.failed} ({errors})")
    print(f"lost          {s.lost}")
    print(f"duplicated    {s.duplicated}")
    print(f"wrong owner   {s.wrong_owner}")
    print(f"stream mismatch {s.stream_mismatch}")
    via = ", ".join(f"{k} {v}" for k, v in sorted(s.via.items()))
    print(
        f"client: {s.requests} requests, {s.retries} retries, {s.rate_limited} rate-limited, "
        f"{s.repaired} repaired; answers via {via}"
    )
    attempts = ", ".join(f"{k}: {v}" for k, v in s.alone_attempts.items())
    p, k = s.alone_failure_rate, RetryPolicy().max_attempts
    print(
        f"asked alone: {p:.1%} of attempts failed; p^{k} = {p**k:.4%} (expected share left "
        f"unanswered by {k} attempts); answers by attempts taken: {attempts}"
    )
    server = ", ".join(f"{k} {v}" for k, v in s.server.items())
    received = sum(s.server.values())
    print(f"server: {received} requests ({s.fault_share:.1%} injected faults): {server}")
    for line in s.chunk_errors:
        print(f"chunk error: {line}")
    for line in s.failures[:10]:
        print(f"failed: {line}")
    print(f"wall time     {s.wall:.1f}s")
    print(f"verdict       {'PASS' if s.ok else 'FAIL'}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/soak.py", description=(__doc__ or "").splitlines()[0]
    )
    add = parser.add_argument
    add("--n", type=int, default=10_000, help="questions (default 10000)")
    add("--chunk", type=int, default=500, help="questions per aask_many call")
    add("--parallel", type=int, default=4, help="chunks in flight at once")
    add("--fault-rate", type=float, default=0.30, help="share of requests given a fault")
    add("--time-scale", type=float, default=0.05, help="real seconds per simulated second")
    add("--timeout", type=float, default=1.0, help="per-request timeout, real seconds")
    add("--stall", type=float, default=60.0, help="a stall's hold, simulated seconds")
    add("--rpm", type=int, default=240, help="the service's requests per simulated minute")
    add("--seed", type=int, default=0)
    add("--stream-every", type=int, default=10, help="every k-th chunk via astream (0: none)")
    add("--swaps", action="store_true", help="let sloppy answers swap two neighbours")
    add("--chunk-timeout", type=float, default=600.0, help="a chunk taking longer has hung")
    add("--min-answered", type=float, default=0.999, help="share that must be answered")
    add("--json", type=Path, default=None, metavar="PATH", help="write the summary as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Soak, print the summary, optionally write JSON; exit 1 unless it passed."""
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.n, args.chunk, args.parallel) < 1:
        parser.error("--n, --chunk and --parallel must be at least 1")
    if not 0 <= args.fault_rate <= 1:
        parser.error("--fault-rate must be between 0 and 1")
    config = Config(
        n=args.n,
        chunk=args.chunk,
        parallel=args.parallel,
        fault_rate=args.fault_rate,
        time_scale=args.time_scale,
        timeout=args.timeout,
        stall=args.stall,
        rpm=args.rpm if args.rpm > 0 else None,
        seed=args.seed,
        stream_every=args.stream_every,
        swaps=args.swaps,
        chunk_timeout=args.chunk_timeout,
        min_answered=args.min_answered,
    )
    service = make_service(config)
    with serve(service) as base_url:
        tally, wall = asyncio.run(soak(config, base_url))
    summary = summarize(tally, service, config, wall)
    report(summary, config)
    if args.json is not None:
        payload: dict[str, Any] = {"config": asdict(config), **asdict(summary)}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
