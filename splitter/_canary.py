"""Canaries: a merged item also asked alone, to learn whether merged answers can be trusted.

A merged reply that parses is not necessarily a good one: a model may answer every item
with a well-formed non-answer, or another item's answer. So, per endpoint (base URL, key
and model), some merged items are asked alone as well — every merged request of the first
``MergePolicy.canary_first``, then at most ``MergePolicy.canary_share`` of the endpoint's
requests — and the two answers are compared by :func:`agrees`. The share that agree is
learned (:class:`CanaryRecord`), and the planner allows a merged plan only while it stays
at or above ``MergePolicy.min_agreement``.

What the measure can see: a merged answer that is a non-answer, off-topic, another item's
answer, empty, or cut short, where the solo answer is not. Structured (JSON) answers are
compared by the words of their values, not their keys. What it cannot: a model that is wrong
the same way alone and merged agrees with itself; and two correct answers worded very
differently (long free text, sampled at a high temperature) can fall under the overlap
threshold and read as a disagreement, which errs towards asking alone.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ._policy import MergePolicy

__all__ = ["Agreement", "CanaryRecord", "agrees", "overlap"]

_WORD = re.compile(r"\w+")
_DECAY = 0.95  # per canary compared: the estimate follows a model that changes, slowly
_PRIOR = 1.0  # canaries' worth of assumed agreement before any is compared


def overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two texts' sets of words (case-folded, punctuation dropped):
    1.0 for texts equal once normalised, 0.0 for texts with no word in common. A text that
    is a JSON object or array (a structured answer) counts the words of its values only:
    its keys are the schema's, the same in every answer, and would make an empty
    ``{"answer": ""}`` agree with ``{"answer": "Paris"}``."""
    words_a = _words(a)
    words_b = _words(b)
    if words_a == words_b:
        return 1.0
    return len(words_a & words_b) / len(words_a | words_b)


def _words(text: str) -> set[str]:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            value = json.loads(stripped)
        except ValueError:
            pass
        else:
            return set(_WORD.findall(" ".join(_values(value)).casefold()))
    return set(_WORD.findall(text.casefold()))


def _values(value: Any) -> Iterator[str]:
    """The scalar values of a JSON value, as text, keys left out."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    elif value is not None:
        yield str(value)


def agrees(merged: str, alone: str, threshold: float) -> bool:
    """Whether a merged answer says what the same question asked alone says."""
    return overlap(merged, alone) >= threshold


@dataclass(frozen=True, slots=True)
class Agreement:
    """The learned agreement of one endpoint's merged answers with their canaries."""

    share: float  # the running estimate, prior included
    checked: int  # canaries compared so far

    def describe(self, minimum: float) -> str:
        if not self.checked:
            return f"merge quality: no canary compared yet (min agreement {minimum:.0%})"
        return (
            f"merge quality: merged answers agreed with {self.share:.0%} of "
            f"{self.checked} canaries (min agreement {minimum:.0%})"
        )


class CanaryRecord:
    """One endpoint's canaries: how many were sent, how many agreed, and when the next is due.

    The agreement estimate is a decayed share with a prior of one agreeing canary, so a
    first disagreement brings it to 50%. Canaries are due on every merged request until
    ``canary_first`` have been sent, then whenever sending one keeps canaries at or under
    ``canary_share`` of the requests sent since.
    """

    __slots__ = ("_agreed", "_compared", "checked", "requests_since", "sent", "sent_since")

    def __init__(self) -> None:
        self._agreed = 0.0
        self._compared = 0.0
        self.checked = 0
        self.sent = 0
        self.sent_since = 0  # canaries sent once settled
        self.requests_since = 0  # requests sent once settled (canaries included)

    @property
    def agreement(self) -> Agreement:
        share = (self._agreed + _PRIOR) / (self._compared + _PRIOR)
        return Agreement(share, self.checked)

    def observe(self, agreed: bool) -> None:
        self._agreed = self._agreed * _DECAY + agreed
        self._compared = self._compared * _DECAY + 1
        self.checked += 1

    def due(self, policy: MergePolicy, pending_requests: int = 0) -> bool:
        """Whether the next merged request should send a canary (and, if so, count it);
        ``pending_requests``: requests of the running batch not yet counted here."""
        if not policy.canaries:
            return False
        if self.sent < policy.canary_first:
            self.sent += 1
            return True
        seen = self.requests_since + pending_requests
        if self.sent_since + 1 > policy.canary_share * seen:
            return False
        self.sent += 1
        self.sent_since += 1
        return True

    def due_count(self, policy: MergePolicy, merged: int, pending_requests: int = 0) -> int:
        """How many of the next ``merged`` merged requests :meth:`due` would send a canary
        for, ``pending_requests`` of the batch counted as sent (nothing is counted here:
        what the planner prices)."""
        trial = copy.copy(self)
        count = 0
        # Once one is not due, none after it in the batch is: nothing it counts has grown.
        while count < merged and trial.due(policy, pending_requests):
            count += 1
        return count

    def count_requests(self, requests: int, policy: MergePolicy) -> None:
        """A batch sent ``requests`` (canaries included): the share is of these once settled."""
        if self.sent >= policy.canary_first:
            self.requests_since += requests
