"""The limiter zoo, driven by hand-set simulated times: verdicts, waits and headers exactly."""

from __future__ import annotations

import anyio
import openai
import pytest
from pydantic import ValidationError

from splitter.sim import SimLimits, SimService, __main__
from splitter.sim._limits import RateLimiter

FIXED = SimLimits(kind="fixed_window", limit=3, window=2.0)
SLIDING = SimLimits(kind="sliding_log", limit=2, window=10.0)
AZURE = SimLimits(kind="azure", rpm=60, tpm=6000)  # 10 requests per 10 s sub-window
LEAKY = SimLimits(kind="leaky_bucket", rate=5)  # nginx rate=5r/s, no burst
LEAKY_BURST = SimLimits(kind="leaky_bucket", rate=5, burst=5)


def verdicts(limits: SimLimits, times: list[float], cost: int = 0) -> list[bool]:
    """Whether each request, arriving at each time in turn, is let through."""
    limiter = RateLimiter(limits, now=0.0)
    return [limiter.admit(cost, t).allowed for t in times]


@pytest.mark.parametrize(
    ("limits", "times", "expected"),
    [
        pytest.param(FIXED, [0, 0.5, 1, 1.5], [True, True, True, False], id="fixed-fills"),
        pytest.param(FIXED, [0, 0, 0, 1.999, 2.0], [True] * 3 + [False, True], id="fixed-boundary"),
        pytest.param(FIXED, [1.9, 1.9, 1.9, 2.1, 2.1, 2.1, 2.1], [True] * 6 + [False],
                     id="fixed-double-burst-across-boundary"),
        pytest.param(SLIDING, [0, 4, 6, 9.999, 10, 13, 14], [True, True, False, False, True,
                                                            False, True], id="sliding-expiry"),
        pytest.param(AZURE, [0] * 10 + [9.999, 10.0], [True] * 10 + [False, True],
                     id="azure-sub-window"),
        pytest.param(LEAKY, [0, 0.1, 0.199, 0.2, 0.2], [True, False, False, True, False],
                     id="leaky-burst0-200ms"),
        pytest.param(LEAKY, [5, 5.001], [True, False], id="leaky-first-at-any-time"),
        pytest.param(LEAKY_BURST, [0] * 7 + [0.2, 0.2], [True] * 6 + [False, True, False],
                     id="leaky-burst5-lets-6-through-idle"),
        pytest.param(LEAKY_BURST, [0] * 6 + [10] * 7, [True] * 12 + [False],
                     id="leaky-burst5-after-drain"),
    ],
)  # fmt: skip
def test_verdicts(limits: SimLimits, times: list[float], expected: list[bool]) -> None:
    """Each kind lets through exactly the requests its rule allows, at its boundaries."""
    assert expected == verdicts(limits, times)


@pytest.mark.parametrize(
    ("limits", "times", "retry_after"),
    [
        pytest.param(FIXED, [0, 0, 0, 0.5], 1.5, id="fixed-to-window-end"),
        pytest.param(SLIDING, [0, 4, 6], 4.0, id="sliding-until-oldest-leaves"),
        pytest.param(AZURE, [3] * 11, 7.0, id="azure-to-sub-window-end"),
        pytest.param(LEAKY, [0, 0.1], 0.1, id="leaky-until-drained"),
        pytest.param(LEAKY_BURST, [0] * 7, 0.2, id="leaky-burst-one-slot"),
        pytest.param(SimLimits(rpm=60), [0] * 61, 2.0, id="openai-counts-its-refusal"),
        pytest.param(SimLimits(rpm=60, count_rejected=False), [0] * 61, 1.0,
                     id="openai-uncounted"),
    ],
)  # fmt: skip
def test_retry_after(limits: SimLimits, times: list[float], retry_after: float) -> None:
    """The last request is refused with the exact wait after which it would pass."""
    limiter = RateLimiter(limits, now=0.0)
    *_, last = [limiter.admit(0, t) for t in times]
    assert (last.allowed, last.limit) == (False, "requests")
    assert retry_after == pytest.approx(last.retry_after)


