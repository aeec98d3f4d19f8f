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

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Decomposition", "Part", "decompose"]


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


# -- what the text looks like --------------------------------------------------------------

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
# Quote pairs; a straight quote opens only after a space, a colon or the start, so the
# apostrophes of "What's" and "İstanbul'un" are not quotes. A curly quote runs to the first
# of its closers; straight quotes stay on their line.
_CURLY_CLOSERS = {"“": "”", "„": "“”", "«": "»", "「": "」", "『": "』", "《": "》", "‘": "’"}
_STRAIGHT_QUOTE = re.compile(
    r"\"[^\"\n]*\"|(?:(?<=^)|(?<=[\s:(]))'[^'\n]*'(?=[\s.,;:!?)]|$)",
    re.M,
)
_QUOTE_OPENER = re.compile("[\"'" + "".join(_CURLY_CLOSERS) + "]")
_MARKER = re.compile(
    r"""^(?P<indent>[ \t]*)(?P<marker>
        \*\*(?:Q|q)?\d{1,2}[.)]?\*\*            # **1.**
      | (?:Q|q)\d{1,2}\s*[:.)]                  # Q1:
      | [\d٠-٩]{1,2}\s*(?:[.)、]|：)(?![\d٠-٩])    # 1.  1)  1、  ١.
      | \d{1,2}\s+[-–](?=\s)                    # 1 -
      | \d{1,2}[º°ª]\)?                         # 1º)
      | (?i:step|schritt|paso|étape|adım|шаг|passo)\s*\d{1,2}\s*[:.)]  # Step 1:
      | [(（]\d{1,2}[)）]                         # (1) （1）
      | [①-⑳]                                   # ①
      | [一二三四五六七八九十]{1,3}、              # 一、
      | [(（][a-zA-Zа-яА-Я][)）]                  # (a)
      | [a-zA-Zа-яА-Я][.)](?=\s)                # a)  A.  а)
      | [-*•・👉▶►➤✅✔☑🔹🔸▪◦‣⁃](?=\s|[^\s*-])       # bullets
    )[ \t]*""",
    re.X,
)
_QUESTION_END = re.compile(r"[?？؟]\s*$")
_SENTENCE_END = re.compile(r"[.!?。！？؟।]\s*$")
_SENTENCE_BREAK = re.compile(r"(?<=[?？!！。؟।])(?!\s*[?？!！؟])|(?<=\S\.)(?=\s+\S)")
# Web addresses are content: their "?" and "." say nothing about sentences.
_URL = re.compile(r"\b(?:https?://|www\.)\S+")
# Words a full stop does not end a sentence after: abbreviations, initials, "1." markers.
# A number ending a sum ("Calcule 12 × 37.") does end its sentence.
_NO_BREAK_BEFORE = re.compile(
    r"(?:^|\s)(?:(?i:e\.g|i\.e|p\.s|etc|vs|mr|mrs|ms|dr|st|no|approx|z\.b|bzw|vb)|[A-Z])\.$"
    r"|(?:^|(?<![×x*+/=÷−-])\s)\d{1,2}\.$"
)
# Longer than any match of it ("approx." after a space is 8), so "^" cannot match mid-word.
_LONGEST_NO_BREAK = 16
_WH_START = re.compile(
    r"^(?:what|whats|what's|how|hows|how's|why|when|where|who|whom|whose|which|is|are|can|"
    r"could|do|does|did|should|would|will|was|were|any|wie|was|warum|wann|wo|wer|"
    r"welche[rsmn]?|kann|können|ist|sind|gibt|soll|sollte|muss|darf|qué|cómo|cuándo|dónde|"
    r"quién|por qué|cuál|quoi|comment|pourquoi|quand|où|qui|quel(?:le)?s?|что|как|почему|"
    r"когда|где|кто|сколько|какой|какая|какие|чем)\b",
    re.I,
)
# Words that lead a sentence without changing what it asks: "Also, what ...", "另外，...".
_CONNECTIVE = re.compile(
    r"^(?:(?:and\s+)?also|and|plus|oh,?\s+and|btw|und|y|et|и\s+ещё|и\s+еще|и|а|ayrıca|"
    r"bir\s+de|另外|还有|還有|それと|あと)[\s,，、:：]+",
    re.I,
)
# Questions without a question mark, by their question words or particles.
_ASKS = re.compile(
    r"什么|什麼|怎么|怎麼|怎样|为什么|為什麼|吗|嗎|呢|哪|几|幾|多少|多久|多长|多大|多远|如何|是否|谁|誰"
    r"|\bne (?:zaman|kadar)\b|\b(?:come|cosa|perché|quando|dove|chi|quale|quanto|si può)\b"
    r"|^(?:ما|ماذا|متى|أين|كيف|لماذا|هل|كم|من)\b|\b(?:क्या|कैसे|कब|कहाँ|क्यों|कितना|कितनी|कौन)\b"
    r"|ですか|ますか|でしょうか|(?:て|で)(?:ください|下さい)|教えて"
    r"|\b(?:nedir|neden|niye|nasıl|hangi\w*|kaç\w*|mi|mı|mu|mü|misin|mısın|musun|müsün|"
    r"miyim|mıyım|midir|mıdır)\b|\bne\s*$",
    re.I,
)
# Requests whose verb comes last: Japanese, Korean, Turkish imperatives.
_VERB_LAST_REQUEST = re.compile(
    r"(?:(?:て|で)(?:ください|下さい)|주세요|줘|(?<!안녕)하세요|십시오)[.。！!]?\s*$"
    r"|\b(?:yaz|çevir|öner|açıkla|anlat|listele|hesapla|özetle|ver|bul|düzelt|yap|göster|"
    r"söyle|tanımla|karşılaştır|yazın|çevirin|açıklayın|anlatın|verin|bulun)[.!]?\s*$",
    re.I,
)
# A trailing sentence about how to answer ("Keep each answer short.") is an instruction
# for every part, not a part.
_STYLE = re.compile(
    r"\b(?:answers?|respond|reply|each|every|all of them|brief(?:ly)?|short|concise|"
    r"in english)\b|回答|答案|简短|簡短|简洁|簡潔|每个|每個|"
    r"中文|英文|кратко|ответ|cevap|cevab|kısa|kurz|antwort|breve|respuesta|réponse|一言|答えて",
    re.I,
)
_ANSWER_WORD = re.compile(
    r"\b(?:answers?|respond|reply)\b|回答|答え|cevap|cevab|ответ|antwort|respuesta|réponse|"
    r"risposta|답변",
    re.I,
)
_GREETING = re.compile(
    r"^(?:hi|hello|hey|hiya|dear \w+|good (?:morning|afternoon|evening)|hallo|hola|bonjour|"
    r"ciao|merhaba|привет|здравствуйте)\b[\w ]{0,20}[,!]\s+(?=\S)",
    re.I,
)
_BUT = re.compile(
    r"^(?:but|aber|pero|mais|ma|ama|fakat|но|однако|但是|可是|不过|でも|しかし)\b", re.I
)
# A step that carries on from the sentence before it: that sentence is a step too.
_THEN = re.compile(
    r"^(?:then|next|after that|dann|danach|luego|después|ensuite|puis|poi|потом|затем|"
    r"sonra|ardından|然后|然後|接着|接著|次に|それから)(?=[\s,，、]|[^\W\d_])",
    re.I,
)
# A line that is someone's turn in a pasted chat ("[10:02] Dana: ...", "小王：...").
_SPEAKER = re.compile(
    r"^\s*(?:\[[^\]\n]{1,20}\]\s*)?[^\s:：\[\]][^\s:：]{0,20}(?:\s[^\s:：]{1,20})?[:：]\s*\S"
)
# Inline enumerations: "a) ... b) ... c) ...", "(1) ... (2) ...", "1. ... 2. ...".
_INLINE_MARK = re.compile(
    r"(?:(?<=\s)|^)(?P<m>\((?P<p>[a-e1-9])\)|(?P<b>[a-e1-9])[.)]|[Qq](?P<q>[1-9]):)(?=\s)"
    r"|(?P<cm>(?P<c>[①-⑨])|[（(](?P<f>[1-9])[)）])"
)
# "Anyway, ..." / "asıl sorum şu:" — what came before was venting or context, not questions.
_PIVOT = re.compile(
    r"^(?:anyway|anyhow|so my (?:real |actual )?question|my (?:real |actual )?question|"
    r"long story short|bref|bref,|en tout cas|neyse|asıl sorum|kurz gesagt|jedenfalls|"
    r"en fin|en resumen|enfim|resumindo|короче|в общем|總之|总之|言归正传|所以我的问题|"
    r"とにかく|要するに)",
    re.I,
)
# "Like, is it actually safe ...?" — the same question again, in other words.
_RESTATEMENT = re.compile(
    r"^(?:like,|i mean|in other words|that is,|or rather|i\.e\.|也就是说|就是说|yani|"
    r"то есть|c'est-à-dire|das heißt)",
    re.I,
)
# A line ending in one of these runs on into the next: one hard-wrapped sentence.
_DANGLING = re.compile(
    r"\b(?:and|or|but|the|a|an|of|to|with|for|in|on|at|if|that|from|und|oder|der|die|das|"
    r"mit|ve|veya|ile|и|или|в|на|с|y|o|de|la|el|et|ou|le|les|du|e|ou|com)\s*$",
    re.I,
)
# Output pasted from a program: tracebacks, "SomeError: ...", quoted lines ("> ...").
_LOG_LINE = re.compile(
    r"^\s*(?:>|Traceback \(|File \"|at [\w.$]+\(|[\w.]*(?:Error|Exception|Warning)\b:)"
)
# A question whose list holds the options to choose from: "Which of these ...?"
_OPTIONS_LEAD = re.compile(
    r"which of (?:these|the following)|which one|cuál de|cuáles de|quel(?:le)?s? de|"
    r"welche[rsmn]? (?:dieser|der folgenden)|какое из|какой из|hangisi|下列|以下哪|哪个|哪一|"
    r"どれ|どの|다음 중|qual (?:destas|dessas|das seguintes)",
    re.I,
)
# A list introduced like this describes the situation, it does not ask.
_CONTEXT_LEAD = re.compile(
    r"\b(?:facts?|context|background|situation|details|info|information|data|notes?)\b|"
    r"情况|背景|durum|bilgiler|hintergrund|situación|contexto|ситуаци|状況",
    re.I,
)
# A list introduced like this is the requirements of one task, not questions.
_REQUIREMENTS_LEAD = re.compile(
    r"requirement|rules|constraint|criteria|must|should|要求|条件|şart|kriter|koşul|anforderung|"
    r"bedingung|requisito|exigence|critère|требовани|条件",
    re.I,
)
# A sentence that leads with one of these asks for something (a part), not context.
_TASK_START = re.compile(
    r"^(?:please\s+)?(?:explain|describe|write|list|summari[sz]e|translate|state|estimate|"
    r"give|name|define|calculate|compute|compare|tell me|rank|suggest|recommend|outline|"
    r"balance|solve|find|convert|prove|simplify|derive|draw|create|make|generate|plan|design|"
    r"draft|rewrite|edit|shorten|proofread|help me|tell|escríb\w*|dame|haz|назови\w*|"
    r"divide|multiply|subtract|round\s+(?:it|the|this|that|to|up|down)|rechne|berechne|"
    r"multipliziere|dividiere|addiere|subtrahiere|calcul[ae]|calcola|divis[ea]|divid[ai]|"
    r"multipli(?:e|ca|que)|explíca\w*|"
    r"придумай|напиши|составь|hazırla|öner|scrivi|dammi|spiega|"
    r"fix|check|correct|improve|review|analy[sz]e|evaluate|identify|classify|provide|"
    r"erkläre|beschreibe|schreibe?|nenne|übersetze|explica|describe|escribe|traduce|"
    r"объясни|опиши|напиши|переведи|перечисли|écris|explique|décris|traduis|utilise|"
    r"請|请|帮我|幫我|给我|給我|用\S{1,12}写|列出|写|寫|解释|介绍|说明|求|计算|計算|证明|證明|"
    r"判断|判斷|化简|化簡|比较|比較|分析|举例|舉例)",
    re.I,
)
_STEP_START = re.compile(
    r"^(?:first(?:ly)?|then|next|after that|finally|lastly|zuerst|dann|danach|schließlich|"
    r"primero|luego|después|finalmente|d'abord|ensuite|enfin|сначала|потом|затем|наконец|"
    r"önce|sonra|ardından|son olarak|先|首先|然后|然後|接着|接著|再|最后|最後|まず|次に|最後に|"
    r"puis|poi|infine|dopodiché|depois|em\s+seguida|por\s+fim|por\s+último|zum\s+schluss)"
    r"(?=[\s,，、]|[^\W\d_])",
    re.I,
)
# Verbs that turn what follows into material to work on, not questions to answer.
_MATERIAL_VERB = re.compile(
    r"summar|translat|proofread|rewrite|paraphras|übersetz|zusammenfass|tradu|resum|"
    r"перевед|перепиш|резюм|总结|總結|翻译|翻譯|概括|改写|özet|çevir|要約|翻訳",
    re.I,
)


