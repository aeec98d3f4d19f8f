"""The seeds' experiment as curves: latency vs number of questions, and the TPOT curve.

For each N in ``--ns`` the seeds' experiment (``splitter bench``: one merged request,
fan-out, and auto after its calibration, ``--rounds`` rounds in alternating order) runs on
one endpoint, and the median of each arm is plotted against N beside the physical limit
(RTT + TTFT + T x TPOT(N), measured by streaming). Then the decode speed is measured
directly: for each m in ``--concurrency``, m answers streamed at once, TPOT read from their
chunk timestamps (median of the streams); beside it, the TPOT(m) that the calibrated auto
``Splitter`` learned from its own responses alone, over all the N (one service model
carried from each N's auto to the next; its ``tpot(min(m, slots))``: past the server's slot
count the extra requests queue and do not slow the running ones).

Writes two PNGs (matplotlib, the ``bench`` extra) and a JSON with every number plotted,
and prints both tables. Run from the repository root::

    python bench/plots.py --profile llama-cpp-cpu --name sim-llama-cpp-cpu
    python bench/plots.py --profile gpt-4o-mini --name sim-gpt-4o-mini
    python bench/engine/setup.py --start --slots 5     # then, on the real engine:
    python bench/plots.py --base-url http://127.0.0.1:8080/v1 --model gemma --ignore-eos \\
        --name engine-llama-cpp --ns 1,2,3,5,8 --concurrency 1,2,3,4,5,6,8

Times are simulated seconds on the simulator (real seconds / ``--time-scale``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import openai

from splitter import ServiceModel, Splitter
from splitter._cli._experiment import Settings, experiment, summarize
from splitter._cli._probe import ARMS, measure_concurrent, question_texts
from splitter.sim import PROFILES, SimService, serve

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def _ints(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="plots.py", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--base-url", default=None, help="endpoint (default: the simulator)")
    p.add_argument("--model", default=None, help="model name (required with --base-url)")
    p.add_argument("--api-key", default="sk-no-key")
    p.add_argument("--profile", default="llama-cpp-cpu", choices=sorted(PROFILES))
    p.add_argument("--time-scale", type=float, default=0.05, help="simulator only")
    p.add_argument("--ignore-eos", action="store_true", help="llama.cpp: pin lengths exactly")
    p.add_argument("--ns", type=_ints, default=[1, 2, 3, 5, 8], help="questions per batch")
    p.add_argument("--concurrency", type=_ints, default=[1, 2, 3, 4, 5, 6, 8])
    p.add_argument("--tokens", type=int, default=200, help="answer length, pinned")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--calibration", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--name", default=None, help="file stem (default: from the endpoint)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for PNG and JSON")
    p.add_argument("--no-png", action="store_true", help="tables and JSON only")
    return p


def settings(args: argparse.Namespace, n: int) -> Settings:
    return Settings(
        base_url=args.base_url,
        model=args.model or args.profile,
        api_key=args.api_key,
        questions=n,
        tokens=args.tokens,
        rounds=args.rounds,
        calibration=args.calibration,
        ignore_eos=args.ignore_eos,
        profile=args.profile,
        time_scale=args.time_scale,
        timeout=args.timeout,
        json_path=None,
    )


async def tpot_curve(
    args: argparse.Namespace, base_url: str, scale: float, on_sim: bool, learned: Splitter
) -> list[dict[str, Any]]:
    """Measured median TPOT of m concurrent streams beside the learned TPOT(m)."""
    model = args.model or args.profile
    params: dict[str, Any] = {} if on_sim else {"max_tokens": args.tokens}
    if args.ignore_eos:
        params["extra_body"] = {"ignore_eos": True}
    estimate = learned.service_model(model).estimate()
    rows = []
    async with openai.AsyncOpenAI(base_url=base_url, api_key=args.api_key, max_retries=0) as c:
        for m in args.concurrency:
            texts = question_texts(m, args.tokens, marker=on_sim)
            timings = await measure_concurrent(c, model=model, texts=texts, params=params)
            tpots = [t.tpot for t in timings if t.tpot is not None]
            running = m if estimate.slots is None else min(m, estimate.slots)
            rows.append(
                {
                    "m": m,
                    "measured": statistics.median(tpots) / scale if tpots else None,
                    "learned": estimate.tpot(running) / scale,
                }
            )
    return rows


def run(args: argparse.Namespace, base_url: str, scale: float, on_sim: bool) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    auto: Splitter | None = None
    # One service model learns through every N, as one endpoint's would from batches of
    # varied sizes: a single N shows the decode speed at one concurrency only.
    service = ServiceModel()
    for n in args.ns:
        s = settings(args, n)
        results, calibration, probe, auto = anyio.run(
            experiment, s, base_url, scale, on_sim, service
        )
        summary = summarize(s, results, probe, auto, scale)
        answered = sum(m.answered for arm in ARMS for m in results[arm])
        points.append(
            {
                "n": n,
                **{arm: summary["medians"][arm] for arm in ARMS},
                "limit": summary["limit"],
                "auto_plan": results["auto"][-1].plan,
                "calibration": calibration,
                "answered": answered,
                "asked": n * args.rounds * len(ARMS),
            }
        )
        print(
            f"N={n}: merged {summary['medians']['merged']:.2f}  fan-out "
            f"{summary['medians']['fan-out']:.2f}  auto {summary['medians']['auto']:.2f} "
            f"({results['auto'][-1].plan})  limit {summary['limit']:.2f}  "
            f"answered {answered}/{n * args.rounds * len(ARMS)}",
            flush=True,
        )
    assert auto is not None
    estimate = auto.service_model(args.model or args.profile).estimate()
    curve = anyio.run(tpot_curve, args, base_url, scale, on_sim, auto)
    return {
        "points": points,
        "tpot": curve,
        "learned": {
            "tpot1": estimate.tpot1 / scale,
            "beta": estimate.beta,
            "slots": estimate.slots,
            "rtt": estimate.rtt / scale,
            "ttft0": estimate.ttft0 / scale,
        },
    }


def print_tables(report: dict[str, Any], unit: str) -> None:
    print(f"\nlatency vs questions ({unit}), median of the rounds")
    print(f"{'N':>3}{'merged':>9}{'fan-out':>9}{'auto':>9}{'limit':>9}  auto plan")
    for p in report["points"]:
        print(
            f"{p['n']:>3}{p['merged']:>9.2f}{p['fan-out']:>9.2f}{p['auto']:>9.2f}"
            f"{p['limit']:>9.2f}  {p['auto_plan']}"
        )
    learned = report["learned"]
    slots = learned["slots"] if learned["slots"] is not None else "no limit seen"
    print(
        f"\nTPOT vs concurrency (ms per token); learned: tpot1 {learned['tpot1'] * 1000:.1f} ms,"
        f" beta {learned['beta']:.2f}, slots {slots}"
    )
    print(f"{'m':>3}{'measured':>10}{'learned':>9}{'learned/measured':>18}")
    for row in report["tpot"]:
        measured = row["measured"]
        ratio = "n/a" if not measured else f"{row['learned'] / measured:.2f}"
        shown = "n/a" if measured is None else f"{measured * 1000:.1f}"
        print(f"{row['m']:>3}{shown:>10}{row['learned'] * 1000:>9.1f}{ratio:>18}")


def save_pngs(report: dict[str, Any], unit: str, title: str, stem: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("plots need matplotlib: pip install -e '.[bench]'") from exc
    ns = [p["n"] for p in report["points"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for key, style in (("merged", "o-"), ("fan-out", "s-"), ("auto", "^--"), ("limit", ":")):
        ax.plot(ns, [p[key] for p in report["points"]], style, label=key)
    ax.set_xlabel("independent questions N")
    ax.set_ylabel(unit)
    ax.set_title(f"{title}: latency vs N")
    ax.set_xticks(ns)
    ax.grid(alpha=0.3)
    ax.legend()
    latency = stem.with_name(stem.name + "-latency-vs-n.png")
    fig.tight_layout()
    fig.savefig(latency, dpi=110)
    plt.close(fig)

    ms = [r["m"] for r in report["tpot"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    measured = [None if r["measured"] is None else r["measured"] * 1000 for r in report["tpot"]]
    ax.plot(ms, measured, "o-", label="measured (streams' chunk timestamps)")
    ax.plot(ms, [r["learned"] * 1000 for r in report["tpot"]], "^--", label="learned by auto")
    ax.set_xlabel("concurrent requests m")
    ax.set_ylabel("ms per output token")
    ax.set_title(f"{title}: TPOT(m)")
    ax.set_xticks(ms)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    tpot = stem.with_name(stem.name + "-tpot.png")
    fig.tight_layout()
    fig.savefig(tpot, dpi=110)
    plt.close(fig)
    return [latency, tpot]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.base_url is not None and args.model is None:
        print("plots.py: error: --model is required with --base-url", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.base_url is None:
        name = args.name or f"sim-{args.profile}"
        scale, unit = args.time_scale, "simulated seconds"
        title = f"simulator {args.profile!r}"
        with serve(SimService(args.profile, time_scale=scale)) as base_url:
            report = run(args, base_url, scale, on_sim=True)
    else:
        name = args.name or "endpoint"
        scale, unit, title = 1.0, "seconds", f"{args.model} at {args.base_url}"
        report = run(args, args.base_url, scale, on_sim=False)
    print_tables(report, unit)
    stem = args.out / name
    report["settings"] = {k: str(v) for k, v in vars(args).items() if k != "api_key"}
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    written = [stem.with_suffix(".json")]
    if not args.no_png:
        written += save_pngs(report, unit, title, stem)
    print("\nwrote " + ", ".join(str(p) for p in written))
    lost = sum(p["asked"] - p["answered"] for p in report["points"])
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