@pytest.mark.parametrize(
    ("limits", "times", "counted", "uncounted"),
    [
        pytest.param(SLIDING, [0, 1, 5, 10, 15], [True, True, False, False, True],
                     [True, True, False, True, True], id="sliding-log-keeps-refusals"),
        pytest.param(LEAKY, [0, 0.1, 0.2, 0.4, 0.6, 1.0], [True] + [False] * 4 + [True],
                     [True, False] + [True] * 4, id="leaky-refusals-fill-the-bucket"),
        pytest.param(SimLimits(kind="fixed_window", limit=2, window=10), [0, 0, 1, 9.999, 10],
                     [True, True, False, False, True], [True, True, False, False, True],
                     id="fixed-window-is-full-anyway"),
    ],
)  # fmt: skip
def test_count_rejected(
    limits: SimLimits, times: list[float], counted: list[bool], uncounted: list[bool]
) -> None:
    """Counting refused requests keeps a hammering client out longer where the kind allows."""
    assert counted == verdicts(limits.model_copy(update={"count_rejected": True}), times)
    assert uncounted == verdicts(limits.model_copy(update={"count_rejected": False}), times)


def test_count_rejected_sliding_wait() -> None:
    """A counted refusal is logged, so its own wait runs from the second-oldest entry."""
    limiter = RateLimiter(SLIDING.model_copy(update={"count_rejected": True}), now=0.0)
    limiter.admit(0, 0)
    limiter.admit(0, 1)
    assert limiter.admit(0, 5).retry_after == 6.0  # log [0, 1, 5]: 1 leaves at 11


@pytest.mark.parametrize(
    ("limits", "times", "now", "time_scale", "expected"),
    [
        pytest.param(FIXED, [0, 0, 0], 1.0, 1.0, {"x-ratelimit-limit-requests": "3",
                     "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"},
                     id="fixed-full"),
        pytest.param(FIXED, [0, 0, 0], 2.5, 0.5, {"x-ratelimit-limit-requests": "3",
                     "x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "750ms"},
                     id="fixed-next-window"),
        pytest.param(SLIDING, [4, 10], 13.0, 1.0, {"x-ratelimit-limit-requests": "2",
                     "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"},
                     id="sliding-oldest"),
        pytest.param(SLIDING, [4], 20.0, 1.0, {"x-ratelimit-limit-requests": "2",
                     "x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "0s"},
                     id="sliding-empty"),
        pytest.param(AZURE, [0] * 10, 1.0, 1.0, {"x-ratelimit-limit-requests": "10",
                     "x-ratelimit-remaining-requests": "0", "x-ratelimit-limit-tokens": "6000",
                     "x-ratelimit-remaining-tokens": "5000"}, id="azure-no-resets"),
        pytest.param(LEAKY_BURST, [0] * 3, 0.0, 1.0, {}, id="leaky-none"),
        pytest.param(FIXED.model_copy(update={"headers": False}), [0], 0.0, 1.0, {},
                     id="headers-off"),
    ],
)  # fmt: skip
def test_headers(
    limits: SimLimits,
    times: list[float],
    now: float,
    time_scale: float,
    expected: dict[str, str],
) -> None:
    """Each dialect sends exactly its own headers, durations in real time."""
    limiter = RateLimiter(limits, now=0.0)
    for t in times:
        limiter.admit(100, t)
    headers = limiter.headers(time_scale, now)
    assert sorted(expected.items()) == headers


def test_token_bucket_headers_are_as_of_the_last_request() -> None:
    """OpenAI's bucket reports the state its latest request left, whatever ``now`` says."""
    limiter = RateLimiter(SimLimits(rpm=60), now=0.0)
    limiter.admit(0, 0.0)
    assert limiter.headers(1.0) == limiter.headers(1.0, now=30.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"kind": "fixed_window", "limit": 10}, "needs window", id="needs-window"),
        pytest.param({"kind": "leaky_bucket"}, "needs rate", id="needs-rate"),
        pytest.param({"kind": "leaky_bucket", "rate": 5, "rpm": 60}, "rpm does not apply",
                     id="rpm-not-leaky"),
        pytest.param({"rpm": 60, "window": 2}, "window does not apply", id="window-not-openai"),
        pytest.param({"kind": "leaky_bucket", "rate": 5, "headers": True}, "no rate-limit headers",
                     id="leaky-has-no-headers"),
        pytest.param({"kind": "sliding_log", "limit": 0, "window": 1}, "greater than or equal",
                     id="limit-positive"),
    ],
)  # fmt: skip
def test_validation(kwargs: dict[str, object], message: str) -> None:
    """A field the kind does not read, or one it needs and lacks, is an error that says so."""
    with pytest.raises(ValidationError, match=message):
        SimLimits.model_validate(kwargs)


