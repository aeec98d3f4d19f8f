"""The cost model's prefill terms (issue #19): concurrent prefills sharing the engine, and a
cached prefix priced at the cache's rate."""

from __future__ import annotations

import pytest

from splitter._cost_model import ServiceEstimate, simulate
from splitter._primed import primed_schedule

E = ServiceEstimate(rtt=0.0, ttft0=0.0, prefill_rate=1000.0, tpot1=0.01, beta=0.0)


def test_compute_bound_prefills_take_turns_in_effect() -> None:
    shared = ServiceEstimate(rtt=0.0, ttft0=0.0, prefill_rate=1000.0, tpot1=0.01, beta=0.0,
                             prefill_share=1.0)  # fmt: skip
    # Four 1,000-token prefills at once: each at a quarter speed, all done at 4 s.
    _, apart = simulate([1000] * 4, [10] * 4, [0.0] * 4, E, 4)
    _, together = simulate([1000] * 4, [10] * 4, [0.0] * 4, shared, 4)
    assert apart == pytest.approx([1.1] * 4)
    assert together == pytest.approx([4.1] * 4)
    # Half shared: 1 + 0.5 * 3 = 2.5 times as long.
    half = ServiceEstimate(rtt=0.0, ttft0=0.0, prefill_rate=1000.0, tpot1=0.01, beta=0.0,
                           prefill_share=0.5)  # fmt: skip
    assert simulate([1000] * 4, [10] * 4, [0.0] * 4, half, 4)[1] == pytest.approx([2.6] * 4)


def test_the_same_schedule_with_no_share_as_the_plain_simulation() -> None:
    tiny = ServiceEstimate(rtt=0.02, ttft0=0.1, prefill_rate=800.0, tpot1=0.01, beta=0.1,
                           slots=2, prefill_share=1e-12)  # fmt: skip
    plain = ServiceEstimate(rtt=0.02, ttft0=0.1, prefill_rate=800.0, tpot1=0.01, beta=0.1, slots=2)
    args = ([300, 50, 900, 20, 400], [40, 300, 10, 90, 5], [0.0, 0.0, 0.1, 0.5, 0.0])
    a = simulate(*args, tiny, 3)
    b = simulate(*args, plain, 3)
    assert a[0] == pytest.approx(b[0])
    assert a[1] == pytest.approx(b[1])


def test_primed_followers_wait_for_the_first_token_and_read_the_prefix_cached() -> None:
    cached = ServiceEstimate(rtt=0.01, ttft0=0.05, prefill_rate=1000.0, tpot1=0.01, beta=0.0,
                             cached_rate=100_000.0)  # fmt: skip
    work, ready = primed_schedule([2000.0, 2100.0, 2050.0], [0.0, 0.0, 0.3], cached, 2000)
    first_token = 0.01 + 0.05 + 2.0
    assert ready == pytest.approx([0.0, first_token, first_token])
    # 2,000 cached tokens at 100k/s = 0.02 s = 20 tokens at the uncached rate.
    assert work == pytest.approx([2000.0, 120.0, 70.0])
    # Without a cache seen, followers pay their whole prompt.
    assert primed_schedule([2000.0, 2100.0], [0.0, 0.0], E, 2000)[0] == [2000.0, 2100.0]


def test_a_cached_token_never_costs_more_than_an_uncached_one() -> None:
    """A cached rate learned below the prefill rate (seen on the engine matrix: queueing
    shared over a few cached tokens, ~4 tokens/s) is priced at the prefill rate, so a
    primed fan-out over a long context is not predicted at thousands of seconds."""
    slow = ServiceEstimate(rtt=0.0, ttft0=0.05, prefill_rate=1000.0, tpot1=0.01, beta=0.0,
                           cached_rate=4.0)  # fmt: skip
    fast = ServiceEstimate(rtt=0.0, ttft0=0.05, prefill_rate=1000.0, tpot1=0.01, beta=0.0,
                           cached_rate=100_000.0)  # fmt: skip
    assert slow.prefill(2000, 1900) == pytest.approx(0.05 + 2.0)
    assert fast.prefill(2000, 1900) == pytest.approx(0.05 + 0.1 + 0.019)
