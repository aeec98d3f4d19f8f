"""Which responses the service model folds into its fits once they have settled: pure
state, no I/O.

Reading a response's queue and updating every slot count's fit was the largest part of
splitter's own CPU per request (issue #21), so once the fits hold ``_SETTLED``
observations only one response in ``_FIT_EVERY`` is fitted. A kind of request the fits
have not learned is fitted all the same: a request of a size (booked tokens, within a
power of two) of which fewer than ``_SETTLED_PER_SIZE`` were chosen. Sampled like the
others, the first requests carrying a 1,500-token document after many short questions left
the fits pricing concurrent prefills of it as if they did not slow each other (fan-out
predicted at 4.5 s, measured 8.0 s, and chosen over a 5.1 s merged request:
``python bench/engine_matrix.py --tokens 16``)."""

from __future__ import annotations

__all__ = ["FitSampler"]

_FIT_EVERY = 4  # once settled, one response in this many is folded into the fits
_SETTLED_PER_SIZE = 16  # ... but every one of a size fewer than this many were chosen of


class FitSampler:
    """Chooses the responses to fit (see the module's docstring)."""

    __slots__ = ("_asked", "_by_size")

    def __init__(self) -> None:
        self._asked = 0
        self._by_size: dict[int, int] = {}  # chosen, by booked tokens' bit length

    def choose(self, booked: float, settled: bool) -> bool:
        """Whether to fit the response to a request booking ``booked`` tokens (input +
        max_tokens); ``settled``: the fits hold enough observations to sample."""
        self._asked += 1
        size = int(booked).bit_length()
        chosen = self._by_size.get(size, 0)
        if settled and chosen >= _SETTLED_PER_SIZE and self._asked % _FIT_EVERY:
            return False
        self._by_size[size] = chosen + 1
        return True
