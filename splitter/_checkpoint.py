"""Answering a JSONL file of questions into a JSONL file of answers, resumable after a crash.

The lines of both files, in either format (splitter's own or OpenAI's Batch API), are
``_file_lines``'s. Ids are strings or integers, unique (a Batch API line's ``custom_id`` is
its id). The whole input is checked before any request: a malformed line, a missing field
or a repeated id is an ``InvalidInputError`` naming the line, or, with ``skip_invalid``, a
line left out of the run (``Checked.invalid``: never asked, never written, so a rerun
leaves it out again) and named in ``Checked.reasons``. Output lines are appended as
answers finish; each line is written whole and flushed to the operating system at once (a
killed process loses nothing written), and fsynced every ``sync_every`` lines or
``sync_seconds`` seconds and at the end (what survives a power cut).

On a restart the whole output is read and checked before anything in it changes: every
complete line must be an answer line of the run's output format. Anything else (a text
file, a questions file, the other output format) refuses the file, naming the line, and
leaves it untouched. Only then may a torn last line (the process died while writing it) be
cut off, and only when its text is how an answer line begins. Ids already answered are
skipped. Failed ids are asked again by default (``retry_failed``): their error lines are
removed first, by rewriting the output to a temporary file that replaces it, so every id
has at most one line. The output may not be the input file itself (``refuse_same_file``).

``splitter run --workers N`` runs N processes on one output: each worker appends to its own
part file (``part_path``: ``ANSWERS.jsonl.part-K``, one writer each, so a worker killed
mid-write tears only its own last line), and the parent appends the parts' complete lines
to the output as they arrive. A restart, with workers or without, first folds the part
files an interrupted run left (``Checkpoint.resume``): their complete lines whose ids the
output does not hold yet are appended, a torn last line dropped, and the parts removed.

A run stops at the first error that every request would meet, when nothing has been
answered in it yet (a base URL that never answered, a refused key, an unknown model, an
empty quota): that answer's line is written and its error raised, rather than writing one
such line per question of the file (``Checkpoint.write``).
"""

from __future__ import annotations

import codecs
import glob
import json
import os
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from ._clock import now
from ._exceptions import InvalidInputError
from ._file_lines import (
    OUTPUT_FORMATS,
    OutputLines,
    SplitterLines,
    body_model,
    output_lines,
    read_input_line,
)
from ._questions import Answer, Question
from ._retry import fails_every_request

__all__ = [
    "Checked",
    "Checkpoint",
    "FileRun",
    "answered_ids",
    "checked_questions",
    "count_answers",
    "file_model",
    "part_path",
    "pending_questions",
    "refuse_same_file",
]

Check = Callable[[int, object], Question]
LISTED = 20  # the malformed lines named one by one; the rest are counted


@dataclass(frozen=True, slots=True)
class FileRun:
    """What ``Splitter.run_file`` did: the input's questions, those already answered in
    the output when it started, and those answered or failed in this run; with
    ``skip_invalid``, the malformed lines left out (``skipped_invalid``, not counted in
    ``questions``) and the first 20 of them named with their reasons (``invalid``)."""

    questions: int
    skipped: int
    answered: int
    failed: int
    skipped_invalid: int = 0
    invalid: tuple[str, ...] = ()


class Checked(NamedTuple):
    """The input checked: its questions' ids, the numbers of the malformed lines left out
    (``skip_invalid``), and the first ``LISTED`` of those named with their reasons."""

    ids: set[str]
    invalid: frozenset[int]
    reasons: tuple[str, ...]