def test_defaults_per_kind() -> None:
    """OpenAI's bucket stays today's default; nginx's sends neither headers nor retry-after."""
    assert SimLimits(rpm=60) == SimLimits(kind="token_bucket", rpm=60)
    openai_ = SimLimits(rpm=60)
    assert (
        openai_.sends_headers,
        openai_.sends_retry_after,
        openai_.counts_rejected,
    ) == (True, True, True)
    assert (
        LEAKY.sends_headers,
        LEAKY.sends_retry_after,
        LEAKY.counts_rejected,
    ) == (False, False, False)
    assert (
        FIXED.sends_headers,
        FIXED.sends_retry_after,
        FIXED.counts_rejected,
    ) == (True, True, False)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("limits", "rate_headers", "retry_after", "content_type"),
    [
        pytest.param(FIXED, True, True, "application/json", id="fixed"),
        pytest.param(AZURE, True, True, "application/json", id="azure"),
        pytest.param(LEAKY, False, False, "text/html", id="leaky"),
        pytest.param(FIXED.model_copy(update={"retry_after": False}), True, False,
                     "application/json", id="fixed-no-retry-after"),
    ],
)  # fmt: skip
async def test_429_on_the_wire(
    limits: SimLimits, rate_headers: bool, retry_after: bool, content_type: str
) -> None:
    """A 429 carries the dialect's headers, and a retry-after only where the dialect has one."""
    service = SimService("instant", limits=limits)
    async with service.async_client(max_retries=0) as client:
        for _ in range(20):
            try:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Hi?"}]
                )
            except openai.RateLimitError as exc:
                headers = exc.response.headers
                break
        else:
            pytest.fail("no 429 in 20 requests")
    assert rate_headers == any(k.startswith("x-ratelimit-") for k in headers)
    assert (retry_after, retry_after) == ("retry-after" in headers, "retry-after-ms" in headers)
    assert headers["content-type"].startswith(content_type)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param([], SimLimits(), id="none"),
        pytest.param(["--rpm", "60"], SimLimits(rpm=60), id="openai"),
        pytest.param(["--limiter", "fixed_window", "--limit", "10", "--window", "2"],
                     SimLimits(kind="fixed_window", limit=10, window=2.0), id="fixed"),
        pytest.param(["--limiter", "leaky_bucket", "--rate", "5", "--burst", "5",
                      "--retry-after-header", "--count-rejected"],
                     SimLimits(kind="leaky_bucket", rate=5, burst=5, retry_after=True,
                               count_rejected=True), id="leaky"),
        pytest.param(["--limiter", "azure", "--rpm", "600", "--no-rate-headers"],
                     SimLimits(kind="azure", rpm=600, headers=False), id="azure-silent"),
    ],
)  # fmt: skip
def test_cli_options(argv: list[str], expected: SimLimits) -> None:
    """``python -m splitter.sim``'s limiter options build the SimLimits they name."""
    assert __main__._limits(__main__._parser().parse_args(argv)) == expected


def test_cli_rejects_a_field_the_kind_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    """An option the limiter kind does not read is a usage error that names it."""
    with pytest.raises(SystemExit) as exit_info:
        __main__.main(["--limiter", "leaky_bucket", "--rate", "5", "--rpm", "60"])
    assert exit_info.value.code == 2
    assert "rpm does not apply to kind='leaky_bucket'" in capsys.readouterr().err


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_the_http_door_counts_a_request_when_its_headers_arrive() -> None:
    """nginx's limit_req counts a request once its headers are in, before the body. The
    simulator counted it after reading and parsing the body: two requests whose headers
    came 60 ms apart, the first one's body 30 ms after its headers, met a 20 r/s leaky
    bucket with no burst 30 ms apart and the second was refused (its first request's
    first task group, 7.6 ms, did the same to every cold cell of ``bench/limiters.py``)."""
    service = SimService("instant", time_scale=1.0, limits=SimLimits(kind="leaky_bucket", rate=20))
    body = b'{"model": "m", "messages": [{"role": "user", "content": "What is 1 + 1?"}]}'
    statuses: list[int] = []

    async def one(body_after: float) -> None:
        sent = False

        async def receive() -> dict[str, object]:
            nonlocal sent
            if sent:
                await anyio.sleep_forever()
            await anyio.sleep(body_after)
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(int(message["status"]))  # type: ignore[call-overload]

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
        await service.asgi_app(scope, receive, send)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0.03)
        await anyio.sleep(0.06)
        tg.start_soon(one, 0.0)
    assert statuses == [200, 200]
