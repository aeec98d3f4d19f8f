"""The garbage collector paused while a wave is planned.

Planning allocates a few objects per question and candidate (each group, its indexes, each
question as the planner sees it), all alive until the plan is made. Counted as they are
made, they start collections that find nothing to free, and at 10,000 questions the full
ones among them (over every object of the process: openai's, pydantic's, the caller's)
cost more than the planning (docs/benchmarks.md, "Planning time"). Paused, the objects
are counted all the same, and the next allocation after the plan starts one collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic collection inside; the collector as it was after (a caller's
    ``gc.disable()`` is kept, and a nested pause leaves it to the outer one)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
