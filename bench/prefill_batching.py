"""How an engine's prefill of concurrent short prompts adds up, on a real engine and on the
simulator's profile, side by side: the check behind the simulator's ``shared_prefill``.

Rounds (``--rounds``, default 8) interleave two shapes: one short question alone, and
``--concurrency`` (default 5) short questions sent at once; every question is new (so no
prefix is reused) and asks for ``--tokens`` (default 4) answer tokens, with llama-server's
``cache_prompt`` off. Then one short and one longer prompt alone, interleaved, whose
``prompt_ms`` difference over their ``prompt_n`` difference is the engine's time per prompt
token, and what is left of the short one's ``prompt_ms`` its fixed part. Printed (medians
over rounds): per shape the wall time of the whole shape, the largest and the mean
``timings.prompt_ms``, the mean ``predicted_ms`` and ``prompt_n``; the concurrent shape's
largest ``prompt_ms`` over the lone one's, against the concurrency (what a prefill that
paid every request's fixed part in turn would take) and against what the tokens alone
predict (the fixed part once, then every prompt token at the per-token time).

Without ``--base-url`` it runs against the simulator's ``llama-cpp-cpu`` profile as
``bench/engine_matrix.py`` makes it (compute-bound shared prefill, ``timings``), on virtual
time. It is a measurement: the exit status is 0 whatever it finds.

Run from the repository root::

    python bench/prefill_batching.py                        # the simulator, virtual time
    python bench/engine/setup.py --start --slots 5 --ctx-per-slot 4096
    python bench/prefill_batching.py --base-url http://127.0.0.1:8080/v1 --model smollm2
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_matrix import sim_service

from splitter.testing import run_virtual

_FILL = " ".join(f"word{i}" for i in range(60))  # ~170 more prompt tokens


async def _one(
    client: openai.AsyncOpenAI, model: str, n: int, tokens: int, long: bool
) -> dict[str, Any]:
    """One question, new by its number; its wall time and the server's timings."""
    text = f"Question {n}: name a colour that starts with the letter {chr(97 + n % 26)}."
    if long:
        text += f" Ignore these: {_FILL}"
    started = anyio.current_time()
    raw = await client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        max_tokens=tokens,
        temperature=0,
        extra_body={"cache_prompt": False},
    )
    wall = anyio.current_time() - started
    timings = (raw.parse().model_extra or {}).get("timings")
    if not isinstance(timings, dict):
        raise SystemExit("no timings in the response: llama-server (or the simulator) reports them")
    return {"wall": wall, **timings}


async def _shape(
    client: openai.AsyncOpenAI, model: str, first: int, m: int, tokens: int, long: bool = False
) -> dict[str, float]:
    replies: list[dict[str, Any]] = []

    async def ask(n: int) -> None:
        replies.append(await _one(client, model, n, tokens, long))

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for n in range(first, first + m):
            tg.start_soon(ask, n)
    return {
        "wall": anyio.current_time() - started,
        "prompt_ms_max": max(r["prompt_ms"] for r in replies),
        "prompt_ms_mean": statistics.mean(r["prompt_ms"] for r in replies),
        "predicted_ms": statistics.mean(r["predicted_ms"] for r in replies),
        "prompt_n": statistics.mean(r["prompt_n"] for r in replies),
    }


def _median(rows: Sequence[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


async def measure(client: openai.AsyncOpenAI, args: argparse.Namespace) -> None:
    m, n = args.concurrency, 1000
    await _shape(client, args.model, 0, 1, args.tokens)  # warm: the model loaded, a slot used
    shapes: dict[str, list[dict[str, float]]] = {"alone": [], "at once": [], "long": []}
    for _ in range(args.rounds):
        for name, count, long in (("alone", 1, False), ("at once", m, False), ("long", 1, True)):
            shapes[name].append(await _shape(client, args.model, n, count, args.tokens, long))
            n += count
    print(
        f"{'shape':<12}{'wall ms':>9}{'prompt_ms max':>15}{'mean':>8}{'predicted_ms':>14}"
        f"{'prompt_n':>10}"
    )
    for name, label in (("alone", "1 alone"), ("at once", f"{m} at once"), ("long", "1 long")):
        rows = shapes[name]
        print(
            f"{label:<12}{_median(rows, 'wall') * 1000:>9.0f}"
            f"{_median(rows, 'prompt_ms_max'):>15.0f}"
            f"{_median(rows, 'prompt_ms_mean'):>8.0f}{_median(rows, 'predicted_ms'):>14.0f}"
            f"{_median(rows, 'prompt_n'):>10.0f}"
        )
    alone_ms, alone_n = (
        _median(shapes["alone"], "prompt_ms_max"),
        _median(shapes["alone"], "prompt_n"),
    )
    long_ms, long_n = _median(shapes["long"], "prompt_ms_max"), _median(shapes["long"], "prompt_n")
    per_token = (long_ms - alone_ms) / (long_n - alone_n) if long_n > alone_n else float("nan")
    fixed = alone_ms - per_token * alone_n
    together = _median(shapes["at once"], "prompt_ms_max")
    tokens_alone = fixed + per_token * alone_n * m
    print(
        f"prefill alone: {per_token:.2f} ms a prompt token ({1000 / per_token:.0f} tok/s), "
        f"fixed part {fixed:.1f} ms"
    )
    print(
        f"{m} at once: the largest prompt_ms is {together / alone_ms:.2f}x one alone "
        f"(every fixed part in turn: {m}x; the fixed part once and every token: "
        f"{tokens_alone / alone_ms:.2f}x)"
    )


async def on_sim(args: argparse.Namespace) -> None:
    async with sim_service().async_client() as client:
        await measure(client, args)


async def on_engine(args: argparse.Namespace) -> None:
    async with openai.AsyncOpenAI(
        base_url=args.base_url, api_key="sk-none", max_retries=0
    ) as client:
        await measure(client, args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/prefill_batching.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--base-url", default=None, help="a llama-server's /v1 (default: the simulator)"
    )
    parser.add_argument("--model", default="m")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=4, help="answer tokens a question")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.concurrency < 2:
        parser.error("--rounds must be at least 1 and --concurrency at least 2")
    where = (
        "the simulator (llama-cpp-cpu, shared prefill; virtual time)"
        if args.base_url is None
        else args.base_url
    )
    print(
        f"prefill batching on {where}: {args.rounds} rounds, {args.concurrency} at once, "
        f"{args.tokens} answer tokens"
    )
    if args.base_url is None:
        run_virtual(on_sim, args)
    else:
        anyio.run(on_engine, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
