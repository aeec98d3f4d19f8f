"""The 429 search against many leaky buckets, not only the two that ``limiters.py`` meets.

``bench/limiters.py`` meets one nginx-style leaky bucket (5 r/s, with and without a burst of
5) in real time. A budget that "learns any limiter" must find any rate and any burst, so
this sweeps a grid of them on virtual time (no machine jitter: what is counted is the
search's own cost): for each rate (requests per second) and burst (nginx's ``burst=``,
``nodelay``), N questions (default 200) through ``Splitter.aask_many`` from a cold process
(each cell its own ``python``, as many at once as there are CPUs), against the simulator's
``leaky_bucket`` (nginx's accounting, no rate headers, 429s without ``retry-after``) in that
process.

Each cell prints ``429s/requests reached``: reached is the accepted requests per second
from the first request to the last accepted, over the bucket's rate (a burst at the start
lets a run exceed 1). A cell is met (no ``*``) with at most 2% of requests answered 429 and
at least 0.85 of the rate reached, issue #14's targets; every question must be answered
with its own answer, or the script stops with an error. On virtual time the figures do not
depend on the machine's load: the same code printed the same table twice in a row (with
``--rtt 0.05`` two runs differed in 2 of 40 cells, by up to 0.04 of the rate: not traced).

    python bench/leaky_sweep.py                          # fan-out, 8 rates x 5 bursts, ~35 s
    python bench/leaky_sweep.py --strategy auto          # the default policy (~60 requests)
    python bench/leaky_sweep.py --rtt 0.05               # a service 50 ms away (a 429 comes later)
    python bench/leaky_sweep.py --rates 5 20 --bursts 0 5 --count-rejected --json out.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from splitter import Policy, Splitter
from splitter.sim import SimLimits, SimService
from splitter.sim._profiles import PROFILES
from splitter.testing import assert_answers_match, open_sim_client, run_virtual

RATES = (2.0, 3.0, 5.0, 7.0, 10.0, 13.0, 20.0, 30.0)
BURSTS = (0, 1, 2, 5, 10)
Strategy = Literal["fanout", "auto"]
MOST_429 = 0.02
LEAST_RATE = 0.85


@dataclass(frozen=True, slots=True)
class Cell:
    rate: float
    burst: int
    requests: int
    rejected: int
    reached: float

    @property
    def met(self) -> bool:
        return self.rejected <= MOST_429 * self.requests and self.reached >= LEAST_RATE


async def run_cell(
    rate: float, burst: int, n: int, strategy: Strategy, count: bool, rtt: float = 0.0
) -> Cell:
    # The instant service, answering after ``rtt`` (a round trip: a 429 comes back then)
    profile = PROFILES["instant"].model_copy(update={"rtt": rtt})
    service = SimService(
        profile,
        time_scale=1.0,
        limits=SimLimits(kind="leaky_bucket", rate=rate, burst=burst, count_rejected=count),
        default_answer_tokens=5,
    )
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=Policy(strategy=strategy)).aask_many(
            [f"What is {i} + {i}?" for i in range(n)], model="m"
        )
    if not result.ok:
        raise RuntimeError(f"rate {rate}, burst {burst}: {result.stats.failed} questions failed")
    assert_answers_match(result)
    log = service.log
    accepted = [r.arrived for r in log if r.status == 200]
    span = max(accepted) - min(r.arrived for r in log)
    reached = (len(accepted) - 1) / span / rate if span > 0 else float("inf")
    return Cell(rate, burst, len(log), sum(r.status == 429 for r in log), reached)


def _cell_in_a_fresh_process(
    rate: float, burst: int, n: int, strategy: Strategy, count: bool, rtt: float
) -> Cell:
    """One cell in its own ``python`` process (``--one``): a cold process, as issue #14
    asks, and nothing one cell cached or learned carries into the next."""
    args = [sys.executable, str(Path(__file__).resolve()), "--one", str(rate), str(burst)]
    args += ["--n", str(n), "--strategy", strategy, "--rtt", str(rtt)]
    args += ["--count-rejected"] if count else []
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"rate {rate}, burst {burst}: {proc.stderr.strip()}")
    return Cell(**json.loads(proc.stdout))


def sweep(
    rates: Sequence[float],
    bursts: Sequence[int],
    n: int,
    strategy: Strategy,
    count: bool,
    rtt: float = 0.0,
) -> list[Cell]:
    """Every cell, each in a fresh process, as many at once as there are CPUs (on virtual
    time the machine's load does not move a cell's figures: one cell read the same alone
    and beside two busy loops)."""
    grid = [(rate, burst) for rate in rates for burst in bursts]

    def one(cell: tuple[float, int]) -> Cell:
        return _cell_in_a_fresh_process(cell[0], cell[1], n, strategy, count, rtt)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, grid))


def print_table(
    cells: Sequence[Cell], bursts: Sequence[int], strategy: str, n: int, rtt: float = 0.0
) -> None:
    trip = f", round trip {rtt * 1000:g} ms" if rtt else ""
    print(f"{n} questions a cell, strategy {strategy}{trip}, virtual time; 429s/requests reached")
    print(f"{'r/s':>6} | " + " | ".join(f"{'burst ' + str(b):<15}" for b in bursts))
    by_rate: dict[float, list[Cell]] = {}
    for cell in cells:
        by_rate.setdefault(cell.rate, []).append(cell)
    for rate, row in by_rate.items():
        text = [
            f"{f'{c.rejected}/{c.requests}':>7} {c.reached:4.2f}{' ' if c.met else '*'}"
            for c in row
        ]
        print(f"{rate:>6g} | " + " | ".join(f"{t:<15}" for t in text))
    met = sum(c.met for c in cells)
    print(
        f"summary: met in {met} of {len(cells)} cells "
        f"(<= {MOST_429:.0%} 429s and >= {LEAST_RATE} of the rate; * missed)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=list(RATES))
    parser.add_argument("--bursts", type=int, nargs="+", default=list(BURSTS))
    parser.add_argument("--n", type=int, default=200, help="questions a cell")
    parser.add_argument("--strategy", choices=("fanout", "auto"), default="fanout")
    parser.add_argument(
        "--count-rejected", action="store_true", help="refused requests fill the bucket too"
    )
    parser.add_argument(
        "--rtt", type=float, default=0.0, help="the service's round trip, seconds (default 0)"
    )
    parser.add_argument(
        "--one", nargs=2, type=float, metavar=("RATE", "BURST"), help=argparse.SUPPRESS
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)
    if any(r <= 0 for r in args.rates) or any(b < 0 for b in args.bursts) or args.n < 2:
        parser.error("--rates must be > 0, --bursts >= 0 and --n >= 2")
    if args.rtt < 0:
        parser.error("--rtt must be >= 0")
    if args.one is not None:  # one cell, this process (see _cell_in_a_fresh_process)
        rate, burst = args.one
        cell = run_virtual(
            run_cell, rate, int(burst), args.n, args.strategy, args.count_rejected, args.rtt
        )
        print(json.dumps(asdict(cell)))
        return 0
    cells = sweep(args.rates, args.bursts, args.n, args.strategy, args.count_rejected, args.rtt)
    print_table(cells, args.bursts, args.strategy, args.n, args.rtt)
    if args.json is not None:
        rows = [{**asdict(c), "met": c.met} for c in cells]
        saved = {"strategy": args.strategy, "rtt": args.rtt, "cells": rows}
        args.json.write_text(json.dumps(saved, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
