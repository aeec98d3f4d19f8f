"""Merge quality on the real engine: the labelled questions alone vs merged in groups of k.

Issue 18: a merged request that *parses* is not a merged request that is *right*. This asks
the checkable questions of ``tests/data/checkable_questions.jsonl`` (short questions with
regex-checked answers: arithmetic, unit conversions, capitals, simple facts) three ways on
the engine of ``bench/engine/setup.py`` (use the instruction-tuned model, the default):

- **alone**: one request per question, as fan-out sends it;
- **markers k**: k questions in one request, in splitter's own merged prompt with its nonce
  markers (``splitter._merge.build_merged_prompt``), read back by splitter's own parser
  (``parse_merged``), exactly as splitter sends and reads it, without the re-ask of what
  did not parse (that is what is being measured);
- **text-json k**: k questions in one request exactly as splitter sends a merge of
  plain-text questions under ``MergePolicy(format="json")`` (``merged_format(TEXT_ANSWERS)``:
  one ``{id, answer}`` item per question, each answer a string with no length limit),
  read back by splitter's own ``parse_merged_json``;
- **schema k**: k questions in one request with ``response_format={"type": "json_schema"}``
  (llama.cpp turns it into a grammar): one item per question keyed by its number, the
  array's length fixed, a ``maxLength`` on each answer so the JSON closes.

Beside each merged arm it prints two agreement figures (issue 18 item 3):

- **agrees**: of the merged answers read back, the share that agree with the same
  question's answer *alone* in this run, by splitter's own measure (``splitter._canary.
  agrees``: word-set Jaccard >= ``MergePolicy.canary_overlap``): what a canary on every
  merged item would see;
- **learned**: what splitter's canaries learn when splitter itself sends the questions
  (``--canary-sample`` of them, in batches of the largest k): ``Splitter.aask_many`` under
  ``strategy="auto"`` with ``MergePolicy(max_per_request=k, canary_first=<every merged
  request>, min_agreement=0)`` (so the gate never closes), planned before each batch on
  the prior of a serial engine (``ServicePrior(slots=1)``, the service model reset: merging
  is then the plan auto picks; on this engine, measured, auto prefers one request each), at
  most ``--concurrency`` requests in flight, one endpoint per arm (its own key); the
  schema arms pass a JSON schema as ``response_format`` (splitter's structured merge: one
  ``{id, answer}`` item per question), the marker and text-json arms plain questions
  (``MergePolicy(format="markers")`` and ``format="json"``). It prints the
  estimate (``Plan.agreement``: decayed share, a prior of one agreeing canary) with the
  canaries compared, the merged requests sent, and the share of splitter's *returned*
  answers that are correct (disagreeing merged answers replaced by the solo one, unparsed
  ones re-asked alone). ``--canary-sample 0`` skips it.

Per arm it prints the parsed share (an answer was read back for the question), the correct
share (the read-back answer matches the question's accept patterns; an unparsed answer is
not correct), correct given parsed, and wall time per question. The questions are taken in
chunks of the largest k; within each chunk every arm runs once, in an order rotated per
chunk, so the arms share the machine's load over time (each arm sends its requests of the
chunk at once, at most ``--concurrency`` in flight). Temperature 0, and every request of
every arm carries the same system message (``--system``; splitter sends a caller's system
message ahead of its merged prompt the same way): SmolLM2-135M-Instruct's own default
system prompt derails it (see bench/engine/setup.py).

Usage, with the engine started (``python bench/engine/setup.py --start``)::

    python bench/merge_quality.py --url http://127.0.0.1:8080/v1 [--sample 48 --seed 18] \
        [--canary-sample 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
import unicodedata
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from splitter import Limits, MergePolicy, Policy, ServiceModel, ServicePrior, Splitter
from splitter._canary import agrees
from splitter._merge import build_merged_prompt, parse_merged
from splitter._structured import TEXT_ANSWERS, merged_format, parse_merged_json

QUESTIONS = Path(__file__).resolve().parents[1] / "tests" / "data" / "checkable_questions.jsonl"
ANSWER_TOKENS = 48  # per question: these answers are a word or a sentence
SCHEMA_ANSWER_CHARS = 120  # maxLength of one answer in the schema: the JSON must close
_THOUSANDS = re.compile(r"(?<=\d)[,\u202f\u00a0 ](?=\d{3}(?!\d))")


@dataclass(frozen=True, slots=True)
class Checkable:
    id: str
    question: str
    accept: tuple[re.Pattern[str], ...]


def load(path: Path = QUESTIONS) -> list[Checkable]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [
        Checkable(
            str(row["id"]),
            str(row["question"]),
            tuple(re.compile(p, re.IGNORECASE) for p in row["accept"]),
        )
        for row in rows
    ]


def normalise(reply: str) -> str:
    """NFKC, thousands separators dropped ("3,000" reads as "3000"), whitespace collapsed."""
    text = unicodedata.normalize("NFKC", reply)
    text = _THOUSANDS.sub("", text)
    return " ".join(text.split())


def correct(reply: str | None, accept: Sequence[re.Pattern[str]]) -> bool:
    """Strict but fair: the answer counts when any accept pattern occurs in it ("Paris" in
    "The capital of France is Paris."); no answer, or none of them, is wrong. The patterns
    carry their own boundaries (a 12 does not match in 120 or 12.5)."""
    if not reply:
        return False
    text = normalise(reply)
    return any(p.search(text) for p in accept)


# -- the schema arm ---------------------------------------------------------------------------


def schema_request(questions: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The user message and the response_format of a JSON-schema merged request."""
    k = len(questions)
    listed = "\n".join(f"{i}. {q.strip()}" for i, q in enumerate(questions, 1))
    text = (
        f"Answer each of the {k} questions below on its own, briefly. Reply in JSON: "
        f'{{"answers": [{{"id": 1, "answer": "..."}}, ...]}}, one item per question, '
        f"its id the question's number.\n\n{listed}"
    )
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "enum": list(range(1, k + 1))},
            "answer": {"type": "string", "maxLength": SCHEMA_ANSWER_CHARS},
        },
        "required": ["id", "answer"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"answers": {"type": "array", "items": item, "minItems": k, "maxItems": k}},
        "required": ["answers"],
        "additionalProperties": False,
    }
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "answers", "strict": True, "schema": schema},
    }
    return text, fmt


