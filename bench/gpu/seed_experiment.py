"""The seeds' experiment on a real continuous-batching GPU engine (issue 18 / task #13).

Starts ``engine.py`` (beside this file) as a subprocess, then, with the real ``openai`` client
over real HTTP, for N questions x T answer tokens in each cell:

- merged: ONE request holding the N questions, ``max_tokens = N x T``;
- fan-out: N concurrent requests, ``max_tokens = T`` each;
- auto: splitter's ``aask_many`` with the default policy on the same N questions
  (``max_tokens = T``): which plan it chose, its wall time, re-asks and retries as they came.

One warm-up round per cell, then ``--rounds`` rounds in alternating arm order; medians.
The engine's weights are random: every answer is exactly ``max_tokens`` letters, so these
are SPEED figures only, and a merged reply carries none of splitter's markers (any merged
plan of auto's is re-asked: reported as it happened).

A time budget (``--budget-s``, from the script's start) keeps the run inside the device
machine's limit: cells run in priority order and a cell whose estimated cost (from the
decode times measured so far) does not fit is skipped and reported as skipped.

    python bench/gpu/seed_experiment.py --tiny --out /tmp/gpu_out      # CPU check
    python bench/gpu/seed_experiment.py --out "$OUT"                    # on the H200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
START = time.monotonic()

QUESTIONS = [
    "Explain how a hash table handles collisions.",
    "What causes the seasons on Earth?",
    "Describe the difference between TCP and UDP.",
    "Why does ice float on water?",
    "How does a compiler differ from an interpreter?",
    "What is the role of mitochondria in a cell?",
    "Explain what a Fourier transform does.",
    "Why is the sky blue during the day?",
]
ARMS = ("merged", "fan-out", "auto")
# The seeds' case first, then the rest, the dearest last: what a short budget drops.
CELLS = [(5, 200), (5, 16), (2, 200), (2, 16), (8, 16), (8, 200)]
# The engines after the first run the seeds' case alone, time allowing.
SEED_CELLS = [(5, 200), (5, 16)]
# engine.py's arguments per engine: "hf-cb" falls back to the slot loop by itself.
ENGINES = {
    "hf-cb": [],
    "slots": ["--backend", "slots"],
    "hf-cb-graphs": ["--backend", "hf-cb", "--cb-graphs"],
}


def log(message: str) -> None:
    print(f"[{time.monotonic() - START:7.1f}s] {message}", flush=True)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in ("openai", "httpx", "httpx2", "pydantic", "anyio", "torch", "transformers"):
        try:
            module = __import__(name)
            found[name] = str(getattr(module, "__version__", "?"))
        except ImportError:
            continue
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        found["git"] = head.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        found["git"] = "?"
    return found


def gpu_line() -> str | None:
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return smi.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class Engine:
    """engine.py as a subprocess: started, waited for, stopped."""

    def __init__(self, args: argparse.Namespace, name: str) -> None:
        command = [sys.executable, str(HERE / "engine.py"), "--port", "0", *ENGINES[name]]
        command += ["--tiny"] if args.tiny else []
        self.log_path = Path(args.out) / f"engine-{name}.log"
        self.log_file = self.log_path.open("w")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.log_file, text=True
        )
        self.port: int | None = None
        self.backend: str | None = None

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                if self.process.poll() is not None:
                    return False
                continue
            if line.startswith("READY "):
                _, port, backend = line.split()
                self.port, self.backend = int(port), backend
                return True
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log_file.close()

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def start_engine(args: argparse.Namespace, name: str) -> Engine:
    """The engine ``name``; if its process dies before it serves, the slot loop instead."""
    for engine_name in dict.fromkeys((name, "slots")):
        log(f"starting the engine {engine_name}")
        engine = Engine(args, engine_name)
        left = args.budget_s - (time.monotonic() - START)
        if engine.wait_ready(min(args.start_timeout, max(left - 30, 30))):
            log(f"engine ready on port {engine.port}, backend {engine.backend}")
            return engine
        engine.stop()
        log(f"engine did not start; its log ends:\n{engine.tail()}")
    raise SystemExit("no engine could be started")


def merged_prompt(questions: list[str]) -> str:
    lines = "\n".join(f"{i}. {q}" for i, q in enumerate(questions, 1))
    return f"Please answer the following questions separately:\n{lines}"


async def ask(client: Any, model: str, text: str, max_tokens: int) -> int:
    """One chat completion; the completion tokens the engine reported."""
    reply = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens
    )
    return int(reply.usage.completion_tokens)


async def run_arm(
    arm: str, client: Any, splitter: Any, model: str, n: int, t: int
) -> dict[str, Any]:
    questions = QUESTIONS[:n]
    t0 = time.perf_counter()
    if arm == "merged":
        tokens = await ask(client, model, merged_prompt(questions), n * t)
        return {"time": time.perf_counter() - t0, "requests": 1, "tokens": tokens}
    if arm == "fan-out":
        made = await asyncio.gather(*(ask(client, model, q, t) for q in questions))
        return {"time": time.perf_counter() - t0, "requests": n, "tokens": sum(made)}
    result = await splitter.aask_many(questions, model=model, max_tokens=t)
    wall = time.perf_counter() - t0
    stats = result.stats
    plan = result.plan
    return {
        "time": wall,
        "plan": f"{plan.chosen.label} k={plan.chosen.k}" if plan is not None else "?",
        "requests": stats.requests,
        "retries": stats.retries,
        "repaired": stats.repaired,
        "failed": stats.failed,
        "predicted": stats.predicted_wall_time,
        "answered": sum(a.ok for a in result),
        "tokens": sum(a.usage.completion_tokens for a in result if a.usage is not None),
    }


async def run_cell(
    client: Any, splitter: Any, model: str, n: int, t: int, rounds: int, warmup: int
) -> dict[str, Any]:
    measured: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in range(warmup + rounds):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            got = await run_arm(arm, client, splitter, model, n, t)
            got["round"] = r - warmup  # negative: a warm-up round
            if r >= warmup:
                measured[arm].append(got)
            log(f"  N={n} T={t} round {r - warmup:+d} {arm:<7} {got['time']:.3f} s")
    med = {arm: statistics.median(m["time"] for m in measured[arm]) for arm in ARMS}
    return {
        "n": n,
        "tokens": t,
        "rounds": measured,
        "median": med,
        "min": {arm: min(m["time"] for m in measured[arm]) for arm in ARMS},
        "max": {arm: max(m["time"] for m in measured[arm]) for arm in ARMS},
        "fanout_speedup": med["merged"] / med["fan-out"],
        "auto_speedup": med["merged"] / med["auto"],
        "merged_ms_per_token": 1000 * med["merged"] / (n * t),
        "fanout_ms_per_step": 1000 * med["fan-out"] / t,
        "auto_plans": sorted({m["plan"] for m in measured["auto"]}),
        "auto_repaired": [m["repaired"] for m in measured["auto"]],
        "auto_requests": [m["requests"] for m in measured["auto"]],
    }


async def probe(client: Any, model: str) -> dict[str, float]:
    """Seconds per decode step alone and with 8 at once (32 tokens), for the budget; after a
    warm-up (the first requests of a fresh engine run several times slower)."""
    await ask(client, model, "warm up", 64)
    await asyncio.gather(*(ask(client, model, q, 16) for q in QUESTIONS))
    t0 = time.perf_counter()
    await ask(client, model, QUESTIONS[0], 32)
    one = (time.perf_counter() - t0) / 32
    t0 = time.perf_counter()
    await asyncio.gather(*(ask(client, model, q, 32) for q in QUESTIONS))
    eight = (time.perf_counter() - t0) / 32
    return {"step_1": one, "step_8": eight}


def estimate(n: int, t: int, steps: dict[str, float], passes: int) -> float:
    """Seconds a cell should take: merged N x T steps alone, fan-out and auto T steps at N;
    one pass more for a cell's first, slower pass (new shapes), and a margin."""
    one = n * t * steps["step_1"] + 2 * t * steps["step_8"]
    return (passes + 1) * one * 1.15 + 2 * passes


