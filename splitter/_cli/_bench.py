"""The seeds' experiment on any OpenAI-compatible endpoint: ``splitter bench``.

The seeds claim that N independent answers arrive about N times sooner as N concurrent
requests than as one merged request, "if the service can batch them". Whether it can is a
property of the endpoint, not of the client: a GPU API decodes N sequences nearly as fast
as one, while a 2-core llama.cpp server pays ~0.4 of a step more per extra sequence. So the
claim, and the planner's choice, are measured here side by side on the same endpoint:

- **merged**: all N questions in one request, in splitter's own merged format
  (``Policy(strategy="merge")``), so its serial decode is what the seeds describe;
- **fan-out**: one request per question, all at once (``strategy="fanout"``);
- **auto**: what the planner chooses, on a ``Splitter`` that first ran ``calibration``
  batches against the endpoint and learned it from their responses;

round after round, alternating the order so drift and warm caches favour no arm. Every
answer's length is pinned so each arm decodes the same tokens: the simulator's ``[len=T]``
marker, or ``max_tokens=T`` with llama.cpp's ``ignore_eos`` (``ignore_eos=True``) on a real
engine. Beside them stands the physical limit no plan beats, measured directly rather than
taken from the planner's model: RTT + TTFT (the first text of one answer streamed alone;
a model listing tells how much of it is round trip) + T x TPOT(N) (N answers streamed at
once, from their chunk timestamps).

The merged arm is timed by its one merged request (an HTTP event hook on the client sees
it go and come back): that is the seeds' baseline. Splitter may then re-ask alone answers
it could not read back from it; with ``ignore_eos`` it always does for the last one, since
the request always stops at ``max_tokens`` and the last answer counts as cut. Those re-asks
show in the ``requests`` column and the whole call's time is reported beside it, but they
are not what merging costs on a model that writes its markers. The other arms are timed by
the whole ``aask_many`` call, as their caller waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import openai

from .._openai import translate_error
from ..sim import PROFILES, SimService, serve
from ._args import at_least_one, positive_number
from ._experiment import Measured, Settings, experiment, summarize
from ._probe import ARMS


def _print_report(
    s: Settings,
    where: str,
    results: dict[str, list[Measured]],
    calibration: list[str],
    summary: dict[str, Any],
    unit: str,
) -> None:
    n, t = s.questions, s.tokens
    pinned = "ignore_eos" if s.ignore_eos else ("[len=T]" if s.base_url is None else "max_tokens")
    print(
        f"seeds' experiment: {n} independent questions x {t} tokens ({pinned}), "
        f"{s.rounds} round(s), on {where}"
    )
    print(f"auto calibrated on {len(calibration)} batch(es): {', '.join(calibration) or '-'}")
    print(f"times in {unit}")
    print(
        f"{'arm':<9}{'plan':<15}{'requests':>9}{'median':>9}{'min':>9}{'max':>9}{'vs merged':>11}"
    )
    varied = []
    for arm in ARMS:
        rows = results[arm]
        times = [m.time for m in rows]
        plans = [m.plan for m in rows]
        shown = statistics.mode(plans)
        if len(set(plans)) > 1:  # marked, and each round's plan listed under the table
            shown += "*"
            varied.append(f"{arm} by round: {', '.join(plans)}")
        requests = statistics.median(m.requests for m in rows)
        print(
            f"{arm:<9}{shown:<15}{requests:>9g}{summary['medians'][arm]:>9.2f}"
            f"{min(times):>9.2f}{max(times):>9.2f}{summary['speedups'][arm]:>10.2f}x"
        )
    for line in varied:
        print(line)
    merged = results["merged"]
    refused = [m for m in merged if m.refused is not None]
    if refused:
        print(
            f"merged: the service refused the merged request in {len(refused)} round(s) "
            f"(HTTP {refused[0].refused}); those rounds are timed by the whole call"
        )
    repaired = statistics.median(m.repaired for m in merged)
    if repaired and len(refused) < len(merged):
        whole = statistics.median(m.wall for m in merged)
        print(
            "merged: timed by its one merged request; splitter then re-asked a median of "
            f"{repaired:g} answer(s) alone, the whole call taking {whole:.2f} (median)"
        )
    best = summary["best_fixed"]
    print(
        f"auto / best measured plan ({best}, {summary['speedups'][best]:.2f}x over merged): "
        f"{summary['auto_of_best']:.3f}"
        + ("" if summary.get("target") is None else f" (target >= {summary['target']:.2f})")
    )
    p, learned = summary["probe"], summary["learned"]
    rtt = "n/a" if p["rtt"] is None else f"{p['rtt']:.3f}"
    auto_of_limit = summary["auto_of_limit"]
    print(
        f"physical limit: RTT {rtt} + TTFT {p['ttft']:.3f} + "
        f"{summary.get('limit_tokens', t)} x TPOT({n}) "
        f"{p['tpot_n'] * 1000:.1f} ms = {summary['limit']:.2f}; auto / limit = "
        + ("n/a" if auto_of_limit is None else f"{auto_of_limit:.2f}")
    )
    slots = learned["slots"] if learned["slots"] is not None else "no limit seen"
    print(
        f"TPOT measured: TPOT(1) {p['tpot1'] * 1000:.1f} ms, TPOT({n}) {p['tpot_n'] * 1000:.1f} ms;"
        f" learned by auto: {learned['tpot(1)'] * 1000:.1f} ms, "
        f"{learned[f'tpot({n})'] * 1000:.1f} ms (beta {learned['beta']:.2f}, slots {slots})"
    )
    answered = ", ".join(f"{arm} {sum(m.answered for m in results[arm])}" for arm in ARMS)
    line = f"answered: {answered} of {n * s.rounds} each"
    if s.base_url is None:
        own = sum(m.attributed or 0 for arm in ARMS for m in results[arm])
        line += f"; attached to their own question: {own}/{n * s.rounds * len(ARMS)}"
    print(line)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``splitter bench`` and ``bench/seed_benchmark.py``."""
    parser.add_argument(
        "--base-url",
        default=None,
        help="the OpenAI-compatible endpoint to measure (default: a simulated one)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model to ask (required with --base-url; default: the simulated profile)",
    )
    parser.add_argument(
        "--api-key", default=None, help="the API key (default: $OPENAI_API_KEY, else none)"
    )
    parser.add_argument(
        "--questions", type=at_least_one, default=5, help="N, the independent questions"
    )
    parser.add_argument(
        "--tokens", type=at_least_one, default=200, help="T, every answer's length in tokens"
    )
    parser.add_argument(
        "--rounds", type=at_least_one, default=3, help="measured rounds of each way"
    )
    parser.add_argument(
        "--calibration",
        type=int,
        default=2,
        help="batches splitter's own choice learns the endpoint from before measuring",
    )
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send llama.cpp's ignore_eos so every answer is exactly T tokens",
    )
    parser.add_argument(
        "--profile",
        default="gpt-4o-mini",
        choices=sorted(PROFILES),
        help="which kind of service to simulate (without --base-url)",
    )
    parser.add_argument(
        "--time-scale",
        type=positive_number,
        default=0.1,
        help="real seconds per simulated second (without --base-url)",
    )
    parser.add_argument(
        "--timeout", type=positive_number, default=600.0, help="seconds allowed per request"
    )
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="also write every measurement here"
    )


