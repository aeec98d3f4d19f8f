"""``splitter run``: a JSONL file of questions (splitter's lines or OpenAI Batch API request
lines) into a JSONL file of answers (splitter's or Batch API output lines), resumably.

Stopped by Ctrl-C, it says how many answers are safely in the output and the
command that resumes: the same command line, since a rerun skips the ids answered."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

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
    params = structured_params(args.response_format)
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
                **params,
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


def structured_params(path: str | None) -> dict[str, Any]:
    """``--response-format SCHEMA.json`` as the run's request keywords: the file's JSON schema
    sent as a strict ``json_schema`` named after the file, or, where the file holds a whole
    ``{"type": "json_schema", ...}`` response format, that as it is. A missing file or one
    that is not a JSON object is a ``CommandError`` (status 2)."""
    if path is None:
        return {}
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"--response-format {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandError(f"--response-format {path}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CommandError(f"--response-format {path}: not a JSON schema (not an object)")
    if value.get("type") == "json_schema":
        if not isinstance(value.get("json_schema"), dict):
            raise CommandError(f"--response-format {path}: json_schema must be an object")
        return {"response_format": value}
    name = re.sub(r"[^A-Za-z0-9_-]", "_", Path(path).stem)[:64] or "answer"
    spec = {"name": name, "schema": value, "strict": True}
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


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
