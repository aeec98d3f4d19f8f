"""Answering a JSONL file of questions into a JSONL file of answers, resumable after a crash.

Input lines are ``{"id": ..., "question": ...}`` with optional ``expected_tokens`` and
``max_tokens``; ids are strings or integers, unique. The whole file is checked before any
request: a malformed line, a missing field or a repeated id is an ``InvalidInputError``
naming the line. Output lines are ``{"id": ..., "answer": ..., "error": ...}``, appended as
answers finish; each line is written whole and flushed to the operating system at once
(a killed process loses nothing written), and fsynced every ``sync_every`` lines or
``sync_seconds`` seconds and at the end (what survives a power cut).

On a restart, ids already answered in the output are skipped. A torn last line (the
process died while writing it) is cut off. Failed ids are asked again by default
(``retry_failed``): their error lines are removed first, by rewriting the output to a
temporary file that replaces it, so every id has at most one line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from ._exceptions import InvalidInputError, SplitterError
from ._questions import Answer, Question

__all__ = ["Checkpoint", "FileRun", "checked_questions", "pending_questions"]

_FIELDS = {"id", "question", "expected_tokens", "max_tokens"}
Check = Callable[[int, object], Question]


@dataclass(frozen=True, slots=True)
class FileRun:
    """What ``Splitter.run_file`` did: the input's questions, those already answered in
    the output when it started, and those answered or failed in this run."""

    questions: int
    skipped: int
    answered: int
    failed: int


def _key(raw_id: object) -> str:
    """The id as a question id: its JSON text, so that 5 and "5" stay apart and the
    output can give back the id exactly as the input had it."""
    return json.dumps(raw_id, ensure_ascii=False)


def _question(number: int, line: str, where: str) -> Question:
    """Line ``number`` (1-based) of the input as a question."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{where} line {number}: not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise InvalidInputError(f"{where} line {number}: not a JSON object")
    for field in ("id", "question"):
        if field not in record:
            raise InvalidInputError(f"{where} line {number}: no {field!r} field")
    unknown = sorted(set(record) - _FIELDS)
    if unknown:
        raise InvalidInputError(
            f"{where} line {number}: unknown field {unknown[0]!r} (known: {sorted(_FIELDS)})"
        )
    raw_id = record["id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise InvalidInputError(f"{where} line {number}: id must be a string or an integer")
    if not isinstance(record["question"], str):
        raise InvalidInputError(f"{where} line {number}: question must be a string")
    try:
        return Question(
            text=record["question"],
            id=_key(raw_id),
            expected_tokens=record.get("expected_tokens"),
            max_tokens=record.get("max_tokens"),
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        field = {"text": "question"}.get(str(error["loc"][0]), str(error["loc"][0]))
        reason = error["msg"].removeprefix("Value error, ")
        raise InvalidInputError(f"{where} line {number}: {field}: {reason}") from None


def _lines(path: Path) -> Generator[tuple[int, str], None, None]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield number, line


def checked_questions(path: Path, check: Check) -> set[str]:
    """Read the whole input once and check every line (as ``check`` checks a question,
    too); the questions' ids (kept, and only they, to find repeats)."""
    seen: dict[str, int] = {}
    for number, line in _lines(path):
        count = len(seen)
        question = _question(number, line, path.name)
        try:
            check(count, question)
        except InvalidInputError as exc:
            reason = str(exc).replace(f"questions[{count}]", "the question", 1)
            raise InvalidInputError(f"{path.name} line {number}: {reason}") from None
        assert question.id is not None
        if question.id in seen:
            raise InvalidInputError(
                f"{path.name} line {number}: id {question.id} repeats line {seen[question.id]}"
            )
        seen[question.id] = number
    return set(seen)


def pending_questions(path: Path, done: set[str]) -> Iterator[Question]:
    """The input's questions not answered yet, read lazily (the file was checked)."""
    with closing(_lines(path)) as lines:
        for number, line in lines:
            question = _question(number, line, path.name)
            if question.id not in done:
                yield question


class Checkpoint:
    """The output file: what it already holds, and appending answers durably."""

    def __init__(self, path: Path, *, sync_every: int, sync_seconds: float) -> None:
        self.path = path
        self._sync_every = sync_every
        self._sync_seconds = sync_seconds
        self._file: IO[str] | None = None
        self._unsynced = 0
        self._synced_at = time.monotonic()

    def resume(self, *, retry_failed: bool) -> set[str]:
        """The ids not to ask again. Cuts a torn last line off; with ``retry_failed``,
        first removes the lines of failed ids."""
        if not self.path.exists():
            return set()
        answered, failed, kept = self._read()
        if retry_failed and failed:
            self._rewrite(kept)
            return answered
        return answered | failed

    def _read(self) -> tuple[set[str], set[str], list[str]]:
        answered: set[str] = set()
        failed: set[str] = set()
        kept: list[str] = []
        with self.path.open("rb") as file:
            data = file.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a torn last line: the process died while writing it
            with self.path.open("r+b") as file:
                file.truncate(end)
                file.flush()
                os.fsync(file.fileno())
        for number, raw in enumerate(data[:end].decode("utf-8").splitlines(), 1):
            if not raw.strip():
                continue
            key, ok = self._record(number, raw)
            (answered if ok else failed).add(key)
            if ok:
                kept.append(raw)
        return answered, failed - answered, kept

    def _record(self, number: int, raw: str) -> tuple[str, bool]:
        try:
            record = json.loads(raw)
            return _key(record["id"]), record.get("error") is None
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InvalidInputError(
                f"{self.path.name} line {number}: not an answer line of splitter run; "
                "is this the right output file?"
            ) from None

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
        """Append ``answer``'s line: one write, flushed at once; fsynced in batches."""
        assert self._file is not None
        assert answer.question.id is not None
        record: dict[str, Any] = {
            "id": json.loads(answer.question.id),
            "answer": answer.text if answer.ok else None,
            "error": _error(answer.error),
        }
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        self._unsynced += 1
        if (
            self._unsynced >= self._sync_every
            or time.monotonic() - self._synced_at >= self._sync_seconds
        ):
            self._sync()

    def _sync(self) -> None:
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._unsynced = 0
        self._synced_at = time.monotonic()


def _error(error: SplitterError | None) -> str | None:
    return None if error is None else f"{type(error).__name__}: {error}"


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
