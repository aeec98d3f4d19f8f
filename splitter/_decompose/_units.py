"""Cutting a prompt into candidate units: list items, inline items, sentences, clauses."""

from __future__ import annotations

import re

from ._reading import _asks, _mostly_parts
from ._rules import (
    _INLINE_MARK,
    _LOG_LINE,
    _LONGEST_NO_BREAK,
    _MARKER,
    _NO_BREAK_BEFORE,
    _SENTENCE_BREAK,
    _SPEAKER,
    _dangles,
    _ends_sentence,
    _masked,
)
from ._types import _Unit


def _strip_label(before: str, label: str | None) -> str:
    text = before.rstrip()
    if label and text.endswith(label):
        text = text[: -len(label)]
    return text.strip()


def _units(prompt: str) -> list[_Unit]:
    """List items (with their continuation lines) and the sentences of other lines."""
    masked = _masked(prompt)
    lines: list[tuple[int, int]] = []  # (start, end) of each line
    pos = 0
    for line in prompt.split("\n"):
        lines.append((pos, pos + len(line)))
        pos += len(line) + 1
    units: list[_Unit] = []
    chat = (
        sum(bool(_SPEAKER.match(masked[s:e]) and not _MARKER.match(prompt[s:e])) for s, e in lines)
        >= 2
    )
    block = 0
    i = 0
    while i < len(lines):
        start, end = lines[i]
        if not masked[start:end].strip():
            block += 1
            i += 1
            continue
        if (
            chat and _SPEAKER.match(masked[start:end]) and not _MARKER.match(prompt[start:end])
        ) or _LOG_LINE.match(prompt[start:end]):
            block += 1
            i += 1
            continue  # a pasted chat's turn or program output: material, not questions
        m = _MARKER.match(prompt[start:end])
        if (
            m is not None
            and masked[start : start + m.end("marker")] != prompt[start : start + m.end("marker")]
        ):
            m = None  # the "marker" is inside a quote or code
        inline = _inline_items(prompt, masked, start, end)
        if m is not None and len(inline) >= 2 and inline[0].start == start + m.end():
            units.extend(inline)  # "a) what is X b) does it Y c) ..." on one line
            block += 1
            i += 1
            continue
        if m is not None and masked[start + m.end() : end].strip():
            # An item runs on over indented lines that carry no marker of their own.
            last = end
            j = i + 1
            while j < len(lines):
                s, e = lines[j]
                line = masked[s:e]
                if not line.strip() or not line[:1].isspace() or _MARKER.match(line):
                    break
                last = e
                j += 1
            body_start = start + m.end()
            text = prompt[body_start:last].strip()
            offset = prompt.index(text, body_start)
            label = m.group("marker").strip()
            units.append(_Unit(text, offset, offset + len(text), label, item=True))
            block += 1
            i = j
            continue
        # A hard-wrapped sentence: this line ends mid-phrase and the next goes on.
        while (
            i + 1 < len(lines)
            and _dangles(masked[lines[i][0] : end])  # the last line joined
            and masked[lines[i + 1][0] : lines[i + 1][1]].strip()
            and not _MARKER.match(prompt[lines[i + 1][0] : lines[i + 1][1]])
        ):
            i += 1
            end = lines[i][1]
        line_units = inline or _sentences(prompt, masked, start, end)
        if len(line_units) == 1 and not _ends_sentence(masked[start:end]):
            line_units[0].bare = block
        units.extend(line_units)
        i += 1
    return units


def _inline_items(prompt: str, masked: str, start: int, end: int) -> list[_Unit]:
    """ "a) what does X stand for b) does it apply to Y": the line's items, when it holds
    a run of markers counting up from a / 1 and every item reads as a question."""
    marks = list(_INLINE_MARK.finditer(masked, start, end))
    run: list[re.Match[str]] = []
    for m in marks:
        key = _key(m)
        expected = "a1"[0 if key.isalpha() else 1] if not run else chr(ord(_key(run[-1])) + 1)
        if key == expected:
            run.append(m)
        elif key in "a1" and len(run) < 2:
            run = [m]  # a fresh start; once a run is going, "(1)" inside an item is a reference
    if len(run) < 2:
        return []
    out = _sentences(prompt, masked, start, run[0].start()) if run[0].start() > start else []
    items: list[_Unit] = []
    for k, m in enumerate(run):
        stop = run[k + 1].start() if k + 1 < len(run) else end
        for unit in _unit(prompt, m.end(), stop):
            unit.label, unit.item = m.group("m") or m.group("cm"), True
            items.append(unit)
    if len(items) < 2 or not _mostly_parts(items):
        return []
    return out + items


def _key(m: re.Match[str]) -> str:
    circled = m.group("c")
    if circled:
        return str(ord(circled) - ord("①") + 1)
    return m.group("p") or m.group("b") or m.group("q") or m.group("f")


def _sentences(prompt: str, masked: str, start: int, end: int) -> list[_Unit]:
    out: list[_Unit] = []
    piece_start = start
    for m in _SENTENCE_BREAK.finditer(masked, start, end):
        cut = m.start()
        # Only the sentence's last word matters: searching all of it is quadratic in a run of
        # "e.g." or initials.
        tail = masked[max(piece_start, cut - _LONGEST_NO_BREAK) : cut]
        if masked[cut - 1] == "." and _NO_BREAK_BEFORE.search(tail):
            continue
        out.extend(_unit(prompt, piece_start, cut))
        piece_start = cut
    out.extend(_unit(prompt, piece_start, end))
    return [clause for unit in out for clause in _clauses(prompt, masked, unit)]


def _clauses(prompt: str, masked: str, unit: _Unit) -> list[_Unit]:
    """ "Best way to keep basil fresh; can I freeze rice; how long does stock keep?": the
    clauses, when every one after the first reads as a question."""
    cuts = [
        unit.start + m.start()
        for m in re.finditer(r";|(?<=\s)/(?=\s)", masked[unit.start : unit.end])
    ]
    if not cuts:
        return [unit]
    pieces: list[_Unit] = []
    begin = unit.start
    for cut in [*cuts, unit.end]:
        pieces.extend(_unit(prompt, begin, cut))
        begin = cut + 1
    for piece in pieces:
        piece.text = piece.text.rstrip(";/").rstrip()
        piece.end = piece.start + len(piece.text)
    later = pieces[1:]
    if len(pieces) >= 2 and all(_asks(u) for u in later):
        for piece in pieces:
            piece.clause = True
        return pieces
    return [unit]


def _unit(prompt: str, start: int, end: int) -> list[_Unit]:
    raw = prompt[start:end]
    text = raw.strip().lstrip("/|").strip()  # "...? / how heavy ...?": the separator
    if not text:
        return []
    offset = start + raw.index(text)
    return [_Unit(text, offset, offset + len(text))]
