"""The ``splitter`` command: ``demo`` (the seeds' experiment on the simulator) and ``ask``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import anyio
import openai

from ._policy import Limits, Policy
from ._splitter import Splitter
from .sim import SimService, answer_tag, serve

__all__ = ["main"]

DEMO_QUESTIONS = (
    "Why does an LLM generate its answer one token at a time?",
    "What is continuous batching in an inference server?",
    "How does a KV cache speed up decoding?",
    "What does a requests-per-minute rate limit mean for a client?",
    "When is one merged request better than several parallel ones?",
    "What is time to first token?",
    "Why do long prompts cost more to prefill?",
    "What is speculative decoding?",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``splitter`` console script."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splitter", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="one merged request vs fan-out on the simulator")
    demo.add_argument("--profile", default="gpt-4o-mini", help="simulated service profile")
    demo.add_argument("--questions", type=int, default=5, choices=range(2, 9), metavar="2..8")
    demo.add_argument("--tokens", type=int, default=200, help="answer length of each question")
    demo.add_argument("--time-scale", type=float, default=0.1, help="real seconds per sim second")
    demo.add_argument("--in-process", action="store_true", help="skip the loopback HTTP server")
    demo.set_defaults(run=_demo)

    ask = commands.add_parser("ask", help="answer questions with the OPENAI_* endpoint")
    ask.add_argument("questions", nargs="+", help="one argument per question")
    ask.add_argument("--model", required=True)
    ask.add_argument("--concurrency", type=int, default=16)
    ask.add_argument("--json", action="store_true", help="print one JSON object per answer")
    ask.set_defaults(run=_ask)
    return parser


def _demo(args: argparse.Namespace) -> int:
    questions = list(DEMO_QUESTIONS[: args.questions])
    service = SimService(
        args.profile, time_scale=args.time_scale, default_answer_tokens=args.tokens
    )
    with _endpoint(service, in_process=args.in_process) as (where, make_client):
        print(
            f"splitter demo: {len(questions)} independent questions, ~{args.tokens} tokens each, "
            f"on the simulated {service.profile.name!r} service ({where}, time scale "
            f"{args.time_scale:g})"
        )
        merged, fanned, texts = anyio.run(_race, make_client, questions)
    ok = sum(bool(t and t.startswith(answer_tag(q))) for q, t in zip(questions, texts, strict=True))
    scale = args.time_scale
    print(f"  merged  (1 request):   {merged:6.2f} s   ({merged / scale:6.1f} s at full scale)")
    print(
        f"  fan-out ({len(questions)} requests):  {fanned:6.2f} s   "
        f"({fanned / scale:6.1f} s at full scale)"
    )
    print(f"  fan-out is {merged / fanned:.1f}x faster; answers in order: {ok}/{len(questions)}")
    return 0 if ok == len(questions) else 1


ClientFactory = Callable[[], openai.AsyncOpenAI]


@contextlib.contextmanager
def _endpoint(service: SimService, *, in_process: bool) -> Iterator[tuple[str, ClientFactory]]:
    """The loopback HTTP server when uvicorn is installed, else the in-process transport."""
    if not in_process:
        try:
            server = serve(service)
            base_url = server.__enter__()
        except RuntimeError as exc:
            print(f"note: {exc}; using the in-process transport", file=sys.stderr)
        else:
            try:
                yield base_url, lambda: openai.AsyncOpenAI(base_url=base_url, api_key="sk-sim")
            finally:
                server.__exit__(None, None, None)
            return
    yield "in-process", service.async_client


async def _race(
    make_client: ClientFactory, questions: list[str]
) -> tuple[float, float, list[str | None]]:
    """Time one merged request, then fan-out through splitter, on the same service."""
    prompt = "Please answer the following questions separately:\n" + "\n".join(
        f"{i}. {q}" for i, q in enumerate(questions, 1)
    )
    async with make_client() as client:
        started = time.perf_counter()
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
        )
        merged = time.perf_counter() - started
        splitter = Splitter(client, policy=Policy(limits=Limits(max_concurrency=len(questions))))
        result = await splitter.aask_many(questions, model="gpt-4o-mini")
    return merged, result.stats.wall_time, result.texts


def _ask(args: argparse.Namespace) -> int:
    policy = Policy(limits=Limits(max_concurrency=args.concurrency))
    result = Splitter(policy=policy).ask_many(args.questions, model=args.model)
    for answer in result:
        if args.json:
            error = (
                None if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
            )
            print(json.dumps({"id": answer.id, "answer": answer.text, "error": error}))
        elif answer.ok:
            print(f"[{answer.id}] {answer.text}")
        else:
            print(f"[{answer.id}] error: {answer.error}", file=sys.stderr)
    return 0 if result.ok else 1
