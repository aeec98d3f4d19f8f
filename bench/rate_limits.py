"""Rate-limited throughput: splitter's budget against what users write today and the cookbook.

Three arms answer the same N questions (default 1000) on the same simulated service: a fresh
``SimService("gpt-4o-mini", time_scale=S, limits=SimLimits(rpm=RPM, tpm=TPM), seed=0,
default_answer_tokens=12)`` per arm (default RPM 60, TPM 40,000, S 0.005: one simulated
second passes in 5 ms, so a budget-bound arm of 1000 questions lasts ~5 s). The service
starts with full buckets (RPM requests, TPM tokens), refills them continuously, charges a
request its prompt tokens + ``max_tokens``, and charges a rejected request one request too.
Every request carries ``max_tokens=32`` (answers are 12 tokens: nothing is cut). Every arm
holds at most C requests in flight (``--concurrency``, default 64, the same for all):

* splitter: ``Splitter(client, policy=Policy(strategy="fanout",
  limits=Limits(max_concurrency=C))).aask_many(...)``: the default budget, which learns the
  limits from the ``x-ratelimit-*`` headers (nothing is told up front), default retries.
* naive-gather: ``asyncio.gather`` of N ``client.chat.completions.create`` calls behind an
  ``asyncio.Semaphore(C)``, on a client with openai's own retries at their default
  (``max_retries=2``; on a 429 openai waits the service's ``retry-after-ms``). A question
  whose call raises counts as failed.
* cookbook: a reimplementation, written from its description, of the throttling rule of
  the OpenAI cookbook's ``api_request_parallel_processor.py``: one loop that every
  ``LOOP_SLEEP`` (1 ms) takes the next request (retries first), refills a requests counter
  and a tokens counter continuously at their per-minute limits / 60 per second (capped at a
  minute's worth, and starting full), and sends the request only when both counters cover
  it: 1 request, and prompt tokens + ``max_tokens * n`` tokens, counted as the cookbook does
  (per message 4 + the tokens of each field, minus 1 for a ``name``, plus 2 for the reply's
  priming, with the ``cl100k_base`` encoding). A failed request goes back to the retry
  queue until it has had ``MAX_ATTEMPTS`` (5) attempts; a failure whose message says "rate
  limit" stamps the time, and the loop then sleeps until ``PAUSE`` (15 s) has passed since
  the last such stamp (requests already in flight go on). Capacity spent on a failed
  attempt is not given back. The client has ``max_retries=0`` (the cookbook posts with
  aiohttp, no retries of its own). Additions, so the arms are comparable: the loop sends
  nothing while C requests are in flight (the cookbook has no concurrency cap), and the
  counts and timings are kept in memory instead of files.

  Scaling: the cookbook is told the service's true limits in real time. The service's
  buckets refill RPM / 60 and TPM / 60 per *simulated* second, i.e. per S real seconds, so
  the cookbook's counters refill at RPM / 60 / S and TPM / 60 / S per real second (their
  caps stay RPM and TPM), and its 15 s pause after a 429 becomes 15 * S real seconds (15
  simulated seconds). The 1 ms loop sleep is a polling interval, not a limit, and is left
  in real time (at S = 0.005 it is 0.2 simulated seconds: sends are delayed by up to that,
  but no capacity is lost, since the counters keep accumulating).

Splitter's own retry backoff constants are real seconds, but a 429's wait is the service's
``retry-after`` (already scaled), and no other failure occurs here. Client CPU is real time
too, so it is magnified by 1/S in simulated seconds (e.g. ~1.5 ms of openai client per
request is 0.3 simulated seconds at S = 0.005); this weighs on arms that send many
requests. Before the arms, one small splitter batch and one raw call on an unlimited
"instant" service warm the process up (imports, the tokenizer).

Reported per arm: wall time in simulated seconds (the arm's real wall time / S);
throughput as a fraction of the RPM budget (accepted requests per simulated minute of wall
time / RPM; a full bucket at the start lets a short run exceed 1); the 429 rate (429
responses / all requests the service received, from ``service.log``); all requests the
service received; questions answered and failed; and when the service saw the arm's first
request (simulated seconds after the arm started: client-side work before sending, magnified
by 1/S like all client CPU). A measurement: the exit status is 0 whatever the numbers,
non-zero only on an error. ``--quick`` runs 200 questions per arm (a few seconds in all).

Run from the repository root::

    /work/venv/bin/python bench/rate_limits.py [--n 1000] [--rpm 60] [--tpm 40000]
        [--concurrency 64] [--time-scale 0.005] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import openai
from openai.types.chat import ChatCompletionMessageParam

from splitter import Limits, Policy, Splitter
from splitter._estimate import encoder_for
from splitter.sim import SimLimits, SimService

PROFILE = "gpt-4o-mini"
MODEL = "gpt-4o-mini"
SEED = 0
ANSWER_TOKENS = 12
MAX_TOKENS = 32
# The cookbook's constants (api_request_parallel_processor.py).
MAX_ATTEMPTS = 5
PAUSE = 15.0  # simulated seconds after a rate-limit error
LOOP_SLEEP = 0.001  # real seconds
COOKBOOK_MODEL = "gpt-4"  # its default token_encoding_name is cl100k_base, as for gpt-4
DEFAULT_N = 1000
QUICK_N = 200


@dataclass(frozen=True, slots=True)
class Config:
    """One run's settings, the same for every arm."""

    n: int
    rpm: int
    tpm: int
    concurrency: int
    time_scale: float


