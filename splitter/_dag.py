"""Questions that need other questions' answers: the graph, its checks, and filling answers in.

A question depends on another through ``Question.depends_on`` (ids, or 0-based positions)
or a ``{answer:ID}`` placeholder in its text. IDs are the questions' ``id``; a question
without one is known by its position ("0", "1", ...), as ``Answer.id`` reports it. (``$2``
is deliberately not a placeholder: "$2" in a question is far more often a price.)
Pure functions; errors are ``InvalidInputError`` naming the questions involved.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ._exceptions import InvalidInputError
from ._questions import Question

__all__ = ["Graph", "ancestors", "build_graph", "critical_path", "fill_in", "question_ids"]

PLACEHOLDER = re.compile(r"\{answer:(?P<ref>[^{}\s]+)\}")

Graph = tuple[tuple[int, ...], ...]  # per question: the indexes it needs, ascending


def build_graph(questions: Sequence[Question]) -> Graph:
    """Each question's direct dependencies, checked: every reference exists, none is the
    question itself, and there is no cycle."""
    if not any(q.depends_on or "{answer:" in q.text for q in questions):
        return ((),) * len(questions)  # the usual batch: none refers to another
    by_id = question_ids(questions)
    deps: list[tuple[int, ...]] = []
    for i, q in enumerate(questions):
        refs: list[int | str] = [*q.depends_on]
        if "{answer:" in q.text:  # what every placeholder starts with: most texts hold none
            refs += [m.group("ref") for m in PLACEHOLDER.finditer(q.text)]
        needs: set[int] = set()
        for ref in refs:
            j = _resolve(ref, by_id, len(questions))
            if j is None:
                raise InvalidInputError(
                    f"questions[{i}] depends on {ref!r}, which is no question's id or position",
                    index=i,
                )
            if j == i:
                raise InvalidInputError(f"questions[{i}] depends on itself", index=i)
            needs.add(j)
        deps.append(tuple(sorted(needs)))
    _check_acyclic(deps)
    return tuple(deps)


def _id(question: Question, index: int) -> str:
    return question.id if question.id is not None else str(index)


def _resolve(ref: int | str, by_id: Mapping[str, int], n: int) -> int | None:
    if isinstance(ref, int):
        return ref if 0 <= ref < n else None
    return by_id.get(ref)


def _check_acyclic(deps: Sequence[tuple[int, ...]]) -> None:
    state = [0] * len(deps)  # 0 unseen, 1 on the current path, 2 done
    for root in range(len(deps)):
        if state[root]:
            continue
        path: list[int] = []
        stack: list[tuple[int, int]] = [(root, 0)]
        while stack:
            node, k = stack.pop()
            if k == 0:
                state[node] = 1
                path.append(node)
            if k < len(deps[node]):
                stack.append((node, k + 1))
                nxt = deps[node][k]
                if state[nxt] == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    shown = " -> ".join(f"questions[{c}]" for c in cycle)
                    raise InvalidInputError(f"dependency cycle: {shown}", index=nxt)
                if state[nxt] == 0:
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()


def ancestors(deps: Graph, index: int) -> list[int]:
    """Everything ``index`` waits for, directly or not, in input order."""
    seen: set[int] = set()
    stack = list(deps[index])
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(deps[j])
    return sorted(seen)


def critical_path(deps: Graph) -> list[int]:
    """For each question, the length of the longest chain of questions waiting on it
    (0 for one nothing waits on): what to start first when the budget is short."""
    dependents: list[list[int]] = [[] for _ in deps]
    for j, needs in enumerate(deps):
        for i in needs:
            dependents[i].append(j)
    length = [0] * len(deps)
    for i in sorted(range(len(deps)), key=lambda i: -_depth(deps, i)):
        for j in dependents[i]:
            length[i] = max(length[i], length[j] + 1)
    return length


def _depth(deps: Graph, index: int) -> int:
    depth, frontier = 0, set(deps[index])
    while frontier:
        depth += 1
        frontier = {k for j in frontier for k in deps[j]}
    return depth


def question_ids(questions: Sequence[Question]) -> dict[str, int]:
    """Each question's id (or position, when it has none) -> its index."""
    return {_id(q, i): i for i, q in enumerate(questions)}


def fill_in(
    text: str, index: int, deps: Graph, answers: Mapping[int, str], ids: Mapping[str, int]
) -> str:
    """The text to send for question ``index``: placeholders replaced by the answers they
    name; the other answers it waits for (directly or not) given as a short context block."""
    used: set[int] = set()

    def substitute(m: re.Match[str]) -> str:
        j = ids[m.group("ref")]
        used.add(j)
        return answers[j]

    text = PLACEHOLDER.sub(substitute, text)
    context = [j for j in ancestors(deps, index) if j not in used and j in answers]
    if not context:
        return text
    block = "\n\n".join(f"[Earlier answer {j + 1}]\n{answers[j]}" for j in context)
    return f"Earlier answers you may need:\n\n{block}\n\n[Question]\n{text}"
