"""The ``splitter`` command: ``demo`` (the seeds' experiment on the simulator), ``bench`` (the
same experiment measured on any endpoint), ``ask``, ``run`` (a JSONL file, resumably) and
``plan``."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Sequence

import anyio
import openai

from . import __version__, _seed_bench
from ._checkpoint import FileRun
from ._exceptions import InvalidInputError
from ._map import DEFAULT_WINDOW
from ._policy import Limits, MergePolicy, Policy
from ._questions import BatchResult
from ._splitter import Splitter
from .sim import SimService, answer_tag, serve

__all__ = ["main"]

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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``splitter`` console script."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splitter", description=__doc__)
    version = f"splitter-llm {__version__}"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="one merged request vs fan-out on the simulator")
    demo.add_argument("--profile", default="gpt-4o-mini", help="simulated service profile")
    demo.add_argument("--questions", type=int, default=5, choices=range(2, 9), metavar="2..8")
    demo.add_argument("--tokens", type=int, default=200, help="answer length of each question")
    demo.add_argument("--time-scale", type=float, default=0.1, help="real seconds per sim second")
    demo.add_argument("--in-process", action="store_true", help="skip the loopback HTTP server")
    demo.set_defaults(run=_demo)

    bench = commands.add_parser(
        "bench",
        help="merged vs fan-out vs auto measured on any endpoint (default: the simulator)",
        description="The seeds' experiment with rounds, spread and the physical limit; "
        "also bench/seed_benchmark.py.",
    )
    _seed_bench.add_arguments(bench)
    bench.set_defaults(run=_seed_bench.run)

    ask = commands.add_parser("ask", help="answer questions with the OPENAI_* endpoint")
    ask.add_argument("questions", nargs="+", help="one argument per question")
    ask.add_argument("--model", required=True)
    ask.add_argument("--concurrency", type=int, default=16)
    ask.add_argument("--json", action="store_true", help="print one JSON object per answer")
    ask.set_defaults(run=_ask)

    run = commands.add_parser(
        "run",
        help="answer a JSONL file of questions into a JSONL file of answers, resumably",
        description='Input lines {"id": ..., "question": ...}; output lines {"id": ..., '
        '"answer": ..., "error": ...}, appended as answers finish. Run it again after a '
        "crash: answered ids are skipped, failed ones asked again. See docs/batch-files.md.",
    )
    run.add_argument("questions", help="the input JSONL file")
    run.add_argument("--out", required=True, help="the output JSONL file (appended to)")
    run.add_argument("--model", required=True)
    run.add_argument("--base-url", default=None, help="default: $OPENAI_BASE_URL")
    run.add_argument("--api-key", default=None, help="default: $OPENAI_API_KEY")
    run.add_argument("--system", default=None, help="a system prompt for every request")
    run.add_argument("--concurrency", type=int, default=64, help="most requests in flight")
    run.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="most questions held")
    run.add_argument("--keep-failed", action="store_true", help="do not re-ask failed ids")
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: when stderr is a terminal and the "
        "progress extra is installed)",
    )
    run.set_defaults(run=_run_file)

    plan = commands.add_parser("plan", help="show how questions would be sent (sends nothing)")
    plan.add_argument("questions", nargs="+", help="one argument per question")
    plan.add_argument("--model", default="gpt-4o-mini")
    plan.add_argument("--concurrency", type=int, default=64)
    plan.add_argument("--rpm", type=int, default=None, help="requests per minute allowed")
    plan.add_argument("--tpm", type=int, default=None, help="tokens per minute allowed")
    plan.add_argument("--strategy", choices=["auto", "merge", "fanout"], default="auto")
    plan.set_defaults(run=_plan)
    return parser


def _plan(args: argparse.Namespace) -> int:
    limits = Limits(max_concurrency=args.concurrency, rpm=args.rpm, tpm=args.tpm)
    splitter = Splitter(policy=Policy(limits=limits, strategy=args.strategy))
    print(splitter.plan(args.questions, model=args.model).explain())
    return 0


def _demo(args: argparse.Namespace) -> int:
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


def _run_file(args: argparse.Namespace) -> int:
    policy = Policy(limits=Limits(max_concurrency=args.concurrency))
    progress = args.progress
    if progress is None:
        progress = sys.stderr.isatty() and importlib.util.find_spec("tqdm") is not None

    async def run() -> FileRun:
        async with openai.AsyncOpenAI(base_url=args.base_url, api_key=args.api_key) as client:
            return await Splitter(client, policy=policy).arun_file(
                args.questions,
                args.out,
                model=args.model,
                system=args.system,
                window=args.window,
                retry_failed=not args.keep_failed,
                progress=progress,
            )

    try:
        done = anyio.run(run)
    except (InvalidInputError, OSError, openai.OpenAIError, ImportError) as exc:
        print(f"splitter run: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{done.questions} questions: {done.skipped} already in {args.out}, "
        f"{done.answered} answered now, {done.failed} failed",
        file=sys.stderr,
    )
    return 0 if done.failed == 0 else 1


def _ask(args: argparse.Namespace) -> int:
    policy = Policy(limits=Limits(max_concurrency=args.concurrency))
    result = Splitter(policy=policy).ask_many(args.questions, model=args.model)
    for answer in result:
        if args.json:
            error = (
                None if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
            )
            print(json.dumps({"id": answer.id, "answer": answer.text, "error": error}))
        elif answer.ok:
            print(f"[{answer.id}] {answer.text}")
        else:
            print(f"[{answer.id}] error: {answer.error}", file=sys.stderr)
    return 0 if result.ok else 1