def _texts(path: Path) -> Generator[tuple[int, str | None], None, None]:
    """The input's non-blank lines and their numbers; None for a line that is not UTF-8."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield number, None
                continue
            if line.strip():
                yield number, line


def _lines(path: Path, leave_out: frozenset[int]) -> Generator[tuple[int, str], None, None]:
    for number, line in _texts(path):
        if number in leave_out:
            continue
        if line is None:
            raise InvalidInputError(f"{path.name} line {number}: not UTF-8 text")
        yield number, line


def count_answers(path: Path) -> tuple[int, int]:
    """The answered and failed ids in an output file of either format, read only (0, 0
    when it does not exist); a torn last line or a line that is not an answer line counts
    as neither."""
    answered: set[str] = set()
    failed: set[str] = set()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, 0
    formats = [output_lines(name, "") for name in OUTPUT_FORMATS]
    for line in data.split(b"\n")[:-1]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        for lines in formats:
            if lines.problem(record) is None:
                key, ok = lines.read(record)
                (answered if ok else failed).add(key)
                break
    return len(answered), len(failed - answered)


def file_model(path: Path) -> str | None:
    """The model the input's first Batch API line names in its body, if one does (a run
    given no model asks that one)."""
    with closing(_texts(path)) as lines:
        for _, line in lines:
            if line is not None and (model := body_model(line)) is not None:
                return model
    return None


def checked_questions(path: Path, check: Check, model: str | None, skip_invalid: bool) -> Checked:
    """Read the whole input once and check every line (as ``check`` checks a question,
    too), keeping the questions' ids (and only they, to find repeats). ``model`` is the
    run's: a Batch API body naming another is refused. A malformed line is an
    ``InvalidInputError``, or, with ``skip_invalid``, left out and named."""
    seen: dict[str, int] = {}
    invalid: set[int] = set()
    reasons: list[str] = []
    for number, line in _texts(path):
        try:
            key = _checked_line(path, number, line, check, len(seen), model)
            if key in seen:
                raise InvalidInputError(
                    f"{path.name} line {number}: id {key} repeats line {seen[key]}"
                )
        except InvalidInputError as exc:
            if not skip_invalid:
                raise InvalidInputError(f"{exc}{_SKIP_HINT}") from None
            invalid.add(number)
            if len(reasons) < LISTED:
                reasons.append(str(exc))
            continue
        seen[key] = number
    return Checked(set(seen), frozenset(invalid), tuple(reasons))


_SKIP_HINT = (
    "; nothing was asked (skip_invalid=True, or splitter run --skip-invalid, answers the "
    "other lines and names each malformed one)"
)


def _checked_line(
    path: Path, number: int, line: str | None, check: Check, count: int, model: str | None
) -> str:
    """Line ``number``'s question id, once the line is checked as a question."""
    if line is None:
        raise InvalidInputError(f"{path.name} line {number}: not UTF-8 text")
    question, field = read_input_line(number, line, path.name, model)
    try:
        check(count, question)
    except InvalidInputError as exc:
        reason = str(exc).replace(f"questions[{count}].params", field, 1)
        reason = reason.replace(f"questions[{count}]", "the question", 1)
        raise InvalidInputError(f"{path.name} line {number}: {reason}") from None
    assert question.id is not None
    return question.id


def pending_questions(
    path: Path, done: set[str], model: str | None, leave_out: frozenset[int] = frozenset()
) -> Iterator[Question]:
    """The input's questions not answered yet, read lazily (the file was checked), less
    the lines numbered in ``leave_out`` (those it found malformed)."""
    with closing(_lines(path, leave_out)) as lines:
        for number, line in lines:
            question = read_input_line(number, line, path.name, model).question
            if question.id not in done:
                yield question


def part_path(out: Path, index: int) -> Path:
    """Where worker ``index`` of ``splitter run --workers`` writes its answers."""
    return out.with_name(f"{out.name}{_PART}{index}")


def _parts(out: Path) -> list[Path]:
    return sorted(out.parent.glob(glob.escape(out.name) + _PART + "*"))


_PART = ".part-"


def answered_ids(path: Path, lines: OutputLines, size: int) -> set[str]:
    """The ids of the answer lines (answered or failed) in the first ``size`` bytes of
    ``path``, an output ``Checkpoint.resume`` has checked (what a worker must not ask)."""
    with path.open("rb") as file:
        data = file.read(size)
    ids: set[str] = set()
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            ids.add(lines.read(json.loads(line))[0])
    return ids


def refuse_same_file(questions: Path, out: Path) -> None:
    """An ``InvalidInputError`` when ``out`` is the questions file (the same path, a link
    to it or another name of it): checked before either file is read or written."""
    try:
        same = os.path.samefile(questions, out)
    except OSError:  # one of them does not exist (yet)
        same = questions.resolve() == out.resolve()
    if same:
        raise InvalidInputError(
            f"{out}: the output file is the questions file {questions}; "
            "name a new file or an earlier run's answers"
        )


