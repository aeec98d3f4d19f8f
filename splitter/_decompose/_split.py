"""Finding the independent sub-questions in one prompt, and which ones need another's answer.

Pure text work, no I/O. The rules lean one way on purpose: splitting one question into two
costs answer quality, while keeping two questions together only costs time. So a prompt is
split only when it clearly holds two or more questions or requests:

* fenced code, quoted text and pasted material ("Summarise this email: ...") are content,
  never questions;
* a list (1. / 1) / (a) / a) / - / * / ① / 一、 / （1） ...) is split into its items only when
  every item reads as a question or a request; a list of options or requirements belongs to
  the one question it is attached to;
* outside lists, lines and sentences ending in "?" (any script) are questions; an imperative
  sentence counts as a request only when it leads with a task verb or a step word ("First",
  "Then", "先", "Sonra") — a trailing "Keep it short." is shared instructions, not a part;
* a sentence that constrains the request before it ("Make it short.", "Use bullet points.",
  "Halte sie kurz.", "Evita los tecnicismos.", "Explain why.") is never a part: between two
  parts it belongs to the one before; a rhetorical opener ("You know how ...?") is context.

Text before the first part is the shared ``preamble``; after the last, the ``postscript``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._exceptions import InvalidInputError
from ._dependencies import with_detected_dependencies
from ._reading import _asks, _core, _instruction, _is_request, _list_of_questions, _without_greeting
from ._rules import (
    _ANSWER_WORD,
    _BUT,
    _CONSTRAINT,
    _FENCE,
    _IMPERATIVE,
    _LISTED_QUESTION,
    _LISTED_REQUEST,
    _MATERIAL_VERB,
    _PIVOT,
    _QUESTION_SENTENCE,
    _RESTATEMENT,
    _RHETORICAL_OPENER,
    _STEP,
    _STEP_START,
    _THEN,
    _UNMARKED_QUESTION,
    _WEAK_BOUNDARY,
    _WH_START,
    _WHOLE,
    _ends_question,
    _ends_sentence,
)
from ._types import Decomposition, Part, _Unit
from ._units import _strip_label, _units


def decompose(prompt: str) -> Decomposition:
    """Split ``prompt`` into its sub-questions (one part when it is one question).

    Raises ``InvalidInputError`` (a ``ValueError``) for a prompt that is not a str or is
    blank.
    """
    if not isinstance(prompt, str):
        raise InvalidInputError(f"prompt must be a str, not {type(prompt).__name__}")
    if not prompt.strip():
        raise InvalidInputError("the prompt is blank")
    units = [] if _FENCE.search(prompt) else _units(prompt)
    chosen = _choose(units, prompt)
    if len(chosen) < 2 or _is_material(prompt, chosen):
        whole = prompt.strip()
        start = prompt.index(whole)
        return Decomposition(
            prompt, "", (Part(whole, None, _WHOLE, (), start, start + len(whole)),), ""
        )
    parts = tuple(Part(u.text, u.label, confidence, (), u.start, u.end) for u, confidence in chosen)
    preamble = _strip_label(prompt[: parts[0].start], parts[0].label)
    parts = with_detected_dependencies(parts, preamble=preamble)
    return Decomposition(prompt, preamble, parts, prompt[parts[-1].end :].strip())


def _choose(units: Sequence[_Unit], prompt: str) -> list[tuple[_Unit, float]]:
    """The units that are parts, with a confidence each."""
    items = [u for u in units if u.item]
    list_ok = len(items) >= 2 and _list_of_questions(units, items)
    # Unpunctuated lines in a row ("how do i split a string", "kann man reis einfrieren")
    # are questions together when most of them read as questions.
    blocks: dict[int, list[_Unit]] = {}
    for u in units:
        if u.bare is not None:
            blocks.setdefault(u.bare, []).append(u)
    asking_blocks = {
        b
        for b, us in blocks.items()
        if len(us) >= 2 and 3 * sum(_asks(u) or _is_request(u.text) for u in us) >= 2 * len(us)
    }
    # Sentences that constrain the request before them ("Keep it short.") belong to it.
    constraining = {k for k, u in enumerate(units) if k and _constrains(u)}
    chosen: list[tuple[_Unit, float]] = []
    for k, u in enumerate(units):
        masked = u.masked
        if k in constraining and chosen:
            continue  # "Write a cover letter. Make it short.": one request
        if not u.item and _RHETORICAL_OPENER.match(_core(u.text)):
            continue  # "You know how ...?": a lead-in to the real question
        if k and _THEN.match(u.text) and not u.item:
            before = _request_before(units, k)
            taken = bool(chosen) and chosen[-1][0] is before
            if not taken and not before.item and _ends_sentence(before.masked):
                chosen.append((before, _IMPERATIVE))  # "Draft a bio. Then shorten it."
        if u.item:
            if list_ok:
                question = _ends_question(masked)
                chosen.append((u, _LISTED_QUESTION if question else _LISTED_REQUEST))
            continue
        if masked.rstrip().endswith((":", "：")):
            continue  # a lead-in: "Please answer the following:"
        if _ends_question(masked) or u.clause:
            chosen.append((u, _WEAK_BOUNDARY if u.clause else _QUESTION_SENTENCE))
        elif _STEP_START.match(u.text):
            chosen.append((u, _STEP))
        elif u.bare is not None and u.bare in asking_blocks:
            chosen.append((u, _WEAK_BOUNDARY))
        elif _WH_START.match(_core(u.text)):
            # "Also what's the best way to move my files over."
            chosen.append((u, _UNMARKED_QUESTION))
        elif _is_request(u.text) and (_ends_sentence(masked) or u.bare is not None):
            chosen.append((u, _IMPERATIVE))
    # "Who buys a car in December? But my lease ends ...": a question the user answers
    # or sets aside with a "but" statement was rhetorical, context for what follows.
    position = {id(u): k for k, u in enumerate(units)}
    chosen = [
        (u, c)
        for u, c in chosen
        if u.item
        or not _ends_question(u.masked)
        or not _rhetorical(u, units[position[id(u)] + 1 : position[id(u)] + 2])
    ]
    # "Anyway, can you ...?": what came before the pivot was context.
    pivots = [k for k, (u, _) in enumerate(chosen) if not u.item and _PIVOT.match(u.text)]
    if pivots:
        chosen = chosen[pivots[-1] :]
    # "Can I freeze rice? Like, is it actually safe?": one question, said twice.
    merged: list[tuple[_Unit, float]] = []
    for u, c in chosen:
        if merged and not u.item and _RESTATEMENT.match(u.text):
            prev, pc = merged[-1]
            merged[-1] = (_Unit(prev.text, prev.start, u.end, prev.label, prev.item), pc)
        else:
            merged.append((u, c))
    chosen = merged
    # Trailing requests about how to answer ("Keep each answer short.") are instructions
    # for every part: the postscript, not parts.
    # So are leading ones ("次の質問に答えてください。"): the preamble.
    while chosen and _instruction(chosen[-1][0]):
        chosen.pop()
    while chosen and _instruction(chosen[0][0]) and _ANSWER_WORD.search(chosen[0][0].text):
        chosen.pop(0)
    chosen = _with_constraints(units, chosen, constraining, prompt)
    return [(_without_greeting(u), c) for u, c in chosen]


def _constrains(u: _Unit) -> bool:
    """A sentence saying how to do the request before it ("Use bullet points.")."""
    return not u.item and not _ends_question(u.masked) and bool(_CONSTRAINT.match(_core(u.text)))


def _request_before(units: Sequence[_Unit], k: int) -> _Unit:
    """The unit before ``units[k]``, passing over the constraints between them: "Explain
    X. Keep it simple. Then ..." carries on from "Explain X."."""
    i = k - 1
    while i > 0 and _constrains(units[i]):
        i -= 1
    return units[i]


