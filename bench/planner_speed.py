"""What planning costs: the planner alone, ``Splitter.plan()``, one tokenization pass, decompose.

Pure CPU: no service, no I/O. Three tables:

1. the planner alone (``plan_wave`` on estimates made beforehand), median and best ms over
   ``--runs`` runs per n, with and without a tight rate-limit budget (target: < 3 ms at
   1,000 questions), and the median with the chosen plan's ``Group`` objects made (a plan
   holds its candidates' requests as columns and makes Groups when they are first read);
2. per question, side by side at each n: the planner alone, ``Splitter.plan(questions)``
   (what a user calls: checks, dependency graph, token counts, expected lengths, the
   planner) and one tokenization pass over the same questions (the tokenizer splitter uses,
   each question encoded once). Target: ``plan()`` <= 1.3x the tokenization pass at 1,000,
   and the per-question cost flat from 1,000 to 10,000. The three are run interleaved, so
   that load on a shared machine falls on all of them alike, each ``plan()`` and
   tokenization run on texts never seen before (splitter remembers questions' token
   counts), and a fourth column, ``again``, plans the same texts a second time (what the
   run after a ``plan()`` pays);
3. ``decompose()`` of a prompt of n items, dependency detection included (target: 8,000
   items well under 100 ms): the numbered list of the questions above, and a list of
   questions pointing back (``pointing_prompt``: references by number and letter,
   demonstratives, pronouns), and one whose demonstratives name nothing said before
   (``unnamed_prompt``), which the plain search of every earlier part made quadratic.

    python bench/planner_speed.py                 # n = 10, 100, 1000, 10000
    python bench/planner_speed.py --ns 1000 --runs 21 --decompose 1000 8000
    python bench/planner_speed.py --cpu           # CPU time: a machine shared with others
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from collections.abc import Callable

from splitter import Policy, Splitter, decompose
from splitter._budget import BudgetSnapshot
from splitter._cost_model import ServiceEstimate
from splitter._estimate import encoder_for
from splitter._planner import PlanItem, plan_wave

MODEL = "gpt-4o-mini"
GPU = ServiceEstimate(rtt=0.06, ttft0=0.25, prefill_rate=20000, tpot1=0.012, beta=0.02)
BUDGETS = {
    "no limit known": BudgetSnapshot(),
    "tight rpm+tpm": BudgetSnapshot(
        remaining_requests=50, requests_per_second=5, remaining_tokens=20000, tokens_per_second=2e3
    ),
}
_TEMPLATES = (
    "What is {i} plus {j}?",
    "What is the capital of the country numbered {i} in the atlas?",
    "Translate 'good morning number {i}' into French.",
    "Give me 3 reasons to visit city {i}.",
    "Explain idea {i} briefly.",
    "Describe process {i} in detail, step by step.",
)


def questions(n: int, start: int = 0) -> list[str]:
    """Short, mixed questions; half carry an output-length cue. Those from another
    ``start`` are other texts (splitter remembers the token counts of texts it has seen)."""
    return [
        _TEMPLATES[i % len(_TEMPLATES)].format(i=i, j=i * 7 % 97) for i in range(start, start + n)
    ]


_SUBJECTS = ("tower", "bridge", "river", "museum", "Gebäude", "país", "città", "dağ", "city")
_PATTERNS = (
    "What is the capital of country {i}?",
    "How tall is that {subject}?",
    "Who designed that {subject}{i}?",
    "Use the answer to question {k} and explain why.",
    "Compare it with item {k}, please?",
    "Describe this {subject} in detail?",
    "Where is the {subject} of region {i}?",
    "Wie alt ist dieses {subject}es?",
    "¿Dónde está esa {subject}?",
    "Bu {subject} ne kadar yüksek?",
    "这条河有多长？",
    "その川はどこですか？",
    "What about its population?",
    "How much does the cheapest model cost?",
    "What is the answer to (b)?",
)


def pointing_prompt(n: int, *, seed: int = 1, listed: bool = True) -> str:
    """``n`` questions, most of them pointing back (explicit references to numbers and
    letters, demonstratives whose noun is or is not named before, pronouns), as a list
    (``1.``, ``(a)``) or as sentences without labels."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        pattern = rng.choice(_PATTERNS)
        text = pattern.format(i=i, k=rng.randint(1, max(1, i + 2)), subject=rng.choice(_SUBJECTS))
        if listed:
            label = f"({chr(ord('a') + i % 26)})" if rng.random() < 0.2 else f"{i + 1}."
            lines.append(f"{label} {text}")
        else:
            lines.append(text)
    return "\n".join(lines) if listed else " ".join(lines)


def unnamed_prompt(n: int, *, seed: int = 1) -> str:
    """``n`` numbered questions about "that <word>", the word named by no earlier question:
    the plain search read every earlier question for each of them."""
    rng = random.Random(seed)
    letters = "bcdfghjklmnpqrstvwxz"
    nouns = ("".join(rng.choice(letters) for _ in range(8)) for _ in range(n))
    return "\n".join(f"{i + 1}. Where is that {noun}?" for i, noun in enumerate(nouns))


