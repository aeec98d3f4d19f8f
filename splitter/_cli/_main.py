"""The ``splitter`` command: ``demo`` (the seeds' experiment on the simulator), ``bench`` (the
same experiment measured on any endpoint), ``ask``, ``run`` (a JSONL file, resumably) and
``plan``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .. import __version__
from .._map import DEFAULT_WINDOW
from .._policy import Limits, Policy
from .._splitter import Splitter
from . import _bench, _demo, _run

__all__ = ["main"]


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
    demo.set_defaults(run=_demo.run)

    bench = commands.add_parser(
        "bench",
        help="merged vs fan-out vs auto measured on any endpoint (default: the simulator)",
        description="The seeds' experiment with rounds, spread and the physical limit; "
        "also bench/seed_benchmark.py.",
    )
    _bench.add_arguments(bench)
    bench.set_defaults(run=_bench.run)

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
    run.set_defaults(run=_run.run)

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
