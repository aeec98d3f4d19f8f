"""``splitter run``: a JSONL file of questions (splitter's lines or OpenAI Batch API request
lines) into a JSONL file of answers (splitter's or Batch API output lines), resumably.

Stopped by Ctrl-C, it says how many answers are safely in the output and the
command that resumes: the same command line, since a rerun skips the ids answered.
``--workers N`` runs N processes on one budget and one output (``_workers``); each of them
is this command with a hidden ``--worker-share``."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import openai

from .._checkpoint import FileRun, count_answers
from .._exceptions import APIError
from .._file_run import FileSettings, WorkerShare, prepare_file, run_file
from .._policy import Limits, Policy, SharedBudget
from .._splitter import Splitter
from .._workers import run_workers, share_budget, watch_parent
from ._args import CommandError, api_key


def run(args: argparse.Namespace) -> int:
    if args.worker_share is not None:
        return _worker(args)
    if args.workers > 1:
        return _parent(args)
    policy = _policy(args, args.concurrency)
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
                skip_invalid=args.skip_invalid,
                **params,
            )

    try:
        done = anyio.run(run)
    except KeyboardInterrupt:
        return _interrupted(args)
    except APIError as exc:  # one every request would meet: the run stopped at once
        raise CommandError(f"{exc}; nothing more was asked", status=3) from exc
    return _summary(args, done)


def _policy(args: argparse.Namespace, concurrency: int) -> Policy:
    shared = SharedBudget(url=args.redis) if args.redis else None
    limits = Limits(max_concurrency=concurrency, rpm=args.rpm, tpm=args.tpm, shared=shared)
    return Policy(limits=limits, strategy=args.strategy)


def _summary(args: argparse.Namespace, done: FileRun) -> int:
    for reason in done.invalid:
        print(f"splitter run: skipped {reason}", file=sys.stderr)
    if (unnamed := done.skipped_invalid - len(done.invalid)) > 0:
        print(f"splitter run: skipped {unnamed} more malformed lines", file=sys.stderr)
    print(
        f"{done.questions} questions: {done.skipped} already in {args.out}, "
        f"{done.answered} answered now, {done.failed} failed",
        file=sys.stderr,
    )
    if done.skipped_invalid:
        lines = "line" if done.skipped_invalid == 1 else "lines"
        print(
            f"splitter run: {done.skipped_invalid} {lines} skipped (not valid questions); "
            "fix them and run the same command again to answer them too",
            file=sys.stderr,
        )
    return 0 if done.failed == 0 and not done.skipped_invalid else 1


def _interrupted(args: argparse.Namespace) -> int:
    answered, _ = count_answers(Path(args.out))
    print(
        f"splitter run: interrupted; {answered} answers are safely in {args.out}. "
        f"Resume with: {resume_command(args)}",
        file=sys.stderr,
    )
    return 130


def _parent(args: argparse.Namespace) -> int:
    """Check and resume once here, then let ``--workers`` processes answer the rest."""
    key = api_key(args)
    settings = FileSettings(args.window, not args.keep_failed, 100, 1.0, args.output_format)
    settings = settings._replace(skip_invalid=args.skip_invalid)
    checker = Splitter(policy=_policy(args, args.concurrency))._session
    prepared = prepare_file(checker, args.questions, args.out, args.model, settings)
    pending = prepared.questions - prepared.skipped
    count = min(args.workers, max(pending, 1))
    command = [*_WORKER_START, *_worker_words(args, prepared.model, count)]
    env = {**os.environ, "OPENAI_API_KEY": key}  # never on a command line (ps shows those)
    with _leave_out(prepared.checked.invalid) as words:
        outcome = run_workers(prepared, [*command, *words], count, env)
    for message in dict.fromkeys(outcome.messages):  # each once, in order
        print(message, file=sys.stderr)
    if outcome.interrupted or 130 in outcome.statuses:
        return _interrupted(args)
    done = FileRun(
        prepared.questions,
        prepared.skipped,
        outcome.answered,
        outcome.failed,
        len(prepared.checked.invalid),
        prepared.checked.reasons,
    )
    killed = [status for status in outcome.statuses if status < 0]
    for status in (3, 2):
        if status in outcome.statuses:
            return status
    if killed or any(status not in (0, 1) for status in outcome.statuses):
        left = pending - outcome.answered - outcome.failed
        _summary(args, done)
        print(
            f"splitter run: a worker died; {left} questions are not answered yet, and every "
            f"answer written is kept in {args.out}. Answer the rest with: {resume_command(args)}",
            file=sys.stderr,
        )
        return 1
    return _summary(args, done)


_WORKER_START = [sys.executable, "-m", "splitter", "run"]


@contextlib.contextmanager
def _leave_out(numbers: frozenset[int]) -> Iterator[list[str]]:
    """The workers' hidden ``--worker-leave-out FILE``: the numbers of the lines the parent
    found malformed, in a file (too many, perhaps, for a command line) kept while they run."""
    if not numbers:
        yield []
        return
    with tempfile.NamedTemporaryFile("w", prefix="splitter-leave-out-", suffix=".txt") as file:
        file.write("".join(f"{number}\n" for number in sorted(numbers)))
        file.flush()
        yield ["--worker-leave-out", file.name]


def _worker_words(args: argparse.Namespace, model: str, count: int) -> list[str]:
    """A worker's command line, less its share: this run's options, the model the parent
    resolved, and 1/``count`` of ``--concurrency``."""
    words = [args.questions, "--out", args.out, "--model", model, "--no-progress"]
    words += ["--concurrency", str(max(1, args.concurrency // count))]
    words += ["--window", str(args.window), "--output-format", args.output_format]
    words += ["--strategy", args.strategy]
    for option, value in (
        ("--base-url", args.base_url),
        ("--system", args.system),
        ("--rpm", args.rpm),
        ("--tpm", args.tpm),
        ("--redis", args.redis),
        ("--response-format", args.response_format),
    ):
        if value is not None:
            words += [option, str(value)]
    return [*words, "--keep-failed"] if args.keep_failed else words


def _worker(args: argparse.Namespace) -> int:
    """One worker: its share of the questions into its part file; quiet but for errors."""
    index, count, done_bytes = args.worker_share
    leave_out = frozenset[int]()
    if args.worker_leave_out is not None:
        leave_out = frozenset(map(int, Path(args.worker_leave_out).read_text().split()))
    share = WorkerShare(index, count, done_bytes, leave_out)
    policy = _policy(args, args.concurrency)
    key = api_key(args)
    params = structured_params(args.response_format)
    settings = FileSettings(args.window, False, 100, 1.0, args.output_format, share)
    warnings.showwarning = _one_line  # the parent passes each line on, once
    watch_parent()

    async def run() -> FileRun:
        async with openai.AsyncOpenAI(base_url=args.base_url, api_key=key) as client:
            if args.redis is None:
                share_budget(client, args.model, policy.limits, count)
            splitter = Splitter(client, policy=policy)
            session = splitter._session
            hooks = (None, False)
            return await run_file(
                session, args.questions, args.out, args.model, args.system, settings, hooks, params
            )

    try:
        done = anyio.run(run)
    except KeyboardInterrupt:
        return 130
    except APIError as exc:
        raise CommandError(f"{exc}; nothing more was asked", status=3) from exc
    return 0 if done.failed == 0 else 1


def _one_line(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    print(f"splitter run: warning: {message}", file=sys.stderr)


def worker_share(text: str) -> tuple[int, int, int]:
    """``K/N/BYTES`` (an ``argparse`` type for the hidden ``--worker-share``)."""
    index, count, done_bytes = (int(part) for part in text.split("/"))
    if not 0 <= index < count or done_bytes < 0:
        raise argparse.ArgumentTypeError(f"not a worker share: {text!r}")
    return index, count, done_bytes


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
