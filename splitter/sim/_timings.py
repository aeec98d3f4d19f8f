"""What llama-server tells about its work, for a profile with ``timings=True``: a
``timings`` object in each chat response (and in a stream's last chunk), and ``GET /props``
with the server's ``total_slots``.

Times are real milliseconds (simulated seconds times the time scale), as every time the
service reports is: ``prompt_ms`` from a sequence's admission to the end of its prefill,
``predicted_ms`` from there to its last token.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from splitter.sim import _refusals, _wire
from splitter.sim._exchange import JSON, SimResponse

if TYPE_CHECKING:
    from splitter.sim._engine import Sequence
    from splitter.sim._exchange import Call
    from splitter.sim._profiles import Profile

__all__ = ["props_response", "timings_of"]


def timings_of(seq: Sequence, profile: Profile, time_scale: float) -> dict[str, float] | None:
    """llama-server's ``timings`` for a finished ``seq``; None when the profile reports none
    (or the sequence never finished its prefill)."""
    if not profile.timings or math.isinf(seq.prefill_end):
        return None
    done = seq.done_at if math.isfinite(seq.done_at) else seq.prefill_end
    prompt_n = seq.input_tokens - seq.cached
    predicted_n = seq.output_tokens
    prompt_ms = (seq.prefill_end - seq.admitted_at) * time_scale * 1000
    predicted_ms = (done - seq.prefill_end) * time_scale * 1000
    return {
        "cache_n": seq.cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
        "predicted_per_second": 1000 * predicted_n / predicted_ms if predicted_ms > 0 else 0.0,
    }


async def props_response(call: Call, profile: Profile) -> SimResponse:
    """``GET /props``: llama-server's server properties (404 for a profile that is not
    llama-server-like, as OpenAI's API has no such path)."""
    if not profile.timings:
        return _refusals.error(call, 404, "Invalid URL (GET /props)", "invalid_request_error")
    call.status = 200
    body = {
        "total_slots": profile.slots,
        "default_generation_settings": {"n_ctx": profile.context_window},
        "model_path": profile.name,
    }
    return SimResponse(200, [JSON], _wire.dumps(body))