# A sentence that constrains the request before it ("Make it short.", "Use bullet points.",
# "Halte sie unter drei Minuten.", "Evita los tecnicismos.", "Explain why."): how to do that
# request, not a request of its own. It is matched on the sentence's start: a constraint
# verb, a verb whose object points back ("make it", "hazlo", "fais-la", "faça-o"), a
# "no/without/don't" phrase, or a request for the reason of the answer just asked for.
_CONSTRAINT = re.compile(
    r"^(?:please\s+|bitte\s+|por\s+favor,?\s+|per\s+favore,?\s+|s'il\s+te\s+plaît,?\s+)?(?:"
    # English
    r"(?:keep|make|write|format|put|word|phrase)\s+(?:it|them|this|that|sure|each|every|the|"
    r"your|all)\b|use\b|avoid\b|don'?t\b|do\s+not\b|never\b|no\s+\w|without\b|include\b|"
    r"focus\b|assume\b|limit\b|stick\s+to\b|mention\b|only\b|be\s+(?:brief|concise|polite|"
    r"specific|clear|honest|friendly|careful|firm|direct|creative|funny|precise|short|"
    r"detailed|thorough|concrete)\b|give\s+me\s+(?:\d+|two|three|four|five|six|seven|eight|"
    r"nine|ten|a\s+few|some|several)\s+(?:options|examples|ideas|suggestions|alternatives|"
    r"variants|versions|choices)\b|(?:explain|tell\s+me|say)\s+why\s*[.!]?$|justify\b|"
    r"show\s+your\s+(?:work|working|reasoning|steps)\b|explain\s+your\s+(?:reasoning|answer)\b"
    # German
    r"|halte?\s+(?:es|sie|ihn|dich|euch)\b|mach(?:e)?\s+(?:es|sie|ihn|das)\b|verwende\b|"
    r"benutze\b|nutze\b|vermeide\b|achte\b|geh(?:e)?\s+davon\s+aus\b|nimm\s+an\b|ohne\b|"
    r"keine?\b|begründe\b|erkläre?\s+warum\b|beschränke\b|bleib(?:e)?\b|sei\s+\w+\s*[.!]?$"
    # French
    r"|fai(?:s|tes)-(?:le|la|les)\b|garde[zs]?\b|utilise[zs]?\b|évite[zs]?\b|reste[zs]?\b|"
    r"sois\b|soyez\b|mets\b|mettez\b|pas\s+de\b|sans\b|n['’]\w+\s+pas\b|ne\s+\w+\s+pas\b|"
    r"justifie[zs]?\b|explique[zs]?\s+pourquoi\b|tiens\s+compte\b|tenez\s+compte\b|"
    r"limite[sz]?-(?:toi|vous)\b"
    # Spanish
    r"|haz(?:lo|la|los|las)\b|mantén\b|manten(?:lo|la)\b|usa\b|utiliza\b|evita\b|"
    r"no\s+(?:uses|incluyas|pases|menciones|añadas|pongas|des|utilices)\b|sin\b|"
    r"que\s+(?:no\s+)?sea\w*\b|ten\s+en\s+cuenta\b|explica\s+por\s+qué\b|justifica\b|"
    r"sé\s+(?:breve|conciso|concisa|claro|clara|concreto|concreta|directo|directa|amable)\b|"
    r"limítate\b"
    # Italian
    r"|fall[aoi]\b|fai\s+in\s+modo\b|mantieni\b|utilizza\b|niente\b|senza\b|"
    r"non\s+(?:usare|superare|includere|menzionare|aggiungere)\b|tieni\s+(?:conto|presente)\b|"
    r"motiva\b|giustifica\b|spiega\s+perché\b|sii\s+\w+\s*[.!]?$|limitati\b"
    # Portuguese
    r"|faça-(?:o|a|os|as)\b|mantenha\b|use\b|utilize\b|evite\b|sem\b|"
    r"não\s+(?:use|inclua|passe|mencione|ultrapasse|coloque)\b|considere\b|justifique\b|"
    r"explique\s+por\s+quê\b|seja\s+\w+\s*[.!]?$|limite-se\b"
    r")",
    re.I,
)
# "You know how everyone says ...?", "Ever wondered why ...?", "¿Te has preguntado ...?": a
# question asked only to lead into the real one, so it is context, not a part.
_RHETORICAL_OPENER = re.compile(
    r"^[¿¡]?(?:you\s+know\s+(?:how|when|what|that)|(?:have\s+you\s+)?ever\s+(?:wonder|notice)\w*|"
    r"isn'?t\s+it\s+(?:funny|weird|strange|annoying|crazy)|don'?t\s+you\s+(?:hate|love)|"
    r"kennst\s+du\s+das|(?:hast\s+du\s+dich|schon)\s+(?:je|jemals|mal|schon\s+mal)?\s*"
    r"(?:gefragt|überlegt)|wer\s+kennt\s+das\s+nicht|"
    r"(?:tu|vous)\s+sa(?:is|vez)\s+quand|(?:tu\s+t['’]es|vous\s+êtes-vous)\s+(?:déjà|jamais)\s+"
    r"demandé|qui\s+n['’]a\s+jamais|"
    r"sabes\s+cuando|(?:alguna\s+vez\s+)?(?:te|os)\s+has\s+preguntado|"
    r"a\s+quién\s+no\s+le\s+ha\s+pasado|"
    r"sai\s+quando|ti\s+sei\s+mai\s+chiest|vi\s+siete\s+mai\s+chiest|"
    r"a\s+chi\s+non\s+è\s+mai\s+capitato|"
    r"(?:você\s+)?sabe\s+quando|(?:você\s+)?já\s+se\s+perguntou|quem\s+nunca)",
    re.I,
)


