"""Issue 19's matrix: merged, fan-out, primed fan-out and auto, with and without a shared
context, on a real engine (or the bundled simulator), side by side.

Cells: N questions (``--ns``, default 2,5,8) x answer length in tokens (``--tokens``,
default 16,200) x shared context (``--contexts``, default none,doc: ``doc`` is a ~1,500-token
document passed as ``context=``). In every cell four plans answer a batch of N questions:

* merged: ``Policy(strategy="merge", merge=MergePolicy(max_per_request=N))``, one request;
* fan-out: ``strategy="fanout"``, one request per question, all at once;
* primed: ``strategy="primed"``, one request first, the others at its first token;
* auto: ``strategy="auto"`` (the default ``MergePolicy``, so at most 4 questions a request;
  ``--cap-at-n``: at most N, as the merged plan).

All four run on one ``Splitter`` (its policy swapped per plan), so they share one learned
service model: the predicted wall time of each plan (``stats.predicted_wall_time``) comes
from what every earlier batch taught it. Before a cell is measured auto runs ``--warmup``
batches (default 1) of that cell's shape; the first cell's are preceded by as many more, so
the model has seen the endpoint before anything is measured. Rounds (``--rounds``) interleave
the plans, their order rotated each round; figures are medians over rounds.

Every round gets fresh questions (the checkable questions of
``tests/data/checkable_questions.jsonl``, taken in turn), which each of its plans asks, so
their answers can be compared; every batch has a context of its own (the document, whose
first line names the batch, or with no document a one-line tag naming it), so no batch
finds another's prompt in the engine's prefix cache: only a plan's own requests can serve
each other. Every request
carries the system prompt ``You are a helpful assistant.`` (SmolLM2 needs one) and
temperature 0; each question is capped at ``max_tokens`` = its answer length. On the
engine answers end where the model ends them (``--ignore-eos`` pins them to the cap, as
``seed_benchmark.py`` does; merged requests then always re-ask their last answer); the
``out`` column shows completion tokens per question. Length 200 asks "Explain in detail."
after the question, shorter lengths "Answer in a few words." ``correct`` counts answers
matching the question's accept patterns
(meaningless with the base model gemma, whose answers are not answers; meaningless on the
simulator, whose answers are tags: there ``own`` counts answers attached to their own
question).

Columns per plan: median wall (the whole ``aask_many`` call), plan-t (until each request
of the plan had its answer: re-asks of what a merged reply did not give back and merge
canaries left out; "-" if a plan's request failed), predicted (the plan's
estimate), pred/meas, requests sent (re-asks included), prompt tokens and those the engine
served from its cache (``usage.prompt_tokens_details.cached_tokens``: llama-server fills it
from ``timings.cache_n``), answers. Per cell: the merged answers agreeing with fan-out's
answer to the same question (splitter's canary measure on every merged answer), the plans
allowed (merged only while that share is at least ``MergePolicy.min_agreement``: issue 19's
"best among plans whose answers the quality check allows"), the fastest plan, the best
allowed plan, auto's choice, and auto / best = best median / auto median (issue 19's
target: >= 0.95). It is a measurement:
the exit status is 0 whatever the ratios, 1 if a question went unanswered.

Run from the repository root::

    python bench/engine_matrix.py                       # the simulator, on virtual time
    python bench/engine/setup.py --start --slots 5 --ctx-per-slot 4096
    python bench/engine_matrix.py --base-url http://127.0.0.1:8080/v1 --model smollm2 \\
        --json /tmp/engine_matrix.json --plot docs/img/engine-matrix.png

On the simulator the profile is ``llama-cpp-cpu`` made llama-server-like: a per-slot prefix
cache, compute-bound prefill shared by concurrent requests, ``timings`` in every response;
times are simulated seconds on virtual time (``splitter.testing.run_virtual``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))  # merge_quality, beside this

from merge_quality import Checkable, correct, load

from splitter import (
    BatchPlanned,
    BatchResult,
    BatchStarted,
    Event,
    MergePolicy,
    Policy,
    Question,
    RequestFinished,
    Splitter,
)
from splitter._canary import agrees
from splitter.sim import PROFILES, SimService, answer_tag
from splitter.testing import run_virtual

PLANS = ("merged", "fan-out", "primed", "auto")
SYSTEM = "You are a helpful assistant."
TARGET_SHARE = 0.95  # auto / best (issue 19)
TARGET_PREDICTION = 0.15  # |predicted / measured - 1|
LONG = 100  # answer lengths from here on ask for detail
SHORT = " Answer in a few words."  # below it: SmolLM2 otherwise starts "To add 9 and 8, ..."
RUN = f"{os.getpid()}-{int(time.time())}"  # batch numbers restart with every process
_FACTS = (
    "The harbour town of Veldmark was founded by fishermen in the year 1412.",
    "Its lighthouse, painted red and white, stands 38 metres tall on the northern cliff.",
    "The town council meets on the first Monday of every month in the old grain hall.",
    "Veldmark exports smoked herring, wool blankets and a bitter plum liqueur.",
    "A ferry leaves for the island of Osk twice a day, at seven and at four.",
    "The market square holds a clock tower whose bells ring a short tune every hour.",
    "Winters are long and wet; the harbour rarely freezes because of a warm current.",
    "The school teaches three languages, and the library lends books for six weeks.",
)


def document(batch: int, sentences: int = 70) -> str:
    """~1,500 tokens (70 sentences) about a made-up town; its first line names the batch
    and the run, so no two batches, of this process or an earlier one, share a cached
    prefix."""
    lines = [f"Document {batch} of run {RUN}: notes on Veldmark."]
    for i in range(sentences):
        lines.append(f"{i + 1}. {_FACTS[i % len(_FACTS)]}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Cell:
    n: int
    tokens: int
    context: bool

    @property
    def name(self) -> str:
        return f"N={self.n} T={self.tokens} ctx={'doc' if self.context else 'none'}"


@dataclass(slots=True)
class Run:
    """One plan's batch in one round; times in seconds (simulated on the simulator)."""

    plan: str
    round: int
    chosen: str
    wall: float
    predicted: float | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    asked: int
    answered: int
    correct: int
    own: int | None  # simulator: answers carrying their own question's tag
    planned: float | None = None  # until the plan's own requests were answered (no re-asks)
    service: str = ""  # the learned terms the plan was priced with (explain()'s line)
    answers: list[str | None] = field(default_factory=list)  # in the batch's order


