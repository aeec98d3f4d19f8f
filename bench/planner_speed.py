"""How long the planner takes to price and choose a plan (target: < 10 ms for 1,000 questions).

Pure CPU: no service, no I/O. For each n, the same mixed-length wave is planned many times
and the median and best times are printed, with and without a tight rate-limit budget.

    python bench/planner_speed.py            # n = 10, 100, 1000; 50 runs each
"""

from __future__ import annotations

import argparse
import statistics
import time

from splitter import Policy
from splitter._budget import BudgetSnapshot
from splitter._cost_model import ServiceEstimate
from splitter._planner import PlanItem, plan_wave

GPU = ServiceEstimate(rtt=0.06, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)
BUDGETS = {
    "no limit known": BudgetSnapshot(),
    "tight rpm+tpm": BudgetSnapshot(
        remaining_requests=50, requests_per_second=5, remaining_tokens=20000, tokens_per_second=2e3
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    print(f"{'n':>6} {'budget':<16} {'median ms':>10} {'best ms':>9} {'candidates':>11}  chosen")
    for n in args.ns:
        items = [PlanItem(i, 20 + i % 50, 20 + (i * 37) % 400) for i in range(n)]
        for name, budget in BUDGETS.items():
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                plan = plan_wave(
                    items, estimate=GPU, budget=budget, concurrency=64, policy=Policy()
                )
                times.append((time.perf_counter() - started) * 1000)
            print(
                f"{n:>6} {name:<16} {statistics.median(times):>10.2f} {min(times):>9.2f} "
                f"{len(plan.candidates):>11}  {plan.chosen.label} ({plan.chosen.k} requests)"
            )


if __name__ == "__main__":
    main()
