"""The Redis-shared budget, against a real redis-server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import redis
from redis_support import RedisServer, free_port, wait_for_port

from splitter import BudgetError, Limits, SharedBudget
from splitter._budget._redis import RedisBudget
from splitter._endpoint import endpoint_fingerprint

pytestmark = pytest.mark.anyio

HEADERS = {
    "x-ratelimit-limit-requests": "600",
    "x-ratelimit-remaining-requests": "599",
    "x-ratelimit-reset-requests": "100ms",  # 10 per second (to the millisecond)
}


def _budget(server: RedisServer, **limits: object) -> RedisBudget:
    shared = SharedBudget(url=server.url, namespace="t")
    return RedisBudget(
        shared,
        fingerprint="f" * 24,
        limits=Limits(shared=shared, burst=1.0, **limits),  # type: ignore[arg-type]
    )


async def _settle(budget: RedisBudget, headers: dict[str, str]) -> None:
    await budget.settle(await budget.acquire(1), headers)


async def test_two_processes_see_one_budget(redis_server: RedisServer) -> None:
    """What one budget object books, another on the same key sees at its next call (as
    another process would): TPM 600 opens with its 600 tokens, and 501 are gone."""
    first, second = _budget(redis_server, tpm=600), _budget(redis_server, tpm=600)
    for _ in range(5):
        await first.acquire(100)
    await second.acquire(1)
    remaining = second.snapshot().remaining_tokens
    assert remaining is not None
    assert 98 <= remaining <= 105  # 99, plus 10 a second refilled meanwhile


async def test_headers_read_by_one_teach_all(redis_server: RedisServer) -> None:
    """A reading taken by any process corrects the shared limits, rate and room."""
    first, second = _budget(redis_server), _budget(redis_server)
    await _settle(first, HEADERS)
    await second.settle(await second.acquire(1), {})
    snap = second.snapshot()
    assert snap.remaining_requests == pytest.approx(599, abs=1)
    assert snap.requests_per_second == pytest.approx(10, rel=0.01)


async def test_a_429_seen_by_one_holds_the_other(redis_server: RedisServer) -> None:
    """A retry-after told to one process holds the other's next request, and the wait is
    told once, with the limit that is short. The retry-after is 30 s and the wait is
    cancelled once told: with 0.2 s, a settle slowed that long by a loaded machine had
    paid the hold off before the other process looked."""
    first, second = _budget(redis_server), _budget(redis_server)
    reservation = await first.acquire(1)
    await first.settle(reservation, HEADERS, limited="requests", retry_after=30.0)
    told: list[tuple[float, str]] = []
    acquired = False
    with anyio.CancelScope() as scope:

        def on_wait(seconds: float, kind: str) -> None:
            told.append((seconds, kind))
            scope.cancel()

        await second.acquire(1, on_wait)
        acquired = True
    assert not acquired, "the other process went without waiting for the retry-after"
    assert len(told) == 1
    assert told[0][1] == "requests"
    assert 20 < told[0][0] <= 30


async def test_a_look_that_must_wait_writes_nothing(redis_server: RedisServer) -> None:
    """Waiting requests look at the shared account again and again; a look that finds it
    must wait changes nothing, so it writes nothing. Regression: every look was written
    back, which voided every other process's optimistic transaction, and four processes
    spent their time retrying each other's looks (a fixed window drew 8% 429s at half its
    rate; 0% at 0.96 of it since)."""
    budget = _budget(redis_server)
    reservation = await budget.acquire(1)
    await budget.settle(reservation, HEADERS, limited="requests", retry_after=30.0)
    client = redis.Redis.from_url(redis_server.url)
    with client.pipeline() as pipe:
        pipe.watch(budget.key)
        with anyio.move_on_after(0.3):
            await budget.acquire(1)  # held by the retry-after: it looks, and waits
        pipe.multi()
        pipe.get(budget.key)
        assert pipe.execute()  # a WatchError if the key was written meanwhile


async def test_keys_hold_no_api_key(redis_server: RedisServer) -> None:
    """Budget keys are namespaced, expire, and carry a fingerprint, never the API key."""
    api_key = "sk-live-SECRET-123"
    fingerprint = endpoint_fingerprint("https://api.example/v1", api_key, "m")
    shared = SharedBudget(url=redis_server.url, namespace="ns")
    budget = RedisBudget(shared, fingerprint=fingerprint, limits=Limits(shared=shared, rpm=60))
    await budget.acquire(10)
    client = redis.Redis.from_url(redis_server.url)
    keys = [k.decode() for k in client.keys("*")]
    assert keys == [f"ns:budget:{fingerprint}"]
    assert 0 < client.ttl(keys[0]) <= 600
    stored = client.get(keys[0])
    assert stored is not None
    assert "SECRET" not in stored.decode()
    assert api_key not in keys[0]
    client.close()


async def test_outage_falls_back_to_a_local_share(redis_server: RedisServer) -> None:
    """Redis down: one warning, then a local budget at outage_share of the learned rate."""
    budget = _budget(redis_server)
    await _settle(budget, HEADERS)
    redis_server.kill()
    with pytest.warns(RuntimeWarning, match="unreachable"):
        await budget.acquire(1)
    local = budget.snapshot()
    assert local.requests_per_second == pytest.approx(10 * 0.25, rel=0.02)  # a quarter of 10/s


async def test_outage_can_stop_instead(redis_server: RedisServer) -> None:
    """on_outage='stop': requests fail with BudgetError rather than go unbudgeted."""
    shared = SharedBudget(url=redis_server.url, namespace="t", on_outage="stop")
    budget = RedisBudget(shared, fingerprint="g" * 24, limits=Limits(shared=shared))
    redis_server.kill()
    with pytest.raises(BudgetError, match="unreachable"):
        await budget.acquire(1)


async def test_splitter_runs_on_a_shared_budget(redis_server: RedisServer) -> None:
    """A Splitter whose policy shares the budget through Redis answers a batch end to end."""
    from splitter import Policy, Splitter
    from splitter.sim import SimLimits, SimService
    from splitter.testing import assert_answers_match, open_sim_client

    service = SimService("instant", time_scale=0.01, limits=SimLimits(rpm=600))
    shared = SharedBudget(url=redis_server.url, namespace="e2e")
    policy = Policy(strategy="fanout", limits=Limits(max_concurrency=8, shared=shared))
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=policy).aask_many(
            [f"q{i}" for i in range(40)], model="m"
        )
    assert result.ok
    assert_answers_match(result)
    keys = redis.Redis.from_url(redis_server.url)
    assert [k.decode() for k in keys.keys("e2e:budget:*")]
    keys.close()


WORKER = Path(__file__).with_name("redis_worker.py")


def _start_sim(rpm: int, scale: float) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "splitter.sim",
        "--port",
        str(port),
        "--profile",
        "instant",
        "--rpm",
        str(rpm),
        "--time-scale",
        str(scale),
        "--answer-tokens",
        "10",
    ]
    sim = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait_for_port(port):
        sim.kill()
        raise RuntimeError("splitter.sim did not start")
    return sim, f"http://127.0.0.1:{port}/v1"


def _workers(base_url: str, redis_url: str, n: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, str(WORKER), base_url, redis_url, str(n), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]


def _collect(workers: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def _four_processes_at_120_rpm(redis: RedisServer) -> tuple[int, int, int, float]:
    """4 worker processes, 120 questions each, on one key at RPM 120: (requests, 429s,
    answered, achieved RPM in requests answered per simulated minute of the run)."""
    # 20 requests per real second: the machine (2 cores) runs 4 clients, the service and
    # Redis at once, and the clients must not be what limits the rate (at 50 a second a
    # loaded machine's stalls between booking and sending drew up to 29 of 509 429s).
    rpm, scale = 120, 0.1
    sim, base_url = _start_sim(rpm, scale)
    try:
        reports = _collect(_workers(base_url, redis.url, 120))
    finally:
        sim.terminate()
        sim.communicate(timeout=10)
    answered = sum(r["answered"] for r in reports)
    span = max(r["last_sent"] for r in reports) - min(r["first_sent"] for r in reports)
    requests = sum(r["requests"] for r in reports)
    return (
        requests,
        sum(r["rate_limited"] for r in reports),
        answered,
        answered / (span / scale / 60),
    )


def test_four_processes_share_one_rpm(redis_server: RedisServer) -> None:
    """4 OS processes on one key at RPM 120 answer everything and stay under it together.

    Four unshared budgets (each process on its own, Redis unreachable) drew 371 429s in 851
    requests here at load 5 (2026-12-04); shared, 0 of 480, and a loaded full-suite run at
    2.5 times this pace drew up to 29 of 509. The bound is 10%: sharing, not the machine's
    scheduling, is what this proves. The bench (bench/limiters.py --redis) reports the
    share itself."""
    requests, rejected, answered, _ = _four_processes_at_120_rpm(redis_server)
    assert answered == 480
    assert rejected <= 0.10 * requests, f"{rejected} of {requests} were 429"


@pytest.mark.slow
def test_four_processes_together_reach_most_of_the_rpm(redis_server: RedisServer) -> None:
    """Together they reach >= 90% of RPM 120. Slow, and out of the default run: it holds
    only when the 4 clients, the simulator and Redis keep up in real time (an idle machine;
    on a busy 2-core one they reached 95 of 120). Run with ``-m slow``."""
    _, _, answered, achieved_rpm = _four_processes_at_120_rpm(redis_server)
    assert answered == 480
    assert achieved_rpm >= 0.9 * 120, f"{achieved_rpm:.0f} of 120 RPM"


def test_killing_redis_mid_run_loses_no_question(redis_server: RedisServer) -> None:
    """Redis dies while 4 processes run: they go on with local shares; every question is
    answered."""
    sim, base_url = _start_sim(120, 0.02)
    try:
        workers = _workers(base_url, redis_server.url, 150)
        time.sleep(1.0)
        redis_server.kill()
        reports = _collect(workers)
    finally:
        sim.terminate()
        sim.communicate(timeout=10)
    assert [r["answered"] for r in reports] == [150] * 4
    assert sum(r["fallback_warnings"] for r in reports) >= 1


async def test_a_shared_wait_is_told_with_the_limit_that_is_short(
    redis_server: RedisServer,
) -> None:
    """on_wait hears the wait the shared account computed, and which limit set it.

    Redis keeps real time, so each wait asked for is many seconds long (no pause of a
    loaded machine between two calls can pay it off) and the call is cancelled as soon
    as the wait is told: the test learns the figure without sitting it out."""
    told: list[tuple[float, str]] = []

    async def told_wait(budget: RedisBudget, amount: int) -> None:
        with anyio.CancelScope() as scope:

            def on_wait(seconds: float, kind: str) -> None:
                told.append((seconds, kind))
                scope.cancel()

            await budget.acquire(amount, on_wait)

    by_tokens = _budget(redis_server, tpm=60_000)  # 1000 per second, a minute's worth held
    await by_tokens.acquire(60_000)
    await told_wait(by_tokens, 20_000)  # 20 s of refill, less the time since the first
    assert [k for _, k in told] == ["tokens"]
    assert 10 < told[0][0] < 25  # 20 s at the rate less headroom, less the pause since
    shared = SharedBudget(url=redis_server.url, namespace="r")
    by_requests = RedisBudget(
        shared, fingerprint="r" * 24, limits=Limits(shared=shared, burst=1.0, rpm=3)
    )
    await by_requests.acquire(1)  # one at once, then one each 20 s
    await told_wait(by_requests, 1)
    assert [k for _, k in told] == ["tokens", "requests"]
    assert 10 < told[1][0] < 25


async def test_one_waiter_per_process_looks_at_the_shared_account(
    redis_server: RedisServer,
) -> None:
    """Requests of one process waiting for the shared pace queue behind one that looks at
    Redis; the others do not poll it. Regression: every waiting request looked at every
    step of the pace (a thread hop and a transaction each): 4 processes of 50 waiting
    requests sent about 200 transactions per request booked, and the load made their
    sends late and uneven, which a leaky bucket with no burst answers with 429s (4
    processes reached 0.5 of its rate)."""
    budget = _budget(redis_server, rpm=6000)  # 100 a second, one at a time
    client = redis.Redis.from_url(redis_server.url)
    client.config_resetstat()
    booked = 30
    async with anyio.create_task_group() as tg:
        for _ in range(booked):
            tg.start_soon(budget.acquire, 1)
    stats = client.info("commandstats")
    client.close()
    looks = stats["cmdstat_get"]["calls"]
    assert looks <= 4 * booked, f"{looks} looks at the account for {booked} requests"


async def test_the_pace_is_kept_at_the_wire_between_processes(redis_server: RedisServer) -> None:
    """Two processes' requests, booked at the shared pace, leave at least one interval
    apart at the wire too: one that leaves on time after another's late send waits for it.
    Regression: each process spaced only its own sends, so bookings 55-60 ms apart left
    48 ms apart, a leaky bucket with no burst refused them, and four processes' search
    settled at 0.72 of its rate. The pace here is one request in 30 s and the wait is
    cut after 0.5 s: the test learns that it waited without sitting it out."""
    first, second = _budget(redis_server), _budget(redis_server)
    booked = [await first.acquire(1), await second.acquire(1)]  # slow start: 0.1 s apart
    learned = {"probe": {"rate": 1 / 30, "low": 1 / 30, "high": 1 / 20}}
    first.teach(learned)
    second.teach(learned)  # each process's copy of the account now has the pace
    await first.depart(booked[0])  # the first goes (late: after the other's booking)
    departed = False
    with anyio.move_on_after(0.5):
        await second.depart(booked[1])
        departed = True
    assert not departed, "the other process's request left right behind the first"


async def test_an_unpaced_send_asks_redis_nothing(redis_server: RedisServer) -> None:
    """Where no pace is in force (the headers tell the room, and nothing was refused), the
    gate at the wire costs no round trip to Redis."""
    budget = _budget(redis_server)
    await _settle(budget, HEADERS)  # 599 of 600 left: no pace, no slow start
    client = redis.Redis.from_url(redis_server.url)
    client.config_resetstat()
    for _ in range(3):
        await budget.depart(await budget.acquire(1))
    stats = client.info("commandstats")
    client.close()
    assert "cmdstat_eval" not in stats
    assert stats["cmdstat_get"]["calls"] >= 3  # the bookings did reach Redis
