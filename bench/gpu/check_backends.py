"""Do the engine's two backends decode what transformers' own ``generate`` decodes?

On one model (the tiny config in fp32 on the CPU by default), greedy ids from
``model.generate`` for a few prompts are compared with the ids that ``hf-cb`` (continuous
batching) and ``slots`` (the hand-written fallback) give for the same prompts sent at once.
Exits 1 if a backend disagrees. Run from the repository root::

    python bench/gpu/check_backends.py            # tiny, CPU
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import torch
from engine import HFContinuousBatching, SlotLoop, build_model, encode

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Why is the sky blue? Answer briefly please."]


def reference(model: Any, prompts: list[list[int]], n: int) -> list[list[int]]:
    out = []
    for ids in prompts:
        tokens = torch.tensor([ids], device=model.device)
        made = model.generate(
            tokens, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None
        )
        out.append(made[0, len(ids) :].tolist())
    return out


def through(backend: Any, prompts: list[list[int]], n: int) -> list[list[int]]:
    async def one(ids: list[int]) -> list[int]:
        got: list[int] = []
        async for new in backend.generate(ids, n):
            got.extend(new)
        return got

    async def every() -> list[list[int]]:
        return list(await asyncio.gather(*(one(ids) for ids in prompts)))

    return asyncio.run(every())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    model = build_model(tiny=True, device=args.device)
    prompts = [encode([{"role": "user", "content": p}]) for p in PROMPTS]
    want = reference(model, prompts, args.tokens)
    failed = 0
    for make in (lambda: HFContinuousBatching(model, tiny=True), lambda: SlotLoop(model, slots=4)):
        backend = make()
        backend.start()
        try:
            got = through(backend, prompts, args.tokens)
        finally:
            backend.stop()
        same = sum(g == w for g, w in zip(got, want, strict=True))
        print(f"{backend.name}: {same}/{len(want)} prompts decode as model.generate does")
        failed += same != len(want)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
