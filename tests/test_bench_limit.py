"""`splitter bench`'s physical limit rests on the answers it measured, not on max_tokens."""

from __future__ import annotations

import openai
import pytest

from splitter import Splitter
from splitter._cli._experiment import ARMS, Measured, Settings, summarize
from splitter._cli._probe import Probe, StreamTiming


def _probe(answer_tokens: int) -> Probe:
    """Streams that each held ``answer_tokens`` tokens at 10 ms a token after 0.1 s."""
    last = 0.1 + (answer_tokens - 1) * 0.01
    stream = StreamTiming(sent=0.0, first=0.1, last=last, tokens=answer_tokens)
    return Probe(rtt=None, alone=stream, together=(stream, stream))


def _settings(tokens: int) -> Settings:
    return Settings(
        base_url="http://127.0.0.1:9/v1",
        model="m",
        api_key="sk-x",
        questions=2,
        tokens=tokens,
        rounds=1,
        calibration=0,
        ignore_eos=False,
        profile="gpt-4o-mini",
        time_scale=1.0,
        timeout=10.0,
        json_path=None,
    )


def test_answers_shorter_than_the_cap_set_the_limit() -> None:
    """max_tokens 200, answers of 20 tokens: the limit is 0.1 + 20 x 10 ms, not 200 x."""
    results = {arm: [Measured(0, 1.0, 1.0, "p", 1, 0, 2, None, None)] for arm in ARMS}
    client = openai.AsyncOpenAI(api_key="sk-x", base_url="http://127.0.0.1:9/v1")
    summary = summarize(_settings(200), results, _probe(20), Splitter(client), scale=1.0)
    assert summary["limit_tokens"] == 20
    assert summary["limit"] == pytest.approx(0.1 + 20 * 0.01)


def test_with_nothing_measured_the_requested_length_stands_in() -> None:
    silent = StreamTiming(sent=0.0, first=None, last=None, tokens=0)
    assert Probe(rtt=None, alone=silent, together=(silent,)).answer_tokens is None
    assert _probe(7).answer_tokens == 7
