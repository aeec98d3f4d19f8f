"""``splitter run --workers N``: one file answered by N processes on one budget and one output.

The parent checks the whole input and resumes the output first (``prepare_file``: a
malformed line is refused before any worker starts, as with one process; with
``--skip-invalid`` their numbers go to the workers in a file, the hidden
``--worker-leave-out``, and no worker reads those lines), then starts N workers, each the
same ``splitter run`` command line with a hidden ``--worker-share K/N/BYTES``: worker K
answers every N-th question not answered in the first BYTES bytes of the output, into its
own part file (``_checkpoint.part_path``). The parent appends the
parts' complete lines to the output as they arrive and removes the parts at the end; a run
cut short leaves them, and the next run folds them in first (``Checkpoint.resume``), so no
answer written by any worker is lost or written twice.

The budget: with ``--redis URL`` every worker books on the one Redis budget of the key (and
falls back as ``SharedBudget.on_outage`` says). Without it, each worker's budget is a fixed
1/N share of the limits, stated or learned from the service's headers (``Limit.share``, as
the Redis budget's outage fallback uses): together they stay within the limits, but room one
worker leaves unused is not lent to another.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import openai

from ._budget import MemoryBudget
from ._checkpoint import part_path
from ._endpoint import endpoint_for
from ._file_lines import OutputLines
from ._file_run import Prepared
from ._policy import Limits, Policy

__all__ = ["Outcome", "run_workers", "share_budget", "watch_parent"]

_POLL = 0.1  # seconds between looks at the workers and their part files
_SYNC = 1.0  # seconds between fsyncs of the output
_STOP_WAIT = 10.0  # seconds a worker has to stop after Ctrl-C before it is killed


@dataclass
class Outcome:
    """What the workers did, counted from the lines the parent appended."""

    answered: int = 0
    failed: int = 0
    statuses: list[int] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    interrupted: bool = False


def share_budget(client: openai.AsyncOpenAI, model: str, limits: Limits, count: int) -> None:
    """Give this worker's endpoint a budget of 1/``count`` of the limits (no ``--redis``)."""
    endpoint = endpoint_for(
        Policy(limits=limits), base_url=str(client.base_url), api_key=client.api_key, model=model
    )
    endpoint.budget = MemoryBudget(
        rpm=limits.rpm,
        tpm=limits.tpm,
        burst=limits.burst,
        slow_start=limits.slow_start,
        share=1 / count,
    )


def run_workers(prepared: Prepared, command: list[str], count: int, env: dict[str, str]) -> Outcome:
    """Run ``count`` workers (``command`` plus each one's ``--worker-share``) to the end,
    appending their answers to the output; on Ctrl-C stop them and keep what they wrote."""
    target = prepared.target
    start = target.stat().st_size if target.exists() else 0
    outcome = Outcome()
    with contextlib.ExitStack() as logs:
        tail = _Tail(target, prepared.lines, count)
        workers: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        try:
            for index in range(count):
                log = logs.enter_context(tempfile.TemporaryFile())
                share = ["--worker-share", f"{index}/{count}/{start}"]
                # A session of its own: Ctrl-C at the terminal reaches the parent alone,
                # which passes it on once (twice, a worker's cleanup would be cut short).
                process = subprocess.Popen(
                    [*command, *share],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                workers.append((process, log))
            while any(process.poll() is None for process, _ in workers):
                tail.drain()
                time.sleep(_POLL)
        except KeyboardInterrupt:
            outcome.interrupted = True
            _stop([process for process, _ in workers])
        finally:
            for process, _ in workers:
                _reap(process)
            tail.drain()
            tail.close()
        outcome.answered, outcome.failed = tail.answered, tail.failed
        for index, (process, written) in enumerate(workers):
            outcome.statuses.append(process.returncode)
            outcome.messages.extend(_messages(written, index, count, process.returncode))
    return outcome


def watch_parent() -> None:
    """In a worker: exit when the parent is gone (killed), rather than answer on, unseen.
    What it wrote stays in its part file for the next run to fold in."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_POLL * 5)
        os._exit(1)

    threading.Thread(target=watch, name="splitter-watch-parent", daemon=True).start()


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """Pass Ctrl-C on to the workers, then kill what has not stopped in time."""
    deadline = time.monotonic() + _STOP_WAIT
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()


def _reap(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def _messages(log: IO[bytes], index: int, count: int, status: int) -> list[str]:
    """A worker's stderr lines (each already says ``splitter run:``), and a line saying
    how it died if a signal killed it."""
    log.seek(0)
    lines = [line for line in log.read().decode("utf-8", "replace").splitlines() if line]
    if status < 0:
        name = signal.Signals(-status).name
        lines.append(f"splitter run: worker {index + 1} of {count} was killed by {name}")
    return lines


class _Tail:
    """The part files, read as they grow; their complete lines appended to the output."""

    def __init__(self, target: Path, lines: OutputLines, count: int) -> None:
        self.lines = lines
        self.parts = [part_path(target, index) for index in range(count)]
        for part in self.parts:
            part.unlink(missing_ok=True)  # resume folded any earlier run's
        self.offsets = [0] * count
        self.out = target.open("ab")
        self.synced_at = time.monotonic()
        self.answered = self.failed = 0

    def drain(self) -> None:
        for index, part in enumerate(self.parts):
            try:
                with part.open("rb") as file:
                    file.seek(self.offsets[index])
                    data = file.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            if not complete:
                continue
            self.out.write(complete)
            self.out.flush()
            self.offsets[index] += len(complete)
            self._count(complete)
        if time.monotonic() - self.synced_at >= _SYNC:
            self._sync()

    def _count(self, complete: bytes) -> None:
        for line in complete.splitlines():
            if line.strip():
                ok = self.lines.read(json.loads(line))[1]
                self.answered += ok
                self.failed += not ok

    def _sync(self) -> None:
        os.fsync(self.out.fileno())
        self.synced_at = time.monotonic()

    def close(self) -> None:
        """Sync the output, then remove the parts: every complete line of theirs is in it."""
        self._sync()
        self.out.close()
        for part in self.parts:
            part.unlink(missing_ok=True)
