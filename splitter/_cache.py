"""The response cache: answers already paid for, found again by what determines them.

Opt-in (``Policy(cache=Cache(...))``). An entry's key hashes everything that decides an
answer: the isolation key, the endpoint's base URL (credentials stripped), the model, the
messages the question would be asked alone with, and the request parameters that change
the reply. Never the API key: rotating a key keeps its hits, and no key is ever written.

Two stores, one behaviour: in memory (``Cache()``, this process) and on disk
(``Cache(path=...)``, SQLite from the standard library, shareable by processes). A store is
opened once per process for equal configurations. Nothing in a store can fail a batch: an
entry that does not read back as one is a miss and is overwritten, a file that is not a
database is moved aside and started afresh, a store that cannot be written is skipped with
one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AnswerStore", "Cache", "CacheEntry", "answer_key", "store_for"]

_log = logging.getLogger("splitter")

# Parameters that travel with a request but do not change the reply it gets.
_NOT_ANSWER_SHAPING = frozenset(
    {
        "timeout",
        "extra_headers",
        "extra_query",
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
    }
)
_KEY_VERSION = 1  # bump when what goes into a key changes: old entries then simply miss


class Cache(BaseModel):
    """Where answers are kept for reuse. ``Cache()`` keeps them in this process's memory;
    ``Cache(path="answers.sqlite")`` keeps them on disk, shared by every process using it.

    Only answers that came back whole are stored (an error or a cut-off reply is asked again).
    Identical questions in one batch are sent once and the answer given to each of them.
    With ``temperature`` > 0 a cache returns the first sample drawn, by design.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path | None = Field(
        None, description="SQLite file to keep answers in; None: in memory, this process only."
    )
    ttl: float | None = Field(
        None, gt=0, description="Seconds an answer stays usable after it was stored; None: forever."
    )


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One stored answer."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    stored_at: float  # time.time() when written: ttl is a date, not a duration

    def to_json(self) -> str:
        return json.dumps(
            {
                "text": self.text,
                "finish_reason": self.finish_reason,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "stored_at": self.stored_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: object) -> CacheEntry | None:
        """The entry ``raw`` holds, or None when it is not exactly one."""
        try:
            data = json.loads(raw) if isinstance(raw, str | bytes) else None
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        text, reason = data.get("text"), data.get("finish_reason")
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        stored = data.get("stored_at")
        if not isinstance(text, str) or not (reason is None or isinstance(reason, str)):
            return None
        if not (_count(prompt) and _count(completion)) or isinstance(stored, bool):
            return None
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return None
        if not isinstance(stored, int | float):
            return None
        return cls(text, reason, prompt, completion, float(stored))


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def answer_key(
    *,
    isolation_key: str | None,
    base_url: str,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
) -> str | None:
    """The content address of one question's answer, or None when a parameter has no
    stable form (an arbitrary object): such a question is not cached."""
    shaping = {k: v for k, v in params.items() if k not in _NOT_ANSWER_SHAPING}
    document = {
        "v": _KEY_VERSION,
        "isolation_key": isolation_key,
        "endpoint": _bare_url(base_url),
        "model": model,
        "messages": list(messages),
        "params": shaping,
    }
    try:
        text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=_stable)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _stable(value: object) -> object:
    """A JSON form of the parameter values openai takes that json cannot write itself."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {"pydantic_schema": value.model_json_schema()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"no stable form for {type(value).__name__}")


def _bare_url(url: str) -> str:
    """``url`` without user, password or trailing slash: the key names the endpoint only."""
    try:
        parts = urlsplit(url.rstrip("/"))
    except ValueError:
        return url.rstrip("/")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


class AnswerStore:
    """A process's handle on one cache's entries. Thread-safe; each call is short, so the
    async core runs a batch's reads and writes in one worker-thread hop each."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._memory: dict[str, str] = {}
        self._db: sqlite3.Connection | None = None
        self._broken = False  # a disk store that failed: later calls miss and skip quietly
        if cache.path is not None:
            self._db = self._open(cache.path)

    @property
    def cache(self) -> Cache:
        return self._cache

    def get_many(self, keys: Iterable[str]) -> dict[str, CacheEntry]:
        """The usable entries among ``keys``; anything unreadable or expired is left out."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        with self._lock:
            raw = self._read(wanted)
        found: dict[str, CacheEntry] = {}
        oldest = None if self._cache.ttl is None else time.time() - self._cache.ttl
        for key, value in raw.items():
            entry = CacheEntry.from_json(value)
            if entry is None:
                _log.debug("splitter cache: entry %s… does not read back; asking again", key[:12])
            elif oldest is None or entry.stored_at >= oldest:
                found[key] = entry
        return found

    def put_many(self, entries: Mapping[str, CacheEntry]) -> None:
        if not entries:
            return
        rows = [(key, entry.to_json(), entry.stored_at) for key, entry in entries.items()]
        with self._lock:
            self._write(rows)

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
            if self._db is not None and not self._broken:

                def delete(db: sqlite3.Connection) -> None:
                    with db:
                        db.execute("DELETE FROM answers")

                self._guard(delete)

    def __len__(self) -> int:
        with self._lock:
            if self._db is None:
                return len(self._memory)
            rows = self._guard(lambda db: db.execute("SELECT COUNT(*) FROM answers").fetchall())
            return int(rows[0][0]) if rows else 0

    def _read(self, keys: list[str]) -> dict[str, object]:
        if self._db is None:
            return {k: self._memory[k] for k in keys if k in self._memory}
        found: dict[str, object] = {}
        for start in range(0, len(keys), 500):  # SQLite's bound-variable limit
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))  # only "?" marks are formatted into the SQL
            sql = f"SELECT key, entry FROM answers WHERE key IN ({marks})"
            rows = self._guard(lambda db, sql=sql, chunk=chunk: db.execute(sql, chunk).fetchall())
            found.update((str(key), entry) for key, entry in rows or ())
        return found

    def _write(self, rows: list[tuple[str, str, float]]) -> None:
        if self._db is None:
            self._memory.update((key, entry) for key, entry, _ in rows)
            return

        def insert(db: sqlite3.Connection) -> None:
            with db:  # one transaction
                db.executemany(
                    "INSERT OR REPLACE INTO answers (key, entry, stored_at) VALUES (?, ?, ?)", rows
                )

        self._guard(insert)

    def _guard(self, action: Any) -> Any:
        """Run ``action`` on the database; a failure turns the store off, with one warning,
        rather than failing the batch that asked."""
        if self._db is None or self._broken:
            return None
        try:
            return action(self._db)
        except sqlite3.Error as error:
            self._broken = True
            _log.warning(
                "splitter cache %s stopped working (%s); answers are no longer cached",
                self._cache.path,
                error,
            )
            return None

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        path = path.expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _connect(path)
        except sqlite3.DatabaseError as error:
            # Not a database (truncated, overwritten): keep it for inspection, start afresh.
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            path.replace(aside)
            _log.warning(
                "splitter cache %s was unreadable (%s); moved to %s and started empty",
                path,
                error,
                aside,
            )
            return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")  # readers never wait on the one writer
        db.execute(
            "CREATE TABLE IF NOT EXISTS answers "
            "(key TEXT PRIMARY KEY, entry TEXT NOT NULL, stored_at REAL NOT NULL)"
        )
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


_stores: dict[Cache, AnswerStore] = {}
_stores_lock = threading.Lock()


def store_for(cache: Cache) -> AnswerStore:
    """The process's one store for ``cache`` (equal configurations share it)."""
    with _stores_lock:
        store = _stores.get(cache)
        if store is None:
            store = _stores[cache] = AnswerStore(cache)
        return store
