"""Prefix caches: which leading prompt tokens a request finds already computed.

A prompt's tokens are what ``prompt_tokens`` counts: per message, 4 framing tokens then one
per 4 bytes of its text; two prompts share a prefix exactly as far as their messages agree.
At least one token is always computed (as llama.cpp and vLLM do), so ``cached <= len - 1``.

* ``SlotCache`` (llama.cpp's ``-np`` slots): each slot keeps the prompt it last served. A
  request takes the free slot whose prompt shares the longest prefix with its own when that
  covers at least half of it (llama.cpp's ``--slot-prompt-similarity 0.5``), else the least
  recently used free slot; it reuses only what *that* slot holds. Same prefix is not "cached"
  when the slot holding it is busy.
* ``SharedCache`` (vLLM's automatic prefix caching): 16-token blocks keyed by their whole
  prefix, shared by every request, least recently used evicted past ``capacity`` tokens. A
  prompt's blocks are stored when its prefill ends, so a request sent before then misses.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence

__all__ = ["BLOCK", "SharedCache", "SlotCache", "common_prefix", "prompt_token_keys"]

BLOCK = 16


def prompt_token_keys(contents: Sequence[str], cache: str = "slot") -> tuple[Hashable, ...]:
    """One key per prompt token (as many as ``prompt_tokens(contents)`` counts); none when
    ``cache`` is ``"none"`` (nothing will match them)."""
    keys: list[Hashable] = []
    if cache == "none":
        return ()
    for index, text in enumerate(contents):
        data = text.encode()
        keys += [("msg", index, j) for j in range(4)]
        keys += [data[i : i + 4] for i in range(0, 4 * math.ceil(len(data) / 4), 4)]
    return tuple(keys)


def common_prefix(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class SlotCache:
    """Per-slot caches, as llama.cpp's server keeps them."""

    def __init__(self, slots: int) -> None:
        self._held: list[tuple[Hashable, ...]] = [()] * slots
        self._busy = [False] * slots
        self._last_used = [0] * slots
        self._uses = 0

    def take(self, prompt: tuple[Hashable, ...]) -> tuple[int, int]:
        """Take a free slot for ``prompt``: (slot, tokens it reuses)."""
        free = [i for i, busy in enumerate(self._busy) if not busy]
        shared = {i: common_prefix(self._held[i], prompt) for i in free}
        best = max(free, key=lambda i: (shared[i], -self._last_used[i]))
        if shared[best] < len(prompt) / 2:
            best = min(free, key=lambda i: self._last_used[i])
        self._uses += 1
        self._busy[best], self._last_used[best] = True, self._uses
        self._held[best] = prompt
        return best, min(shared[best], max(0, len(prompt) - 1))

    def give_back(self, slot: int) -> None:
        """The slot is free again; it keeps its prompt."""
        self._busy[slot] = False


class SharedCache:
    """Prefix blocks shared by all requests, LRU-evicted past ``capacity`` tokens."""

    def __init__(self, capacity: int) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._limit = capacity // BLOCK

    def lookup(self, prompt: tuple[Hashable, ...]) -> int:
        """Tokens of ``prompt`` served from cached blocks (marking them used)."""
        hit = 0
        for end, key in _block_keys(prompt):
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            hit = end
        return min(hit, max(0, len(prompt) - 1))

    def store(self, prompt: tuple[Hashable, ...]) -> None:
        """Keep ``prompt``'s full blocks (its prefill is done)."""
        for _, key in _block_keys(prompt):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self._limit:
            self._blocks.popitem(last=False)


def _block_keys(prompt: tuple[Hashable, ...]) -> list[tuple[int, int]]:
    """(end, key) per full block; a block's key hashes its tokens and every block before."""
    keys, key = [], 0
    for end in range(BLOCK, len(prompt) + 1, BLOCK):
        key = hash((key, prompt[end - BLOCK : end]))
        keys.append((end, key))
    return keys
