"""Single calls under a tight rate limit: aggregated per tenant, against one request each.

CALLS single-question calls (default 200), tenant by tenant in turn from TENANTS tenants
(default 4), all made at once through ``Splitter.aask_one(question, isolation_key=tenant)``
on one ``Splitter``. Two arms, each on a fresh ``SimService("gpt-4o-mini",
time_scale=S, limits=SimLimits(rpm=RPM))`` (default RPM 60, S 0.01) over real loopback
HTTP, with ``Policy(limits=Limits(rpm=RPM / S), prior=<the profile's timing at scale S>)``
(the service's limit told in real requests per minute):

* one-by-one: ``aggregate_window_ms=None``: every call is its own ``aask_many``, one
  request each, paced by the budget.
* aggregated: ``aggregate_window_ms=W`` (default 50 real ms): the calls of one tenant that
  arrive within W ms of the first are answered by one ``aask_many``, whose planner may
  merge them (at most 4 to a request) to spend fewer requests of the budget.

Before each arm's clock starts, one call teaches the budget the service's true refill rate
from its ``x-ratelimit-*`` headers (the rate limit is in simulated minutes; the prior is the
profile's timing at scale S: what a long-running service has learned about its endpoint).
Printed per arm: wall time in simulated seconds (real / S; the window counts too, magnified
like all real time), requests the service received, answers that were their own question's,
and logged prompts holding questions of more than one tenant (must be 0); then the ratio of
the wall times. A measurement: it exits 0 whatever the times, 1 if a prompt mixed tenants
or a caller got an answer that was not its own.

Run from the repository root::

    python bench/aggregate.py [--calls 200] [--tenants 4] [--rpm 60] [--window-ms 50]
        [--scale 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import openai

from splitter import Answer, Limits, Policy, ServicePrior, Splitter
from splitter.sim import PROFILES, SimLimits, SimService, answer_tag, serve

MODEL = "gpt-4o-mini"
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell")


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    wall: float  # simulated seconds
    requests: int  # received by the service during the arm (the warm-up call excluded)
    own: int  # answers that were their own question's
    mixed: int  # prompts holding questions of two tenants or more


def prior(scale: float) -> ServicePrior:
    """The profile's timing in real seconds at this time scale."""
    p = PROFILES[MODEL]
    return ServicePrior(
        rtt=p.rtt * scale,
        ttft0=p.ttft0 * scale,
        prefill_rate=p.prefill_rate / scale,
        tpot1=p.tpot1 * scale,
        beta=p.beta,
    )


def calls(n: int, tenants: Sequence[str]) -> list[tuple[str, str]]:
    """(question, tenant) pairs; the tenant's name is in its questions, to check prompts."""
    return [
        (f"[{tenants[i % len(tenants)]}] What is {i} + {i}?", tenants[i % len(tenants)])
        for i in range(n)
    ]


def own(answer: Answer, question: str) -> bool:
    return answer.ok and (answer.text or "").startswith(answer_tag(question))


async def run_arm(name: str, window_ms: float | None, args: argparse.Namespace) -> Arm:
    service = SimService(MODEL, time_scale=args.scale, limits=SimLimits(rpm=args.rpm))
    # The service's limit is per simulated minute: told in real time, it is RPM / S.
    real_rpm = round(args.rpm / args.scale)
    policy = Policy(
        limits=Limits(rpm=real_rpm), prior=prior(args.scale), aggregate_window_ms=window_ms
    )
    tenants = TENANTS[: args.tenants]
    work = calls(args.calls, tenants)
    with serve(service) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim") as client:
            splitter = Splitter(client, policy=policy, model=MODEL)
            await splitter.aask_one("warm-up")  # the budget learns the refill rate
            before = len(service.log)
            started = time.perf_counter()
            answers = await asyncio.gather(
                *(splitter.aask_one(q, isolation_key=tenant) for q, tenant in work)
            )
            wall = (time.perf_counter() - started) / args.scale
    sent = service.log[before:]
    mixed = sum(sum(f"[{t}]" in r.user_text for t in tenants) > 1 for r in sent)
    mine = sum(own(a, q) for a, (q, _) in zip(answers, work, strict=True))
    return Arm(name, wall, len(sent), mine, mixed)


async def run(args: argparse.Namespace) -> int:
    arms = [
        await run_arm("one-by-one", None, args),
        await run_arm("aggregated", args.window_ms, args),
    ]
    print(
        f"{args.calls} single calls at once from {args.tenants} tenants; service {MODEL!r} "
        f"RPM {args.rpm}, time scale {args.scale:g}; window {args.window_ms:g} ms (real)"
    )
    print(
        f"{'arm':<12}{'wall (sim s)':>13}{'requests':>10}{'own answers':>13}{'mixed prompts':>15}"
    )
    for arm in arms:
        print(f"{arm.name:<12}{arm.wall:>13.1f}{arm.requests:>10}{arm.own:>13}{arm.mixed:>15}")
    alone, together = arms
    print(f"wall aggregated / one-by-one: {together.wall / alone.wall:.2f}")
    print(f"prompts mixing tenants: {sum(arm.mixed for arm in arms)}")
    return 0 if all(a.mixed == 0 and a.own == args.calls for a in arms) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/aggregate.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=200, help="single calls, all at once")
    parser.add_argument("--tenants", type=int, default=4, help=f"at most {len(TENANTS)}")
    parser.add_argument("--rpm", type=int, default=60, help="the service's requests per minute")
    parser.add_argument("--window-ms", type=float, default=50.0, help="aggregation window, real")
    parser.add_argument("--scale", type=float, default=0.01, help="real seconds per simulated one")
    args = parser.parse_args(argv)
    if not 1 <= args.tenants <= len(TENANTS) or min(args.calls, args.rpm) < 1:
        parser.error(f"--calls and --rpm must be positive, --tenants 1 to {len(TENANTS)}")
    if args.scale <= 0 or args.window_ms < 0:
        parser.error("--scale must be positive and --window-ms not negative")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
