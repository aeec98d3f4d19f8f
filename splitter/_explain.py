"""``Plan.explain()``: the candidates as a small table, the service's terms, and the reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._planner import Plan

__all__ = ["explain_plan"]


def explain_plan(plan: Plan) -> str:
    """A small table of the candidates, the chosen one marked, and the reason."""
    width = max(10, *(len(c.label) + 1 for c in plan.candidates))
    lines = [
        f"{'':2}{'plan':<{width}}{'requests':>9}{'sizes':>14}{'latency':>10}{'tokens':>9}"
        f"{'rate wait':>11}"
    ]
    for c in plan.candidates:
        sizes = sorted({len(g.indexes) for g in c.groups})
        shown = "-".join(map(str, (sizes[0], sizes[-1]))) if len(sizes) > 1 else str(sizes[0])
        mark = "> " if c is plan.chosen else "  "
        lines.append(
            f"{mark}{c.label:<{width}}{c.k:>9}{shown:>14}{c.latency:>9.2f}s{c.cost:>9}"
            f"{c.budget_wait:>10.2f}s"
        )
    e = plan.estimate
    service = (
        f"service: rtt {e.rtt * 1000:.0f} ms, ttft0 {e.ttft0 * 1000:.0f} ms, "
        f"tpot1 {e.tpot1 * 1000:.1f} ms, beta {e.beta:.2f}, "
        f"slots {e.slots if e.slots is not None else 'no limit seen'}"
    )
    if e.prefill_share or e.cached_rate is not None:
        service += f", prefill share {e.prefill_share:.2f}"
        if e.cached_rate is not None:
            service += f", cached prefill {e.cached_rate:.0f} tok/s"
            if e.cache_per_slot:
                service += " (per-slot cache)"
    lines.append(service)
    if plan.agreement is not None:
        lines.append(plan.agreement.describe(plan.min_agreement))
    chosen = plan.chosen
    if chosen.canaries and chosen.checked_latency is not None:
        where = "once its reply is back" if chosen.canary_after else "beside it"
        lines.append(
            f"canaries: {chosen.canaries} merged request(s) checked by the same question "
            f"asked alone, {where}: {chosen.checked_latency:.2f}s with them, "
            f"{chosen.canary_tokens} tokens more"
        )
    lines.append(f"why: {plan.reason}")
    return "\n".join(lines)