def parse_schema(text: str, k: int) -> dict[int, str]:
    """Answers by question number: an id that occurs once, in range, with a non-empty
    answer; bad JSON reads as nothing."""
    try:
        items = json.loads(text)["answers"]
    except (ValueError, KeyError, TypeError):
        return {}
    if not isinstance(items, list):
        return {}
    seen: dict[int, list[str]] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("id"), int):
            seen.setdefault(item["id"], []).append(str(item.get("answer", "")))
    return {i: a[0] for i, a in seen.items() if 1 <= i <= k and len(a) == 1 and a[0].strip()}


#: The merged arms: splitter's markers; splitter's JSON layout for plain-text questions
#: (``MergePolicy(format="json")``: each answer a string, no length limit); a schema of the
#: bench's own with a ``maxLength`` per answer (structured answers, ``response_format``).
ARMS = ("markers", "text-json", "schema")


# -- splitter's own canaries --------------------------------------------------------------------

ANSWER_FORMAT: dict[str, Any] = {  # one answer's schema, for splitter's structured merge
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string", "maxLength": SCHEMA_ANSWER_CHARS}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}


@dataclass(slots=True)
class Learned:
    """What splitter's canaries learned on one arm, and how right its answers were."""

    share: float = 1.0
    checked: int = 0
    canaries: int = 0
    disagreements: int = 0
    merged_requests: int = 0
    requests: int = 0
    asked: int = 0
    right: int = 0


def answer_of(text: str | None, parsed: Any) -> str | None:
    """The answer to score: a structured answer's ``answer`` field, else the text."""
    if isinstance(parsed, dict) and isinstance(parsed.get("answer"), str):
        return str(parsed["answer"])
    return text


async def learn_agreement(
    args: argparse.Namespace, kind: str, k: int, questions: Sequence[Checkable], batch: int
) -> Learned:
    """Splitter itself, under ``strategy="auto"`` with canaries on every merged request, on
    ``questions`` in batches of ``batch``: what its canaries learn for merges of up to k."""
    policy = Policy(
        strategy="auto",
        # Planned as for a serial engine, before each batch: merging is then the plan auto
        # picks (on this engine, once it has measured it, auto prefers one request each).
        prior=ServicePrior(slots=1),
        limits=Limits(max_concurrency=args.concurrency),
        merge=MergePolicy(
            max_per_request=k,
            canary_first=1_000_000,
            min_agreement=0.0,
            format="json" if kind == "text-json" else "markers",
        ),
    )
    extra: dict[str, Any] = {"response_format": ANSWER_FORMAT} if kind == "schema" else {}
    learned = Learned()
    # Its own key: its own endpoint, so each arm learns from nothing.
    async with openai.AsyncOpenAI(
        base_url=args.url, api_key=f"sk-canaries-{kind}-{k}", max_retries=0, timeout=600
    ) as client:
        splitter = Splitter(client, policy=policy)
        for start in range(0, len(questions), batch):
            chunk = questions[start : start + batch]
            splitter.use_service_model(ServiceModel(policy.prior), args.model)
            result = await splitter.aask_many(
                [q.question for q in chunk],
                model=args.model,
                system=args.system or None,
                max_tokens=ANSWER_TOKENS,
                temperature=0,
                **extra,
            )
            assert result.plan is not None
            learned.merged_requests += sum(len(g.indexes) > 1 for g in result.plan.chosen.groups)
            learned.requests += result.stats.requests
            learned.canaries += result.stats.canaries
            learned.disagreements += result.stats.canary_disagreements
            for q, answer in zip(chunk, result, strict=True):
                learned.asked += 1
                learned.right += correct(answer_of(answer.text, answer.parsed), q.accept)
        after = splitter.plan([q.question for q in questions[:batch]], model=args.model, **extra)
    if after.agreement is not None:
        learned.share, learned.checked = after.agreement.share, after.agreement.checked
    return learned


# -- running it -------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    asked: int = 0
    parsed: int = 0
    right: int = 0
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    answers: dict[str, str | None] = field(default_factory=dict)  # by question id


@dataclass(frozen=True, slots=True)
class Target:
    client: openai.AsyncOpenAI
    gate: asyncio.Semaphore
    model: str
    system: str


async def chat(
    target: Target,
    text: str,
    max_tokens: int,
    **extra: Any,
) -> tuple[str, str | None]:
    messages: list[dict[str, str]] = [{"role": "user", "content": text}]
    if target.system:
        messages.insert(0, {"role": "system", "content": target.system})
    async with target.gate:
        reply = await target.client.chat.completions.create(
            model=target.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0,
            **extra,
        )
    choice = reply.choices[0]
    return choice.message.content or "", choice.finish_reason


async def run_arm(
    target: Target,
    arm: str,
    k: int,
    chunk: Sequence[Checkable],
) -> tuple[list[str | None], list[str], float]:
    """One arm on one chunk: the answer read back per question (None: not parsed), the raw
    replies, and the wall seconds."""
    groups = [list(chunk[i : i + k]) for i in range(0, len(chunk), k)]

    raws: list[str] = []

    async def one(group: list[Checkable]) -> list[str | None]:
        texts = [q.question for q in group]
        if arm == "alone":
            reply, _ = await chat(target, texts[0], ANSWER_TOKENS)
            raws.append(reply)
            return [reply if reply.strip() else None]
        if arm == "markers":
            prompt = build_merged_prompt(texts)
            reply, finish = await chat(target, prompt.text, ANSWER_TOKENS * k + 16 * k)
            raws.append(reply)
            parsed = parse_merged(reply, prompt, truncated=finish == "length").answers
        elif arm == "text-json":
            prompt = build_merged_prompt(texts, as_json=True)
            fmt = merged_format(TEXT_ANSWERS, len(texts))
            reply, finish = await chat(
                target, prompt.text, ANSWER_TOKENS * k + 24 * k, response_format=fmt
            )
            raws.append(reply)
            read = parse_merged_json(reply, len(texts), TEXT_ANSWERS, truncated=finish == "length")
            parsed = {i: text for i, (text, _) in read.items()}
        else:
            text, fmt = schema_request(texts)
            reply, _ = await chat(target, text, ANSWER_TOKENS * k + 24 * k, response_format=fmt)
            raws.append(reply)
            parsed = parse_schema(reply, k)
        return [parsed.get(i) for i in range(1, len(group) + 1)]

    started = time.perf_counter()
    results = await asyncio.gather(*(one(g) for g in groups))
    return [a for r in results for a in r], raws, time.perf_counter() - started


def server_props(url: str) -> str:
    root = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/props", timeout=5) as response:
            props = json.loads(response.read())
    except (OSError, ValueError):
        return "llama-server (its /props did not answer)"
    model = Path(str(props.get("model_path", "?"))).name
    slots = props.get("total_slots", "?")
    build = props.get("build_info", "")
    return f"llama-server {build}, model {model}, {slots} slots".replace("  ", " ")


async def main_async(args: argparse.Namespace) -> int:
    questions = load(Path(args.questions))
    ks = sorted({int(k) for k in args.k.split(",")})
    chunk_size = max(ks)
    rng = random.Random(args.seed)
    sample = list(questions)
    rng.shuffle(sample)
    n = args.sample or len(sample)
    n -= n % chunk_size
    sample = sample[:n]
    arms = [("alone", 1)] + [(kind, k) for kind in ARMS for k in ks]
    tallies = {arm: Tally() for arm in arms}
    gate = asyncio.Semaphore(args.concurrency)
    print(f"engine: {server_props(args.url)}")
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    print(
        f"questions: {n} of {len(questions)} (shuffled with seed {args.seed}), chunks of "
        f"{chunk_size}, arms rotated per chunk, concurrency {args.concurrency}, temperature 0"
    )
    print(f"system message: {args.system!r}")
    async with openai.AsyncOpenAI(
        base_url=args.url, api_key="sk-no-key", max_retries=0, timeout=600
    ) as client:
        target = Target(client, gate, args.model, args.system)
        for c, start in enumerate(range(0, n, chunk_size)):
            chunk = sample[start : start + chunk_size]
            order = arms[c % len(arms) :] + arms[: c % len(arms)]
            for kind, k in order:
                answers, raws, seconds = await run_arm(target, kind, k, chunk)
                tally = tallies[kind, k]
                tally.seconds += seconds
                if len(tally.raw) < args.raw:
                    tally.raw.append(raws[0])
                for q, answer in zip(chunk, answers, strict=True):
                    tally.asked += 1
                    tally.parsed += answer is not None
                    tally.answers[q.id] = answer
                    ok = correct(answer, q.accept)
                    tally.right += ok
                    if len(tally.examples) < args.examples:
                        shown = "-" if answer is None else answer.strip().replace("\n", " ")[:70]
                        tally.examples.append(f"{q.id} {'ok' if ok else 'no'}: {shown}")
            print(f"  chunk {c + 1}/{n // chunk_size} done", file=sys.stderr, flush=True)
    learned: dict[tuple[str, int], Learned] = {}
    canary_questions = sample[: args.canary_sample - args.canary_sample % chunk_size]
    if canary_questions:
        print(
            f"splitter's canaries: {len(canary_questions)} questions per arm, batches of "
            f"{chunk_size}, auto planned as for a serial engine, a canary on every merged "
            "request"
        )
        for kind, k in arms[1:]:
            learned[kind, k] = await learn_agreement(args, kind, k, canary_questions, chunk_size)
            print(f"  canaries {kind} k={k} done", file=sys.stderr, flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    print()
    alone = tallies["alone", 1].answers
    overlap = MergePolicy().canary_overlap
    print(
        f"{'arm':<12}{'parsed':>7}{'correct':>8}{'correct|parsed':>15}{'s/question':>11}"
        f"{'agrees':>8}{'learned (n)':>13}{'merged':>7}{'splitter correct':>17}"
    )
    for (kind, k), t in tallies.items():
        name = kind if kind == "alone" else f"{kind} k={k}"
        given = f"{t.right / t.parsed:.2f}" if t.parsed else "-"
        read = [(a, alone[i]) for i, a in t.answers.items() if a is not None]
        agree = "-"
        if kind != "alone" and read:
            same = sum(agrees(a, solo or "", overlap) for a, solo in read)
            agree = f"{same / len(read):.2f}"
        row = (
            f"{name:<12}{t.parsed / t.asked:>7.2f}{t.right / t.asked:>8.2f}{given:>15}"
            f"{t.seconds / t.asked:>11.2f}{agree:>8}"
        )
        mine = learned.get((kind, k))
        if mine is not None:
            row += (
                f"{f'{mine.share:.2f} ({mine.checked})':>13}{mine.merged_requests:>7}"
                f"{mine.right / mine.asked:>17.2f}"
            )
        print(row)
    if learned:
        print()
        print(
            "agrees: share of the merged answers read back whose words overlap the same "
            f"question's answer alone (Jaccard >= {overlap}); learned: splitter's canary "
            "estimate after its run (n: canaries compared); merged: merged requests splitter "
            "sent; splitter correct: share of the answers splitter returned that are right"
        )
        for (kind, k), mine in learned.items():
            print(
                f"  {kind} k={k}: {mine.requests} requests for {mine.asked} questions, "
                f"{mine.canaries} canaries, {mine.disagreements} disagreed"
            )
    if args.examples:
        print()
        for (kind, k), t in tallies.items():
            print(f"{kind} k={k}:")
            for line in t.examples:
                print(f"  {line}")
    if args.raw:
        print()
        for (kind, k), t in tallies.items():
            for reply in t.raw:
                print(f"{kind} k={k}, first reply of a chunk: {reply[:400]!r}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SPLITTER_ENGINE_URL"), help="engine /v1")
    parser.add_argument("--model", default="smollm2", help="model name sent (llama-server: any)")
    parser.add_argument("--questions", default=str(QUESTIONS), help="the labelled JSONL")
    parser.add_argument("--k", default="2,4,8", help="merged group sizes (default 2,4,8)")
    parser.add_argument("--sample", type=int, default=0, help="questions to ask (0: all)")
    parser.add_argument("--seed", type=int, default=18, help="the sample's shuffle seed")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at most")
    parser.add_argument(
        "--system",
        default="You are a helpful assistant.",
        help="system message of every request ('' for none)",
    )
    parser.add_argument(
        "--canary-sample",
        type=int,
        default=48,
        help="questions splitter itself asks per merged arm, to learn agreement (0: none)",
    )
    parser.add_argument("--examples", type=int, default=0, help="replies shown per arm")
    parser.add_argument("--raw", type=int, default=0, help="raw replies shown per arm")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url (or SPLITTER_ENGINE_URL) is required")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
