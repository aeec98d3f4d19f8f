"""Stream several answers as they are produced, yet read them in your order.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator:

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/streaming.py
"""

from __future__ import annotations

import asyncio
import os

import openai

import splitter

QUESTIONS = [
    "Explain how a rainbow forms.",
    "What is a prime number?",
    "Name three moons of Jupiter.",
]


async def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    async with openai.AsyncOpenAI() as client:
        # The questions run concurrently; the one being shown streams token by token and
        # the others wait in a buffer for their turn.
        shown: set[int] = set()
        async with splitter.Splitter(client).astream(QUESTIONS, model=model) as events:
            async for event in events:
                if event.delta and event.index not in shown:
                    print(f"\n{event.index + 1}. ", end="")
                    shown.add(event.index)
                print(event.delta, end="", flush=True)
                if event.answer is not None and not event.answer.ok:
                    print(f"[failed: {event.answer.error}]", end="")
        print(f"\n({events.result.stats.requests} requests, {events.result.stats.wall_time:.2f}s)")

        # The same through the drop-in wrapper: one prompt, ChatCompletionChunks back.
        wrapped = splitter.wrap(client)
        prompt = "Answer separately:\n" + "\n".join(f"{i}. {q}" for i, q in enumerate(QUESTIONS, 1))
        async with await wrapped.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], stream=True
        ) as stream:
            async for chunk in stream:
                if chunk.choices:
                    print(chunk.choices[0].delta.content or "", end="", flush=True)
        print()


if __name__ == "__main__":
    asyncio.run(main())