class PlanSpan:
    """An ``on_event`` hook: the time from the batch's start until every request of the
    first plan had its first response, re-asks and canaries left out (they ask other
    groups of questions than the plan's)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.groups: set[tuple[int, ...]] = set()
        self.done: dict[tuple[int, ...], float] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, BatchStarted):
            self.start = event.at
        elif isinstance(event, BatchPlanned) and event.wave == 0:
            self.groups = {tuple(sorted(g)) for g in event.groups}
        elif isinstance(event, RequestFinished) and event.ok:
            key = tuple(sorted(event.indexes))
            if key in self.groups:
                self.done.setdefault(key, event.at)

    def span(self) -> float | None:
        if self.start is None or not self.groups or set(self.done) != self.groups:
            return None
        return max(self.done.values()) - self.start


@dataclass(slots=True)
class CellReport:
    cell: Cell
    runs: list[Run] = field(default_factory=list)
    warmup: list[str] = field(default_factory=list)  # auto's plans in the warm-up batches

    def median(self, plan: str, key: str) -> float:
        return statistics.median(float(getattr(r, key)) for r in self.runs if r.plan == plan)

    def merged_agreement(self) -> tuple[int, int]:
        """Issue 18's quality check on every merged answer: (agreeing, compared) with the
        fan-out answer to the same question in the same round, by splitter's canary
        measure (``splitter._canary.agrees``)."""
        overlap = MergePolicy().canary_overlap
        agreeing = compared = 0
        for merged in (r for r in self.runs if r.plan == "merged"):
            alone = next(r for r in self.runs if r.plan == "fan-out" and r.round == merged.round)
            for m, a in zip(merged.answers, alone.answers, strict=True):
                if m is not None and a is not None:
                    compared += 1
                    agreeing += agrees(m, a, overlap)
        return agreeing, compared

    def allowed(self) -> tuple[str, ...]:
        """The plans issue 19's best is taken from: fan-out and primed (answers asked alone),
        and merged only while its answers agree with fan-out's at least as often as
        ``MergePolicy.min_agreement`` demands (the gate auto's canaries hold merging to)."""
        agreeing, compared = self.merged_agreement()
        merged_ok = compared == 0 or agreeing / compared >= MergePolicy().min_agreement
        return ("merged", "fan-out", "primed") if merged_ok else ("fan-out", "primed")

    def summary(self) -> dict[str, Any]:
        walls = {p: self.median(p, "wall") for p in PLANS}
        best = min(self.allowed(), key=lambda p: walls[p])
        chosen = [r.chosen for r in self.runs if r.plan == "auto"]
        agreeing, compared = self.merged_agreement()
        return {
            "walls": walls,
            "best": best,
            "fastest": min(PLANS[:3], key=lambda p: walls[p]),
            "merged_agreement": [agreeing, compared],
            "auto_share": walls[best] / walls["auto"] if walls["auto"] > 0 else None,
            "auto_chose": statistics.mode(chosen),
            "auto_choices": chosen,
        }


def policies(n: int, canaries: bool = True, cap_at_n: bool = False) -> dict[str, Policy]:
    """Each plan's policy for a cell of ``n`` questions; ``cap_at_n``: auto may merge the
    whole batch too (``MergePolicy.max_per_request``, by default 4, set to ``n``)."""
    auto = MergePolicy(canaries=canaries)
    if cap_at_n:
        auto = auto.model_copy(update={"max_per_request": max(n, auto.max_per_request)})
    return {
        "merged": Policy(strategy="merge", merge=MergePolicy(max_per_request=n), timeout=600),
        "fan-out": Policy(strategy="fanout", timeout=600),
        "primed": Policy(strategy="primed", timeout=600),
        "auto": Policy(merge=auto, timeout=600),
    }


class Matrix:
    """Runs the cells on one client and one Splitter (one learned service model)."""

    def __init__(self, client: openai.AsyncOpenAI, model: str, args: argparse.Namespace):
        self.client, self.model, self.args = client, model, args
        self.on_sim = args.base_url is None
        self.questions = load()
        self.taken = 0  # questions handed out so far (each batch gets the next ones)
        self.batches = 0
        self.splitter = Splitter(client, policy=policies(1)["auto"], model=model)

    def _batch(self, cell: Cell, fresh: bool) -> tuple[list[Checkable], list[Question], str | None]:
        """The next batch: the round's questions again (``fresh`` False: every plan of a
        round asks the same ones, so their answers can be compared) under a context of its
        own (the document, or with none a one-line tag), so no batch finds another's
        prompt in the engine's prefix cache."""
        if fresh:
            self.taken += cell.n
        start = self.taken - cell.n
        picked = [self.questions[(start + i) % len(self.questions)] for i in range(cell.n)]
        self.batches += 1
        ask = []
        for q in picked:
            text = q.question + (" Explain in detail." if cell.tokens >= LONG else SHORT)
            if self.on_sim:
                text += f" [len={cell.tokens}]"
            ask.append(Question(text=text, max_tokens=cell.tokens))
        tag = f"Batch {self.batches} of run {RUN}."
        return picked, ask, document(self.batches) if cell.context else tag

    async def ask(self, cell: Cell, plan: str, round_: int, fresh: bool = True) -> Run:
        picked, ask, context = self._batch(cell, fresh)
        params: dict[str, Any] = {"temperature": 0}
        if self.args.ignore_eos:
            params["extra_body"] = {"ignore_eos": True}
        self.splitter.policy = policies(cell.n, self.args.canaries, self.args.cap_at_n)[plan]
        hook = PlanSpan()
        result = await self.splitter.aask_many(
            ask, system=SYSTEM, context=context, on_event=hook, **params
        )
        run = self._run(plan, round_, picked, result)
        run.planned = hook.span()
        return run

    def _run(self, plan: str, round_: int, picked: list[Checkable], result: BatchResult) -> Run:
        s, u = result.stats, result.usage
        own = None
        if self.on_sim:
            own = sum(
                bool(a.text and a.text.startswith(answer_tag(a.question.text))) for a in result
            )
        return Run(
            plan=plan,
            round=round_,
            chosen="?" if result.plan is None else result.plan.chosen.label,
            wall=s.wall_time,
            predicted=s.predicted_wall_time,
            requests=s.requests,
            prompt_tokens=u.prompt_tokens,
            cached_tokens=u.cached_tokens,
            completion_tokens=u.completion_tokens,
            asked=len(picked),
            answered=sum(a.ok for a in result),
            correct=sum(correct(a.text, q.accept) for a, q in zip(result, picked, strict=True)),
            own=own,
            service=_service_line(result),
            answers=[a.text for a in result],
        )

    async def cell(self, cell: Cell, first: bool) -> CellReport:
        report = CellReport(cell)
        for _ in range(self.args.warmup * (2 if first else 1)):
            report.warmup.append((await self.ask(cell, "auto", -1)).chosen)
        for r in range(self.args.rounds):
            order = PLANS[r % len(PLANS) :] + PLANS[: r % len(PLANS)]
            for i, plan in enumerate(order):
                report.runs.append(await self.ask(cell, plan, r, fresh=i == 0))
        return report


def _service_line(result: BatchResult) -> str:
    if result.plan is None:
        return ""
    lines = result.plan.explain().splitlines()
    return next((line.strip() for line in lines if line.strip().startswith("service:")), "")


def cells(args: argparse.Namespace) -> list[Cell]:
    """Shortest answers first, then no context before the document: the cheap cells first,
    so a run cut short (the JSON is written after every cell) keeps the most cells."""
    return [
        Cell(n, t, c == "doc")
        for t in map(int, args.tokens.split(","))
        for c in args.contexts.split(",")
        for n in map(int, args.ns.split(","))
    ]


async def run_matrix(
    client: openai.AsyncOpenAI, model: str, args: argparse.Namespace
) -> list[CellReport]:
    matrix = Matrix(client, model, args)
    reports = []
    for i, cell in enumerate(cells(args)):
        report = await matrix.cell(cell, first=i == 0)
        print_cell(report, args)
        reports.append(report)
        if args.json:  # after every cell: a run cut short keeps what it measured
            write_json(reports, args)
    return reports


def write_json(reports: list[CellReport], args: argparse.Namespace) -> None:
    data = [
        {"cell": asdict(r.cell), "warmup": r.warmup, "runs": [asdict(x) for x in r.runs]}
        | {"summary": r.summary()}
        for r in reports
    ]
    Path(args.json).write_text(json.dumps({"settings": vars(args), "cells": data}, indent=2))


def sim_service() -> SimService:
    profile = PROFILES["llama-cpp-cpu"].model_copy(
        update={
            "prefix_cache": "slot",
            "shared_prefill": True,
            "timings": True,
            "context_window": 16384,
        }
    )
    return SimService(profile)


async def on_sim(args: argparse.Namespace) -> list[CellReport]:
    async with sim_service().async_client() as client:
        return await run_matrix(client, "llama-cpp-cpu", args)


async def on_engine(args: argparse.Namespace) -> list[CellReport]:
    key = os.environ.get("OPENAI_API_KEY") or "sk-no-key"
    async with openai.AsyncOpenAI(base_url=args.base_url, api_key=key, max_retries=0) as client:
        return await run_matrix(client, args.model, args)


HEADER = (
    f"{'cell':<22}{'plan':<9}{'wall':>8}{'plan-t':>8}{'pred':>8}{'p/m':>6}{'req':>5}"
    f"{'prompt':>8}{'cached':>8}{'out/q':>7}{'answered':>10}{'correct':>9}  chosen"
)


def print_cell(report: CellReport, args: argparse.Namespace, load: bool = True) -> None:
    cell = report.cell
    for plan in PLANS:
        runs = [r for r in report.runs if r.plan == plan]
        wall = report.median(plan, "wall")
        preds = [r.predicted for r in runs if r.predicted is not None]
        pred = statistics.median(preds) if preds else None
        ratio = "-" if pred is None or wall <= 0 else f"{pred / wall:.2f}"
        answered = f"{sum(r.answered for r in runs)}/{sum(r.asked for r in runs)}"
        good = sum(r.correct if r.own is None else r.own for r in runs)
        out = report.median(plan, "completion_tokens") / cell.n
        spans = [r.planned for r in runs]
        span = "-" if None in spans else f"{statistics.median(x for x in spans if x):.2f}"
        print(
            f"{cell.name:<22}{plan:<9}{wall:>8.2f}{span:>8}"
            + ("       -" if pred is None else f"{pred:>8.2f}")
            + f"{ratio:>6}{report.median(plan, 'requests'):>5g}"
            f"{report.median(plan, 'prompt_tokens'):>8g}{report.median(plan, 'cached_tokens'):>8g}"
            f"{out:>7.1f}{answered:>10}{good:>9}  {runs[0].chosen}",
            flush=True,
        )
    s = report.summary()
    auto = [r for r in report.runs if r.plan == "auto"]
    if auto and auto[-1].service:
        print(f"{cell.name:<22}auto priced with {auto[-1].service}")
    share = "-" if s["auto_share"] is None else f"{s['auto_share']:.2f}"
    agreeing, compared = report.merged_agreement()
    print(
        f"{cell.name:<22}merged answers agreeing with fan-out's: {agreeing} of {compared}; "
        f"allowed: {', '.join(report.allowed())}; fastest {s['fastest']}",
        flush=True,
    )
    print(
        f"{cell.name:<22}best {s['best']}, auto chose {s['auto_chose']} "
        f"({', '.join(s['auto_choices'])}); auto/best {share}; warm-up: "
        f"{', '.join(report.warmup)}" + (f"; load {os.getloadavg()[0]:.2f}" if load else ""),
        flush=True,
    )


def print_summary(reports: list[CellReport], load: bool = True) -> None:
    shares = [r.summary()["auto_share"] for r in reports]
    met = sum(s is not None and s >= TARGET_SHARE for s in shares)
    close = 0
    pairs = 0
    for rep in reports:
        for plan in PLANS:
            preds = [r.predicted for r in rep.runs if r.plan == plan and r.predicted is not None]
            if preds:
                pairs += 1
                wall = rep.median(plan, "wall")
                close += wall > 0 and abs(statistics.median(preds) / wall - 1) <= TARGET_PREDICTION
    print(
        f"summary: cells={len(reports)} auto/best>={TARGET_SHARE} in {met}; "
        f"predicted within {TARGET_PREDICTION:.0%} in {close} of {pairs} (cell, plan) pairs"
        + (f"; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}" if load else "")
    )


def save_plot(reports: list[CellReport], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("plots need matplotlib: pip install -e '.[bench]'") from exc
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.2
    for j, plan in enumerate(PLANS):
        xs = [i + (j - 1.5) * width for i in range(len(reports))]
        ax.bar(xs, [r.median(plan, "wall") for r in reports], width, label=plan)
    ax.set_xticks(range(len(reports)))
    ax.set_xticklabels([r.cell.name.replace(" ", "\n") for r in reports], fontsize=7)
    ax.set_ylabel("median wall time (s)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engine_matrix.py", description=(__doc__ or "").splitlines()[0]
    )
    p.add_argument("--base-url", default=None, help="the engine (default: the simulator)")
    p.add_argument("--model", default="smollm2", help="the model name sent to the engine")
    p.add_argument("--ns", default="2,5,8", help="questions per batch")
    p.add_argument("--tokens", default="16,200", help="answer lengths (max_tokens per question)")
    p.add_argument("--contexts", default="none,doc", help="none and/or doc (~1,500 tokens)")
    p.add_argument("--rounds", type=int, default=2, help="measured rounds per cell")
    p.add_argument("--warmup", type=int, default=1, help="auto batches per cell before measuring")
    p.add_argument("--ignore-eos", action="store_true", help="pin answers to max_tokens")
    p.add_argument(
        "--canaries",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="auto's merge canaries (MergePolicy.canaries; default on, as for users)",
    )
    p.add_argument(
        "--cap-at-n",
        action="store_true",
        help="auto may merge a whole cell (MergePolicy.max_per_request=N, not the default 4)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="write every run here")
    p.add_argument("--plot", default=None, metavar="PNG", help="a bar chart of the medians")
    p.add_argument(
        "--from-json", default=None, metavar="PATH", help="print (and --plot) a saved run"
    )
    return p


def load_reports(path: Path) -> list[CellReport]:
    """The cells a ``--json`` file holds (one a run wrote after every cell, cut short or not)."""
    cells_ = json.loads(path.read_text())["cells"]
    return [
        CellReport(Cell(**c["cell"]), [Run(**r) for r in c["runs"]], list(c["warmup"]))
        for c in cells_
    ]


def replot(args: argparse.Namespace) -> int:
    """``--from-json PATH``: print the table and the plot of a saved run, sending nothing."""
    reports = load_reports(Path(args.from_json))
    print(HEADER)
    for report in reports:
        print_cell(report, args, load=False)
    print_summary(reports, load=False)
    if args.plot:
        save_plot(reports, Path(args.plot), f"engine matrix: {args.from_json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.from_json:
        return replot(args)
    where = f"{args.base_url} (model {args.model!r})" if args.base_url else "the simulator"
    unit = "seconds" if args.base_url else "simulated seconds (virtual)"
    print(
        f"engine matrix on {where}: plans {', '.join(PLANS)}; {args.rounds} round(s) per cell, "
        f"interleaved; auto warm-up {args.warmup} batch(es) per cell ({2 * args.warmup} in "
        f"the first); auto's canaries {'on' if args.canaries else 'off'}"
        f"{'; auto may merge a whole cell' if args.cap_at_n else ''}; times in {unit}"
        f"; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    if args.base_url is None:
        print("simulator: answers are tags; 'correct' counts answers attached to their question")
    elif args.model == "gemma":
        print("gemma is a base model: its answers are not answers, 'correct' means nothing")
    print(HEADER, flush=True)
    reports = run_virtual(on_sim, args) if args.base_url is None else anyio.run(on_engine, args)
    print_summary(reports)
    if args.plot:
        save_plot(reports, Path(args.plot), f"engine matrix: {where}")
    lost = sum(r.asked - r.answered for rep in reports for r in rep.runs)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
