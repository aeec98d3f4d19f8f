"""Questions' token counts, remembered per tokenizer: a text is encoded once while it is
remembered, so the input check, ``Splitter.plan()`` and the run that follows the plan count
a question once between them.

What is remembered is bounded (``_MAX_TEXTS`` texts, ``_MAX_CHARS`` characters per
tokenizer): past either bound the older half is forgotten, so a stream of millions of
questions (``Splitter.map``) holds no more than that, and the batch being planned stays
remembered for its run. (Forgetting everything at the bound, as before, dropped a
10,000-question batch's first 6,384 counts in the middle of its ``plan()`` whenever the
memory held 10,000 from before: the run then encoded them again.)
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TokenCounts", "token_counts"]

_MAX_TEXTS = 1 << 14
_MAX_CHARS = 1 << 21
_MAX_TOKENIZERS = 8

Encode = Callable[[str], list[int]]


class TokenCounts:
    """``text -> len(encode(text))``, each text encoded once while it is remembered."""

    __slots__ = ("_chars", "_counts", "_encode")

    def __init__(self, encode: Encode) -> None:
        self._encode = encode
        self._counts: dict[str, int] = {}
        self._chars = 0

    def __call__(self, text: str) -> int:
        count = self._counts.get(text)
        if count is None:
            count = len(self._encode(text))
            self._remember(text, count)
        return count

    def _remember(self, text: str, count: int) -> None:
        self._chars += len(text)
        if self._chars > _MAX_CHARS or len(self._counts) >= _MAX_TEXTS:
            self._forget_older_half()
        self._counts[text] = count

    def _forget_older_half(self) -> None:
        """Forget the texts remembered first (a dict keeps their order) until half of
        each bound is left: amortised, one deletion per text remembered."""
        counts = self._counts
        for old in list(counts):
            if self._chars <= _MAX_CHARS // 2 and len(counts) < _MAX_TEXTS // 2:
                break
            # pop, not del: two threads planning at once may forget the same text
            if counts.pop(old, None) is not None:
                self._chars -= len(old)


_by_tokenizer: dict[Encode, TokenCounts] = {}


def token_counts(encode: Encode) -> TokenCounts:
    """The remembered counts of ``encode`` (a tokenizer made again starts afresh)."""
    counts = _by_tokenizer.get(encode)
    if counts is None:
        if len(_by_tokenizer) >= _MAX_TOKENIZERS:
            _by_tokenizer.clear()
        counts = _by_tokenizer[encode] = TokenCounts(encode)
    return counts
