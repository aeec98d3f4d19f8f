"""Streaming a compound prompt: first token and last token, wrapped against unwrapped.

The prompt of ``bench/wrap_speedup.py`` (N questions of TOKENS tokens in one numbered
list) is sent to ``python -m splitter.sim --profile gpt-4o-mini`` (its own process, so the
server does not share this process's GIL with the client being timed) with
``stream=True`` through the same ``AsyncOpenAI`` client, unwrapped (one
streamed request) and through ``wrap(...)`` (the parts streamed concurrently, delivered in
the prompt's order: part 1 live, the rest as their turn comes). Per round, for each arm:
the time to the first non-empty content chunk and to the end of the stream. A third arm,
raw-fanout, sends the same parts at once with the raw client and no splitter: it shows
what fanning out itself costs part 1's first token on this service and transport, so the
wrapped / raw-fanout ratio is splitter's own share. Printed: the medians (simulated seconds
= real / scale) and the ratios; the first token's should be about 1 (splitting must not
delay the first token), the end's about 1/N on the GPU-API profile. A measurement: it
exits 0 whatever the ratios.

The default time scale is 1 (real time): the first token comes ~0.3 s in, and splitter's
client-side work before it (taking the prompt apart, planning: a few ms of real CPU) would
be magnified by 1/scale at a smaller scale, which measures the machine, not the service.

Run from the repository root::

    python bench/stream_first_token.py [--questions 5] [--tokens 200] [--rounds 5] [--scale 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio
import openai
from overhead import subprocess_server
from wrap_speedup import prompt

import splitter


async def timed_stream(client: openai.AsyncOpenAI, text: str) -> tuple[float, float, str]:
    """(seconds to the first content, seconds to the end, the streamed text)."""
    started = time.perf_counter()
    first: float | None = None
    pieces: list[str] = []
    async with await client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": text}], stream=True
    ) as stream:
        async for chunk in stream:
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                if first is None:
                    first = time.perf_counter() - started
                pieces.append(piece)
    end = time.perf_counter() - started
    return (first if first is not None else end), end, "".join(pieces)


async def raw_fanout(client: openai.AsyncOpenAI, parts: list[str]) -> tuple[float, float, str]:
    """The parts sent at once by the raw client, no splitter: part 1's first token and the
    last part's end. What fanning out costs the first token on this service and transport,
    before anything splitter does."""
    started = time.perf_counter()
    timings: dict[int, tuple[float, float, str]] = {}

    async def one(k: int) -> None:
        timings[k] = await timed_stream(client, parts[k])

    async with anyio.create_task_group() as tg:
        for k in range(len(parts)):
            tg.start_soon(one, k)
    return timings[0][0], time.perf_counter() - started, timings[0][2]


async def run(args: argparse.Namespace) -> int:
    text = prompt(args.questions, args.tokens)
    parts = [
        f"Please answer each of these separately:\n\n{line.split('. ', 1)[1]}"
        for line in text.splitlines()[1:]
    ]
    with subprocess_server("gpt-4o-mini", args.scale) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim", max_retries=0) as plain:
            wrapped = splitter.wrap(plain)
            await timed_stream(plain, text)  # warm-up: connections, imports
            _, _, shown = await timed_stream(wrapped, text)  # and splitter's first look
            if not shown.startswith("1. ") or "\n\n2. " not in shown:
                print("the wrapped client did not split the prompt", file=sys.stderr)
                return 1
            firsts: dict[str, list[float]] = {"unwrapped": [], "wrapped": [], "raw-fanout": []}
            ends: dict[str, list[float]] = {"unwrapped": [], "wrapped": [], "raw-fanout": []}
            arms: list[tuple[str, Callable[[], Awaitable[tuple[float, float, str]]]]] = [
                ("unwrapped", lambda: timed_stream(plain, text)),
                ("wrapped", lambda: timed_stream(wrapped, text)),
                ("raw-fanout", lambda: raw_fanout(plain, parts)),
            ]
            for r in range(args.rounds):
                for name, measure in arms if r % 2 == 0 else arms[::-1]:
                    first, end, _ = await measure()
                    firsts[name].append(first / args.scale)
                    ends[name].append(end / args.scale)
    first_med = {name: statistics.median(ts) for name, ts in firsts.items()}
    end_med = {name: statistics.median(ts) for name, ts in ends.items()}
    print(
        f"{args.questions} questions x {args.tokens} tokens, stream=True, gpt-4o-mini profile, "
        f"scale {args.scale}, {args.rounds} rounds (simulated seconds, medians)"
    )
    print(f"{'arm':<12}{'first':>9}{'end':>9}")
    for name in firsts:
        print(f"{name:<12}{first_med[name]:>9.3f}{end_med[name]:>9.2f}")
    print(f"first token wrapped / unwrapped: {first_med['wrapped'] / first_med['unwrapped']:.2f}")
    print(
        f"first token raw-fanout / unwrapped: "
        f"{first_med['raw-fanout'] / first_med['unwrapped']:.2f} (the same parts, no splitter)"
    )
    print(f"first token wrapped / raw-fanout: {first_med['wrapped'] / first_med['raw-fanout']:.2f}")
    print(f"end of stream wrapped / unwrapped: {end_med['wrapped'] / end_med['unwrapped']:.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
