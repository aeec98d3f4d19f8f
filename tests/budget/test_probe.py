"""The 429 search's state (``_probe.Probe``), step by step: pure, no clock, no service."""

from __future__ import annotations

import math

from splitter._budget._probe import Probe


def test_a_climb_step_counts_as_held_after_thirty_requests_whatever_the_allowance() -> None:
    """Slow start had 12 requests through nginx's burst=5 at 20 r/s, taken as the allowance;
    10% over a floor of 12.5 r/s the step then had to hold for 12 * 13.75 / 1.25 = 132
    requests, and the pace stayed at 0.69 of the rate for 9 s. Thirty are enough: a step
    taken as held too soon costs a 429, whose drain tells the rate."""
    probe = Probe(rate=13.75, low=12.5, high=25.0, since=0.0, count=30, burst=12)
    probe.paced_high = True
    probe.accepted(sent_at=9.0, now=9.0)
    assert probe.low == 13.75
    assert probe.rate is not None
    assert probe.rate > 13.75


def test_a_climb_step_held_briefly_above_an_allowance_proves_nothing() -> None:
    """Held for fewer requests than the allowance could absorb (12 over 13.75 - 12.5 r/s
    asks 132, capped at 30), the step is not yet a floor."""
    probe = Probe(rate=13.75, low=12.5, high=25.0, since=0.0, count=29, burst=12)
    probe.accepted(sent_at=9.0, now=9.0)
    assert probe.low == 12.5
    assert probe.rate == 13.75


def test_two_429s_bound_a_bucket_with_an_allowance_from_above() -> None:
    """Paced at 15 r/s with an allowance seen (12), 4 accepted between two 429s 0.4 s apart:
    it drained fewer than 5 over 0.4 s, so its rate is under 12.5 r/s, and the pace goes
    under that (15% under it, the drain's 10 r/s less 5% being lower), not just under the
    15 r/s that drew the 429, which was over the rate again."""
    probe = Probe(rate=15.0, low=15.0, high=16.5, since=0.0, burst=12)
    probe.refused_at, probe.accepted_since = 1.0, 4
    probe.rejected(1.4, 1.4, first_guess=10.0)
    assert math.isclose(probe.high, 12.5)
    assert probe.rate is not None
    assert math.isclose(probe.rate, 12.5 / 1.15)
