"""``splitter run``: a JSONL file of questions (splitter's lines or OpenAI Batch API request
lines) into a JSONL file of answers (splitter's or Batch API output lines), resumably.

Stopped by Ctrl-C, it says how many answers are safely in the output and the
command that resumes: the same command line, since a rerun skips the ids answered."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path

import anyio
import openai

from .._checkpoint import FileRun, count_answers
from .._exceptions import APIError
from .._policy import Limits, Policy
from .._splitter import Splitter
from ._args import CommandError, api_key


def run(args: argparse.Namespace) -> int:
    policy = Policy(limits=Limits(max_concurrency=args.concurrency))
    key = api_key(args)
    progress = args.progress
    if progress is None:
        progress = sys.stderr.isatty() and importlib.util.find_spec("tqdm") is not None

    async def run() -> FileRun:
        async with openai.AsyncOpenAI(base_url=args.base_url, api_key=key) as client:
            return await Splitter(client, policy=policy).arun_file(
                args.questions,
                args.out,
                model=args.model,
                system=args.system,
                window=args.window,
                retry_failed=not args.keep_failed,
                progress=progress,
                output_format=args.output_format,
            )

    try:
        done = anyio.run(run)
    except KeyboardInterrupt:
        answered, _ = count_answers(Path(args.out))
        print(
            f"splitter run: interrupted; {answered} answers are safely in {args.out}. "
            f"Resume with: {resume_command(args)}",
            file=sys.stderr,
        )
        return 130
    except APIError as exc:  # one every request would meet: the run stopped at once
        raise CommandError(f"{exc}; nothing more was asked", status=3) from exc
    print(
        f"{done.questions} questions: {done.skipped} already in {args.out}, "
        f"{done.answered} answered now, {done.failed} failed",
        file=sys.stderr,
    )
    return 0 if done.failed == 0 else 1


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run: this one, with a key typed into it
    replaced by ``"$OPENAI_API_KEY"`` (a key is not printed)."""
    words: list[str] = []
    hide = False
    for word in [*args.prog, *args.argv]:
        if hide:
            words.append(_KEY)
        elif word.startswith("--api-key="):
            words.append(f"--api-key={_KEY}")
        else:
            words.append(shlex.quote(word))
        hide = word == "--api-key"
    return " ".join(words)


_KEY = '"$OPENAI_API_KEY"'
