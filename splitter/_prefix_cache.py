"""What a service's prefix cache has shown the service model: what a cached prompt token
costs, and whether the cache is shared between requests or each slot's own (llama-server's).
Nothing here does I/O; :mod:`splitter._service_model` feeds it and reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._cost_model import CACHE_SPEEDUP
from ._service_fit import _DECAY

__all__ = ["PrefixCacheRecord"]

# A shared prefix shorter than this tells nothing of the cache's scope, nor of its cost:
# llama-server's slots reuse a system prompt's few tokens for every request.
_MIN_FOLLOWED = 32


class PrefixCacheRecord:
    """Decayed sums of what the cache served."""

    def __init__(self) -> None:
        # The cost per cached token, fitted through the origin: sums of cached tokens x
        # seconds left unexplained, and of cached tokens squared.
        self.fit = [0.0, 0.0]
        # Followers (requests sent after a first one's first token) the cache served their
        # shared prefix to, and those it did not (per slot: the slot holding it was busy).
        self.followers = [0.0, 0.0]
        self.served = False  # the cache served a response any tokens at all

    def cost(self, cached_tokens: int, left: float) -> None:
        """A response with ``cached_tokens`` served from the cache and ``left`` seconds the
        rest of the model does not explain. A least-squares slope, so a response weighs as
        its cached prefix squared: a system prompt's few cached tokens cannot share out a
        whole response's queueing and noise as if it were the cache's cost. Under
        ``_MIN_FOLLOWED`` cached tokens a response is not fitted at all: a system prompt's
        13 a response taught the simulated llama-server of ``python bench/engine_matrix.py
        --ns 2 --tokens 16 --contexts doc`` 54 cached tokens a second, slower than its
        uncached prefill, and the 1,500-token document a merged request left in its slot
        was priced as if no cache held it (its canary went beside it: 8.8 s, not ~5.6)."""
        self.served = self.served or cached_tokens > 0
        if cached_tokens < _MIN_FOLLOWED:
            return
        cached = float(cached_tokens)
        self.fit[0] = self.fit[0] * _DECAY + cached * left
        self.fit[1] = self.fit[1] * _DECAY + cached * cached

    def rate(self, prefill_rate: float, prior: float | None) -> float | None:
        """Cached prompt tokens per second: learned once the cache served a prefix long
        enough to time, else ``prior``, else, once it has served any tokens, what engines
        make it (llama.cpp and vLLM skip a cached prefix's compute): ``CACHE_SPEEDUP`` times
        the uncached rate, also the most learned, so that a rounding error in the cached
        time cannot make it endless. None: no cache seen."""
        moment, weight = self.fit
        fastest = prefill_rate * CACHE_SPEEDUP
        if weight <= 0:
            return prior if prior is not None or not self.served else fastest
        seconds_per_token = moment / weight
        return fastest if seconds_per_token * fastest <= 1 else 1 / seconds_per_token

    def followed(self, shared: int, cached_tokens: int) -> bool:
        """A follower with ``shared`` prompt tokens in common with the first of its batch,
        ``cached_tokens`` of its prompt served from the cache; whether it counted."""
        if shared < _MIN_FOLLOWED:
            return False
        self.followers = [c * _DECAY for c in self.followers]
        self.followers[0 if cached_tokens >= shared / 2 else 1] += 1
        return True

    @property
    def per_slot(self) -> bool:
        """More followers missed their shared prefix than found it; or, with no follower
        seen and no prefix long enough to time served, the cache taken as per slot: its
        cost then is a guess, and taken as shared it priced primed fan-out's followers as
        reading the prefix the first request's busy slot holds (the batch of
        ``tests/test_canary_plan.py::test_a_canary_after_its_reply_is_priced_cached_once_any_prefix_was_served``
        then chose primed fan-out on the simulator's per-slot cache, not merge). A long
        prefix served (a request queued for a slot reads its sibling's) is timed, and the
        followers' count rules from there."""
        if sum(self.followers) <= 0 and self.fit[1] <= 0 and self.served:
            return True
        return self.followers[1] > self.followers[0]

    def dump(self) -> dict[str, list[float] | bool]:
        return {"cached_fit": self.fit, "followers": self.followers, "cache_served": self.served}

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> PrefixCacheRecord:
        """From :meth:`dump`'s keys in a saved service model (absent: nothing learned)."""
        record = cls()
        record.followers = [float(v) for v in data.get("followers", (0.0, 0.0))]
        record.served = bool(data.get("cache_served", False))
        if "cached_fit" in data:
            record.fit = [float(v) for v in data["cached_fit"]]
        elif "cached_time" in data:  # saved before the slope: (seconds, tokens) summed
            seconds, tokens = (float(v) for v in data["cached_time"])
            # The same cost per token, weighed as readings of one token: new ones soon win.
            record.fit = [seconds, tokens]
        record.served = record.served or record.fit[1] > 0  # saved before the flag
        return record