def _settings(args: argparse.Namespace) -> Settings:
    if args.base_url is not None and args.model is None:
        raise ValueError("--model is required with --base-url")
    for name in ("questions", "tokens", "rounds"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1")
    if args.calibration < 0 or args.time_scale <= 0 or args.timeout <= 0:
        raise ValueError("--calibration must be >= 0, --time-scale and --timeout > 0")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "sk-no-key"
    return Settings(
        base_url=args.base_url,
        model=args.model or args.profile,
        api_key=api_key,
        questions=args.questions,
        tokens=args.tokens,
        rounds=args.rounds,
        calibration=args.calibration,
        ignore_eos=args.ignore_eos,
        profile=args.profile,
        time_scale=args.time_scale,
        timeout=args.timeout,
        json_path=args.json,
    )


def run(args: argparse.Namespace) -> int:
    """Run the experiment, print the table, write the JSON; 1 if any question went
    unanswered (the times themselves are a measurement: no threshold fails the run)."""
    try:
        s = _settings(args)
    except ValueError as exc:
        print(f"splitter bench: error: {exc}", file=sys.stderr)
        return 2
    if s.base_url is None:
        service = SimService(s.profile, time_scale=s.time_scale)
        scale, unit = s.time_scale, f"simulated seconds (real seconds / {s.time_scale:g})"
        try:
            with serve(service) as base_url:
                where = f"the simulated {s.profile!r} service at {base_url}"
                outcome = anyio.run(experiment, s, base_url, scale, True)
        except RuntimeError as exc:  # uvicorn (the sim extra) is missing
            print(f"splitter bench: error: {exc}", file=sys.stderr)
            return 1
    else:
        scale, unit, where = 1.0, "seconds", f"{s.base_url} (model {s.model!r})"
        try:
            outcome = anyio.run(experiment, s, s.base_url, scale, False)
        except openai.OpenAIError as exc:
            failure = translate_error(exc)
            print(f"splitter bench: error: {s.base_url} failed: {failure}", file=sys.stderr)
            return 3
    results, calibration, measured_probe, auto = outcome
    summary = summarize(s, results, measured_probe, auto, scale)
    if getattr(args, "target", None) is not None:  # bench/seed_benchmark.py's bookkeeping
        summary["target"] = args.target
    _print_report(s, where, results, calibration, summary, unit)
    if s.json_path is not None:
        report = {
            "settings": _applied(asdict(s)),
            "where": where,
            "unit": unit,
            "calibration": calibration,
            "arms": {arm: [asdict(m) for m in results[arm]] for arm in ARMS},
            "summary": summary,
        }
        Path(s.json_path).write_text(json.dumps(report, indent=2) + "\n")
    unanswered = sum(s.questions - m.answered for arm in ARMS for m in results[arm])
    return 1 if unanswered else 0


def _applied(settings: dict[str, object]) -> dict[str, object]:
    """The settings as the JSON records them: only what applied to this run (a simulated
    profile and its time scale mean nothing against a real endpoint), never the key."""
    recorded = {k: v for k, v in settings.items() if k != "api_key"}
    if settings.get("base_url") is not None:
        recorded.pop("profile", None)
        recorded.pop("time_scale", None)
    return recorded


def main(argv: Sequence[str] | None = None, *, target: float | None = None) -> int:
    """``python bench/seed_benchmark.py``: the same as ``splitter bench``, with the project's
    ``target`` for auto's share of the best plan printed beside it."""
    parser = argparse.ArgumentParser(
        prog="seed_benchmark.py", description=(__doc__ or "").splitlines()[0]
    )
    add_arguments(parser)
    parser.set_defaults(target=target)
    return run(parser.parse_args(argv))