async def experiment(
    args: argparse.Namespace,
    base_url: str,
    model: str,
    todo: list[tuple[int, int]],
    result: dict[str, Any],
    save: Any,
) -> None:
    """The cells of ``todo`` that fit the budget, into ``result``; ``save()`` after each."""
    import openai

    from splitter import Splitter

    client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=300)
    splitter = Splitter(client)  # the default policy: auto
    cells: list[dict[str, Any]] = result.setdefault("cells", [])
    skipped: list[dict[str, Any]] = result.setdefault("skipped", [])
    async with client:
        steps = result["probe"] = await probe(client, model)
        alone, eight = 1000 * steps["step_1"], 1000 * steps["step_8"]
        log(f"probe: {alone:.2f} ms/step alone, {eight:.2f} with 8")
        for n, t in todo:
            cost = estimate(n, t, steps, args.rounds + args.warmup)
            left = args.budget_s - (time.monotonic() - START)
            if cost > left:
                log(f"skip N={n} T={t}: estimated {cost:.0f} s, {left:.0f} s left")
                skipped.append({"n": n, "tokens": t, "estimated_s": cost, "left_s": left})
                continue
            log(f"cell N={n} T={t} (estimated {cost:.0f} s, {left:.0f} s left)")
            cells.append(await run_cell(client, splitter, model, n, t, args.rounds, args.warmup))
            save()
            # What this cell measured replaces the probe's guess for the next estimates.
            steps["step_1"] = cells[-1]["merged_ms_per_token"] / 1000
            steps["step_8"] = max(steps["step_8"], cells[-1]["fanout_ms_per_step"] / 1000)


