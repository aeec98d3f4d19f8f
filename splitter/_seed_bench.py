"""The seeds' experiment on any OpenAI-compatible endpoint: ``splitter bench``.

The seeds claim that N independent answers arrive about N times sooner as N concurrent
requests than as one merged request, "if the service can batch them". Whether it can is a
property of the endpoint, not of the client: a GPU API decodes N sequences nearly as fast
as one, while a 2-core llama.cpp server pays ~0.4 of a step more per extra sequence. So the
claim, and the planner's choice, are measured here side by side on the same endpoint:

- **merged**: all N questions in one request, in splitter's own merged format
  (``Policy(strategy="merge")``), so its serial decode is what the seeds describe;
- **fan-out**: one request per question, all at once (``strategy="fanout"``);
- **auto**: what the planner chooses, on a ``Splitter`` that first ran ``calibration``
  batches against the endpoint and learned it from their responses;

round after round, alternating the order so drift and warm caches favour no arm. Every
answer's length is pinned so each arm decodes the same tokens: the simulator's ``[len=T]``
marker, or ``max_tokens=T`` with llama.cpp's ``ignore_eos`` (``ignore_eos=True``) on a real
engine. Beside them stands the physical limit no plan beats, measured directly rather than
taken from the planner's model: RTT + TTFT (the first text of one answer streamed alone;
a model listing tells how much of it is round trip) + T x TPOT(N) (N answers streamed at
once, from their chunk timestamps).

The merged arm is timed by its one merged request (an HTTP event hook on the client sees
it go and come back): that is the seeds' baseline. Splitter may then re-ask alone answers
it could not read back from it; with ``ignore_eos`` it always does for the last one, since
the request always stops at ``max_tokens`` and the last answer counts as cut. Those re-asks
show in the ``requests`` column and the whole call's time is reported beside it, but they
are not what merging costs on a model that writes its markers. The other arms are timed by
the whole ``aask_many`` call, as their caller waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import openai

from . import _clock
from ._policy import MergePolicy, Policy
from ._questions import BatchResult, Question
from ._service_model import ServiceModel
from ._splitter import Splitter
from .sim import PROFILES, SimService, answer_tag, serve

__all__ = [
    "ARMS",
    "Measured",
    "Probe",
    "Settings",
    "StreamTiming",
    "add_arguments",
    "experiment",
    "main",
    "measure_concurrent",
    "measure_rtt",
    "measure_stream",
    "probe",
    "question_texts",
    "run",
    "summarize",
]

#: The arms, in the order of even rounds (odd rounds run them backwards).
ARMS = ("merged", "fan-out", "auto")
TARGET = 0.95  # issue 7: auto reaches this share of the best measured plan's speed-up

_TOPICS = (
    "photosynthesis",
    "plate tectonics",
    "the immune system",
    "compilers",
    "inflation",
    "black holes",
    "the French Revolution",
    "vaccines",
    "neural networks",
    "tides",
    "the water cycle",
    "public-key cryptography",
)


def question_texts(n: int, tokens: int, *, marker: bool) -> list[str]:
    """N distinct, independent questions; ``marker`` pins the simulator's answer length."""
    texts = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        part = f" (part {i // len(_TOPICS) + 1})" if i >= len(_TOPICS) else ""
        pin = f" [len={tokens}]" if marker else ""
        texts.append(f"Explain {topic}{part} in detail.{pin}")
    return texts


# -- direct measurement: what the physical limit is made of ---------------------------------


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """One streamed answer: when it was sent, when its first and last text arrived, and how
    many tokens it held (the service's usage count, else the text chunks seen)."""

    sent: float
    first: float | None
    last: float | None
    tokens: int

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first text, as the client sees it (RTT included)."""
        return None if self.first is None else self.first - self.sent

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first: the decode speed of this stream."""
        if self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) / (self.tokens - 1)


async def measure_stream(
    client: openai.AsyncOpenAI, *, model: str, text: str, params: Mapping[str, Any]
) -> StreamTiming:
    """Stream one answer to ``text`` and time its chunks (``params`` go to the request)."""
    sent = _clock.now()
    first = last = None
    chunks = 0
    usage_tokens: int | None = None
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        stream=True,
        stream_options={"include_usage": True},
        **params,
    )
    async with stream:
        async for chunk in stream:
            if chunk.usage is not None:
                usage_tokens = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                last = _clock.now()
                first = last if first is None else first
                chunks += 1
    return StreamTiming(sent, first, last, usage_tokens if usage_tokens else chunks)


