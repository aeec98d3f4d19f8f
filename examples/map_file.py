"""Answer an input of any size with flat memory, and a JSONL file resumably.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator:

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/map_file.py

The command-line twin of the second half is
``splitter run questions.jsonl --out answers.jsonl --model gpt-4o-mini``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import openai

import splitter


def questions(n: int) -> Iterator[str]:
    """A lazy input: nothing is built up front, however large ``n`` is."""
    for k in range(1, n + 1):
        yield f"In one sentence: what is special about the number {k}?"


async def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    async with openai.AsyncOpenAI() as client:
        asker = splitter.Splitter(client)

        # At most 64 questions are held at once; answers come in input order.
        answered = 0
        async with asker.amap(questions(500), model=model, window=64) as answers:
            async for answer in answers:
                answered += answer.ok
                if answer.index < 3:
                    print(f"{answer.index}: {answer.text if answer.ok else answer.error}")
        print(f"map: {answered} of 500 answered")

        # A JSONL file answered into another; running it again asks nothing twice.
        folder = Path(tempfile.mkdtemp())
        source, out = folder / "questions.jsonl", folder / "answers.jsonl"
        with source.open("w") as file:
            for k, text in enumerate(questions(40)):
                file.write(json.dumps({"id": f"q{k}", "question": text}) + "\n")
        for attempt in ("first run", "rerun"):
            run = await asker.arun_file(source, out, model=model)
            print(
                f"{attempt}: {run.questions} questions, {run.skipped} already done, "
                f"{run.answered} answered now, errors: {run.failed}"
            )
        print(out.read_text().splitlines()[0])


if __name__ == "__main__":
    asyncio.run(main())
