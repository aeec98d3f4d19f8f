"""The requests a candidate plan sends: questions grouped by shape, k groups balanced by
expected output (longest first onto the lightest open group, as LPT scheduling does), and
each group's tokens in and out as one request (``Group``), or a candidate's requests as
columns (``Requests``: what pricing reads, with no object per request)."""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._merge import ANSWER_MARKER_TOKENS, INSTRUCTION_TOKENS, MARKER_TOKENS
from ._policy import Policy

__all__ = [
    "Group",
    "PlanItem",
    "Repair",
    "Requests",
    "balanced_requests",
    "group_of",
    "groupings",
    "new_plan_item",
]

_EXHAUSTIVE_UP_TO = 24  # every k is priced up to this many questions; beyond, every group size
_INDEX = operator.attrgetter("index")
_OUTPUT = operator.attrgetter("output_tokens")
_SHAPE = operator.attrgetter("shape")


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One question as the planner sees it."""

    index: int
    input_tokens: int
    output_tokens: int  # expected
    max_tokens: int | None = None  # the caller's cap
    # Questions are merged only with others of the same shape: None is the batch's own
    # request; a question's own system prompt or keywords make another (RequestSpec.shape).
    shape: Hashable = None
    preamble: int | None = None  # its own system prompt's tokens, in place of the batch's


@dataclass(frozen=True, slots=True)
class Group:
    """One request of a plan: a single question, or several merged."""

    indexes: tuple[int, ...]
    input_tokens: int
    output_tokens: int  # expected
    max_tokens: int | None

    @property
    def merged(self) -> bool:
        return len(self.indexes) > 1


# A plan makes a Group per request of every candidate (2,000 for 1,000 questions). The
# frozen dataclass's __init__ sets each field through object.__setattr__; set through the
# slots' own descriptors, a Group costs 0.3 µs instead of 0.5.
_SET_FIELDS = tuple(
    Group.__dict__[name].__set__
    for name in ("indexes", "input_tokens", "output_tokens", "max_tokens")
)


def _new_group(
    indexes: tuple[int, ...],
    input_tokens: int,
    output_tokens: int,
    max_tokens: int | None,
    _new: Any = object.__new__,
    _set: tuple[Any, ...] = _SET_FIELDS,
) -> Group:
    """``Group(indexes, input_tokens, output_tokens, max_tokens)``, made faster."""
    group: Group = _new(Group)
    set_indexes, set_input, set_output, set_max = _set
    set_indexes(group, indexes)
    set_input(group, input_tokens)
    set_output(group, output_tokens)
    set_max(group, max_tokens)
    return group


@dataclass(frozen=True, slots=True)
class Requests:
    """A candidate's requests as columns, one entry per request, in the order they are sent.

    A plan prices several candidates and sends one: the others' requests are read only as
    sums (and by ``explain()``), so a ``Group`` is made only for what is read (``groups``).
    """

    # Tuples, so that a Candidate (and a Plan) stays hashable.
    indexes: tuple[tuple[int, ...], ...]  # each request's questions, in input order
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]  # expected
    max_tokens: tuple[int | None, ...]
    # Known to be longest first already (fan-out's, from questions sorted so): not re-sorted.
    longest_first: bool = False

    def __len__(self) -> int:
        return len(self.indexes)

    def groups(self) -> tuple[Group, ...]:
        return tuple(
            map(_new_group, self.indexes, self.input_tokens, self.output_tokens, self.max_tokens)
        )

    def reordered(self, order: Sequence[int]) -> Requests:
        """These requests in ``order`` (positions into them)."""
        return Requests(
            tuple([self.indexes[i] for i in order]),
            tuple([self.input_tokens[i] for i in order]),
            tuple([self.output_tokens[i] for i in order]),
            tuple([self.max_tokens[i] for i in order]),
        )

    @staticmethod
    def of(groups: Sequence[Group]) -> Requests:
        return Requests(
            tuple([g.indexes for g in groups]),
            tuple([g.input_tokens for g in groups]),
            tuple([g.output_tokens for g in groups]),
            tuple([g.max_tokens for g in groups]),
        )

    @staticmethod
    def joined(parts: Sequence[Requests]) -> Requests:
        if len(parts) == 1:
            return parts[0]
        return Requests(
            tuple([i for part in parts for i in part.indexes]),
            tuple([t for part in parts for t in part.input_tokens]),
            tuple([t for part in parts for t in part.output_tokens]),
            tuple([t for part in parts for t in part.max_tokens]),
        )


_SET_ITEM_FIELDS = tuple(
    PlanItem.__dict__[name].__set__
    for name in ("index", "input_tokens", "output_tokens", "max_tokens", "shape", "preamble")
)


def new_plan_item(
    index: int,
    input_tokens: int,
    output_tokens: int,
    max_tokens: int | None,
    shape: Hashable,
    preamble: int | None,
    _new: Any = object.__new__,
    _set: tuple[Any, ...] = _SET_ITEM_FIELDS,
) -> PlanItem:
    """``PlanItem(...)`` made as ``_new_group`` makes a Group (one per question planned)."""
    item: PlanItem = _new(PlanItem)
    set_index, set_input, set_output, set_max, set_shape, set_preamble = _set
    set_index(item, index)
    set_input(item, input_tokens)
    set_output(item, output_tokens)
    set_max(item, max_tokens)
    set_shape(item, shape)
    set_preamble(item, preamble)
    return item


def groupings(
    items: list[PlanItem], policy: Policy, preamble: int, repair: Repair, distrusted: bool
) -> Iterator[Requests]:
    """Each candidate's requests. Questions of one shape (the usual case): every k from
    ``_candidate_ks``. Of several shapes: each shape grouped on its own, the same largest
    group size for all, for every size up to the merge cap."""
    if len(set(map(_SHAPE, items))) <= 1:
        longest_first = _longest_first(items)
        answer_caps = answer_caps_of(longest_first, policy)
        for k in _candidate_ks(len(items), policy, distrusted) if items else []:
            yield balanced_requests(longest_first, k, policy, preamble, repair, answer_caps)
        return
    shapes: dict[Hashable, list[PlanItem]] = {}
    for item in items:
        shapes.setdefault(item.shape, []).append(item)
    seen: set[tuple[int, ...]] = set()
    for size in _candidate_sizes(policy, distrusted):
        ks = tuple(math.ceil(len(members) / size) for members in shapes.values())
        if ks not in seen:
            seen.add(ks)
            yield Requests.joined(
                [
                    balanced_requests(_longest_first(members), k, policy, preamble, repair)
                    for members, k in zip(shapes.values(), ks, strict=True)
                ]
            )


def _longest_first(items: list[PlanItem]) -> list[PlanItem]:
    """By expected output, longest first, then by index: the order of the key
    ``(-output_tokens, index)``, from two sorts on one attribute each (a stable sort keeps
    the index order among equal outputs, reversed too)."""
    return sorted(sorted(items, key=_INDEX), key=_OUTPUT, reverse=True)


def _candidate_sizes(policy: Policy, distrusted: bool = False) -> list[int]:
    cap = policy.merge.max_per_request
    if policy.strategy in ("fanout", "primed") or cap == 1 or distrusted:
        return [1]
    if policy.strategy == "merge":
        return [cap]
    return list(range(1, cap + 1))


def _candidate_ks(n: int, policy: Policy, distrusted: bool = False) -> list[int]:
    cap = policy.merge.max_per_request
    fewest = math.ceil(n / cap)
    if policy.strategy in ("fanout", "primed") or cap == 1 or distrusted:
        return [n]
    if policy.strategy == "merge":
        return [fewest]
    if n <= _EXHAUSTIVE_UP_TO:
        return list(range(fewest, n + 1))
    return sorted({math.ceil(n / size) for size in range(1, cap + 1)})


@dataclass(frozen=True, slots=True)
class Repair:
    """What a merged answer not read back costs: it is re-asked alone after the reply."""

    success: float = 1.0  # share of merged answers read back
    lead: float = 0.0  # a re-ask's round trip and first token, in tokens of decode time

    def tokens(self, members: Sequence[PlanItem]) -> int:
        """As a rough price: the chance that any is re-asked, times the longest of them
        (and the re-ask's lead) decoded once more."""
        if self.success >= 1:
            return 0
        chance = 1 - self.success ** len(members)
        return math.ceil(chance * (max(it.output_tokens for it in members) + self.lead))


def balanced_requests(
    longest_first: list[PlanItem],
    k: int,
    policy: Policy,
    preamble: int,
    repair: Repair,
    answer_caps: list[int] | None = None,
) -> Requests:
    """k requests balanced by expected output: longest first onto the lightest open group.
    ``longest_first`` are of one shape; ``answer_caps`` are theirs (``answer_caps_of``)."""
    if k == len(longest_first):  # fan-out: group_of's single case, inlined (once per question)
        return Requests(
            tuple([(it.index,) for it in longest_first]),
            tuple(
                [
                    it.input_tokens + (preamble if it.preamble is None else it.preamble)
                    for it in longest_first
                ]
            ),
            tuple([it.output_tokens for it in longest_first]),
            tuple([it.max_tokens for it in longest_first]),
            longest_first=True,
        )
    if repair.success < 1:  # a re-ask priced per group: from its members, as group_of does
        return Requests.of(_balanced_members(longest_first, k, policy, preamble, repair))
    if answer_caps is None:
        answer_caps = answer_caps_of(longest_first, policy)
    cap = policy.merge.max_per_request
    # Each open group as one int, load * k + g: ordered as the pair (load, g) is (g < k),
    # and compared, pushed and popped faster than a pair. Each group's sums are kept as
    # its members join (group_of's sums, without a second pass over the members).
    firsts: list[PlanItem | None] = [None] * k  # each group's longest: its system prompt
    outputs = [0] * k  # a group's outputs: its load
    if cap > 1 and longest_first[-1].output_tokens >= 1:
        # Every output at least 1: an empty group is lighter than any other, so the first
        # k questions go one to each group in turn (as the loop below would put them).
        firsts[:] = longest_first[:k]
        indexes = [[it.index] for it in longest_first[:k]]
        inputs = [it.input_tokens for it in longest_first[:k]]
        caps = answer_caps[:k]
        heap = [g + it.output_tokens * k for g, it in enumerate(longest_first[:k])]
        heapq.heapify(heap)
        rest = zip(longest_first[k:], answer_caps[k:], strict=True)
    else:
        heap = list(range(k))
        indexes = [[] for _ in range(k)]
        inputs, caps = [0] * k, [0] * k
        rest = zip(longest_first, answer_caps, strict=True)
    pop, replace = heapq.heappop, heapq.heapreplace
    for item, answer_cap in rest:
        key = heap[0]  # the lightest (keys all differ): replaced in place while open
        g = key % k
        members = indexes[g]
        if not members:
            firsts[g] = item
        members.append(item.index)
        out = item.output_tokens
        inputs[g] += item.input_tokens
        caps[g] += answer_cap
        if len(members) < cap:
            replace(heap, key + out * k)
        else:
            pop(heap)
            outputs[g] = key // k + out  # full: its load, as it leaves the heap
    for key in heap:  # the groups still open
        outputs[key % k] = key // k
    made: tuple[list[Any], ...] = ([], [], [], [])
    add_indexes, add_input, add_output, add_max = (column.append for column in made)
    for g, members in enumerate(indexes):
        first = firsts[g]
        if first is None:
            continue
        head = preamble if first.preamble is None else first.preamble
        m = len(members)
        if m == 1:
            add_indexes((first.index,))
            add_input(head + inputs[g])
            add_output(outputs[g])
            add_max(first.max_tokens)
            continue
        members.sort()
        markers = ANSWER_MARKER_TOKENS * m
        add_indexes(tuple(members))
        add_input(head + INSTRUCTION_TOKENS + inputs[g] + MARKER_TOKENS * m)
        add_output(outputs[g] + markers)
        add_max(caps[g] + markers)
    indexes_made, inputs_made, outputs_made, caps_made = made
    return Requests(tuple(indexes_made), tuple(inputs_made), tuple(outputs_made), tuple(caps_made))


def answer_caps_of(longest_first: list[PlanItem], policy: Policy) -> list[int]:
    """What each question adds to a merged request's ``max_tokens``: its own cap, else
    its expected answer with the policy's margin (at least ``min_answer_tokens``)."""
    floor, margin, ceil = policy.merge.min_answer_tokens, policy.merge.answer_margin, math.ceil
    return [
        it.max_tokens if it.max_tokens is not None else max(floor, ceil(it.output_tokens * margin))
        for it in longest_first
    ]


def _balanced_members(
    longest_first: list[PlanItem], k: int, policy: Policy, preamble: int, repair: Repair
) -> list[Group]:
    """``balanced_requests`` with each group made from its members by ``group_of``."""
    cap = policy.merge.max_per_request
    heap = list(range(k))
    members: list[list[PlanItem]] = [[] for _ in range(k)]
    pop, replace = heapq.heappop, heapq.heapreplace
    for item in longest_first:
        key = heap[0]
        group = members[key % k]
        group.append(item)
        if len(group) < cap:
            replace(heap, key + item.output_tokens * k)
        else:
            pop(heap)
    floor, margin = policy.merge.min_answer_tokens, policy.merge.answer_margin
    return [group_of(m, floor, margin, preamble, repair) for m in members if m]


def group_of(
    members: list[PlanItem], floor: int, margin: float, preamble: int, repair: Repair | None = None
) -> Group:
    """One request for ``members``: merged when there are several, in their input order."""
    if len(members) == 1:
        (only,) = members
        return Group((only.index,), _preamble(only, preamble) + only.input_tokens, *_out(only))
    # Sums of ints and the repair's longest: the members' order matters only to the indexes.
    head = _preamble(members[0], preamble)  # one shape: one system prompt
    inputs = outputs = caps = 0
    indexes = []
    for it in members:
        indexes.append(it.index)
        inputs += it.input_tokens
        out = it.output_tokens
        outputs += out
        cap = it.max_tokens
        caps += cap if cap is not None else max(floor, math.ceil(out * margin))
    indexes.sort()
    markers = ANSWER_MARKER_TOKENS * len(members)
    return Group(
        tuple(indexes),
        head + INSTRUCTION_TOKENS + inputs + MARKER_TOKENS * len(members),
        outputs + markers + (repair.tokens(members) if repair is not None else 0),
        caps + markers,
    )


def _preamble(item: PlanItem, batch: int) -> int:
    return batch if item.preamble is None else item.preamble


def _out(item: PlanItem) -> tuple[int, int | None]:
    return item.output_tokens, item.max_tokens
