"""The seeds' experiment on any OpenAI-compatible endpoint: merged vs fan-out vs auto.

N independent questions with pinned answer lengths, timed as one merged request (splitter's
own merged format), as naive fan-out, and as the planner chooses after calibration batches;
several rounds in alternating order; printed: median and min-max per arm, each arm's
speed-up over merged, auto's share of the best measured plan's speed-up (issue 7's target:
>= 0.95), and the physical limit RTT + TTFT + T x TPOT(N), measured directly by streaming.
It is a measurement: it exits 0 whatever the ratios (1 only if a question went unanswered).

The code lives in ``splitter._cli._bench`` so that ``splitter bench`` runs the very same
experiment from an installed package; see that module's docstring for how each arm is timed.

Run from the repository root::

    python bench/seed_benchmark.py                   # the bundled simulator (gpt-4o-mini)
    python bench/seed_benchmark.py --profile llama-cpp-cpu --time-scale 0.05
    python bench/engine/setup.py --start --slots 5   # then, on the real engine:
    python bench/seed_benchmark.py --base-url http://127.0.0.1:8080/v1 --model gemma \\
        --ignore-eos --json /tmp/seed_engine.json
"""

from __future__ import annotations

import sys

from splitter._cli._bench import main

#: Issue 7's bar: auto reaches this share of the best measured plan's speed-up.
TARGET = 0.95

if __name__ == "__main__":
    sys.exit(main(target=TARGET))
