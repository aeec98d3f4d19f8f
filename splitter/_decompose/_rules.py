"""The rule tables of ``decompose``: what text looks like in each language (patterns, code
and quotes masked, CJK script), and how sure a part is (``Part.confidence`` values)."""

from __future__ import annotations

import re

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
_QUESTION_MARKS = ("?", "？", "؟")
_SENTENCE_MARKS = (".", "!", *_QUESTION_MARKS, "。", "！", "।")


def _ends_question(text: str) -> bool:
    """Ends in a question mark, whitespace after it aside (what ``[?？؟]\\s*$`` finds, without
    a search from every position: ``\\s`` is ``str.isspace``)."""
    return text.rstrip().endswith(_QUESTION_MARKS)


def _ends_sentence(text: str) -> bool:
    """Ends in a sentence's closing mark, whitespace after it aside."""
    return text.rstrip().endswith(_SENTENCE_MARKS)


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
# Where a match of it can start, counted back from the last character not a space: its
# longest word ("karşılaştır", 11) and the mark after it.
_LONGEST_VERB_LAST = 12


def _verb_last_request(text: str) -> bool:
    """``_VERB_LAST_REQUEST`` searched from where a match can start (8 us a sentence from
    every position)."""
    at = max(0, len(text.rstrip()) - _LONGEST_VERB_LAST)
    return _VERB_LAST_REQUEST.search(text, at) is not None


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
_LONGEST_DANGLING = 4  # "veya", "oder", "with": no word of _DANGLING is longer


def _dangles(text: str) -> bool:
    """Ends mid-phrase ("... and", "... the"): ``_DANGLING`` searched from where its
    longest word could start, not from every position of the line (10 us a line). The
    ``\\b`` before the word still sees the character before that position."""
    return _DANGLING.search(text, max(0, len(text.rstrip()) - _LONGEST_DANGLING)) is not None


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


def _masked(text: str) -> str:
    """``text`` with code and quoted spans blanked out (same length), so their question
    marks and markers are not read as the prompt's own."""
    # Each substitution only where its pattern can match (a decompose() call masks each
    # part several times, and most parts hold neither).
    if "://" in text or "www." in text:
        text = _URL.sub(_blank, text)
    if "`" in text:
        text = _INLINE_CODE.sub(_blank, text)
    spans = _quote_spans(text)
    if not spans:
        return text
    pieces, pos = [], 0
    for start, end in spans:
        pieces += [text[pos:start], " " * (end - start)]
        pos = end
    return "".join([*pieces, text[pos:]])


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())


def _quote_spans(text: str) -> list[tuple[int, int]]:
    """Where the quoted spans are, left to right. A regex would try every unclosed opener
    against the rest of the text (quadratic on a run of them); here each closer's next
    position is looked up once and reused until the scan passes it."""
    opener = _QUOTE_OPENER.search(text)
    if opener is None:
        return []  # most texts: no quote to look for a closer of
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

    while opener is not None:
        start = opener.start()
        closers = _CURLY_CLOSERS.get(opener.group())
        if closers is None:
            straight = _STRAIGHT_QUOTE.match(text, start)
            end = straight.end() if straight else -1
        else:
            close = closer_after(closers, start + 1)
            end = close + 1 if close >= 0 else -1
        if end < 0:
            opener = _QUOTE_OPENER.search(text, start + 1)
            continue
        spans.append((start, end))
        opener = _QUOTE_OPENER.search(text, end)
    return spans


def _is_cjk(text: str) -> bool:
    return any("\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" for ch in text)
