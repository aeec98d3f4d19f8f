"""Events, logging and progress, against the simulator with faults and rate limits."""

from __future__ import annotations

import io
import logging
import sys
from collections import Counter
from collections.abc import Sequence

import openai
import pytest

import splitter
from splitter import (
    AnswerDone,
    AnswerFailed,
    BatchFinished,
    BatchPlanned,
    BatchStarted,
    Event,
    InvalidInputError,
    MergePolicy,
    Policy,
    Progress,
    Question,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryPolicy,
    RetryScheduled,
    Splitter,
    Usage,
)
from splitter.sim import Faults, SimLimits, SimService, serve
from splitter.testing import assert_answers_match, open_sim_client

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=8, initial_wait=0.005, max_wait=0.02, jitter=0.005)
# Retried faults, and an empty quota (429 insufficient_quota) that is never retried.
FAULTS = Faults(
    rate_429=0.08,
    rate_quota=0.06,  # ~1 in 16 requests: some question fails in any run of 40 or more
    rate_500=0.06,
    rate_502=0.04,
    rate_503=0.04,
    rate_reset=0.04,
    retry_after=0.05,
)


def faulty_service(seed: int = 5, *, rpm: int | None = 30) -> SimService:
    """Faults on every fifth request or so, behind a requests-per-minute limit that a batch
    of 30 or more runs into however slow the machine: a simulated minute is 1.2 s here, so
    the service takes 30 requests at once and then 25 a second."""
    limits = SimLimits(rpm=rpm) if rpm is not None else None
    return SimService("gpt-4o-mini", time_scale=0.02, faults=FAULTS, seed=seed, limits=limits)


def ended(events: Sequence[Event]) -> Counter[int]:
    """How many times each question was told to be done or failed."""
    return Counter(e.index for e in events if isinstance(e, AnswerDone | AnswerFailed))


def total(usages: Sequence[Usage]) -> Usage:
    return sum(usages, Usage())


def assert_consistent(events: Sequence[Event], result: splitter.BatchResult) -> None:
    """The invariants every event stream keeps, checked against the result."""
    assert isinstance(events[0], BatchStarted)
    assert isinstance(events[-1], BatchFinished)
    assert len({e.batch for e in events}) == 1
    assert ended(events) == Counter(range(len(result)))
    done = {e.index for e in events if isinstance(e, AnswerDone)}
    assert done == {a.index for a in result if a.ok}
    failed = [e for e in events if isinstance(e, AnswerFailed)]
    assert {e.index: e.error for e in failed} == {
        a.index: type(a.error).__name__ for a in result if not a.ok
    }
    assert len(failed) == result.stats.failed
    assert sum(isinstance(e, RetryScheduled) for e in events) == result.stats.retries
    started = {
        (e.request, e.attempt): at for at, e in enumerate(events) if isinstance(e, RequestStarted)
    }
    finished = {
        (e.request, e.attempt): at for at, e in enumerate(events) if isinstance(e, RequestFinished)
    }
    assert len(started) == result.stats.requests
    assert started.keys() == finished.keys()
    assert all(started[key] < finished[key] for key in started)
    answered = total([e.usage for e in events if isinstance(e, AnswerDone)])
    assert answered == result.usage
    last = events[-1]
    assert isinstance(last, BatchFinished)
    assert (last.answered, last.failed, last.requests, last.retries, last.usage) == (
        sum(a.ok for a in result),
        result.stats.failed,
        result.stats.requests,
        result.stats.retries,
        result.usage,
    )


async def test_events_under_faults_and_a_rate_limit_end_every_question_once() -> None:
    """60 questions through mixed faults and an RPM limit: each question ends exactly once,
    retries, requests and tokens in the events add up to the result's, and the budget's
    waits are told with the limit that is short."""
    service = faulty_service()
    events: list[Event] = []
    questions = [f"Event question number {i}?" for i in range(60)]
    policy = Policy(retry=FAST, strategy="fanout")
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            questions, model="m", on_event=events.append
        )
    assert_consistent(events, result)
    assert_answers_match(result)
    assert result.stats.retries > 0
    assert result.stats.failed > 0  # the empty quota is never retried
    failed = [e for e in events if isinstance(e, AnswerFailed)]
    assert {(e.error, e.status_code) for e in failed} == {("QuotaExceededError", 429)}
    billed = total([e.usage for e in events if isinstance(e, RequestFinished)])
    assert billed == result.usage  # fan-out: every billed token is one answer's
    assert result.stats.requests == len(service.log)
    retried = [e for e in events if isinstance(e, RetryScheduled)]
    assert {e.error for e in retried} <= {"RateLimitError", "ServerError", "APIConnectionError"}
    # Backoff waits are jittered above zero; a 429's is the service's (here ~0: the budget
    # then holds the retry back, as RateLimitWait tells).
    assert all(e.wait > 0 for e in retried if e.error != "RateLimitError")
    assert all(e.wait >= 0 for e in retried)
    waits = [e for e in events if isinstance(e, RateLimitWait)]
    assert waits, "the RPM limit never made a request wait"
    assert {e.limit for e in waits} <= {"requests", "tokens"}
    assert all(e.seconds > 0 for e in waits)
    planned = [e for e in events if isinstance(e, BatchPlanned)]
    assert [(e.wave, e.strategy, e.requests) for e in planned] == [(0, "fan-out", 60)]