async def measure_concurrent(
    client: openai.AsyncOpenAI, *, model: str, texts: Sequence[str], params: Mapping[str, Any]
) -> list[StreamTiming]:
    """Stream one answer per text, all at once: their TPOT is the engine's TPOT(len(texts))."""
    timings: list[StreamTiming | None] = [None] * len(texts)
    failures: list[openai.OpenAIError] = []

    async def one(i: int) -> None:
        try:
            timings[i] = await measure_stream(client, model=model, text=texts[i], params=params)
        except openai.OpenAIError as exc:  # raised below as itself, not in an exception group
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(len(texts)):
            tg.start_soon(one, i)
    if failures:
        raise failures[0]
    return [t for t in timings if t is not None]


async def measure_rtt(client: openai.AsyncOpenAI, repeats: int = 3) -> float | None:
    """The network round trip: the fastest of a few model listings (no decoding in them);
    None when the endpoint does not list models."""
    best: float | None = None
    for _ in range(repeats):
        started = _clock.now()
        try:
            await client.models.list()
        except openai.OpenAIError:
            return None
        elapsed = _clock.now() - started
        best = elapsed if best is None else min(best, elapsed)
    return best


@dataclass(frozen=True, slots=True)
class Probe:
    """The physical limit's terms, measured directly (seconds, on the endpoint's clock)."""

    rtt: float | None
    alone: StreamTiming
    together: tuple[StreamTiming, ...]

    @property
    def first_token(self) -> float:
        """Seconds from sending the lone request to its first text: RTT + TTFT, measured
        as one, so the limit never rests on the round trip measured apart."""
        return self.alone.ttft or 0.0

    @property
    def round_trip(self) -> float:
        """The RTT share of :attr:`first_token` (a listing slower than a first token, as
        a loopback server's delayed ACKs can make it, counts as the whole of it)."""
        return min(self.rtt or 0.0, self.first_token)

    @property
    def ttft(self) -> float:
        """Time to first token at the server: the lone stream's, less the round trip."""
        return self.first_token - self.round_trip

    @property
    def tpot1(self) -> float:
        return self.alone.tpot or 0.0

    @property
    def tpot_n(self) -> float:
        """Median TPOT of the concurrent streams."""
        values = [t.tpot for t in self.together if t.tpot is not None]
        return statistics.median(values) if values else 0.0

    def limit(self, tokens: int) -> float:
        """RTT + TTFT + T x TPOT(N): one answer of T tokens decoded beside N - 1 others."""
        return self.first_token + tokens * self.tpot_n


async def probe(
    client: openai.AsyncOpenAI, *, model: str, texts: Sequence[str], params: Mapping[str, Any]
) -> Probe:
    """RTT, one answer streamed alone, then all ``texts`` streamed at once."""
    rtt = await measure_rtt(client)
    alone = await measure_stream(client, model=model, text=texts[0], params=params)
    together = await measure_concurrent(client, model=model, texts=texts, params=params)
    return Probe(rtt, alone, tuple(together))


# -- the experiment -------------------------------------------------------------------------


class _RequestLog:
    """Send and response times of chat-completion requests, seen by the HTTP client's event
    hooks: the only way to time one request inside an ``aask_many`` call from outside."""

    def __init__(self) -> None:
        self._sent: dict[int, float] = {}
        self.spans: list[tuple[float, float, int]] = []  # sent, answered, HTTP status

    async def on_request(self, request: Any) -> None:
        if str(request.url.path).endswith("/chat/completions"):
            self._sent[id(request)] = _clock.now()

    async def on_response(self, response: Any) -> None:
        # A non-streamed completion's headers come with its body, once it is fully decoded.
        sent = self._sent.pop(id(response.request), None)
        if sent is not None:
            self.spans.append((sent, _clock.now(), response.status_code))

    def take(self) -> list[tuple[float, float, int]]:
        spans, self.spans = sorted(self.spans), []
        return spans


@dataclass(frozen=True, slots=True)
class Settings:
    """The command line, checked."""

    base_url: str | None  # None: start the bundled simulator
    model: str
    api_key: str
    questions: int
    tokens: int
    rounds: int
    calibration: int
    ignore_eos: bool
    profile: str
    time_scale: float
    timeout: float
    json_path: str | None


@dataclass(slots=True)
class Measured:
    """One arm in one round; times in the report's unit (simulated seconds on the sim)."""

    round: int
    time: float  # what the arm is judged by (see the module docstring)
    wall: float  # the whole aask_many call
    plan: str
    requests: int
    repaired: int
    answered: int
    attributed: int | None  # simulator only: answers carrying their own question's tag
    predicted: float | None
    request_seconds: list[float] = field(default_factory=list)
    refused: int | None = None  # merged arm: the HTTP status the merged request was refused with


