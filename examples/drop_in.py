"""Keep your openai code; change only how the client is built.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator:

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/drop_in.py
"""

from __future__ import annotations

import asyncio
import os

import openai

import splitter

PROMPT = """Please answer these separately:
1. What causes the seasons on Earth?
2. How does a refrigerator keep food cold?
3. Why do cats purr?"""


async def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    # The one changed line: was `client = openai.AsyncOpenAI()`.
    async with splitter.wrap(openai.AsyncOpenAI()) as client:
        completion = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": PROMPT}], temperature=0
        )
        print(completion.choices[0].message.content)
        details = getattr(completion, "splitter_details", None)
        if details is not None:  # it was split: one request per part, run concurrently
            print(f"({len(details.parts)} parts, {details.parts.stats.requests} requests)")
        # Everything else is the openai client as before.
        models = [m.id async for m in client.models.list()]
        print(f"models: {models}")


if __name__ == "__main__":
    asyncio.run(main())