# -- how sure a part is: Part.confidence -----------------------------------------------------
# An ordering, not a calibrated probability: the more of the independent signs (a list
# marker, a question mark, a question word or task verb) that agree a piece of text is a
# request of its own, the higher. Nothing in the package acts on the value; callers may,
# to keep a doubtful split together. The values are the ones the rules were written with;
# no labelled corpus records how sure a human is, so none has been fitted.
#
# Nothing was split: the prompt, as asked, is one request.
_WHOLE = 1.0
# A list item ending in "?" in a list of questions: marker and mark both say it.
_LISTED_QUESTION = 0.95
# A sentence ending in "?" outside a list: the mark says question, the boundaries are read
# from sentence ends, which abbreviations and numbers can blur.
_QUESTION_SENTENCE = 0.9
# A list item that reads as a question or request by its words, with no "?": the marker
# bounds it, its words say it asks.
_LISTED_REQUEST = 0.85
# "First ...", "Then ...": a step word leads it; steps are parts, but may be one task.
_STEP = 0.75
# A clause of a ";" / " / " run of questions, or an unpunctuated line among asking lines:
# the cut is inferred from punctuation and line breaks that often mean less.
_WEAK_BOUNDARY = 0.7
# Starts with a question word but does not end in "?" ("Also what's the best way ...").
_UNMARKED_QUESTION = 0.65
# Read as a request by its leading task verb alone ("Explain X."), or the sentence before a
# "Then" step: the weakest sign, as an imperative is as often context or an instruction.
_IMPERATIVE = 0.6


