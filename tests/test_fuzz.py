"""Bad input, fuzzed: the input checks, the parsers and the header readers take anything.

Properties, each over hypothesis-generated input (arbitrary unicode, NULs, lone surrogates,
huge strings, fake delimiters, malformed header values, odd JSON):

* only documented exceptions (``InvalidInputError`` for bad questions, ``ValueError`` where a
  parser's docstring says so, ``InvalidResponseError`` for an unreadable stream), never
  another;
* never a hang: sizes are bounded, and the text scanners are checked to scale linearly;
* never an answer attached to the wrong question: a merged response built from known answers
  is read back with each answer under its own item, or that item marked missing.

The suite runs under the "fuzz" settings below (few examples, no per-example deadline) so it
stays well under a minute in CI.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from splitter import decompose

# -- no quadratic scans ---------------------------------------------------------------------


def _seconds(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param("x A. ", id="initials"),
        pytest.param("e.g. ", id="abbreviations"),
        pytest.param("what and\n", id="hard-wrapped-lines"),
        pytest.param("„", id="unclosed-low-quotes"),
        pytest.param("“", id="unclosed-curly-quotes"),
        pytest.param("«", id="unclosed-guillemets"),
    ],
)
def test_decompose_time_grows_linearly_with_the_prompt(unit: str) -> None:
    """Ten times the text takes far less than a hundred times as long (these shapes were
    quadratic: 100 kB of "e.g. " took over a minute)."""

    small, large = unit * 400, unit * 4000
    ratio = _seconds(lambda: decompose(large)) / max(_seconds(lambda: decompose(small)), 1e-4)
    assert ratio < 40, f"10x the text took {ratio:.0f}x as long"
