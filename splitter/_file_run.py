"""``Splitter.arun_file``: a JSONL file of questions answered into a JSONL file of answers,
resumably, on ``amap``'s bounded window (the file and its checks are ``_checkpoint``'s, the
line formats ``_file_lines``'s). ``prepare_file`` is the part before any request (checks and
resume), which ``splitter run --workers`` runs once in the parent; ``WorkerShare`` is one
worker's part of what is left (see ``_workers``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from ._checkpoint import (
    Checked,
    Checkpoint,
    FileRun,
    answered_ids,
    checked_questions,
    file_model,
    part_path,
    pending_questions,
    refuse_same_file,
)
from ._exceptions import InvalidInputError
from ._file_lines import OutputFormat, OutputLines, output_lines
from ._inputs import map_item
from ._progress import progress_bar
from ._questions import Question
from ._session import Session

__all__ = ["FileSettings", "Prepared", "WorkerShare", "prepare_file", "run_file"]


class WorkerShare(NamedTuple):
    """Worker ``worker`` (from 0) of ``workers`` answers every ``workers``-th question not
    answered in the first ``done_bytes`` bytes of the output (what the parent checked
    before starting the workers; it appends to it while they run), into its own part file,
    never reading the input lines numbered in ``leave_out`` (those the parent found
    malformed and skips)."""

    worker: int
    workers: int
    done_bytes: int
    leave_out: frozenset[int] = frozenset()


class FileSettings(NamedTuple):
    """How :meth:`Splitter.arun_file` reads and writes: its keywords of the same names."""

    window: int
    retry_failed: bool
    sync_every: int
    sync_seconds: float
    output_format: OutputFormat = "splitter"
    share: WorkerShare | None = None
    skip_invalid: bool = False


class Prepared(NamedTuple):
    """A file run checked and resumed, before any request."""

    source: Path
    target: Path
    model: str
    lines: OutputLines
    questions: int
    done: set[str]
    skipped: int
    checked: Checked


def prepare_file(
    session: Session,
    questions: str | os.PathLike[str],
    out: str | os.PathLike[str],
    model: str | None,
    settings: FileSettings,
) -> Prepared:
    """Check the whole input, then resume the output (see ``Checkpoint.resume``)."""
    source, target = Path(questions), Path(out)
    refuse_same_file(source, target)
    chosen_model = _model(session, model, source)
    lines = output_lines(settings.output_format, chosen_model)

    def check(index: int, item: object) -> Question:
        return map_item(index, item, policy=session.policy, model=chosen_model)

    checked = checked_questions(source, check, chosen_model, settings.skip_invalid)
    checkpoint = Checkpoint(target, sync_every=1, sync_seconds=1.0, lines=lines)
    done = checkpoint.resume(retry_failed=settings.retry_failed)
    skipped = len(done & checked.ids)
    return Prepared(source, target, chosen_model, lines, len(checked.ids), done, skipped, checked)


async def run_file(
    session: Session,
    questions: str | os.PathLike[str],
    out: str | os.PathLike[str],
    model: str | None,
    system: str | None,
    settings: FileSettings,
    hooks: tuple[object, object],
    params: dict[str, Any],
) -> FileRun:
    """Answer ``questions`` into ``out`` (see :meth:`Splitter.arun_file`); ``hooks`` are the
    call's ``on_event`` and ``progress``."""
    window, _, sync_every, sync_seconds, _, share, _ = settings
    checked = Checked(set(), frozenset(), ())
    if share is None:
        prepared = prepare_file(session, questions, out, model, settings)
        source, target, chosen_model, lines, total, done, skipped, checked = prepared
        pending: Iterator[Question] = pending_questions(source, done, chosen_model, checked.invalid)
    else:  # a worker: the parent checked the input and resumed the output
        source, target = Path(questions), Path(out)
        chosen_model = _model(session, model, source)
        lines = output_lines(settings.output_format, chosen_model)
        done = answered_ids(target, lines, share.done_bytes) if share.done_bytes else set()
        pending = pending_questions(source, done, chosen_model, share.leave_out)
        pending = _share_of(pending, share)
        target = part_path(target, share.worker)
        total = skipped = 0
    checkpoint = Checkpoint(target, sync_every=sync_every, sync_seconds=sync_seconds, lines=lines)
    on_event, progress = hooks
    bar = progress_bar(progress, total=total, initial=skipped)
    answered = failed = 0
    mapped = session.map(
        pending,
        chosen_model,
        system,
        params,
        window,
        ordered=False,
        hooks=(on_event, bar or False),
    )
    with checkpoint, bar if progress is True and bar is not None else nullcontext():
        async with mapped as answers:
            async for answer in answers:
                checkpoint.write(answer)
                answered += answer.ok
                failed += not answer.ok
    total = total if share is None else answered + failed
    invalid = len(checked.invalid)
    return FileRun(total, skipped, answered, failed, invalid, checked.reasons)


def _share_of(pending: Iterator[Question], share: WorkerShare) -> Iterator[Question]:
    for number, question in enumerate(pending):
        if number % share.workers == share.worker:
            yield question


def _model(session: Session, model: str | None, source: Path) -> str:
    """The run's model: given here, else the Splitter's, else the one the input's Batch
    API bodies name."""
    if model is None and session.settings.model is None:
        model = file_model(source)
        if model is None:
            raise InvalidInputError(
                "model is required: pass model=... (splitter run: --model), or name it in "
                "the body of the input's Batch API lines"
            )
    return session.model(model)