@dataclass(slots=True)
class _Unit:
    text: str  # as in the prompt, marker removed, stripped
    start: int
    end: int
    label: str | None = None
    item: bool = False  # a list item
    clause: bool = False  # one of several questions separated by semicolons
    bare: int | None = None  # a whole line without end punctuation: its block of lines


def decompose(prompt: str) -> Decomposition:
    """Split ``prompt`` into its sub-questions (one part when it is one question).

    Raises ``ValueError`` for a blank prompt.
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, not {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("the prompt is blank")
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


def _strip_label(before: str, label: str | None) -> str:
    text = before.rstrip()
    if label and text.endswith(label):
        text = text[: -len(label)]
    return text.strip()


def _masked(text: str) -> str:
    """``text`` with code and quoted spans blanked out (same length), so their question
    marks and markers are not read as the prompt's own."""
    for pattern in (_URL, _INLINE_CODE):
        text = pattern.sub(lambda m: " " * len(m.group()), text)
    spans = _quote_spans(text)
    if not spans:
        return text
    pieces, pos = [], 0
    for start, end in spans:
        pieces += [text[pos:start], " " * (end - start)]
        pos = end
    return "".join([*pieces, text[pos:]])


def _quote_spans(text: str) -> list[tuple[int, int]]:
    """Where the quoted spans are, left to right. A regex would try every unclosed opener
    against the rest of the text (quadratic on a run of them); here each closer's next
    position is looked up once and reused until the scan passes it."""
    spans: list[tuple[int, int]] = []
    next_at: dict[str, int] = {}  # closer -> where it was last found (-1: nowhere after)

    def closer_after(chars: str, pos: int) -> int:
        found = []
        for c in chars:
            at = next_at.get(c)
            if at is None or 0 <= at < pos:
                at = next_at[c] = text.find(c, pos)
            if at >= 0:
                found.append(at)
        return min(found, default=-1)

    pos = 0
    while (opener := _QUOTE_OPENER.search(text, pos)) is not None:
        start = opener.start()
        closers = _CURLY_CLOSERS.get(opener.group())
        if closers is None:
            straight = _STRAIGHT_QUOTE.match(text, start)
            end = straight.end() if straight else -1
        else:
            close = closer_after(closers, start + 1)
            end = close + 1 if close >= 0 else -1
        if end < 0:
            pos = start + 1
            continue
        spans.append((start, end))
        pos = end
    return spans


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
            and _DANGLING.search(masked[lines[i][0] : end])  # the last line joined
            and masked[lines[i + 1][0] : lines[i + 1][1]].strip()
            and not _MARKER.match(prompt[lines[i + 1][0] : lines[i + 1][1]])
        ):
            i += 1
            end = lines[i][1]
        line_units = inline or _sentences(prompt, masked, start, end)
        if len(line_units) == 1 and not _SENTENCE_END.search(masked[start:end]):
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
        masked = _masked(u.text)
        if k in constraining and chosen:
            continue  # "Write a cover letter. Make it short.": one request
        if not u.item and _RHETORICAL_OPENER.match(_core(u.text)):
            continue  # "You know how ...?": a lead-in to the real question
        if k and _THEN.match(u.text) and not u.item:
            before = _request_before(units, k)
            taken = bool(chosen) and chosen[-1][0] is before
            if not taken and not before.item and _SENTENCE_END.search(_masked(before.text)):
                chosen.append((before, _IMPERATIVE))  # "Draft a bio. Then shorten it."
        if u.item:
            if list_ok:
                question = _QUESTION_END.search(masked)
                chosen.append((u, _LISTED_QUESTION if question else _LISTED_REQUEST))
            continue
        if masked.rstrip().endswith((":", "：")):
            continue  # a lead-in: "Please answer the following:"
        if _QUESTION_END.search(masked) or u.clause:
            chosen.append((u, _WEAK_BOUNDARY if u.clause else _QUESTION_SENTENCE))
        elif _STEP_START.match(u.text):
            chosen.append((u, _STEP))
        elif u.bare is not None and u.bare in asking_blocks:
            chosen.append((u, _WEAK_BOUNDARY))
        elif _WH_START.match(_core(u.text)):
            # "Also what's the best way to move my files over."
            chosen.append((u, _UNMARKED_QUESTION))
        elif _is_request(u.text) and (_SENTENCE_END.search(masked) or u.bare is not None):
            chosen.append((u, _IMPERATIVE))
    # "Who buys a car in December? But my lease ends ...": a question the user answers
    # or sets aside with a "but" statement was rhetorical, context for what follows.
    position = {id(u): k for k, u in enumerate(units)}
    chosen = [
        (u, c)
        for u, c in chosen
        if u.item
        or not _QUESTION_END.search(_masked(u.text))
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
    return (
        not u.item
        and not _QUESTION_END.search(_masked(u.text))
        and bool(_CONSTRAINT.match(_core(u.text)))
    )


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
        and not _QUESTION_END.search(_masked(following[0].text))
    )


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
    core = _core(_masked(unit.text))
    return bool(_QUESTION_END.search(core) or _WH_START.match(core) or _ASKS.search(core))


