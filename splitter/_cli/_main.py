"""The ``splitter`` command: parsing, dispatch, and turning every failure into one line on
stderr and an exit status (``EXIT_STATUS``), never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import openai
from pydantic import ValidationError

from .. import __version__
from .._exceptions import APIError, InvalidInputError
from .._map import DEFAULT_WINDOW
from .._policy import Limits, Policy
from .._retry import fails_every_request
from .._splitter import Splitter
from . import _bench, _demo, _run
from ._args import CommandError, Help, api_key, at_least_one

__all__ = ["main"]

DESCRIPTION = """\
Send several questions to an LLM service the fastest way: one merged request, one request
per question, or a few groups, whichever the planner predicts is quickest under the
service's rate limits."""

EXIT_STATUS = """\
exit status:
  0    done: every question answered
  1    done, but some questions failed (their errors are printed, or written to --out),
       or `run --skip-invalid` skipped malformed lines (each is named)
  2    the command line or an input file is wrong: an unknown command or option, a bad
       option value, a missing or malformed input file, no API key
  3    the service cannot be used: the base URL never answered (wrong address, server
       down), the API key was refused, the model is unknown, or the quota is spent
  130  interrupted (Ctrl-C); `splitter run` prints how to resume
  141  the output was closed early (as by `| head`); nothing more is printed"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``splitter`` console script: the exit status (see ``--help``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(words)  # a usage error exits 2 here, as argparse does
    args.argv, args.prog = words, _invoked_as()
    name = f"splitter {args.command}"
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point it elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # every failure ends in one line, never a traceback
        status, message = explain(exc)
        print(f"{name}: error: {message}", file=sys.stderr)
        return status


def _invoked_as() -> list[str]:
    """How this process was started: ``python -m splitter``, else the ``splitter`` script."""
    if Path(sys.argv[0]).name == "__main__.py":
        return [sys.executable, "-m", "splitter"]
    return ["splitter"]


def explain(exc: Exception) -> tuple[int, str]:
    """The exit status and the one line that say what went wrong."""
    if isinstance(exc, CommandError):
        return exc.status, str(exc)
    if isinstance(exc, APIError):
        return 3, str(exc)
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return 2, f"{where}: {error['msg']}" if where else str(error["msg"])
    if isinstance(exc, InvalidInputError | ValueError):
        return 2, str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return 2, f"{exc.filename}: {exc.strerror}"
    if isinstance(exc, openai.OpenAIError):  # raised by the client before any request
        return 2, str(exc)
    return 1, f"unexpected {type(exc).__name__}: {exc}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="splitter", description=DESCRIPTION, epilog=EXIT_STATUS, formatter_class=Help
    )
    parser.add_argument("--version", action="version", version=f"splitter-llm {__version__}")
    commands = parser.add_subparsers(
        required=True, dest="command", metavar="COMMAND", title="commands"
    )

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=EXIT_STATUS,
            formatter_class=Help,
        )

    demo = command(
        "demo",
        "race one merged request against one request per question, on a simulated service",
        "Ask the same few questions three ways on a simulated LLM service started for the "
        "occasion: merged into one request, one request each, and as splitter chooses; "
        "print how long each took. Needs no API key and no network.",
    )
    _demo.add_arguments(demo)
    demo.set_defaults(run=_demo.run)

    bench = command(
        "bench",
        "measure merged vs one-per-question vs splitter's choice on any endpoint",
        "Measure, round after round, how long N questions take merged into one request, "
        "sent as N requests at once, and as splitter chooses, on any OpenAI-compatible "
        "endpoint (default: a simulated one), beside the fastest any plan could be. "
        "The same as bench/seed_benchmark.py.",
    )
    _bench.add_arguments(bench)
    bench.set_defaults(run=_bench.run)

    ask = command(
        "ask",
        "answer questions given on the command line",
        "Answer each question argument with the OpenAI-compatible endpoint at --base-url "
        "(or $OPENAI_BASE_URL, else OpenAI's), printing the answers in order.",
    )
    ask.add_argument("questions", nargs="+", metavar="QUESTION", help="one argument a question")
    ask.add_argument("--model", required=True, help="the model to ask")
    _endpoint_arguments(ask)
    ask.add_argument(
        "--concurrency", type=at_least_one, default=16, help="most requests in flight at once"
    )
    ask.add_argument("--json", action="store_true", help="print one JSON object per answer")
    ask.set_defaults(run=_ask)

    run = command(
        "run",
        "answer a JSONL file of questions into a JSONL file of answers; resumable",
        'Read questions, one JSON object a line: {"id": ..., "question": ...}, or OpenAI '
        'Batch API request lines {"custom_id": ..., "body": {...}}. Append an answer line '
        '{"id": ..., "answer": ..., "error": ...} (or, with --output-format batch, a Batch '
        "API output line) to --out as each one finishes. Stopped or crashed? Run the same "
        "command again: answered ids are skipped and failed ones asked again. See "
        "docs/batch-files.md.",
    )
    run.add_argument("questions", metavar="QUESTIONS.jsonl", help="the questions file")
    run.add_argument(
        "--out", required=True, metavar="ANSWERS.jsonl", help="the answers file (appended to)"
    )
    run.add_argument(
        "--model",
        default=None,
        help="the model to ask (default: the one the Batch API lines' body names)",
    )
    _endpoint_arguments(run)
    run.add_argument("--system", default=None, help="a system prompt sent with every request")
    run.add_argument(
        "--concurrency", type=at_least_one, default=64, help="most requests in flight at once"
    )
    run.add_argument(
        "--window",
        type=at_least_one,
        default=DEFAULT_WINDOW,
        help="most questions read ahead and held in memory",
    )
    run.add_argument(
        "--keep-failed", action="store_true", help="do not ask failed ids again on a rerun"
    )
    run.add_argument("--rpm", type=at_least_one, default=None, help="requests per minute allowed")
    run.add_argument("--tpm", type=at_least_one, default=None, help="tokens per minute allowed")
    run.add_argument(
        "--strategy",
        choices=["auto", "merge", "fanout", "primed"],
        default="auto",
        help="auto: as the planner chooses; merge: merged requests; fanout: one per question; "
        "primed: one request first, the rest at its first token (needs --system)",
    )
    run.add_argument(
        "--workers",
        type=at_least_one,
        default=1,
        help="processes answering the file together, on one budget and one --out "
        "(--concurrency, --rpm and --tpm are their total)",
    )
    run.add_argument(
        "--redis",
        default=None,
        metavar="URL",
        help="keep the rate-limit budget in this Redis (redis:// URL), shared with every "
        "process on the key (default: in this process; with --workers, 1/N of the limits each)",
    )
    run.add_argument(
        "--skip-invalid",
        action="store_true",
        help="answer the valid lines and skip each malformed one, naming it (exit status 1), "
        "rather than refuse the whole file before asking anything",
    )
    run.add_argument("--worker-share", type=_run.worker_share, default=None, help=argparse.SUPPRESS)
    run.add_argument("--worker-leave-out", default=None, help=argparse.SUPPRESS)
    run.add_argument(
        "--output-format",
        choices=["splitter", "batch"],
        default="splitter",
        help='splitter: {"id", "answer", "error"} lines; batch: OpenAI Batch API output lines',
    )
    run.add_argument(
        "--response-format",
        metavar="SCHEMA.json",
        default=None,
        help="a JSON schema file: every answer is JSON valid against it, and its answer "
        'line carries it as "parsed" (a file holding {"type": "json_schema", ...} is sent '
        "as it is)",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: when stderr is a terminal and the "
        "progress extra is installed)",
    )
    run.set_defaults(run=_run.run)

    plan = command(
        "plan",
        "show how questions would be sent, and why (sends nothing)",
        "Print the plan splitter would choose for the question arguments, the other "
        "candidates it priced, and why. Sends no request and needs no API key.",
    )
    plan.add_argument("questions", nargs="+", metavar="QUESTION", help="one argument a question")
    plan.add_argument("--model", default="gpt-4o-mini", help="the model to plan for")
    plan.add_argument(
        "--concurrency", type=at_least_one, default=64, help="most requests in flight at once"
    )
    plan.add_argument("--rpm", type=at_least_one, default=None, help="requests per minute allowed")
    plan.add_argument("--tpm", type=at_least_one, default=None, help="tokens per minute allowed")
    plan.add_argument(
        "--strategy",
        choices=["auto", "merge", "fanout"],
        default="auto",
        help="auto: as the planner chooses; merge: one request; fanout: one per question",
    )
    plan.set_defaults(run=_plan)
    return parser


def _endpoint_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url",
        default=None,
        help="the OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI's)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="the API key (default: $OPENAI_API_KEY; any text for a server that needs none)",
    )


def _plan(args: argparse.Namespace) -> int:
    limits = Limits(max_concurrency=args.concurrency, rpm=args.rpm, tpm=args.tpm)
    splitter = Splitter(policy=Policy(limits=limits, strategy=args.strategy))
    print(splitter.plan(args.questions, model=args.model).explain())
    return 0


def _ask(args: argparse.Namespace) -> int:
    policy = Policy(limits=Limits(max_concurrency=args.concurrency))
    client = openai.OpenAI(base_url=args.base_url, api_key=api_key(args))
    with client:
        result = Splitter(client, policy=policy).ask_many(args.questions, model=args.model)
    if not result.ok and all(not a.ok for a in result):
        first = result.failed[0]
        if fails_every_request(first.error, first.attempts):
            raise CommandError(str(first.error), status=3)
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
    if not result.ok:
        print(
            f"splitter ask: {len(result.failed)} of {len(result)} questions failed",
            file=sys.stderr,
        )
    return 0 if result.ok else 1
