"""A compound prompt through ``wrap(AsyncOpenAI)`` against the same client unwrapped.

The prompt asks N independent questions in one numbered list, each answered in TOKENS
tokens (the simulator's ``[len=N]`` marker). Unwrapped, the client sends it as one request
and the service decodes the N answers in one serial stream; wrapped, splitter splits it into
N parts, plans them (after learning the service from the warm-up round) and runs them
concurrently, then returns one ``ChatCompletion``. Both run against one ``SimService`` on the
GPU-API profile (``gpt-4o-mini``) over real loopback HTTP, round after round, alternating
which goes first; printed: the median wall time of each (simulated seconds = real / scale),
their ratio, and the physical limit (one answer alone: RTT + TTFT + TOKENS x TPOT(N)).
It is a measurement: it exits 0 whatever the ratio.

``--clock virtual`` runs both arms in-process on virtual time (``splitter.testing``) at
scale 1: the ratio is then the plans' own, exact and the same on a busy machine (the smoke
test uses it); the default, real loopback HTTP, includes the client's own costs.

Run from the repository root::

    python bench/wrap_speedup.py [--questions 5] [--tokens 200] [--rounds 5] [--scale 0.2]
        [--clock real|virtual]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import openai

import splitter
from splitter._cli._probe import question_texts
from splitter.sim import PROFILES, SimService, serve
from splitter.testing import run_virtual


def prompt(n: int, tokens: int) -> str:
    lines = [f"{i + 1}. {q}" for i, q in enumerate(question_texts(n, tokens, marker=True))]
    return "Please answer each of these separately:\n" + "\n".join(lines)


async def timed(client: openai.AsyncOpenAI, text: str) -> tuple[float, object]:
    started = anyio.current_time()
    completion = await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": text}]
    )
    return anyio.current_time() - started, completion


@asynccontextmanager
async def plain_client(service: SimService, clock: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """The unwrapped client: in-process on virtual time, else over real loopback HTTP."""
    if clock == "virtual":
        async with service.async_client(max_retries=0) as client:
            yield client
        return
    with serve(service) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim", max_retries=0) as client:
            yield client


async def run(args: argparse.Namespace) -> int:
    service = SimService("gpt-4o-mini", time_scale=args.scale)
    text = prompt(args.questions, args.tokens)
    async with plain_client(service, args.clock) as plain:
        wrapped = splitter.wrap(plain)
        await timed(plain, text)  # warm-up: connections, imports
        _, first = await timed(wrapped, text)  # and splitter's first look at the service
        if getattr(first, "splitter_details", None) is None:
            print("the wrapped client did not split the prompt", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {"unwrapped": [], "wrapped": []}
        for r in range(args.rounds):
            order = [("unwrapped", plain), ("wrapped", wrapped)]
            for name, client in order if r % 2 == 0 else order[::-1]:
                seconds, _ = await timed(client, text)
                times[name].append(seconds / args.scale)
    profile = PROFILES["gpt-4o-mini"]
    limit = profile.rtt + profile.ttft0 + args.tokens * profile.step_seconds(args.questions)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(
        f"{args.questions} questions x {args.tokens} tokens, gpt-4o-mini profile, "
        f"scale {args.scale}, {args.rounds} rounds (simulated seconds), clock {args.clock}"
    )
    print(f"{'arm':<10}{'median':>9}{'min':>9}{'max':>9}")
    for name, ts in times.items():
        print(f"{name:<10}{med[name]:>9.2f}{min(ts):>9.2f}{max(ts):>9.2f}")
    print(
        f"speed-up wrapped vs unwrapped: {med['unwrapped'] / med['wrapped']:.2f}x "
        f"(N = {args.questions})"
    )
    print(
        f"physical limit (one answer alone at TPOT({args.questions})): {limit:.2f}s; "
        f"wrapped / limit = {med['wrapped'] / limit:.2f}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=None, help="default 0.2; 1 virtual")
    parser.add_argument("--clock", choices=["real", "virtual"], default="real")
    args = parser.parse_args(argv)
    if args.clock == "virtual":
        args.scale = args.scale or 1.0
        return run_virtual(run, args, backend="asyncio")
    args.scale = args.scale or 0.2
    return anyio.run(run, args, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main())
