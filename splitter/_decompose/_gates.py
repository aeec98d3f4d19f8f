"""Word gates for the dependency patterns: in ASCII text, a necessary condition for each
pattern to match, checked on the text's words before the pattern is searched.

Each pattern is an alternation tried at every position, 5-23 us a search on a short
question (``_PRONOUN`` the slowest), and most questions match none of them. In ASCII
text every alternative that can match needs a word of its own there (``\\bit\\b``: the
word "it") or a substring (``\\bthe result\\w*``: "result", looked for anywhere, which
costs fewer calls than testing each word's start for a few more yeses; and where the
pattern has no word boundary, as ``_EXPLICIT_REF`` has none). An alternative written in
another script cannot match ASCII text, except through a letter that case-insensitive
matching folds to ASCII (the Turkish "ı" of "yukarıdaki" matches "i"). A gate that says
no is certain; one that says yes sends the text to the pattern as before. Text that is
not ASCII is always searched. ``tests/test_decompose_gates.py`` checks every gate
against its pattern.
"""

from __future__ import annotations

import re

__all__ = ["Words"]

_WORD = re.compile(r"\w+")

# _EXPLICIT_REF has no word boundary before its keywords ("q 2" inside "faq 2" matches).
_EXPLICIT = ("q", "#", "item", "part", "answer to", "frage", "pregunta", "soru", "antwort auf",
             "respuesta a")  # fmt: skip
_PREVIOUS_STARTS = (
    *("previous", "above", "preceding", "prior", "earlier", "vorherig", "obig", "oben"),
    *("anterior", "arriba", "dessus", "answer", "result", "ergebnis", "risultato"),
)
_PREVIOUS_WORDS = frozenset(
    {"wrote", "gave", "listed", "suggested"}  # "you (just) wrote"
    | {"summary", "text", "list", "query", "code", "function", "plan", "draft"}  # "your ..."
)
_PREVIOUS_ANYWHERE = ("acima", "anterior", "yukaridaki")  # no word boundary in the pattern
_DEMONSTRATIVE_WORDS = frozenset(
    {"that", "those", "these", "this", "its", "their", "ese", "esa", "esos", "esas", "ce"}
    | {"cet", "cette", "ces", "esse", "essa", "esses", "essas", "aquela", "bu", "o"}
    | {"quella", "quello", "quegli", "quei", "desse", "dessa", "desses", "dessas", "nesse"}
    | {"nessa", "nesses", "nessas", "este", "esta", "estos", "estas", "estes", "questo"}
    | {"questa", "questi", "queste", "deste", "desta", "destes", "destas", "neste", "nesta"}
    | {"quell", "quest"}  # "quell'autore"
)
_DEMONSTRATIVE_STARTS = ("dies", "jene", "aquel", "daquel", "naquel")
_PRONOUN_WORDS = frozenset(
    {"it", "its", "they", "their", "them", "ella", "dort", "dorthin", "suyo", "suya"}
    | {"suyos", "suyas", "er", "darin", "davon", "daran", "darauf", "deren", "dessen"}
    | {"leur", "leurs", "ele", "ela", "eles", "elas", "dele", "dela", "deles", "delas"}
    | {"suo", "sua", "suoi", "seu", "seus", "suas"}
    | {"those", "there", "this", "that"}  # "those", "there", "does this"
    | {"sein", "seine", "seinem", "seinen", "seiner", "seines"}  # "sein Hauptsitz"
    | {"ihr", "ihre", "ihrem", "ihren", "ihrer", "ihres"}
    | {"y", "pour", "de", "t"}  # "s'y", "y aller", "pour la gravir", "a-t-il"
)
_POSSESSIVE_WORDS = frozenset({"sa", "son", "ses", "su", "sus"})  # "sa capitale", "su sede"


class Words:
    """The words of one (masked) text, lowercased, for the gates; ``None`` words where the
    text is not ASCII (then every gate says yes)."""

    __slots__ = ("lowered", "words")

    def __init__(self, text: str) -> None:
        if text.isascii():
            self.lowered: str | None = text.lower()
            self.words: frozenset[str] | None = frozenset(_WORD.findall(self.lowered))
        else:
            self.lowered = self.words = None

    def may_name(self) -> bool:
        """Whether ``_EXPLICIT_REF`` may match ("question 2", "(b)")."""
        lowered = self.lowered
        return lowered is None or any(key in lowered for key in _EXPLICIT)

    def may_point_back(self) -> bool:
        """Whether ``_PREVIOUS_REF`` may match ("the previous answer", "your code")."""
        if self.words is None or self.lowered is None:
            return True
        lowered = self.lowered
        return (
            not self.words.isdisjoint(_PREVIOUS_WORDS)
            # A word starting so holds it: looked for anywhere (fewer calls, a few more yes).
            or any(key in lowered for key in _PREVIOUS_STARTS)
            or any(key in lowered for key in _PREVIOUS_ANYWHERE)
        )

    def may_point_at_noun(self) -> bool:
        """Whether ``_DEMONSTRATIVE`` may match ("that country", "dieses Bundeslandes")."""
        if self.words is None or self.lowered is None:
            return True
        lowered = self.lowered
        return not self.words.isdisjoint(_DEMONSTRATIVE_WORDS) or any(
            key in lowered for key in _DEMONSTRATIVE_STARTS
        )

    def may_possess(self) -> bool:
        """Whether a possessive of ``_POSSESSIVE_IN_LANGUAGE`` may match ("son siège")."""
        return self.words is None or not self.words.isdisjoint(_POSSESSIVE_WORDS)

    def may_refer(self) -> bool:
        """Whether ``_PRONOUN`` may match ("Who discovered them?", "a-t-il")."""
        return self.words is None or not self.words.isdisjoint(_PRONOUN_WORDS)