@dataclass(frozen=True, slots=True)
class ArmResult:
    """One arm's outcome; times in simulated seconds."""

    name: str
    wall: float
    first_request: float  # from the arm's start to the service seeing its first request
    throughput: float  # accepted requests per simulated minute / RPM
    rate_429: float  # 429 responses / requests received
    requests: int
    accepted: int
    rejected_429: int
    answered: int
    failed: int


Arm = Callable[[SimService, Config, list[str]], Awaitable[int]]


def questions(n: int) -> list[str]:
    return [f"What is {i} + {i}?" for i in range(n)]


def messages(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def make_service(config: Config) -> SimService:
    return SimService(
        PROFILE,
        time_scale=config.time_scale,
        limits=SimLimits(rpm=config.rpm, tpm=config.tpm),
        default_answer_tokens=ANSWER_TOKENS,
        seed=SEED,
    )


async def run_splitter(service: SimService, config: Config, texts: list[str]) -> int:
    """Splitter with the default budget; returns the questions that failed."""
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=config.concurrency))
    async with service.async_client() as client:
        result = await Splitter(client, policy=policy).aask_many(
            texts, model=MODEL, max_tokens=MAX_TOKENS
        )
    return result.stats.failed


async def run_naive(service: SimService, config: Config, texts: list[str]) -> int:
    """``asyncio.gather`` behind a semaphore, openai's default retries; returns failures."""
    semaphore = asyncio.Semaphore(config.concurrency)
    async with service.async_client() as client:  # max_retries: openai's default (2)

        async def one(text: str) -> None:
            async with semaphore:
                await client.chat.completions.create(
                    model=MODEL, messages=messages(text), max_tokens=MAX_TOKENS
                )

        outcomes = await asyncio.gather(*(one(t) for t in texts), return_exceptions=True)
    return sum(isinstance(o, BaseException) for o in outcomes)


def cookbook_tokens(request: dict[str, Any], encode: Callable[[str], list[int]]) -> int:
    """Tokens the cookbook books for a chat request: its prompt count + max_tokens * n."""
    prompt = 0
    for message in request["messages"]:
        prompt += 4  # every message is framed as <im_start>{role/name}\n{content}<im_end>\n
        for key, value in message.items():
            prompt += len(encode(value))
            if key == "name":  # a name replaces the role
                prompt -= 1
    prompt += 2  # the reply is primed with <im_start>assistant
    completion = int(request.get("max_tokens", 15)) * int(request.get("n", 1))
    return prompt + completion


@dataclass(slots=True)
class _Job:
    request: dict[str, Any]
    tokens: int
    attempts_left: int = MAX_ATTEMPTS


async def run_cookbook(service: SimService, config: Config, texts: list[str]) -> int:
    """The cookbook's throttle, scaled to the service's real-time limits; returns failures."""
    scale = config.time_scale
    requests_per_second = config.rpm / 60 / scale
    tokens_per_second = config.tpm / 60 / scale
    pause = PAUSE * scale
    encode = encoder_for(COOKBOOK_MODEL)
    pending: deque[_Job] = deque()
    for text in texts:
        request = {"model": MODEL, "messages": messages(text), "max_tokens": MAX_TOKENS}
        pending.append(_Job(request, cookbook_tokens(request, encode)))
    retries: deque[_Job] = deque()
    unfinished, failed, in_flight = len(texts), 0, 0
    last_rate_limit = -math.inf

    async with service.async_client(max_retries=0) as client:

        async def call(job: _Job) -> None:
            nonlocal unfinished, failed, in_flight, last_rate_limit
            try:
                await client.chat.completions.create(**job.request)
            except openai.APIError as exc:
                if "rate limit" in exc.message.lower():
                    last_rate_limit = time.monotonic()
                if job.attempts_left:
                    retries.append(job)
                else:
                    unfinished -= 1
                    failed += 1
            else:
                unfinished -= 1
            finally:
                in_flight -= 1

        request_capacity, token_capacity = float(config.rpm), float(config.tpm)
        last_update = time.monotonic()
        job: _Job | None = None
        async with anyio.create_task_group() as tg:
            while True:
                if job is None:
                    if retries:
                        job = retries.popleft()
                    elif pending:
                        job = pending.popleft()
                now = time.monotonic()
                elapsed, last_update = now - last_update, now
                request_capacity = min(config.rpm, request_capacity + requests_per_second * elapsed)
                token_capacity = min(config.tpm, token_capacity + tokens_per_second * elapsed)
                if (
                    job is not None
                    and in_flight < config.concurrency
                    and request_capacity >= 1
                    and token_capacity >= job.tokens
                ):
                    request_capacity -= 1
                    token_capacity -= job.tokens
                    job.attempts_left -= 1
                    in_flight += 1
                    tg.start_soon(call, job)
                    job = None
                if unfinished == 0:
                    break
                await anyio.sleep(LOOP_SLEEP)
                since = time.monotonic() - last_rate_limit
                if since < pause:
                    await anyio.sleep(pause - since)
    return failed


