"""What ``splitter bench`` measures directly: the question texts with pinned answer lengths,
the round trip, and TTFT and TPOT(N) by streaming (the physical limit no plan beats)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import openai

from .. import _clock

#: The arms, in the order of even rounds (odd rounds run them backwards).
ARMS = ("merged", "fan-out", "auto")

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

    @property
    def answer_tokens(self) -> int | None:
        """The longest answer the concurrent streams really held (None: none measured).
        An endpoint whose answers stop before ``max_tokens`` is bound by these, not the cap."""
        held = [t.tokens for t in self.together if t.tokens > 0]
        return max(held) if held else None

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
