"""Where a merge canary goes: beside its merged request, or once the merged reply is back,
on a real engine (or the bundled simulator), side by side in one run.

A canary is a merged item asked alone as well, to check merged answers (docs/planner.md,
"Merge quality"). On an engine whose prefills share its compute, a canary sent beside a
merged request about a long document prefills the document a second time on the same
compute; sent once the merged reply is back it finds the document in the engine's prefix
cache (llama-server: the slot the merged request freed) and costs a short request.

Each batch is N short questions (``--questions``, default 3) about its own ~1,500-token
document, under ``strategy="auto"`` with ``MergePolicy(max_per_request=N,
canary_placement=P)`` for P in beside, after and auto, rounds interleaved (order rotated).
Every merged request carries a canary (``canary_first`` high) and the agreement gate is
off (``min_agreement=0``): a model that merges badly (SmolLM2) would otherwise be fanned
out after its first disagreement, and what is measured here is where the canary goes, not
whether to merge. Merged answers are asked for as JSON (``MergePolicy(format="json")``),
which llama-server's grammar makes every merged reply parse (with markers SmolLM2's mostly
do not, its questions are re-asked alone, and the plan then fans out). Before the rounds,
warm-up batches let the service model learn the engine (its decode, prefill share, cache
and the cache's scope): two short questions alone (llama-server times a token decoded
beside another request's prefill at that prefill's chunk: a cold model that saw only such
readings took SmolLM2's decode for 220 ms a token, and fanned out), then a fan-out, a
primed fan-out and two auto batches about a document.

Per batch: the plan and the canary's placement, the merged request's latency, the canary's
(and the prompt tokens the engine served it from its cache), when both were back (the check
done, from the batch's start), the wall, requests sent, the predicted wall. Then per
placement the medians, and the ratios check(beside) / check(P) and wall(beside) / wall(P).
The canary is the first single-question request of a batch that sent one (beside: it
starts with the merged request; after: at its reply, before any re-ask). A batch whose
merged reply gave no answer back sends no canary after it (nothing to compare; its
questions are re-asked alone): shown with "-". It is a measurement: the exit status is 0
whatever the ratios, 1 if a question went unanswered.

Run from the repository root::

    python bench/canary_placement.py                                  # the simulator
    python bench/engine/setup.py --start --slots 5 --ctx-per-slot 4096
    python bench/canary_placement.py --base-url http://127.0.0.1:8080/v1 --model smollm2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engine_matrix, beside this

from engine_matrix import SYSTEM, document, sim_service

from splitter import (
    Event,
    Limits,
    MergePolicy,
    Policy,
    RequestFinished,
    RequestStarted,
    Splitter,
)
from splitter.testing import run_virtual

PLACEMENTS = ("beside", "after", "auto")
QUESTIONS = (
    "What year was Veldmark founded?",
    "How tall is the lighthouse?",
    "What does Veldmark export?",
    "When does the ferry leave for Osk?",
    "When does the town council meet?",
    "How long does the library lend books?",
)
_WARMUP = ("fanout", "primed", "auto", "auto")


@dataclass(slots=True)
class Batch:
    placement: str
    round: int
    plan: str
    after: bool
    canaries: int
    merged: float | None  # the merged request's latency
    canary: float | None  # the canary's latency
    canary_cached: int | None  # its prompt tokens served from the engine's cache
    checked: float | None  # both back, from the batch's start
    wall: float
    requests: int
    predicted: float | None
    answered: int
    asked: int


class Timeline:
    """Each request's start and finish (seconds from the batch's start) and usage."""

    def __init__(self) -> None:
        self.t0 = anyio.current_time()  # the event loop's clock: virtual on the simulator
        self.started: dict[int, float] = {}
        self.done: dict[int, tuple[tuple[int, ...], float, float, int]] = {}

    def __call__(self, event: Event) -> None:
        at = anyio.current_time() - self.t0
        if isinstance(event, RequestStarted):
            self.started.setdefault(event.request, at)
        elif isinstance(event, RequestFinished) and event.ok:
            start = self.started.get(event.request, at - event.latency)
            self.done[event.request] = (event.indexes, start, at, event.usage.cached_tokens)


def policy(n: int, placement: str, strategy: str = "auto") -> Policy:
    merge = MergePolicy(
        max_per_request=n,
        canary_first=1_000_000,
        min_agreement=0.0,
        canary_placement=placement,  # type: ignore[arg-type]
        format="json",
    )
    return Policy(strategy=strategy, merge=merge, limits=Limits(slow_start=False), timeout=600)  # type: ignore[arg-type]


async def ask(splitter: Splitter, n: int, doc: str, params: dict[str, Any], tag: str) -> Any:
    questions = [q + " Answer in a few words." + tag for q in QUESTIONS[:n]]
    timeline = Timeline()
    result = await splitter.aask_many(
        questions, system=SYSTEM, context=doc, on_event=timeline, **params
    )
    return result, timeline


def batch_row(placement: str, round_: int, result: Any, timeline: Timeline) -> Batch:
    chosen = result.plan.chosen if result.plan is not None else None
    merged = [v for v in timeline.done.values() if len(v[0]) > 1]
    singles = sorted((v for v in timeline.done.values() if len(v[0]) == 1), key=lambda v: v[1])
    m = merged[0] if len(merged) == 1 else None
    c = singles[0] if singles and result.stats.canaries else None
    return Batch(
        placement=placement,
        round=round_,
        plan=chosen.label if chosen is not None else "?",
        after=bool(chosen is not None and chosen.canary_after),
        canaries=result.stats.canaries,
        merged=None if m is None else m[2] - m[1],
        canary=None if c is None else c[2] - c[1],
        canary_cached=None if c is None else c[3],
        checked=None if m is None or c is None else max(m[2], c[2]),
        wall=result.stats.wall_time,
        requests=result.stats.requests,
        predicted=result.stats.predicted_wall_time,
        answered=sum(a.ok for a in result),
        asked=len(result),
    )


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


HEADER = (
    f"{'placement':<10}{'round':>6}  {'plan':<15}{'canary':>8}{'merged':>8}{'canary':>8}"
    f"{'cached':>8}{'checked':>9}{'wall':>8}{'req':>5}{'pred':>8}"
)


def print_row(b: Batch) -> None:
    where = ("after" if b.after else "beside") if b.canaries else "none"
    cached = "-" if b.canary_cached is None else str(b.canary_cached)
    print(
        f"{b.placement:<10}{b.round:>6}  {b.plan:<15}{where:>8}{_f(b.merged):>8}"
        f"{_f(b.canary):>8}{cached:>8}{_f(b.checked):>9}{b.wall:>8.2f}{b.requests:>5}"
        f"{_f(b.predicted):>8}",
        flush=True,
    )


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summary(batches: list[Batch]) -> list[str]:
    lines = []
    med: dict[str, dict[str, float | None]] = {}
    for p in PLACEMENTS:
        rows = [b for b in batches if b.placement == p]
        med[p] = {
            key: _median([getattr(b, key) for b in rows])
            for key in ("merged", "canary", "checked", "wall", "canary_cached")
        }
        m = med[p]
        lines.append(
            f"{p:<7} medians of {len(rows)}: merged {_f(m['merged'])} s, canary "
            f"{_f(m['canary'])} s (cached {_f(m['canary_cached'])}), check done at "
            f"{_f(m['checked'])} s, wall {_f(m['wall'])} s"
        )
    base = med["beside"]
    for p in ("after", "auto"):
        ratios = []
        for key in ("checked", "wall"):
            a, b = base[key], med[p][key]
            ratios.append(f"{key} beside/{p} {a / b:.2f}" if a and b else f"{key} -")
        lines.append("ratios: " + ", ".join(ratios))
    return lines


async def run(client: openai.AsyncOpenAI, model: str, args: argparse.Namespace) -> list[Batch]:
    params: dict[str, Any] = {"temperature": 0, "max_tokens": args.tokens}
    # The simulator answers a question with as many tokens as its tag asks (engine_matrix's).
    tag = f" [len={args.tokens}]" if args.base_url is None else ""
    splitter = Splitter(client, model=model, policy=policy(args.questions, "auto"))
    docs = iter(range(10_000))
    for i in range(2):  # alone: llama-server's decode timing beside no one else's prefill
        splitter.policy = policy(args.questions, "auto", "fanout")
        await splitter.aask_many(
            [f"Say hello to {i} in a few words.{tag}"], system=SYSTEM, **params
        )
    for strategy in _WARMUP:
        splitter.policy = policy(args.questions, "auto", strategy)
        await ask(splitter, args.questions, document(next(docs)), params, tag)
    batches = []
    print(HEADER, flush=True)
    for r in range(args.rounds):
        order = PLACEMENTS[r % 3 :] + PLACEMENTS[: r % 3]
        for placement in order:
            splitter.policy = policy(args.questions, placement)
            result, timeline = await ask(
                splitter, args.questions, document(next(docs)), params, tag
            )
            b = batch_row(placement, r, result, timeline)
            batches.append(b)
            print_row(b)
    return batches


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--base-url", default=None, help="the engine (default: the simulator)")
    p.add_argument("--model", default="smollm2", help="the model name sent to the engine")
    p.add_argument("--questions", type=int, default=3, choices=range(2, len(QUESTIONS) + 1))
    p.add_argument("--tokens", type=int, default=16, help="max_tokens per question")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path, default=None, metavar="PATH")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    where = args.base_url or "the simulator (virtual time, simulated seconds)"
    print(
        f"canary placement on {where}: {args.questions} questions about a ~1,500-token "
        f"document, {args.tokens} tokens each, {args.rounds} rounds; load "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )

    async def on_sim() -> list[Batch]:
        async with sim_service().async_client() as client:
            return await run(client, "llama-cpp-cpu", args)

    async def on_engine() -> list[Batch]:
        key = os.environ.get("OPENAI_API_KEY") or "sk-no-key"
        async with openai.AsyncOpenAI(base_url=args.base_url, api_key=key, max_retries=0) as c:
            return await run(c, args.model, args)

    batches = run_virtual(on_sim) if args.base_url is None else anyio.run(on_engine)
    for line in summary(batches):
        print(line)
    print("load " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(b) for b in batches], indent=1) + "\n")
    return 0 if all(b.answered == b.asked for b in batches) else 1


if __name__ == "__main__":
    sys.exit(main())
