"""``splitter run --workers N`` on one file: throughput, splitter's CPU per request, 429s and
exactly-once counts, at 1, 2 and 4 workers.

Each round writes N questions (default 2,000; each with a one-turn history, so each is asked
in a request of its own and requests = questions), serves a fresh ``SimService`` (profile
``instant`` by default: no simulated latency, so what is measured is the client side) over
real loopback HTTP in a thread of this process, and runs ``python -m splitter run
QUESTIONS --out ANSWERS --workers W --rpm RPM`` as a subprocess. The service enforces the
same ``--rpm`` (OpenAI's token bucket, in real time), so a budget the workers did not share
would draw 429s.

Reported per worker count (median over ``--rounds``):

* questions/s: questions answered / wall time of the ``splitter run`` command (its start,
  input check and worker start-up included);
* CPU ms/request: the CPU time (user + system) of ``splitter run`` and all its workers
  (``RUSAGE_CHILDREN``), per request the service saw; the service's own CPU is not in it;
* 429s: requests the service refused for the rate limit;
* once / missing / twice: ids with exactly one answer line, with none, with more than one;
  and asked twice: questions the service answered more than once.

A measurement: the exit status is 0 whatever the figures, non-zero only when a run fails.

Run from the repository root::

    PYTHONPATH=$PWD /work/venv/bin/python bench/workers.py [--questions 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from splitter.sim import SimLimits, SimService, serve

HISTORY = [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hello."}]


@dataclass
class Round:
    workers: int
    seconds: float
    cpu: float
    requests: int
    rejected: int
    once: int
    missing: int
    twice: int
    asked_twice: int


def write_questions(path: Path, n: int) -> list[str]:
    texts = [f"Question {k}: what follows {k}? [len=8]" for k in range(n)]
    with path.open("w") as file:
        for k, text in enumerate(texts):
            file.write(json.dumps({"id": k, "question": text, "messages": HISTORY}) + "\n")
    return texts


def one_round(workers: int, args: argparse.Namespace, directory: Path) -> Round:
    questions, out = directory / "questions.jsonl", directory / f"answers-{workers}.jsonl"
    out.unlink(missing_ok=True)
    write_questions(questions, args.questions)
    service = SimService(args.profile, limits=SimLimits(rpm=args.rpm), time_scale=1.0)
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    with serve(service) as base_url:
        command = [sys.executable, "-m", "splitter", "run", str(questions), "--out", str(out)]
        command += ["--model", args.profile, "--base-url", base_url, "--no-progress"]
        command += ["--workers", str(workers), "--rpm", str(args.rpm)]
        command += ["--concurrency", str(args.concurrency)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"splitter run --workers {workers} failed:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = Counter(json.loads(line)["id"] for line in out.read_text().splitlines())
    answered = Counter(q for r in service.log if r.status == 200 for q in r.questions)
    return Round(
        workers=workers,
        seconds=seconds,
        cpu=cpu,
        requests=len(service.log),
        rejected=sum(r.status == 429 for r in service.log),
        once=sum(1 for k in range(args.questions) if lines[k] == 1),
        missing=sum(1 for k in range(args.questions) if lines[k] == 0),
        twice=sum(1 for count in lines.values() if count > 1),
        asked_twice=sum(1 for count in answered.values() if count > 1),
    )


def report(rounds: list[Round], questions: int) -> None:
    print(
        f"{'workers':>7} {'questions/s':>12} {'CPU ms/request':>15} {'requests':>9} "
        f"{'429s':>5} {'once':>6} {'missing':>8} {'twice':>6} {'asked twice':>12}"
    )
    for workers in sorted({r.workers for r in rounds}):
        mine = [r for r in rounds if r.workers == workers]
        rates = [questions / r.seconds for r in mine]
        low, high = min(rates), max(rates)
        rate = statistics.median(rates)
        cpu = statistics.median(1000 * r.cpu / r.requests for r in mine)
        print(
            f"{workers:>7} {rate:>7.0f} ({low:.0f}-{high:.0f}) {cpu:>10.2f} "
            f"{statistics.median(r.requests for r in mine):>9.0f} "
            f"{max(r.rejected for r in mine):>5} {min(r.once for r in mine):>6} "
            f"{max(r.missing for r in mine):>8} {max(r.twice for r in mine):>6} "
            f"{max(r.asked_twice for r in mine):>12}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rpm", type=int, default=60_000, help="the service's and the run's")
    parser.add_argument("--concurrency", type=int, default=64, help="in flight, all workers")
    parser.add_argument("--profile", default="instant")
    args = parser.parse_args(argv)
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            for workers in args.workers:  # interleaved: a slow spell hits every count
                rounds.append(one_round(workers, args, Path(directory)))
    print(
        f"{args.questions} questions, one request each, profile {args.profile}, "
        f"--rpm {args.rpm}, --concurrency {args.concurrency}, median of {args.rounds} rounds "
        "(min-max)"
    )
    report(rounds, args.questions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
