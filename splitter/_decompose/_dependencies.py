"""Which parts need an earlier part's answer: explicit references, reference words in six
languages, and a noun named earlier."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence

from ._gates import Words
from ._rules import _STEP_START, _is_cjk, _masked
from ._types import Part

# -- dependencies --------------------------------------------------------------------------

_EXPLICIT_REF = re.compile(
    r"(?:question|q|#|item|part|answer to|frage|pregunta|вопрос|soru)"
    r"\s*\(?(?P<n>\d{1,2}|[a-z])\)?\b"
    r"|(?:answer to|antwort auf|respuesta a)\s*\((?P<letter>[a-z])\)",
    re.I,
)
_PREVIOUS_REF = re.compile(
    r"\b(?:previous|above|preceding|prior|earlier|last answer|that answer|your answer|"
    r"the result|vorherig|obig|oben|anterior|arriba|предыдущ|выше|précédent|ci-dessus)\w*"
    r"|\b(?:das|dem|des) ergebnis|\ble résultat|\bel resultado|\bil risultato|\bo resultado"
    r"|\byou (?:just )?(?:wrote|gave|listed|suggested)\b|\byour (?:summary|text|list|query|"
    r"code|function|plan|draft)\b|yazdığın|verdiğin|önerdiğin|你写的|你給的|你给的"
    r"|上一题|上一個|上一个|上面|上述|以上|前面|前の|上記|yukarıdaki|önceki|bir önceki"
    r"|위의|위 답변|앞의 답변|acima|anterior",
    re.I,
)
# "that country", "dieses Bundeslandes", "ese autor", "这条河", "その川", "Bu dağ".
_DEMONSTRATIVE = re.compile(
    r"(?<!-)\b(?:that|those|these|this|its|their|dies\w*|jene\w*|ese|esa|esos|esas|aquel\w*|"
    r"ce|cet|cette|ces|esse|essa|esses|essas|aquela|этот|эта|это|этого|этой|этом|том|тот|"
    r"bu|şu|o|그|quella|quello|quegli|quei|desse|dessa|desses|dessas|nesse|nessa|nesses|"
    r"nessas|daquel\w*|naquel\w*|este|esta|estos|estas|estes|questo|questa|questi|queste|"
    r"deste|desta|destes|destas|neste|nesta)\s+(?P<noun>\w+)"
    r"|\b(?P<elided>quell|quest)['’](?P<noun_el>\w+)"
    r"|(?:这|那|這)(?:个|個|条|條|座|位|本|种|種|家)?(?P<zh>\w{1,2})"
    r"|(?:その|この|あの)(?P<ja>\w{1,3})",
    re.I,
)
_NOT_NOUNS = frozenset({"que", "qui", "the", "and", "est", "des", "les"})
_TURKISH_LETTERS = re.compile(r"[ğışİçöü]")
# "the cheapest model", "the most expensive one", with nothing after it saying of what: of
# the thing an earlier answer named. "the best way to ...", "the largest of them" say.
_BARE_SUPERLATIVE = re.compile(
    r"\bthe\s+(?:(?:most|least)\s+\w+|(?!(?:rest|test|interest|forest|guest|request|quest|"
    r"chest|nest|contest|protest|harvest|west|arrest|honest|modest)\b)\w+est|best|worst)"
    r"\s+(?!(?:way|time|place|option|thing|age|of|in|on|at|for|among|from|to|that|which|"
    r"i|you|we)\b)\w+\b(?!\s+(?:of|in|on|at|for|among|from|that|which|to|i|you|we)\b)",
    re.I,
)
# A capitalised word after the first: the part names its own subject ("... in Lisbon?").
_NAMED = re.compile(r"(?<=\s)(?-i:[A-Z])\w*")
# Like "this", these are as often "this year" or "this email" as an earlier answer: they
# point back only when the noun after them is in an earlier part.
_THIS_WORD = re.compile(r"this|these|its|their|est[aeo]s?|quest[aeio]?|[dn]est[ae]s?")
# Pronouns, possessives and place adverbs that can only mean an earlier answer when there
# is no shared context to mean: "Who discovered them?", "travel there", "Wo ist sein
# Hauptsitz?", "Quelle est sa capitale ?", "¿Dónde está su sede?", "Si può fare il bagno
# lì?", "Como faço para chegar lá?".
_PRONOUN = re.compile(
    r"\b(?:it|its|they|their|them|него|нём|неё|ней|ему|туда|там|он|она|они|él|ella|"
    r"allí|ahí|allá|dort|dorthin|его|её|их|suyo|suya|suyos|suyas|(?-i:er)|"
    r"darin|darüber|davon|daran|darauf|deren|dessen|là-bas|leurs?|lì|laggiù|lá|"
    r"ele|ela|eles|elas|dele|dela|deles|delas|suo|sua|suoi|seu|seus|suas)\b"
    # "those" that is not "those who/of", "there" that is not "there is"
    r"|\bthose\b(?!\s+(?:who|that|which|of|with|in)\b)"
    r"|(?<!\bis\s)(?<!\bare\s)(?<!\bwas\s)(?<!\bwere\s)(?<!\bbe\s)(?<!\bany\s)\bthere\b"
    r"(?!\s*(?:is|are|was|were|['’]s|will|would|could|should|might|may|must|seems?|"
    r"exists?|isn['’]t|aren['’]t|wasn['’]t|won['’]t|used|has|have|had)\b)"
    # "How does this work?": "this" / "that" standing alone after a verb
    r"|\b(?:does|do|did|is|was|can|could|will|would|should|has)\s+(?:this|that)\b"
    # German possessives before a (capitalised) noun: "sein Hauptsitz", "ihre Hauptstadt"
    r"|(?-i:\b(?:[Ss]ein|ihr)(?:e[mnrs]?)?\s+[A-ZÄÖÜ])"
    # French clitics: "s'y baigner", "y aller", inversion "a-t-il", not "fait-il", "y a-t-il"
    r"|\b[snjmtlc]['’]y\b|\by\s+(?:aller|monter|arriver|accéder|rester|loger|dormir|vivre)\b"
    # French object clitics before a closing infinitive: "pour la gravir ?", "de les voir ?"
    r"|\b(?:pour|de|à)\s+(?:la|le|les|l['’])\s*\w+(?:er|ir|re)\s*[?？]?\s*$"
    r"|(?<!\bfait)(?<!\bfaut)(?<!\by a)-t-(?:il|elle|ils|elles)\b"
    r"|^(?:它|他|她|そこ|それ)",
    re.I,
)
# Possessives that are other words in other languages count only in a question of their
# own language: French "sa capitale" (not Spanish "son" = are, Italian "sa" = knows, Turkish
# "son" = last), Spanish "su sede" (not Turkish "su" = water). Two searches, not one
# pattern spanning the text between them, which would be quadratic.
_POSSESSIVE_IN_LANGUAGE = (
    (
        re.compile(r"\b(?:quel(?:le)?s?|combien|pourquoi|où|qu['’]\w+|est-ce)\b", re.I),
        re.compile(r"\b(?:sa|son|ses)\s+\w", re.I),
    ),
    (
        re.compile(r"¿|\b(?:qué|cuál|cuáles|quién|quiénes|dónde|cuándo|cómo|cuánt[oa]s?)\b", re.I),
        re.compile(r"\bsus?\b", re.I),
    ),
)


def with_detected_dependencies(parts: Sequence[Part], *, preamble: str = "") -> tuple[Part, ...]:
    """``parts`` with the dependencies their text gives away.

    Explicit references ("question 1", "your answer to (a)", "the previous answer",
    "上一题", "yukarıdaki") and sequencing ("Then use that function") point at the part
    named or the one before. A demonstrative ("that country", "这条河") points at the latest
    earlier part mentioning that noun; failing that, and with no shared context the
    phrase could refer to, at the part before. Errs towards dependence: a wrong split costs
    quality, a wrong wait costs only time.
    """
    return _with_dependencies(parts, preamble, _Earlier(parts))


def _with_dependencies(parts: Sequence[Part], preamble: str, earlier: _Earlier) -> tuple[Part, ...]:
    out: list[Part] = []
    for j, part in enumerate(parts):
        needs = set(part.depends_on)
        if j:
            needs |= _references(part.text, j, earlier, preamble)
        out.append(
            Part(part.text, part.label, part.confidence, tuple(sorted(needs)), part.start, part.end)
        )
    return tuple(out)


def _plain_label(label: str | None) -> str | None:
    if label is None:
        return None
    core = re.sub(r"[*().)、:：（）\s]|^[Qq]", "", label)
    return core.lower() or None


_WORD = re.compile(r"\w+")
_NEAR = 16  # earlier parts searched one by one for a noun before the index is asked


def _starts_word(stem: str, words: str) -> bool:
    """Whether ``stem`` (word characters) starts a word of ``words``: ``\\b`` before it, as
    a search for ``rf"\\b{stem}"`` finds, without compiling a pattern per stem."""
    at = words.find(stem)
    while at >= 0:
        if at == 0 or not (words[at - 1].isalnum() or words[at - 1] == "_"):
            return True
        at = words.find(stem, at + 1)
    return False


class _Earlier:
    """The parts' labels and lowercased texts, indexed: what a reference in part ``j`` names
    among the parts before it is looked up, not searched for in each of them (which made
    ``decompose`` quadratic in the number of parts). A noun not in the few parts just before
    is looked up once in the prompt's words (the words holding its rarest three letters, a
    run of the sorted words for its stem); ``tests/test_decompose_index.py`` checks every
    answer against the plain search."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self.labels = [_plain_label(p.label) for p in parts]
        self.lowered = [p.text.lower() for p in parts]
        self._by_label: dict[str, list[int]] = {}
        for i, label in enumerate(self.labels):
            if label is not None:
                self._by_label.setdefault(label, []).append(i)
        self._by_number = {str(i + 1): i for i, label in enumerate(self.labels) if label is None}
        self._mentioning: dict[str, list[int]] = {}  # noun -> the parts mentioning it
        self._postings: dict[str, list[int]] = {}  # word -> the parts holding it
        self._words: list[str] = []  # the distinct words, sorted
        self._trigrams: dict[str, list[str]] = {}  # three letters -> the words holding them
        self._by_char: dict[str, list[int]] | None = None

    def named(self, key: str, j: int) -> set[int]:
        """The parts before ``j`` that an explicit reference ``key`` ("2", "b") names: by
        their label, or, unlabelled, by their position counted from 1."""
        labelled = self._by_label.get(key, [])
        found = set(labelled[: bisect_left(labelled, j)])
        i = self._by_number.get(key)
        if i is not None and i < j:
            found.add(i)
        return found

    def mentioning(self, noun: str, j: int) -> int | None:
        """The latest part before ``j`` holding ``noun`` (word characters, as the patterns
        capture them, lowercased) or its stem: the parts just before it one by one (where
        what it names usually is), then the index."""
        if not noun:
            return None
        alphabetic = noun.isascii() or (noun.isalpha() and not _is_cjk(noun))
        # The stem, so "dieses Bundeslandes" finds "Bundesland" and "Bu dağ" "dağı".
        stem = noun[: max(3, len(noun) - 3)]
        near = max(0, j - _NEAR)
        for i in range(j - 1, near - 1, -1):
            words = self.lowered[i]
            if alphabetic:
                if noun in words or (len(stem) >= 3 and _starts_word(stem, words)):
                    return i
            elif noun[0] in words:  # CJK: "その川は" finds "川" (some prefix: the first)
                return i
        if not near:
            return None
        hits = self._mentioning.get(noun)
        if hits is None:
            hits = self._mentioning[noun] = self._parts_mentioning(noun, alphabetic, stem)
        k = bisect_left(hits, near)
        return hits[k - 1] if k else None

    def _parts_mentioning(self, noun: str, alphabetic: bool, stem: str) -> list[int]:
        if not alphabetic:
            return self._holding_char(noun[0])
        if not self._words:
            self._index_words()
        # A run of word characters occurs only inside a word; the stem must start one.
        words = self._words_containing(noun)
        if len(stem) >= 3:
            words |= self._words_starting(stem)
        return sorted({i for word in words for i in self._postings[word]})

    def _index_words(self) -> None:
        postings: dict[str, list[int]] = {}
        for i, words in enumerate(self.lowered):
            for word in set(_WORD.findall(words)):
                postings.setdefault(word, []).append(i)
        trigrams: dict[str, list[str]] = {}
        for word in postings:
            for trigram in {word[k : k + 3] for k in range(len(word) - 2)}:
                trigrams.setdefault(trigram, []).append(word)
        self._postings, self._words, self._trigrams = postings, sorted(postings), trigrams

    def _words_containing(self, text: str) -> set[str]:
        """The words holding ``text``: among those holding its rarest three letters."""
        if len(text) < 3:
            return {word for word in self._words if text in word}
        rarest = min(
            (self._trigrams.get(text[k : k + 3], ()) for k in range(len(text) - 2)), key=len
        )
        return {word for word in rarest if text in word}

    def _words_starting(self, stem: str) -> set[str]:
        """The words starting with ``stem``: a run of the sorted words."""
        found = set()
        for k in range(bisect_left(self._words, stem), len(self._words)):
            if not self._words[k].startswith(stem):
                break
            found.add(self._words[k])
        return found

    def _holding_char(self, char: str) -> list[int]:
        if self._by_char is None:
            self._by_char = {}
            for i, words in enumerate(self.lowered):
                for c in set(words):
                    self._by_char.setdefault(c, []).append(i)
        return self._by_char.get(char, [])