def _is_request(text: str) -> bool:
    core = _core(text)
    return bool(
        _TASK_START.match(core) or _STEP_START.match(text) or _VERB_LAST_REQUEST.search(core)
    )


def _list_of_questions(units: Sequence[_Unit], items: Sequence[_Unit]) -> bool:
    """Are the list's items questions (split them) or one question's options or
    requirements (keep them together)?"""
    if all(_QUESTION_END.search(_masked(u.text)) for u in items):
        return True
    first = units.index(items[0])
    lead = units[first - 1].text if first else ""
    if lead.rstrip().endswith((":", "：")) and (
        _REQUIREMENTS_LEAD.search(lead)
        or _TASK_START.match(_core(lead))
        or _CONTEXT_LEAD.search(lead)
    ):
        return False  # "Write a poem that:", "要求：", "Some facts:" — not questions
    if _QUESTION_END.search(_masked(lead)) and _OPTIONS_LEAD.search(lead):
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


def _is_material(prompt: str, chosen: Sequence[tuple[_Unit, float]]) -> bool:
    """The prompt asks for work on pasted material ("Summarise this email:", "Translate:
    '...'"): whatever questions the material holds are not the user's."""
    head = prompt[: chosen[0][0].start]
    return any(
        line.rstrip().endswith((":", "：")) and _MATERIAL_VERB.search(line)
        for line in head.splitlines()
    )


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
    out: list[Part] = []
    labels = [_plain_label(p.label) for p in parts]
    lowered = [p.text.lower() for p in parts]
    for j, part in enumerate(parts):
        needs = set(part.depends_on)
        if j:
            needs |= _references(part.text, j, labels, lowered, preamble)
        out.append(
            Part(part.text, part.label, part.confidence, tuple(sorted(needs)), part.start, part.end)
        )
    return tuple(out)