async def test_merged_repaired_and_dependent_questions_end_once_with_caller_indexes() -> None:
    """Sloppy merges re-asked alone and dependency waves: every event names the caller's
    question indexes, each wave's plan is told, and each question still ends once."""
    service = SimService(
        "gpt-4o-mini",
        time_scale=0.005,
        faults=Faults(rate_sloppy=0.5, sloppy_swaps=False),
        seed=3,
    )
    firsts = [Question(id=f"q{i}", text=f"First question {i}?") for i in range(8)]
    seconds = [
        Question(id=f"d{i}", text=f"Given {{answer:q{i}}}, what next {i}?", depends_on=(f"q{i}",))
        for i in range(4)
    ]
    events: list[Event] = []
    policy = Policy(strategy="merge", merge=MergePolicy(max_per_request=4), retry=FAST)
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            [*firsts, *seconds], model="m", on_event=events.append
        )
    assert result.ok
    assert_consistent(events, result)
    planned = [e for e in events if isinstance(e, BatchPlanned)]
    assert planned[0].wave == 0
    assert sorted(i for e in planned[:1] for g in e.groups for i in g) == list(range(8))
    assert sorted(i for e in planned[1:] for g in e.groups for i in g) == list(range(8, 12))
    done = {e.index: e for e in events if isinstance(e, AnswerDone)}
    assert {done[i].id for i in range(8, 12)} == {"d0", "d1", "d2", "d3"}
    assert all(done[i].wave >= 1 for i in range(8, 12))
    assert {e.via for e in done.values()} >= {"merged"}
    assert [done[a.index].via for a in result] == [a.via for a in result]
    merged = [e for e in events if isinstance(e, RequestStarted) and len(e.indexes) > 1]
    assert merged
    assert all(set(e.indexes) <= set(range(12)) for e in merged)


async def test_a_failed_dependency_and_the_deadline_are_told_as_failures() -> None:
    """Questions never asked (their dependency failed) and questions the deadline cut off
    end with AnswerFailed naming the error; cut-off requests finish as "cancelled"."""
    service = SimService("instant", faults=Faults(rate_quota=1.0))
    events: list[Event] = []
    questions = [Question(id="a", text="A?"), Question(text="Then {answer:a}?", depends_on=("a",))]
    async with open_sim_client(service) as client:
        result = await Splitter(client).aask_many(questions, model="m", on_event=events.append)
        assert_consistent(events, result)
        assert [e.error for e in events if isinstance(e, AnswerFailed)] == [
            "QuotaExceededError",
            "DependencyError",
        ]
    stalled = SimService(
        "instant", time_scale=0.01, faults=Faults(rate_stall=1.0, stall_seconds=300)
    )
    events = []
    async with open_sim_client(stalled) as client:
        policy = Policy(deadline=0.5, retry=FAST)
        result = await Splitter(client, policy=policy).aask_many(
            ["x?", "y?"], model="m", on_event=events.append
        )
    assert_consistent(events, result)
    assert {e.error for e in events if isinstance(e, AnswerFailed)} == {"DeadlineExceededError"}
    assert {e.error for e in events if isinstance(e, RequestFinished)} == {"cancelled"}


