"""Answer one pasted prompt that holds several questions, part by part, in its own numbering.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator:

    python -m splitter.sim --port 8000 &
    export OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim
    python examples/compound_prompt.py
"""

from __future__ import annotations

import os

import splitter

PROMPT = """I'm planning a week in Japan in April.
1. Which city should I fly into for the cherry blossoms?
2. How long does the Shinkansen take from that city to Kyoto?
3. Is a 7-day rail pass worth it?
Keep each answer short."""


def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    found = splitter.decompose(PROMPT)
    print(f"preamble: {found.preamble!r}")
    for part in found.parts:
        needs = [n + 1 for n in part.depends_on]
        print(f"  {part.label} {part.text}" + (f"  (needs {needs})" if needs else ""))
    answer = splitter.Splitter(model=model).ask(PROMPT, temperature=0)
    print(answer.text if answer.ok else f"failed: {[a.error for a in answer.parts.failed]}")
    waves = [a.wave for a in answer.parts]
    print(f"{answer.parts.stats.requests} requests in waves {waves}")


if __name__ == "__main__":
    main()