def _references(text: str, j: int, earlier: _Earlier, preamble: str) -> set[int]:
    masked = _masked(text)
    # Each pattern below is searched only where its words are in the text (``_gates``):
    # most questions hold none, and the searches were most of decompose()'s time.
    words = Words(masked)
    found: set[int] = set()
    for m in _EXPLICIT_REF.finditer(masked) if words.may_name() else ():
        found |= earlier.named((m.group("n") or m.group("letter") or "").lower(), j)
    if found:
        return found
    if (words.may_point_back() and _PREVIOUS_REF.search(masked)) or _STEP_START.match(text):
        return {j - 1}
    for m in _DEMONSTRATIVE.finditer(masked) if words.may_point_at_noun() else ():
        noun = (
            m.group("noun") or m.group("noun_el") or m.group("zh") or m.group("ja") or ""
        ).lower()
        if m.group("elided"):
            word = m.group("elided").lower()  # "quell'autore"
        else:
            word = m.group(0).split()[0].lower() if m.group("noun") is not None else ""
        if m.group("noun") is not None and (len(noun) < 3 or noun in _NOT_NOUNS):
            continue  # "ce qu'on", "o da": not a noun phrase
        if word == "o" and not _TURKISH_LETTERS.search(text):
            continue  # Portuguese/Spanish "o" is an article, not Turkish "that"
        source = earlier.mentioning(noun, j)
        if source is not None:
            return {source}
        if not preamble and word and not _THIS_WORD.fullmatch(word):
            return {j - 1}  # "that city", "cet auteur", "essa cidade": no context to mean
    if preamble:
        return found  # what follows points at the part before only without shared context
    if _BARE_SUPERLATIVE.search(masked) and not _NAMED.search(masked):
        return {j - 1}  # "How much does the cheapest model cost?": of what was just named
    pronoun = (words.may_refer() and _PRONOUN.search(masked)) or (
        words.may_possess()
        and any(
            lang.search(masked) and word.search(masked) for lang, word in _POSSESSIVE_IN_LANGUAGE
        )
    )
    if pronoun and not _mentions_own_subject(text):
        return {j - 1}
    return found


def _mentions_own_subject(text: str) -> bool:
    """ "Is it safe to give dogs peanut butter?", "Is X worth it?": the pronoun is a dummy.
    Not when the verb after "to" lacks its object, which "it" then is: "Is it hard to learn
    for a beginner?" (learn it)."""
    gap = re.match(
        r"^(?:is|was)\s+it\s+\w+\s+to\s+\w+(?:\s+(?:for|if|as|when|without|at|by|from)\b"
        r"|\s*[?？.!]?\s*$)",
        text,
        re.I,
    )
    return gap is None and bool(
        re.match(r"^(?:is|was|does|do|can|should)\s+it\b", text, re.I)
        or re.search(r"\bworth it\b", text, re.I)
    )
