"""Ask several independent questions at once; answers come back in your order.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator:

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/ask_many.py
"""

from __future__ import annotations

import os

import splitter

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Who wrote 'The Old Man and the Sea'?",
]


def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    policy = splitter.Policy(limits=splitter.Limits(max_concurrency=8))
    result = splitter.ask_many(QUESTIONS, model=model, policy=policy, temperature=0)
    for answer in result:
        shown = answer.text if answer.ok else f"failed: {answer.error}"
        print(f"{answer.index + 1}. {answer.question.text}\n   -> {shown}")
    stats = result.stats
    print(
        f"{stats.requests} requests, {stats.retries} retries, {stats.wall_time:.2f}s, "
        f"{result.usage.total_tokens} tokens"
    )


if __name__ == "__main__":
    main()
