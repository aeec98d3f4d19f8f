"""The simulator's pure parts: answers, prompt parsing, resets, buckets, faults, the engine."""

from __future__ import annotations

import hashlib
import math
import random

import pytest
from pydantic import ValidationError

from splitter.sim import PROFILES, Faults, Profile, SimLimits, answer_tag, answer_text, format_reset
from splitter.sim._answers import answer_prompt, cut_tokens, parse_numbered, prompt_tokens
from splitter.sim._engine import Engine, SeqState
from splitter.sim._faults import FaultKind, draw_fault, request_rng, sloppy_parts
from splitter.sim._limits import RateLimiter


class FakeClock:
    """A hand-driven clock in real seconds."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_answer_tag_is_sha256_prefix() -> None:
    """The tag is 'ans-' plus 8 hex digits of the stripped question's sha256."""
    expected = "ans-" + hashlib.sha256(b"What is 2+2?").hexdigest()[:8]
    assert answer_tag("  What is 2+2?\n") == expected


def test_answer_text_is_deterministic_and_exact_length() -> None:
    """An answer has exactly the asked tokens, starts with the tag, and never varies."""
    text = answer_text("Why?", 17)
    assert text == answer_text("Why?", 17)
    assert len(text.split()) == 17
    assert text.split()[0] == answer_tag("Why?")
    assert answer_text("Why?", 1) == answer_tag("Why?")
    with pytest.raises(ValueError, match="at least one"):
        answer_text("Why?", 0)


def test_numbered_list_parsing() -> None:
    """Preamble is ignored, continuation lines join their item, and one item is no list."""
    text = "Answer these:\n1. First question\n   more of it\n2) Second [len=3]\n"
    items = parse_numbered(text)
    assert items is not None
    expected = [(1, "First question\nmore of it"), (2, "Second [len=3]")]
    assert [(q.number, q.text) for q in items] == expected
    assert parse_numbered("1. only one") is None
    assert parse_numbered("no list at all") is None


def test_numbered_prompt_is_answered_in_its_own_numbers() -> None:
    """A list prompt gets a numbered answer per item, with [len=N] pinning lengths."""
    answer = answer_prompt("3. Alpha?\n7. Beta? [len=2]", default_tokens=4)
    expected = f"3. {answer_text('Alpha?', 4)}\n7. {answer_text('Beta? [len=2]', 2)}"
    assert answer.text == expected
    assert answer_prompt("Just one?", 5).text == answer_text("Just one?", 5)


def test_cut_and_prompt_tokens() -> None:
    """Cutting keeps the text's own whitespace; prompt tokens are ceil(bytes/4)+4 per message."""
    assert cut_tokens("1. a b\n2. c d", 4) == "1. a b\n2."
    assert prompt_tokens(["abcde", ""]) == (2 + 4) + (0 + 4)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.012, "12ms"), (0.9994, "999ms"), (1, "1s"), (1.5, "1.5s"), (90.5, "1m30.5s"),
     (360, "6m0s"), (3600, "1h0m0s")],
)  # fmt: skip
def test_format_reset(seconds: float, text: str) -> None:
    """Reset durations are formatted like OpenAI's x-ratelimit-reset-* headers."""
    assert format_reset(seconds) == text


def test_bucket_counts_refused_requests() -> None:
    """A refused request still costs one request, so its own retry wait grows."""
    limiter = RateLimiter(SimLimits(rpm=60), now=0.0)  # refills 1 request per sim second
    for _ in range(60):
        assert limiter.admit(0, 0.0).allowed
    first = limiter.admit(0, 0.0)
    second = limiter.admit(0, 0.0)
    assert not first.allowed
    assert first.limit == "requests"
    assert first.retry_after == pytest.approx(2.0)
    assert second.retry_after == pytest.approx(3.0)
    assert limiter.admit(0, 3.0).allowed


def test_token_bucket_and_headers() -> None:
    """Tokens are debited by prompt+max, and headers report limits, remaining and reset."""
    limiter = RateLimiter(SimLimits(rpm=10, tpm=600), now=0.0)
    assert limiter.admit(500, 0.0).allowed
    refused = limiter.admit(200, 0.0)
    assert (refused.allowed, refused.limit) == (False, "tokens")
    assert refused.retry_after == pytest.approx(10.0)  # 100 tokens missing at 10/s
    headers = dict(limiter.headers(time_scale=0.5))
    assert headers["x-ratelimit-limit-tokens"] == "600"
    assert headers["x-ratelimit-remaining-tokens"] == "100"
    assert headers["x-ratelimit-remaining-requests"] == "8"
    assert headers["x-ratelimit-reset-tokens"] == "25s"  # 50 sim s to refill, halved
    assert limiter.admit(601, 100.0).too_large