def _with_constraints(
    units: Sequence[_Unit],
    chosen: Sequence[tuple[_Unit, float]],
    constraining: set[int],
    prompt: str,
) -> list[tuple[_Unit, float]]:
    """Each part but the last taken on up to the last constraint before the next part:
    "Explain X. Keep it simple. Also, what is Y?" has the parts "Explain X. Keep it simple."
    and "Also, what is Y?" (context between a part and its constraint comes along). After
    the last part, constraints stay the postscript, said for every part."""
    position = {id(u): k for k, u in enumerate(units)}
    out: list[tuple[_Unit, float]] = []
    for n, (u, c) in enumerate(chosen):
        k = position.get(id(u))
        if k is not None and n + 1 < len(chosen) and not u.item:
            nxt = position.get(id(chosen[n + 1][0]), k)
            between = range(k + 1, nxt)
            last = max((i for i in between if i in constraining), default=k)
            if last > k and not any(units[i].item for i in between):
                end = units[last].end
                u = _Unit(prompt[u.start : end], u.start, end, u.label, u.item, u.clause, u.bare)
        out.append((u, c))
    return out


def _rhetorical(question: _Unit, following: Sequence[_Unit]) -> bool:
    return bool(
        following
        and not following[0].item
        and _BUT.match(following[0].text)
        and not _ends_question(following[0].masked)
    )


def _is_material(prompt: str, chosen: Sequence[tuple[_Unit, float]]) -> bool:
    """The prompt asks for work on pasted material ("Summarise this email:", "Translate:
    '...'"): whatever questions the material holds are not the user's."""
    head = prompt[: chosen[0][0].start]
    return any(
        line.rstrip().endswith((":", "：")) and _MATERIAL_VERB.search(line)
        for line in head.splitlines()
    )
