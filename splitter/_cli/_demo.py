"""``splitter demo``: the same questions merged into one request, fanned out one request
each, and as the planner chooses, on the simulator (the seeds' experiment)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

import anyio
import openai

from .._policy import MergePolicy, Policy
from .._questions import BatchResult
from .._splitter import Splitter
from ..sim import PROFILES, SimService, answer_tag, serve
from ._args import at_least_one, positive_number

DEMO_QUESTIONS = (
    "Why does an LLM generate its answer one token at a time?",
    "What is continuous batching in an inference server?",
    "How does a KV cache speed up decoding?",
    "What does a requests-per-minute rate limit mean for a client?",
    "When is one merged request better than several parallel ones?",
    "What is time to first token?",
    "Why do long prompts cost more to prefill?",
    "What is speculative decoding?",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``splitter demo``."""
    parser.add_argument(
        "--profile",
        default="gpt-4o-mini",
        choices=sorted(PROFILES),
        help="which kind of service to simulate",
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=5,
        choices=range(2, 9),
        metavar="{2..8}",
        help="how many questions to ask",
    )
    parser.add_argument(
        "--tokens", type=at_least_one, default=200, help="answer length of each question, tokens"
    )
    parser.add_argument(
        "--time-scale",
        type=positive_number,
        default=0.1,
        help="real seconds per simulated second (smaller runs faster)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="talk to the simulator in-process instead of over a loopback HTTP server",
    )


def run(args: argparse.Namespace) -> int:
    questions = list(DEMO_QUESTIONS[: args.questions])
    service = SimService(
        args.profile, time_scale=args.time_scale, default_answer_tokens=args.tokens
    )
    with _endpoint(service, in_process=args.in_process) as (where, make_client):
        print(
            f"splitter demo: {len(questions)} independent questions, ~{args.tokens} tokens each, "
            f"on the simulated {service.profile.name!r} service ({where}, time scale "
            f"{args.time_scale:g})"
        )
        results = anyio.run(_race, make_client, questions)
    merged = results["merged"].stats.wall_time
    for name, result in results.items():
        plan = result.plan
        k = plan.chosen.k if plan else 0
        shape = f"({plan.chosen.label if plan else '?'}, {k} request{'s' * (k != 1)})"
        wall = result.stats.wall_time
        speedup = "" if name == "merged" else f"   {merged / wall:4.1f}x faster than merged"
        print(
            f"  {name:<8}{shape:<24}{wall:6.2f} s ({wall / args.time_scale:6.1f} s at full scale)"
            f"{speedup}"
        )
    right = sum(
        bool(a.text and a.text.startswith(answer_tag(a.question.text)))
        for result in results.values()
        for a in result
    )
    total = len(questions) * len(results)
    print(f"  answers in order, each attached to its own question: {right}/{total}")
    return 0 if right == total else 1


ClientFactory = Callable[[], openai.AsyncOpenAI]


@contextlib.contextmanager
def _endpoint(service: SimService, *, in_process: bool) -> Iterator[tuple[str, ClientFactory]]:
    """The loopback HTTP server when uvicorn is installed, else the in-process transport."""
    if not in_process:
        try:
            server = serve(service)
            base_url = server.__enter__()
        except RuntimeError as exc:
            print(f"note: {exc}; using the in-process transport", file=sys.stderr)
        else:
            try:
                yield base_url, lambda: openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim")
            finally:
                server.__exit__(None, None, None)
            return
    yield "in-process", service.async_client


async def _race(make_client: ClientFactory, questions: list[str]) -> dict[str, BatchResult]:
    """The same questions merged into one request, fanned out, and as the planner chooses."""
    n = len(questions)
    policies = {
        "merged": Policy(strategy="merge", merge=MergePolicy(max_per_request=n)),
        "fan-out": Policy(strategy="fanout"),
        "auto": Policy(),
    }
    results: dict[str, BatchResult] = {}
    async with make_client() as client:
        for name, policy in policies.items():
            results[name] = await Splitter(client, policy=policy).aask_many(questions, model="m")
    return results