class Checkpoint:
    """The output file: what it already holds, and appending answers durably."""

    def __init__(
        self,
        path: Path,
        *,
        sync_every: int,
        sync_seconds: float,
        lines: OutputLines | None = None,
    ) -> None:
        self.path = path
        self.lines = lines if lines is not None else SplitterLines()
        self._sync_every = sync_every
        self._sync_seconds = sync_seconds
        self._file: IO[str] | None = None
        self._unsynced = 0
        self._synced_at = now()
        self._answered = 0

    def resume(self, *, retry_failed: bool) -> set[str]:
        """The ids not to ask again. Cuts a torn last line off; with ``retry_failed``,
        first removes the lines of failed ids."""
        self._fold_parts()
        if not self.path.exists():
            return set()
        answered, failed, kept = self._read()
        if retry_failed and failed:
            self._rewrite(kept)
            return answered
        return answered | failed

    def _read(self) -> tuple[set[str], set[str], list[str]]:
        """Check every line, then cut a torn last line; the answered and failed ids and the
        answered lines."""
        answered: set[str] = set()
        failed: set[str] = set()
        kept: list[str] = []
        with self.path.open("rb") as file:
            data = file.read()
        *complete, tail = data.split(b"\n")
        for number, line in enumerate(complete, 1):
            raw = self._decoded(number, line)
            if not raw.strip():
                continue
            key, ok = self._record(number, raw)
            (answered if ok else failed).add(key)
            if ok:
                kept.append(raw)
        if tail:
            self._cut(len(complete) + 1, tail, len(data) - len(tail))
        return answered, failed - answered, kept

    def _fold_parts(self) -> None:
        """Append the complete lines of the part files an interrupted ``--workers`` run
        left whose ids are not in the output yet, then remove the parts (see the module
        docstring). Every part is checked before the output changes."""
        parts = _parts(self.path)
        if not parts:
            return
        have: set[str] = set()
        if self.path.exists():
            answered, failed, _ = self._read()
            have = answered | failed
        new: list[str] = []
        for part in parts:
            complete = part.read_bytes().split(b"\n")[:-1]  # a torn last line is dropped
            for number, line in enumerate(complete, 1):
                raw = self._decoded(number, line, part)
                if not raw.strip():
                    continue
                key, _ = self._record(number, raw, part)
                if key not in have:
                    have.add(key)
                    new.append(raw)
        with self.path.open("a", encoding="utf-8") as file:
            file.writelines(line + "\n" for line in new)
            file.flush()
            os.fsync(file.fileno())
        for part in parts:
            part.unlink()
        _sync_directory(self.path.parent)

    def _decoded(self, number: int, line: bytes, path: Path | None = None) -> str:
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError:
            raise self._refused(number, "not UTF-8 text", path) from None

    def _record(self, number: int, raw: str, path: Path | None = None) -> tuple[str, bool]:
        """Line ``number``'s id and whether it was answered, if it is an answer line."""
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            raise self._refused(number, "not JSON", path) from None
        problem = self.lines.problem(record)
        if problem is not None:
            raise self._refused(number, problem + self._other_format(record), path)
        return self.lines.read(record)

    def _other_format(self, record: object) -> str:
        """A hint when ``record`` is an answer line of the other output format."""
        for name in OUTPUT_FORMATS:
            if name != self.lines.name and output_lines(name, "").problem(record) is None:
                return f"; it is an answer line of output format {name!r}: resume with that"
        return ""

    def _cut(self, number: int, tail: bytes, end: int) -> None:
        """Cut the last line, which has no newline, if it is how an answer line begins."""
        try:
            text = codecs.getincrementaldecoder("utf-8")().decode(tail, final=False)
        except UnicodeDecodeError:
            text = None
        if not text or not self.lines.begins(text):
            raise self._refused(number, "the last line has no newline and is not a torn answer")
        with self.path.open("r+b") as file:
            file.truncate(end)
            file.flush()
            os.fsync(file.fileno())

    def _refused(self, number: int, reason: str, path: Path | None = None) -> InvalidInputError:
        return InvalidInputError(
            f"{path or self.path} line {number}: not an answer line of splitter run ({reason}); "
            "the file was left as it is: is this the right output file?"
        )

    def _rewrite(self, lines: list[str]) -> None:
        """Replace the output with ``lines``, atomically (a crash leaves the old or the new)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w", encoding="utf-8") as file:
            file.writelines(line + "\n" for line in lines)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        _sync_directory(self.path.parent)

    def __enter__(self) -> Checkpoint:
        self._file = self.path.open("a", encoding="utf-8")
        _sync_directory(self.path.parent)  # the file itself, if this run created it
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._file is not None
        try:
            self._sync()
        finally:
            self._file.close()

    def write(self, answer: Answer) -> None:
        """Append ``answer``'s line: one write, flushed at once; fsynced in batches. Raises
        the answer's error once written if every request would meet it and nothing was
        answered yet in this run (see the module docstring)."""
        assert self._file is not None
        self._file.write(self.lines.line(answer) + "\n")
        self._file.flush()
        self._unsynced += 1
        if self._unsynced >= self._sync_every or now() - self._synced_at >= self._sync_seconds:
            self._sync()
        self._answered += answer.ok
        error = answer.error
        if error is not None and not self._answered and fails_every_request(error, answer.attempts):
            raise error

    def _sync(self) -> None:
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._unsynced = 0
        self._synced_at = now()


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