async def warm_up() -> None:
    """Imports, the tokenizers and openai's first-request costs, outside any arm's clock."""
    service = SimService("instant", default_answer_tokens=ANSWER_TOKENS)
    async with service.async_client() as client:
        await Splitter(client, policy=Policy(strategy="fanout")).aask_many(
            questions(4), model=MODEL, max_tokens=MAX_TOKENS
        )
        await client.chat.completions.create(
            model=MODEL, messages=messages("warm-up"), max_tokens=MAX_TOKENS
        )
    encoder_for(COOKBOOK_MODEL)("warm-up")


async def measure_arm(name: str, arm: Arm, config: Config) -> ArmResult:
    """Run one arm on a fresh service; summarise it from its wall time and the service log."""
    service = make_service(config)
    texts = questions(config.n)
    started = time.monotonic()
    failed = await arm(service, config, texts)
    wall = (time.monotonic() - started) / config.time_scale
    received = len(service.log)
    accepted = sum(r.status == 200 for r in service.log)
    rejected = sum(r.status == 429 for r in service.log)
    return ArmResult(
        name=name,
        wall=wall,
        first_request=(min(r.arrived for r in service.log) - started) / config.time_scale,
        throughput=accepted / (wall / 60) / config.rpm,
        rate_429=rejected / received if received else 0.0,
        requests=received,
        accepted=accepted,
        rejected_429=rejected,
        answered=config.n - failed,
        failed=failed,
    )


async def measure(config: Config) -> list[ArmResult]:
    await warm_up()
    arms: dict[str, Arm] = {
        "splitter": run_splitter,
        "naive-gather": run_naive,
        "cookbook": run_cookbook,
    }
    return [await measure_arm(name, arm, config) for name, arm in arms.items()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/rate_limits.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--n", type=int, default=None, help=f"questions per arm (default {DEFAULT_N})"
    )
    parser.add_argument("--rpm", type=int, default=60, help="the service's requests per minute")
    parser.add_argument("--tpm", type=int, default=40_000, help="the service's tokens per minute")
    parser.add_argument("--concurrency", type=int, default=64, help="most in flight, every arm")
    parser.add_argument(
        "--time-scale", type=float, default=0.005, help="real seconds per simulated second"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write results")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_N} questions (unless --n is given)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three arms, print the table, optionally write JSON."""
    parser = _parser()
    args = parser.parse_args(argv)
    n = args.n if args.n is not None else QUICK_N if args.quick else DEFAULT_N
    if min(n, args.rpm, args.tpm, args.concurrency) < 1 or args.time_scale <= 0:
        parser.error("--n, --rpm, --tpm, --concurrency and --time-scale must be positive")
    config = Config(n, args.rpm, args.tpm, args.concurrency, args.time_scale)
    results = asyncio.run(measure(config))
    print(
        f"{config.n} questions per arm; service {PROFILE!r}: RPM {config.rpm}, TPM {config.tpm}, "
        f"time scale {config.time_scale:g}; concurrency {config.concurrency}; "
        f"max_tokens {MAX_TOKENS}, answers {ANSWER_TOKENS} tokens"
    )
    print(
        f"{'arm':<14}{'wall (sim s)':>13}{'thru/RPM':>10}{'429 rate':>10}"
        f"{'requests':>10}{'answered':>10}{'failed':>8}{'1st req (sim s)':>17}"
    )
    for arm in results:
        print(
            f"{arm.name:<14}{arm.wall:>13.1f}{arm.throughput:>10.3f}{arm.rate_429:>10.3f}"
            f"{arm.requests:>10}{arm.answered:>10}{arm.failed:>8}{arm.first_request:>17.1f}"
        )
    if args.json is not None:
        payload: dict[str, Any] = {
            "config": asdict(config),
            "profile": PROFILE,
            "max_tokens": MAX_TOKENS,
            "answer_tokens": ANSWER_TOKENS,
            "arms": [asdict(arm) for arm in results],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
