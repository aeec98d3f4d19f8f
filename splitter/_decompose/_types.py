"""What ``decompose`` returns (``Part``, ``Decomposition``), and the unit it cuts a prompt
into on the way (``_Unit``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._rules import _masked


@dataclass(frozen=True, slots=True)
class Part:
    """One sub-question of a prompt, as written (list marker removed)."""

    text: str
    label: str | None  # its marker in the prompt ("1.", "(a)", "①"), if it had one
    confidence: float  # how sure the split is, 0..1: an ordering, see _WHOLE .. _IMPERATIVE
    depends_on: tuple[int, ...] = ()  # 0-based positions of parts whose answers it needs
    start: int = 0  # where it sits in the prompt (character offsets)
    end: int = 0


@dataclass(frozen=True, slots=True)
class Decomposition:
    """A prompt taken apart: shared text around the parts, the parts in order."""

    prompt: str
    preamble: str
    parts: tuple[Part, ...]
    postscript: str

    @property
    def single(self) -> bool:
        """One question: nothing to split."""
        return len(self.parts) == 1

    def question_text(self, index: int) -> str:
        """Part ``index`` as a prompt of its own: with the shared preamble and postscript."""
        pieces = (self.preamble, self.parts[index].text, self.postscript)
        return "\n\n".join(p for p in pieces if p)


@dataclass(slots=True)
class _Unit:
    text: str  # as in the prompt, marker removed, stripped
    start: int
    end: int
    label: str | None = None
    item: bool = False  # a list item
    clause: bool = False  # one of several questions separated by semicolons
    bare: int | None = None  # a whole line without end punctuation: its block of lines
    # ``masked`` of the text it was last computed for: a unit is read by several passes,
    # and masking each time was a fifth of ``_choose``'s time on long lists.
    _masked_of: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def masked(self) -> str:
        """``_masked(self.text)``, computed once per text (``text`` is reassigned while
        clauses are cut)."""
        memo = self._masked_of
        if memo is None or memo[0] is not self.text:
            memo = self._masked_of = (self.text, _masked(self.text))
        return memo[1]