async def test_a_hook_that_raises_changes_no_answer_and_is_logged_once_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hook raising on every event: the answers are the same as without it, the batch
    ends normally, and the failure is logged at WARNING once per batch (then DEBUG)."""
    questions = [f"Hook question {i}?" for i in range(12)]
    seen: list[Event] = []

    def broken(event: Event) -> None:
        seen.append(event)
        raise RuntimeError("telemetry is down")

    caplog.set_level(logging.DEBUG, logger="splitter")
    retried_only = Faults(rate_429=0.1, rate_500=0.1, rate_reset=0.05, retry_after=0.05)
    policy = Policy(retry=RetryPolicy(max_attempts=10, initial_wait=0.005, max_wait=0.02))
    async with open_sim_client(SimService("instant", faults=retried_only, seed=9)) as client:
        with_hook = await Splitter(client, policy=policy, on_event=broken).aask_many(
            questions, model="m"
        )
    async with open_sim_client(SimService("instant", faults=retried_only, seed=9)) as client:
        without = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert with_hook.ok
    assert with_hook.texts == without.texts
    assert_answers_match(with_hook)
    assert with_hook.stats.retries > 0
    assert_consistent(seen, with_hook)
    warned = [r for r in caplog.records if "on_event hook" in r.getMessage()]
    assert [r.levelno for r in warned[:1]] == [logging.WARNING]
    assert {r.levelno for r in warned[1:]} == {logging.DEBUG}
    assert len(warned) == len(seen)


async def test_an_async_or_uncallable_hook_is_refused_before_anything_is_sent() -> None:
    """An async hook would never run: it is an InvalidInputError, as is a non-callable."""

    async def hook(event: Event) -> None: ...

    service = SimService("instant")
    async with open_sim_client(service) as client:
        with pytest.raises(InvalidInputError, match="plain function"):
            Splitter(client, on_event=hook)
        with pytest.raises(InvalidInputError, match="on_event must be callable"):
            await Splitter(client).aask_many(["a"], model="m", on_event=42)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="progress must be"):
            await Splitter(client).aask_many(["a"], model="m", progress="yes")  # type: ignore[arg-type]
    assert service.log == []


async def test_logs_never_hold_the_api_key_and_hold_prompt_text_below_info_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every record of every logger, captured at DEBUG through a faulty, rate-limited batch
    (and a hook that fails): the API key appears nowhere, a question's text never at INFO
    or above, and splitter's own records carry no question text at any level."""
    key = "sk-proj-DISTINCTIVEkey-7f3a9c2e"
    secret_text = "zanzibar-quokka-marmalade"
    questions = [f"{secret_text} question {i}?" for i in range(30)]
    service = faulty_service(seed=13)
    caplog.set_level(logging.DEBUG)

    def broken(event: Event) -> None:
        raise ValueError("the hook fails")

    http_client = openai.DefaultAsyncHttpxClient(transport=service.transport())
    async with openai.AsyncOpenAI(
        base_url=service.base_url, api_key=key, http_client=http_client, max_retries=0
    ) as client:
        policy = Policy(retry=FAST, strategy="merge", merge=MergePolicy(max_per_request=5))
        result = await Splitter(client, policy=policy, on_event=broken).aask_many(
            questions, model="m"
        )
    assert len(result) == 30
    records = caplog.records
    assert {r.name for r in records} >= {"splitter"}
    assert any(r.levelno >= logging.INFO and r.name == "splitter" for r in records)
    for record in records:
        message = record.getMessage()
        shown = f"{message} {record.__dict__.get('splitter_event')!r}"
        assert key not in shown
        assert key[8:] not in shown  # not even a masked key's tail
        if record.levelno >= logging.INFO or record.name.startswith("splitter"):
            assert secret_text not in shown, (record.name, record.levelname, message)
    assert key not in caplog.text


async def test_progress_final_counts_equal_the_result() -> None:
    """A Progress rendered to a StringIO through a faulty, rate-limited batch ends with the
    result's answered / failed / retries / tokens, and nothing still retrying."""
    service = faulty_service(seed=21)
    out = io.StringIO()
    questions = [f"Progress question {i}?" for i in range(50)]
    shown_waits: list[str] = []
    async with open_sim_client(service) as client:
        with Progress(file=out, mininterval=0) as bar:

            def feed(event: Event) -> None:  # a Progress is a plain hook too
                bar(event)
                if isinstance(event, RateLimitWait):
                    shown_waits.append(bar.summary())

            result = await Splitter(client, policy=Policy(retry=FAST)).aask_many(
                questions, model="m", on_event=feed
            )
    assert (bar.answered, bar.failed, bar.retries, bar.retrying) == (
        sum(a.ok for a in result),
        result.stats.failed,
        result.stats.retries,
        0,
    )
    assert bar.tokens >= result.usage.total_tokens > 0
    assert bar.total == 50
    final = out.getvalue().rsplit("\r", 1)[-1]
    assert "50/50" in final
    assert f"ok={bar.answered} failed={bar.failed}" in final
    assert f"tokens={bar.tokens}" in final
    assert result.stats.failed > 0
    assert result.stats.retries > 0
    assert shown_waits, "the RPM limit never made a request wait"
    assert all(" rate-wait=" in text for text in shown_waits)