def _plain_label(label: str | None) -> str | None:
    if label is None:
        return None
    core = re.sub(r"[*().)、:：（）\s]|^[Qq]", "", label)
    return core.lower() or None


def _references(
    text: str, j: int, labels: Sequence[str | None], lowered: Sequence[str], preamble: str
) -> set[int]:
    masked = _masked(text)
    found: set[int] = set()
    for m in _EXPLICIT_REF.finditer(masked):
        key = (m.group("n") or m.group("letter") or "").lower()
        for i in range(j):
            if labels[i] == key or (labels[i] is None and key == str(i + 1)):
                found.add(i)
    if found:
        return found
    if _PREVIOUS_REF.search(masked) or _STEP_START.match(text):
        return {j - 1}
    for m in _DEMONSTRATIVE.finditer(masked):
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
        source = _mentions(noun, lowered[:j])
        if source is not None:
            return {source}
        if not preamble and word and not _THIS_WORD.fullmatch(word):
            return {j - 1}  # "that city", "cet auteur", "essa cidade": no context to mean
    if not preamble and _BARE_SUPERLATIVE.search(masked) and not _NAMED.search(masked):
        return {j - 1}  # "How much does the cheapest model cost?": of what was just named
    pronoun = _PRONOUN.search(masked) or any(
        lang.search(masked) and word.search(masked) for lang, word in _POSSESSIVE_IN_LANGUAGE
    )
    if not preamble and pronoun and not _mentions_own_subject(text):
        return {j - 1}
    return found


def _mentions(noun: str, earlier: Sequence[str]) -> int | None:
    """The latest earlier part (``earlier``: their texts, lowercased) holding ``noun`` (or
    its stem). Cheap substring checks first: this runs for every part against every
    earlier one."""
    if not noun:
        return None
    alphabetic = noun.isascii() or (noun.isalpha() and not _is_cjk(noun))
    # The stem, so "dieses Bundeslandes" finds "Bundesland" and "Bu dağ" "dağı".
    stem = noun[: max(3, len(noun) - 3)]
    at_word_start = re.compile(rf"\b{re.escape(stem)}") if len(stem) >= 3 else None
    for i in range(len(earlier) - 1, -1, -1):
        words = earlier[i]
        if alphabetic:
            if noun in words or (at_word_start and stem in words and at_word_start.search(words)):
                return i
        elif any(noun[:k] in words for k in range(len(noun), 0, -1)):
            return i  # CJK: "その川は" finds "川"
    return None


def _is_cjk(text: str) -> bool:
    return any("\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" for ch in text)


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
