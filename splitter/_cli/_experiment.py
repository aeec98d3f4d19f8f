"""``splitter bench``'s experiment: merged, fan-out and auto in alternating rounds on one
endpoint, and their summary."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from .. import _clock
from .._policy import MergePolicy, Policy
from .._questions import BatchResult, Question
from .._service_model import ServiceModel
from .._splitter import Splitter
from ..sim import answer_tag
from ._probe import ARMS, Probe, probe, question_texts


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
    # The answers measured, not the requested length: an endpoint whose answers end before
    # max_tokens would otherwise get a limit several times too high (auto / limit 0.34).
    tokens = probe_.answer_tokens or s.tokens
    limit = probe_.limit(tokens) / scale
    return {
        "medians": medians,
        "speedups": speedups,
        "best_fixed": best,
        "auto_of_best": speedups["auto"] / speedups[best],
        "limit": limit,
        "limit_tokens": tokens,
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
