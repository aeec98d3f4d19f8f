"""A progress bar on stderr, and your own telemetry fed by splitter's events.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator (needs the ``progress`` extra for the bar):

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/progress.py
"""

from __future__ import annotations

import os
from collections import Counter

import splitter


class Telemetry:
    """Your own metrics, fed by splitter's events: here, counters and the slowest request."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.slowest = 0.0

    def __call__(self, event: splitter.Event) -> None:
        self.counts[type(event).__name__] += 1
        if isinstance(event, splitter.RequestFinished):
            self.slowest = max(self.slowest, event.latency)


def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    questions = [f"What is {n} times {n + 1}?" for n in range(40)]
    telemetry = Telemetry()
    policy = splitter.Policy(limits=splitter.Limits(max_concurrency=16))
    result = splitter.Splitter(policy=policy, on_event=telemetry).ask_many(
        questions, model=model, progress=True
    )

    print(f"{sum(a.ok for a in result)} of {len(result)} answered")
    print(f"events: {dict(sorted(telemetry.counts.items()))}")
    print(f"slowest request: {telemetry.slowest:.2f}s, {result.usage.total_tokens} tokens")


if __name__ == "__main__":
    main()
