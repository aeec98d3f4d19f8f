"""``Splitter.arun_file``: a JSONL file of questions answered into a JSONL file of answers,
resumably, on ``amap``'s bounded window (the file and its checks are ``_checkpoint``'s, the
line formats ``_file_lines``'s)."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from ._checkpoint import (
    Checkpoint,
    FileRun,
    checked_questions,
    file_model,
    pending_questions,
    refuse_same_file,
)
from ._exceptions import InvalidInputError
from ._file_lines import OutputFormat, output_lines
from ._inputs import map_item
from ._progress import progress_bar
from ._questions import Question
from ._session import Session

__all__ = ["FileSettings", "run_file"]


class FileSettings(NamedTuple):
    """How :meth:`Splitter.arun_file` reads and writes: its keywords of the same names."""

    window: int
    retry_failed: bool
    sync_every: int
    sync_seconds: float
    output_format: OutputFormat = "splitter"


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
    window, retry_failed, sync_every, sync_seconds, output_format = settings
    source, target = Path(questions), Path(out)
    refuse_same_file(source, target)
    chosen_model = _model(session, model, source)
    lines = output_lines(output_format, chosen_model)

    def check(index: int, item: object) -> Question:
        return map_item(index, item, policy=session.policy, model=chosen_model)

    ids = checked_questions(source, check, chosen_model)
    checkpoint = Checkpoint(target, sync_every=sync_every, sync_seconds=sync_seconds, lines=lines)
    done = checkpoint.resume(retry_failed=retry_failed)
    total, skipped = len(ids), len(done & ids)
    del ids
    on_event, progress = hooks
    bar = progress_bar(progress, total=total, initial=skipped)
    answered = failed = 0
    mapped = session.map(
        pending_questions(source, done, chosen_model),
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
    return FileRun(questions=total, skipped=skipped, answered=answered, failed=failed)


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
