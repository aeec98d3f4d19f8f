"""Peak memory of ``Splitter.map`` for 1k and 100k streamed questions: flat, not O(n).

Each size runs in a fresh subprocess (a process's peak RSS only ever grows) that streams
generated questions from a generator through ``Splitter.map`` to the simulated service,
at a tiny time scale with short answers, and reads every answer (checking that each is its
own question's). It reports the process's peak RSS (``ru_maxrss``) and, with
``--tracemalloc``, the peak of Python's own allocations in a second run, counted from the
first window's answers on, past the one-off warm-up (tracemalloc slows the run and adds its
own memory, so it is never measured in the RSS run). Target:
peak(100k) <= 1.5 x peak(1k).

The simulator runs in the same process (its in-process door: a loopback server would
spend most of the time in two HTTP stacks) and keeps a log of every request for tests;
that log is the simulator's memory, not map's, so the bench clears it as it goes.

    python bench/memory.py                    # 1,000 and 100,000 questions
    python bench/memory.py --sizes 200 2000   # a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator

import anyio

from splitter import Policy, Splitter
from splitter.sim import SimService, answer_tag

TARGET = 1.5


def questions(n: int) -> Iterator[str]:
    for k in range(n):
        yield f"Question {k}: what comes after {k}? [len=2]"


async def stream(n: int, window: int, scale: float) -> dict[str, float]:
    """Map ``n`` questions; the figures of this process."""
    service = SimService("instant", time_scale=scale)
    answered = wrong = requests = 0
    started = time.perf_counter()
    async with service.async_client() as client:
        mapped = Splitter(client, policy=Policy()).amap(questions(n), model="m", window=window)
        async with mapped as answers:
            async for answer in answers:
                answered += 1
                if answered == window and tracemalloc.is_tracing():
                    tracemalloc.reset_peak()  # past the one-off warm-up (tokenizer tables, ...)
                text = f"Question {answer.index}: what comes after {answer.index}? [len=2]"
                wrong += not (answer.ok and (answer.text or "").startswith(answer_tag(text)))
                if answered % 1000 == 0:
                    requests += len(service.log)
                    service.log.clear()  # the simulator's record, not map's memory
    return {
        "n": n,
        "answered": answered,
        "wrong": wrong,
        "seconds": time.perf_counter() - started,
        "requests": requests + len(service.log),
    }


def child(args: argparse.Namespace) -> None:
    if args.tracemalloc:
        tracemalloc.start()
    figures = anyio.run(stream, args.child, args.window, args.scale)
    figures["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    if args.tracemalloc:
        figures["traced_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
    print(json.dumps(figures))


def measure(n: int, args: argparse.Namespace, *extra: str) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", str(n), "--window", str(args.window)]
    command += ["--scale", str(args.scale), *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[1_000, 100_000], metavar="N")
    parser.add_argument("--window", type=int, default=256, help="Splitter.map's window")
    parser.add_argument("--scale", type=float, default=0.0001, help="simulator time scale")
    parser.add_argument("--tracemalloc", action="store_true", help="also Python's own peak")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args)
        return 0
    print(f"Splitter.map, window {args.window}, simulator 'instant' at time scale {args.scale:g}")
    header = f"{'questions':>10} {'answered':>9} {'wrong':>6} {'requests':>9} {'seconds':>8}"
    print(header + f" {'peak RSS MiB':>13}" + (f" {'traced MiB':>11}" * args.tracemalloc))
    rows = []
    for n in args.sizes:
        row = measure(n, args)
        if args.tracemalloc:
            row["traced_mib"] = measure(n, args, "--tracemalloc")["traced_mib"]
        rows.append(row)
        line = (
            f"{n:>10} {row['answered']:>9} {row['wrong']:>6} {row['requests']:>9} "
            f"{row['seconds']:>8.1f} {row['rss_mib']:>13.1f}"
        )
        print(line + (f" {row['traced_mib']:>11.2f}" if args.tracemalloc else ""), flush=True)
    small, large = rows
    ratio = large["rss_mib"] / small["rss_mib"]
    print(
        f"peak RSS {args.sizes[1]} / {args.sizes[0]}: {ratio:.2f} "
        f"(target <= {TARGET}): {'met' if ratio <= TARGET else 'NOT met'}"
    )
    if args.tracemalloc:
        print(
            f"traced peak {args.sizes[1]} / {args.sizes[0]}: "
            f"{large['traced_mib'] / small['traced_mib']:.2f}"
        )
    complete = all(r["answered"] == r["n"] and r["wrong"] == 0 for r in rows)
    print(f"every question answered once with its own answer: {'yes' if complete else 'NO'}")
    return 0 if complete and ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