def _plan_label(result: BatchResult) -> str:
    """The plan that ran, in one word and its request count ("fan-out k=5", "2-groups k=2")."""
    plan = result.plan
    if plan is None:
        return "? k=0"
    return f"{plan.chosen.label.replace(' ', '-')} k={plan.chosen.k}"


def _measured(
    result: BatchResult,
    spans: list[tuple[float, float, int]],
    arm: str,
    round_: int,
    scale: float,
    on_sim: bool,
) -> Measured:
    stats = result.stats
    wall = stats.wall_time
    time_ = wall
    # The merged request is the first sent; re-asks follow it. One the service refused (a
    # context too small for the merged answers, say) measured nothing: the call is timed.
    refused = spans[0][2] if arm == "merged" and spans and spans[0][2] != 200 else None
    if arm == "merged" and spans and stats.retries == 0 and refused is None:
        start, end, _ = spans[0]
        time_ = end - start
    attributed = None
    if on_sim:
        attributed = sum(
            bool(a.text and a.text.startswith(answer_tag(a.question.text))) for a in result
        )
    predicted = stats.predicted_wall_time
    return Measured(
        round=round_,
        time=time_ / scale,
        wall=wall / scale,
        plan=_plan_label(result),
        requests=stats.requests,
        repaired=stats.repaired,
        answered=sum(a.ok for a in result),
        attributed=attributed,
        predicted=None if predicted is None else predicted / scale,
        request_seconds=[(end - start) / scale for start, end, _ in spans],
        refused=refused,
    )


async def experiment(
    s: Settings,
    base_url: str,
    scale: float,
    on_sim: bool,
    service: ServiceModel | None = None,
) -> tuple[dict[str, list[Measured]], list[str], Probe, Splitter]:
    """Calibrate auto, probe the physical limit, then measure the arms round by round.

    Returns each arm's rounds, auto's calibration plans, the probe, and the calibrated auto
    ``Splitter`` (its service model is what it learned). ``on_sim``: pin lengths with the
    simulator's marker instead of ``max_tokens``. ``service``: auto starts from (and goes
    on teaching) this service model instead of a fresh one."""
    texts = question_texts(s.questions, s.tokens, marker=on_sim)
    params: dict[str, Any] = {}
    if not on_sim:  # the simulator pins lengths by the marker; a cap would only cut markers
        params["max_tokens"] = s.tokens
    if s.ignore_eos:
        params["extra_body"] = {"ignore_eos": True}
    log = _RequestLog()
    http_client = openai.DefaultAsyncHttpxClient(
        event_hooks={"request": [log.on_request], "response": [log.on_response]}
    )
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key=s.api_key, http_client=http_client, max_retries=0
    )
    n = s.questions
    splitters = {
        "merged": Splitter(
            client,
            policy=Policy(
                strategy="merge", merge=MergePolicy(max_per_request=n), timeout=s.timeout
            ),
        ),
        "fan-out": Splitter(client, policy=Policy(strategy="fanout", timeout=s.timeout)),
        "auto": Splitter(client, policy=Policy(timeout=s.timeout)),
    }
    if service is not None:
        splitters["auto"].use_service_model(service, s.model)
    # The seeds' one merged request is sized for its answers (max_tokens from the known
    # length); sized by a guess it may not fit the model's context.
    sized = [Question(text=t, expected_tokens=s.tokens) for t in texts]
    results: dict[str, list[Measured]] = {arm: [] for arm in ARMS}
    calibration: list[str] = []
    async with client:
        for _ in range(s.calibration):  # auto learns the endpoint from these responses
            result = await splitters["auto"].aask_many(texts, model=s.model, **params)
            calibration.append(_plan_label(result))
        log.take()
        measured_probe = await probe(client, model=s.model, texts=texts, params=params)
        for r in range(s.rounds):
            for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
                log.take()
                asked = sized if arm == "merged" else texts
                result = await splitters[arm].aask_many(asked, model=s.model, **params)
                results[arm].append(_measured(result, log.take(), arm, r, scale, on_sim))
    return results, calibration, measured_probe, splitters["auto"]


