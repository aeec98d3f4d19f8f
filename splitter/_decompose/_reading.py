"""What one unit of a prompt reads as: a question, a request, an instruction, a fragment."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._rules import (
    _ASKS,
    _CONNECTIVE,
    _CONTEXT_LEAD,
    _GREETING,
    _OPTIONS_LEAD,
    _REQUIREMENTS_LEAD,
    _STEP_START,
    _STYLE,
    _TASK_START,
    _WH_START,
    _ends_question,
    _is_cjk,
    _masked,
    _verb_last_request,
)
from ._types import _Unit


def _without_greeting(u: _Unit) -> _Unit:
    """ "Hi, which plan has SSO?": the greeting is shared text, not part of the question."""
    m = _GREETING.match(u.text)
    if m is None or u.item:
        return u
    return _Unit(u.text[m.end() :], u.start + m.end(), u.end, u.label, u.item, u.clause, u.bare)


def _instruction(u: _Unit) -> bool:
    """A request about how to answer the others, not a part of its own."""
    return (
        not u.item
        and not _STEP_START.match(u.text)
        and _is_request(u.text)
        and bool(_STYLE.search(u.text))
    )


def _core(text: str) -> str:
    return _CONNECTIVE.sub("", text.strip(), count=1)


def _asks(unit: _Unit) -> bool:
    """Reads as a question even without a question mark."""
    core = _core(unit.masked)
    return bool(_ends_question(core) or _WH_START.match(core) or _ASKS.search(core))


def _is_request(text: str) -> bool:
    core = _core(text)
    return bool(_TASK_START.match(core) or _STEP_START.match(text) or _verb_last_request(core))


def _list_of_questions(units: Sequence[_Unit], items: Sequence[_Unit]) -> bool:
    """Are the list's items questions (split them) or one question's options or
    requirements (keep them together)?"""
    if all(_ends_question(u.masked) for u in items):
        return True
    first = units.index(items[0])
    lead = units[first - 1].text if first else ""
    if lead.rstrip().endswith((":", "：")) and (
        _REQUIREMENTS_LEAD.search(lead)
        or _TASK_START.match(_core(lead))
        or _CONTEXT_LEAD.search(lead)
    ):
        return False  # "Write a poem that:", "要求：", "Some facts:" — not questions
    if _ends_question(_masked(lead)) and _OPTIONS_LEAD.search(lead):
        return False  # "Which of these ...?" and its options
    return _mostly_parts(items)


def _mostly_parts(items: Sequence[_Unit]) -> bool:
    """All questions or requests; or two thirds of them, the rest not as short as an
    option ("Oxygen", "押韵")."""
    if all(_item_is_part(u.text) for u in items):
        return True
    parts = sum(_item_is_part(u.text) for u in items)
    return 3 * parts >= 2 * len(items) and not any(
        _fragment(u.text) and not _item_is_part(u.text) for u in items
    )


def _fragment(text: str) -> bool:
    words = text.split()
    if _is_cjk(text):
        return len(text.replace(" ", "")) < 8
    return len(words) < 4


def _item_is_part(text: str) -> bool:
    """A list item that is a question or a request, not an option, a requirement or a
    statement of fact."""
    masked = _masked(text)
    core = _core(masked)
    return bool(
        re.search(r"[?？]", masked)
        or _WH_START.match(core)
        or _ASKS.search(core)
        or _is_request(text)
    )