def table(cells: list[dict[str, Any]]) -> str:
    head = (
        f"{'N':>2} {'T':>4} | {'merged':>8} {'fan-out':>8} {'auto':>8} | {'fan-out x':>9} "
        f"{'auto x':>7} | {'ms/tok 1':>8} {'ms/step N':>9} | auto plan (re-asked)"
    )
    rows = [head, "-" * len(head)]
    for c in sorted(cells, key=lambda c: (c["tokens"], c["n"])):
        m = c["median"]
        plans = ", ".join(c["auto_plans"])
        rows.append(
            f"{c['n']:>2} {c['tokens']:>4} | {m['merged']:>8.3f} {m['fan-out']:>8.3f} "
            f"{m['auto']:>8.3f} | {c['fanout_speedup']:>8.2f}x {c['auto_speedup']:>6.2f}x | "
            f"{c['merged_ms_per_token']:>8.2f} {c['fanout_ms_per_step']:>9.2f} | "
            f"{plans} ({'/'.join(map(str, c['auto_repaired']))})"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny config on the CPU")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_seed"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=330.0)
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument(
        "--engines",
        default="hf-cb,slots",
        help=f"engines in order, of {', '.join(ENGINES)}: the first runs every cell, the "
        "others the seeds' case (N=5) as the budget allows",
    )
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import openai  # noqa: F401  (fail here, before the engine starts, if they are missing)

    import splitter  # noqa: F401

    found = versions()
    log(f"versions: {json.dumps(found)}")
    gpu = gpu_line()
    log(f"nvidia-smi: {gpu}")
    report: dict[str, Any] = {"versions": found, "gpu": gpu, "args": vars(args), "runs": {}}
    out = Path(args.out) / "seed_experiment.json"

    def save() -> None:
        report["elapsed_s"] = time.monotonic() - START
        out.write_text(json.dumps(report, indent=2, default=str))

    for i, name in enumerate(args.engines.split(",")):
        todo = CELLS if i == 0 else SEED_CELLS
        left = args.budget_s - (time.monotonic() - START)
        if i > 0 and left < 60:
            log(f"no run on {name}: {left:.0f} s left")
            report["runs"][name] = {"not_run": f"{left:.0f} s left"}
            continue
        result: dict[str, Any] = {}
        report["runs"][name] = result
        try:
            run_engine(args, name, todo, result, save)
        except (Exception, SystemExit) as exc:  # the other runs' figures still stand
            log(f"the run on {name} failed: {exc!r}")
            result["error"] = repr(exc)
        save()
    print_report(report, args, out)
    return 0


def run_engine(
    args: argparse.Namespace,
    name: str,
    todo: list[tuple[int, int]],
    result: dict[str, Any],
    save: Any,
) -> None:
    """Start an engine, run the cells on it, stop it."""
    import httpx

    engine = start_engine(args, name)
    try:
        base = f"http://127.0.0.1:{engine.port}"
        result["engine"] = httpx.get(f"{base}/stats", timeout=10).json()
        model = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        log(f"engine: {json.dumps(result['engine'])}")
        asyncio.run(experiment(args, f"{base}/v1", model, todo, result, save))
        result["engine_after"] = httpx.get(f"{base}/stats", timeout=10).json()["stats"]
    finally:
        engine.stop()


def print_report(report: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    for name, run in report["runs"].items():
        if "engine" not in run:
            print(f"\n{name}: {run.get('error') or run.get('not_run')}")
            continue
        engine = run["engine"]
        print()
        print(
            f"seeds' experiment on {engine['backend']} ({engine['model']}, RANDOM weights, "
            f"{engine['versions'].get('device', engine['device'])}); medians of {args.rounds} "
            f"rounds after {args.warmup} warm-up, seconds"
        )
        print(table(run.get("cells", [])))
        for s in run.get("skipped", []):
            print(
                f"skipped N={s['n']} T={s['tokens']}: "
                f"est. {s['estimated_s']:.0f} s > {s['left_s']:.0f} s left"
            )
    print(f"JSON: {out}; total {report['elapsed_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