def summarize(
    s: Settings,
    results: dict[str, list[Measured]],
    probe_: Probe,
    auto: Splitter,
    scale: float,
) -> dict[str, Any]:
    """Medians, speed-ups, auto's share of the best, the limit, measured and learned TPOT."""
    medians = {arm: statistics.median(m.time for m in results[arm]) for arm in ARMS}
    speedups = {arm: medians["merged"] / medians[arm] for arm in ARMS}
    best = max(("merged", "fan-out"), key=lambda arm: speedups[arm])
    estimate = auto.service_model(s.model).estimate()
    limit = probe_.limit(s.tokens) / scale
    return {
        "medians": medians,
        "speedups": speedups,
        "best_fixed": best,
        "auto_of_best": speedups["auto"] / speedups[best],
        "target": TARGET,
        "limit": limit,
        "auto_of_limit": medians["auto"] / limit if limit > 0 else None,
        "probe": {
            "rtt": None if probe_.rtt is None else probe_.round_trip / scale,
            "model_listing": None if probe_.rtt is None else probe_.rtt / scale,
            "ttft": probe_.ttft / scale,
            "tpot1": probe_.tpot1 / scale,
            "tpot_n": probe_.tpot_n / scale,
            "alone": asdict(probe_.alone),
            "together": [asdict(t) for t in probe_.together],
        },
        "learned": {
            "rtt": estimate.rtt / scale,
            "ttft0": estimate.ttft0 / scale,
            "tpot1": estimate.tpot1 / scale,
            "beta": estimate.beta,
            "slots": estimate.slots,
            "tpot(1)": estimate.tpot(1) / scale,
            f"tpot({s.questions})": estimate.tpot(s.questions) / scale,
        },
    }