def test_config_validation() -> None:
    """Config models are frozen, forbid unknown fields and reject impossible values."""
    with pytest.raises(ValidationError):
        Faults(rate_500=1.5)
    with pytest.raises(ValidationError):
        Faults(rate_500=0.6, rate_502=0.6)
    with pytest.raises(ValidationError):
        SimLimits(rpm=0)
    with pytest.raises(ValidationError):
        Faults(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Profile.model_validate({**PROFILES["serial"].model_dump(), "tpot1": -1})
    assert PROFILES["llama-cpp-cpu"].slots == 5
    assert {"gpt-4o-mini", "serial", "llama-cpp-cpu", "instant"} <= set(PROFILES)


def test_fault_draws_are_seeded() -> None:
    """The same seed and request number always draw the same fault."""
    faults = Faults(rate_500=0.3, rate_reset=0.3)
    draws = [draw_fault(faults, request_rng(7, n)) for n in range(50)]
    assert draws == [draw_fault(faults, request_rng(7, n)) for n in range(50)]
    assert {FaultKind.E500, FaultKind.RESET, None} == set(draws)
    assert draw_fault(Faults(rate_stall=1.0), request_rng(0, 1)) is FaultKind.STALL


def test_sloppy_always_changes_the_answer() -> None:
    """Every sloppy variant (drop, merge, swap) differs from the correct numbered answer."""
    parts = [(1, "ans-a x"), (2, "ans-b y"), (3, "ans-c z")]
    correct = "1. ans-a x\n2. ans-b y\n3. ans-c z"
    outputs = {sloppy_parts(parts, random.Random(i)) for i in range(40)}
    assert correct not in outputs
    assert len(outputs) >= 3


def _engine(profile: str, clock: FakeClock) -> Engine:
    return Engine(PROFILES[profile], time_scale=1.0, clock=clock)


def test_engine_batch_on_llama_cpp_is_exact() -> None:
    """Five sequences decode together at tpot1*(1+beta*4); a sixth waits for a free slot."""
    clock = FakeClock()
    engine = _engine("llama-cpp-cpu", clock)
    seqs = [engine.submit(20, 200) for _ in range(6)]  # prefill 0.05 + 20/400 = 0.1
    assert (engine.active, engine.queued) == (5, 1)
    clock.t += 1000
    engine.advance()
    batch = 0.1 + 200 * 0.027 * (1 + 0.42 * 4)
    assert [s.done_at for s in seqs[:5]] == pytest.approx([batch] * 5)
    assert seqs[5].done_at == pytest.approx(batch + 0.1 + 200 * 0.027)


def test_engine_piecewise_rates() -> None:
    """When the shorter sequence finishes, the longer one speeds up to the solo rate."""
    clock = FakeClock()
    engine = _engine("serial", clock)  # beta 1: two decoders each get half speed
    long, short = engine.submit(0, 100), engine.submit(0, 50)
    clock.t += 0.05 + 1.0  # prefill, then 1 s at 25 tokens/s each
    engine.advance()
    assert long.tokens == short.tokens == 25
    clock.t += 1000
    engine.advance()
    assert short.done_at == pytest.approx(0.05 + 2.0)
    assert long.done_at == pytest.approx(0.05 + 2.0 + 1.0)


def test_engine_release_frees_the_slot() -> None:
    """Releasing a decoding sequence admits the queue's head at that moment."""
    clock = FakeClock()
    profile = Profile(name="one", rtt=0, ttft0=1, prefill_rate=1e9, tpot1=0.1, beta=0,
                      slots=1, context_window=100)  # fmt: skip
    engine = Engine(profile, clock=clock)
    first, second = engine.submit(0, 100), engine.submit(0, 10)
    clock.t += 3
    engine.release(first)
    assert first.state is SeqState.REMOVED
    assert second.state is SeqState.PREFILL
    clock.t += 100
    engine.advance()
    assert second.done_at == pytest.approx(3 + 1 + 1.0)


def test_a_new_time_scale_runs_on_from_the_same_simulated_moment() -> None:
    """Rescaled mid-run, simulated time does not jump: a sequence half done at scale 1
    finishes the rest at the new pace; a scale that is not positive is refused."""
    clock = FakeClock()
    engine = _engine("serial", clock)  # one decoder alone: 50 tokens/s after 0.05 s prefill
    seq = engine.submit(0, 100)
    clock.t += 0.05 + 1.0
    engine.advance()
    assert seq.tokens == 50
    engine.rescale(0.1)
    assert engine.now() == pytest.approx(1.05)
    clock.t += 0.1  # one simulated second at the new pace
    engine.advance()
    assert seq.done_at == pytest.approx(2.05)
    with pytest.raises(ValueError, match="time_scale must be positive"):
        engine.rescale(0)


def test_instant_profile_finishes_on_submit() -> None:
    """With zero times a sequence is done the moment it is submitted."""
    engine = _engine("instant", FakeClock())
    seq = engine.submit(1000, 500)
    assert seq.state is SeqState.DONE
    assert seq.tokens == 500
    assert math.isfinite(seq.done_at)