def items(n: int) -> list[PlanItem]:
    return [PlanItem(i, 20 + i % 50, 20 + (i * 37) % 400) for i in range(n)]


def _planned(wave: list[PlanItem]) -> object:
    """The planner alone, its chosen plan's groups made (what a run reads)."""
    plan = plan_wave(wave, estimate=GPU, budget=BudgetSnapshot(), concurrency=64, policy=Policy())
    return plan.chosen.groups


def _tokenize(encode: Callable[[str], list[int]], texts: list[str]) -> None:
    for text in texts:
        encode(text)


# What the runs are timed by: the wall clock, or with --cpu this thread's CPU time (on a
# machine shared with other work, what planning costs without the waits for a core).
_clock = time.perf_counter


def _timed(fn: Callable[[], object]) -> float:
    started = _clock()
    fn()
    return _clock() - started


def planner_table(ns: list[int], runs: int) -> None:
    print("planner alone (plan_wave on estimates made beforehand; 'with groups': and the")
    print("chosen plan's Group objects made, as the run that sends them reads them)")
    print(
        f"{'n':>6} {'budget':<16} {'median ms':>10} {'best ms':>9} {'with groups':>12} "
        f"{'candidates':>11}  chosen"
    )
    for n in ns:
        wave = items(n)
        for name, budget in BUDGETS.items():
            times, made = [], []
            for _ in range(runs):
                started = _clock()
                plan = plan_wave(wave, estimate=GPU, budget=budget, concurrency=64, policy=Policy())
                planned = _clock()
                plan.chosen.groups  # noqa: B018 - made on first read
                times.append((planned - started) * 1000)
                made.append((_clock() - started) * 1000)
            print(
                f"{n:>6} {name:<16} {statistics.median(times):>10.2f} {min(times):>9.2f} "
                f"{statistics.median(made):>12.2f} {len(plan.candidates):>11}  "
                f"{plan.chosen.label} ({plan.chosen.k} requests)"
            )


def side_by_side(ns: list[int], runs: int) -> None:
    splitter = Splitter(model=MODEL)
    encode = encoder_for(MODEL)
    print()
    print("per question, microseconds (median of interleaved runs; plan() and tokenize: texts")
    print("never seen before in each run; plan() again: the same texts planned a second time)")
    print(
        f"{'n':>6} {'planner':>9} {'plan()':>9} {'tokenize':>9} {'again':>9} "
        f"{'plan()/tokenize':>16}"
    )
    fresh = 10**7  # where the texts no run has seen begin
    for n in ns:
        wave = items(n)
        splitter.plan(questions(n, fresh))  # warm: the tokenizer, the endpoint
        repeats = max(5, min(runs, 20_000 // n))
        times: dict[str, list[float]] = {"planner": [], "plan": [], "tokenize": [], "again": []}
        for r in range(repeats):
            texts = questions(n, fresh + (r + 1) * n)
            arms: dict[str, Callable[[], object]] = {
                "planner": functools.partial(_planned, wave),
                "tokenize": functools.partial(_tokenize, encode, texts),
                "plan": functools.partial(splitter.plan, texts),
                "again": functools.partial(splitter.plan, texts),
            }
            for name, fn in arms.items():
                times[name].append(_timed(fn))
        fresh += (repeats + 1) * n
        per = {name: statistics.median(ts) / n * 1e6 for name, ts in times.items()}
        print(
            f"{n:>6} {per['planner']:>9.2f} {per['plan']:>9.2f} {per['tokenize']:>9.2f} "
            f"{per['again']:>9.2f} {per['plan'] / per['tokenize']:>15.2f}x"
        )


def decompose_table(sizes: list[int], runs: int) -> None:
    print()
    print("decompose() of n items, dependency detection included")
    print(
        f"{'items':>6} {'prompt':<9} {'median ms':>10} {'us/item':>8} {'parts':>7} {'waiting':>8}"
    )
    for n in sizes:
        prompts = {
            "numbered": "\n".join(f"{i + 1}. {q}" for i, q in enumerate(questions(n))),
            "pointing": pointing_prompt(n),
            "unnamed": unnamed_prompt(n),
        }
        for name, prompt in prompts.items():
            times, parts = [], decompose(prompt).parts
            for _ in range(max(3, min(runs, 40_000 // n))):
                started = _clock()
                decompose(prompt)
                times.append((_clock() - started) * 1000)
            median = statistics.median(times)
            waiting = sum(bool(p.depends_on) for p in parts)
            print(
                f"{n:>6} {name:<9} {median:>10.2f} {median / n * 1000:>8.1f} {len(parts):>7} "
                f"{waiting:>8}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument(
        "--decompose", type=int, nargs="*", default=[1000, 8000], metavar="N", help="items"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="time by this thread's CPU time, not the wall clock"
    )
    args = parser.parse_args()
    global _clock
    _clock = time.thread_time if args.cpu else time.perf_counter
    print(f"timed by {'CPU time (this thread)' if args.cpu else 'the wall clock'}")
    planner_table(args.ns, args.runs)
    side_by_side(args.ns, args.runs)
    if args.decompose:
        decompose_table(args.decompose, args.runs)


if __name__ == "__main__":
    main()
