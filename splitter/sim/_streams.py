"""The streamed bodies of one generation, written as the engine produces its tokens: chat
completion chunks (``[DONE]`` last, llama-server's ``timings`` in the final chunk) and the
Responses API's events. A truncated stream (``stop``) ends halfway, with neither."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

from splitter.sim import _wire
from splitter.sim._replies import (
    Reply,
    chunk_choices,
    each_choice,
    response_events,
    tool_chunk_choices,
)
from splitter.sim._timings import timings_of

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from splitter.sim._engine import Engine, Sequence
    from splitter.sim._exchange import Call
    from splitter.sim._requests import GenerationRequest
    from splitter.sim._service import SimService

__all__ = ["chat_sse", "response_sse"]


async def chat_sse(
    service: SimService,
    call: Call,
    request: GenerationRequest,
    seq: Sequence,
    reply: Reply,
    stop: int | None,
) -> AsyncGenerator[bytes, None]:
    chunk = functools.partial(
        _wire.chat_chunk,
        id_=f"chatcmpl-sim{call.number}",
        created=int(time.time()),
        model=request.model,
    )
    opening = {"role": "assistant", "content": "" if reply.tool_calls == () else None}
    yield chunk(delta=None, choices=each_choice(reply, delta=opening))
    pieces = reply.pieces
    if reply.tool_calls:
        await service._engine.wait_tokens(seq, reply.choice_tokens)
        yield chunk(delta=None, choices=tool_chunk_choices(reply, str(call.number)))
    end = len(pieces) if stop is None else stop
    sent = 0
    while sent < end:
        ready = await _ready(service._engine, seq, sent, end)
        # Every token produced since the last write, one chunk event each.
        yield b"".join(
            chunk(delta=None, choices=chunk_choices(reply, pieces[i : i + 1], i))
            for i in range(sent, ready)
        )
        sent = ready
    if stop is not None:
        call.error_code = "truncated"
        call.finished = service._clock()
        return
    timings = timings_of(seq, service.profile, service.time_scale)  # llama-server's last chunk
    told = None if timings is None else {"timings": timings}
    tail = chunk(
        delta=None, choices=each_choice(reply, delta={}, finish_reason=reply.finish), extra=told
    )
    if request.include_usage:
        call.cached_tokens = seq.cached
        usage = (call.prompt_tokens, call.completion_tokens, service._cached(call))
        tail += chunk(delta=None, usage=usage)
    yield tail + _wire.DONE
    call.finished = service._clock()


async def response_sse(
    service: SimService,
    call: Call,
    request: GenerationRequest,
    seq: Sequence,
    reply: Reply,
    stop: int | None,
) -> AsyncGenerator[bytes, None]:
    pieces = reply.pieces
    events = response_events(service._response(call, request, reply), pieces)
    yield b"".join(events[:4])
    end = len(pieces) if stop is None else stop
    sent = 0
    while sent < end:
        ready = await _ready(service._engine, seq, sent, end)
        yield b"".join(events[4 + sent : 4 + ready])
        sent = ready
    if stop is not None:
        call.error_code = "truncated"
        call.finished = service._clock()
        return
    yield b"".join(events[4 + len(pieces) :])
    call.finished = service._clock()


async def _ready(engine: Engine, seq: Sequence, sent: int, end: int) -> int:
    """How many tokens (at most ``end``) are out once the one after ``sent`` is."""
    await engine.wait_tokens(seq, sent + 1)
    return min(seq.tokens, end)