async def test_one_progress_follows_several_batches_and_a_fixed_total() -> None:
    """A Progress passed to two calls adds each batch's questions; with total= it keeps
    the given length and initial= counts work done before."""
    service = SimService("instant")
    async with open_sim_client(service) as client:
        s = Splitter(client)
        with Progress(file=io.StringIO()) as grows:
            await s.aask_many(["a", "b"], model="m", progress=grows)
            await s.aask_many(["c", "d", "e"], model="m", progress=grows)
        with Progress(file=io.StringIO(), total=10, initial=5) as fixed:
            await s.aask_many(["f", "g"], model="m", progress=fixed)
    assert (grows.total, grows.answered) == (5, 5)
    assert (fixed.total, fixed.answered) == (10, 7)


async def test_progress_true_draws_on_stderr_and_closes(capfd: pytest.CaptureFixture[str]) -> None:
    """progress=True: the bar goes to stderr (nothing to stdout) and ends at 3/3."""
    async with open_sim_client(SimService("instant")) as client:
        result = await Splitter(client).aask_many(["a", "b", "c"], model="m", progress=True)
    assert result.ok
    out, err = capfd.readouterr()
    assert out == ""
    assert "3/3" in err
    assert "ok=3 failed=0" in err


async def test_progress_without_tqdm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """With tqdm missing, progress=True raises ImportError naming splitter-llm[progress], and
    sends nothing."""
    monkeypatch.setitem(sys.modules, "tqdm", None)  # what an absent package looks like
    service = SimService("instant")
    async with open_sim_client(service) as client:
        with pytest.raises(ImportError, match=r"pip install 'splitter-llm\[progress\]'"):
            await Splitter(client).aask_many(["a"], model="m", progress=True)
    with pytest.raises(ImportError, match="progress"):
        Progress()
    assert service.log == []


async def test_the_splitters_hook_sees_aask_and_astream_batches() -> None:
    """Splitter(on_event=) hears every batch it runs: a compound prompt's and a stream's."""
    events: list[Event] = []
    async with open_sim_client(SimService("instant")) as client:
        s = Splitter(client, on_event=events.append)
        await s.aask("1. What is a cat?\n2. What is a dog?", model="m")
        async with s.astream(["x?", "y?", "z?"], model="m") as stream:
            async for _ in stream:
                pass
    batches = Counter(e.batch for e in events if isinstance(e, AnswerDone))
    assert sorted(batches.values()) == [2, 3]
    assert sum(isinstance(e, BatchFinished) for e in events) == 2


def test_the_sync_twin_calls_the_hook_and_the_progress() -> None:
    """ask_many passes on_event and progress through to the batch."""
    events: list[Event] = []
    service = SimService("instant", faults=Faults(rate_500=0.3), seed=2)
    with (
        serve(service) as base_url,
        openai.OpenAI(base_url=base_url, api_key="k") as client,
        Progress(file=io.StringIO()) as bar,
    ):
        result = Splitter(client, policy=Policy(retry=FAST)).ask_many(
            [f"s{i}?" for i in range(10)], model="m", on_event=events.append, progress=bar
        )
    assert_consistent(events, result)
    assert bar.answered == sum(a.ok for a in result)


async def test_no_hook_and_no_debug_build_no_request_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hot path without listeners: no per-request event object is made at all."""
    made: list[type] = []
    original = RequestStarted.__init__

    def counting(self: RequestStarted, **kwargs: object) -> None:
        made.append(type(self))
        original(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RequestStarted, "__init__", counting)
    logging.getLogger("splitter").setLevel(logging.INFO)
    try:
        async with open_sim_client(SimService("instant")) as client:
            result = await Splitter(client).aask_many(["a", "b"], model="m")
    finally:
        logging.getLogger("splitter").setLevel(logging.NOTSET)
    assert result.ok
    assert made == []


def test_an_emitter_tells_a_windows_answers_by_their_input_positions() -> None:
    """For a window of a longer input (map): answers told by their input position end once
    each, also when the result is passed to finished() with the same positions."""
    from splitter._events import Emitter

    seen: list[Event] = []
    events = Emitter([seen.append])
    answers = (
        splitter.Answer(0, Question(text="a?"), "A"),
        splitter.Answer(
            1, Question(text="b?"), None, error=splitter.ServerError("boom", status_code=500)
        ),
    )
    events.answer(answers[0], position=40)
    events.finished(splitter.BatchResult(answers), positions=[40, 41])
    assert [(type(e).__name__, getattr(e, "index", None)) for e in seen] == [
        ("AnswerDone", 40),
        ("AnswerFailed", 41),
        ("BatchFinished", None),
    ]
