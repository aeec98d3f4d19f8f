"""``splitter run``: a JSONL file of questions into a JSONL file of answers, resumably."""

from __future__ import annotations

import argparse
import importlib.util
import sys

import anyio
import openai

from .._checkpoint import FileRun
from .._exceptions import InvalidInputError
from .._policy import Limits, Policy
from .._splitter import Splitter


def run(args: argparse.Namespace) -> int:
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