def _print_report(
    s: Settings,
    where: str,
    results: dict[str, list[Measured]],
    calibration: list[str],
    summary: dict[str, Any],
    unit: str,
) -> None:
    n, t = s.questions, s.tokens
    pinned = "ignore_eos" if s.ignore_eos else ("[len=T]" if s.base_url is None else "max_tokens")
    print(
        f"seeds' experiment: {n} independent questions x {t} tokens ({pinned}), "
        f"{s.rounds} round(s), on {where}"
    )
    print(f"auto calibrated on {len(calibration)} batch(es): {', '.join(calibration) or '-'}")
    print(f"times in {unit}")
    print(
        f"{'arm':<9}{'plan':<15}{'requests':>9}{'median':>9}{'min':>9}{'max':>9}{'vs merged':>11}"
    )
    varied = []
    for arm in ARMS:
        rows = results[arm]
        times = [m.time for m in rows]
        plans = [m.plan for m in rows]
        shown = statistics.mode(plans)
        if len(set(plans)) > 1:  # marked, and each round's plan listed under the table
            shown += "*"
            varied.append(f"{arm} by round: {', '.join(plans)}")
        requests = statistics.median(m.requests for m in rows)
        print(
            f"{arm:<9}{shown:<15}{requests:>9g}{summary['medians'][arm]:>9.2f}"
            f"{min(times):>9.2f}{max(times):>9.2f}{summary['speedups'][arm]:>10.2f}x"
        )
    for line in varied:
        print(line)
    merged = results["merged"]
    refused = [m for m in merged if m.refused is not None]
    if refused:
        print(
            f"merged: the service refused the merged request in {len(refused)} round(s) "
            f"(HTTP {refused[0].refused}); those rounds are timed by the whole call"
        )
    repaired = statistics.median(m.repaired for m in merged)
    if repaired and len(refused) < len(merged):
        whole = statistics.median(m.wall for m in merged)
        print(
            "merged: timed by its one merged request; splitter then re-asked a median of "
            f"{repaired:g} answer(s) alone, the whole call taking {whole:.2f} (median)"
        )
    best = summary["best_fixed"]
    print(
        f"auto / best measured plan ({best}, {summary['speedups'][best]:.2f}x over merged): "
        f"{summary['auto_of_best']:.3f} (target >= {TARGET:.2f})"
    )
    p, learned = summary["probe"], summary["learned"]
    rtt = "n/a" if p["rtt"] is None else f"{p['rtt']:.3f}"
    auto_of_limit = summary["auto_of_limit"]
    print(
        f"physical limit: RTT {rtt} + TTFT {p['ttft']:.3f} + {t} x TPOT({n}) "
        f"{p['tpot_n'] * 1000:.1f} ms = {summary['limit']:.2f}; auto / limit = "
        + ("n/a" if auto_of_limit is None else f"{auto_of_limit:.2f}")
    )
    slots = learned["slots"] if learned["slots"] is not None else "no limit seen"
    print(
        f"TPOT measured: TPOT(1) {p['tpot1'] * 1000:.1f} ms, TPOT({n}) {p['tpot_n'] * 1000:.1f} ms;"
        f" learned by auto: {learned['tpot(1)'] * 1000:.1f} ms, "
        f"{learned[f'tpot({n})'] * 1000:.1f} ms (beta {learned['beta']:.2f}, slots {slots})"
    )
    answered = ", ".join(f"{arm} {sum(m.answered for m in results[arm])}" for arm in ARMS)
    line = f"answered: {answered} of {n * s.rounds} each"
    if s.base_url is None:
        own = sum(m.attributed or 0 for arm in ARMS for m in results[arm])
        line += f"; attached to their own question: {own}/{n * s.rounds * len(ARMS)}"
    print(line)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``splitter bench`` and ``bench/seed_benchmark.py``."""
    parser.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (default: the simulator)"
    )
    parser.add_argument(
        "--model", default=None, help="model name to send (default with the simulator: its profile)"
    )
    parser.add_argument(
        "--api-key", default=None, help="API key (default: $OPENAI_API_KEY, else a placeholder)"
    )
    parser.add_argument("--questions", type=int, default=5, help="independent questions N")
    parser.add_argument("--tokens", type=int, default=200, help="answer length T, pinned")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per arm")
    parser.add_argument(
        "--calibration", type=int, default=2, help="auto's batches before measuring"
    )
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send llama.cpp's ignore_eos so every answer is exactly T tokens",
    )
    parser.add_argument(
        "--profile", default="gpt-4o-mini", choices=sorted(PROFILES), help="simulator profile"
    )
    parser.add_argument(
        "--time-scale", type=float, default=0.1, help="simulator: real seconds per sim second"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument("--json", default=None, metavar="PATH", help="write everything here")


def _settings(args: argparse.Namespace) -> Settings:
    if args.base_url is not None and args.model is None:
        raise ValueError("--model is required with --base-url")
    for name in ("questions", "tokens", "rounds"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1")
    if args.calibration < 0 or args.time_scale <= 0 or args.timeout <= 0:
        raise ValueError("--calibration must be >= 0, --time-scale and --timeout > 0")
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "sk-no-key"
    return Settings(
        base_url=args.base_url,
        model=args.model or args.profile,
        api_key=api_key,
        questions=args.questions,
        tokens=args.tokens,
        rounds=args.rounds,
        calibration=args.calibration,
        ignore_eos=args.ignore_eos,
        profile=args.profile,
        time_scale=args.time_scale,
        timeout=args.timeout,
        json_path=args.json,
    )


def run(args: argparse.Namespace) -> int:
    """Run the experiment, print the table, write the JSON; 1 if any question went
    unanswered (the times themselves are a measurement: no threshold fails the run)."""
    try:
        s = _settings(args)
    except ValueError as exc:
        print(f"splitter bench: error: {exc}", file=sys.stderr)
        return 2
    if s.base_url is None:
        service = SimService(s.profile, time_scale=s.time_scale)
        scale, unit = s.time_scale, f"simulated seconds (real seconds / {s.time_scale:g})"
        try:
            with serve(service) as base_url:
                where = f"the simulated {s.profile!r} service at {base_url}"
                outcome = anyio.run(experiment, s, base_url, scale, True)
        except RuntimeError as exc:  # uvicorn (the sim extra) is missing
            print(f"splitter bench: error: {exc}", file=sys.stderr)
            return 1
    else:
        scale, unit, where = 1.0, "seconds", f"{s.base_url} (model {s.model!r})"
        try:
            outcome = anyio.run(experiment, s, s.base_url, scale, False)
        except openai.OpenAIError as exc:
            print(f"splitter bench: the endpoint failed: {exc}", file=sys.stderr)
            return 1
    results, calibration, measured_probe, auto = outcome
    summary = summarize(s, results, measured_probe, auto, scale)
    _print_report(s, where, results, calibration, summary, unit)
    if s.json_path is not None:
        report = {
            "settings": asdict(s) | {"api_key": None},
            "where": where,
            "unit": unit,
            "calibration": calibration,
            "arms": {arm: [asdict(m) for m in results[arm]] for arm in ARMS},
            "summary": summary,
        }
        Path(s.json_path).write_text(json.dumps(report, indent=2) + "\n")
    unanswered = sum(s.questions - m.answered for arm in ARMS for m in results[arm])
    return 1 if unanswered else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python bench/seed_benchmark.py``: the same as ``splitter bench``."""
    parser = argparse.ArgumentParser(
        prog="seed_benchmark.py", description=(__doc__ or "").splitlines()[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
