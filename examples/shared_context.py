"""Ask several questions about one document: the document goes once into the system
message, the same bytes in every request, so the service's prefix cache can serve it.

Runs against any OpenAI-compatible endpoint named by OPENAI_BASE_URL / OPENAI_API_KEY,
for example the bundled simulator with a vLLM-like shared prefix cache:

    python -m splitter.sim --port 8000 --prefix-cache shared &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim python examples/shared_context.py
"""

from __future__ import annotations

import os

import splitter

CONTRACT = (
    "This lease runs for two years from 1 March 2026 and renews for one more year unless "
    "either party gives two months' written notice. The rent is 1,200 EUR a month, due on "
    "the first day of each month; the deposit is two months' rent. "
) * 30
QUESTIONS = [
    "How long does the lease run?",
    "Does it renew on its own?",
    "How much notice is needed to end it?",
    "How large is the deposit?",
]


def main() -> None:
    model = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
    asker = splitter.Splitter(model=model)
    system = "Answer from the lease only, in one sentence."
    # A first question computes the document; the others can then read it from the cache.
    warm = asker.ask_many(QUESTIONS[:1], system=system, context=CONTRACT, temperature=0)
    rest = asker.ask_many(QUESTIONS[1:], system=system, context=CONTRACT, temperature=0)
    for answer in [*warm, *rest]:
        shown = answer.text if answer.ok else f"failed: {answer.error}"
        print(f"{answer.question.text}\n   -> {shown}")
        print(
            f"   ({answer.usage.prompt_tokens} prompt tokens, {answer.usage.cached_tokens} cached)"
        )
    print(rest.plan.explain() if rest.plan is not None else "nothing was planned")


if __name__ == "__main__":
    main()
