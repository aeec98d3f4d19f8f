"""The response cache's store and keys, on their own (batches: test_response_cache.py)."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from splitter._cache import AnswerStore, Cache, CacheEntry, answer_key, store_for


def _entry(text: str = "Paris", stored_at: float | None = None) -> CacheEntry:
    return CacheEntry(text, "stop", 12, 3, time.time() if stored_at is None else stored_at)


def _key(**changes: object) -> str | None:
    fields: dict[str, object] = {
        "isolation_key": None,
        "base_url": "https://api.example.com/v1",
        "model": "m",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "params": {"temperature": 0},
    }
    fields.update(changes)
    return answer_key(**fields)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> AnswerStore:
    path = tmp_path / "answers.sqlite" if request.param == "sqlite" else None
    return AnswerStore(Cache(path=path))


def test_an_entry_reads_back_as_written(store: AnswerStore) -> None:
    entry = _entry()
    store.put_many({"k1": entry})
    assert store.get_many(["k1", "k2"]) == {"k1": entry}
    assert len(store) == 1


def test_clear_empties_the_store(store: AnswerStore) -> None:
    store.put_many({"k1": _entry(), "k2": _entry("Rome")})
    store.clear()
    assert store.get_many(["k1", "k2"]) == {}
    assert len(store) == 0


def test_an_entry_past_its_ttl_is_a_miss(tmp_path: Path) -> None:
    store = AnswerStore(Cache(path=tmp_path / "a.sqlite", ttl=60))
    store.put_many({"old": _entry(stored_at=time.time() - 61), "new": _entry()})
    assert set(store.get_many(["old", "new"])) == {"new"}


def test_many_keys_are_read_in_chunks_under_sqlites_variable_limit(tmp_path: Path) -> None:
    store = AnswerStore(Cache(path=tmp_path / "a.sqlite"))
    entries = {f"k{i}": _entry(f"answer {i}") for i in range(1_234)}
    store.put_many(entries)
    assert store.get_many(entries) == entries


def test_the_disk_store_is_seen_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    AnswerStore(Cache(path=path)).put_many({"k": _entry("from the parent")})
    script = (
        "from pathlib import Path; from splitter._cache import AnswerStore, Cache;"
        f"print(AnswerStore(Cache(path=Path({str(path)!r}))).get_many(['k'])['k'].text)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "from the parent"


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"text": 3, "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1, '
        '"stored_at": 1}',
        '{"text": "x", "finish_reason": "stop", "prompt_tokens": -1, "completion_tokens": 1, '
        '"stored_at": 1}',
        '{"text": "x", "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1}',
        '{"text": "x", "finish_reason": 5, "prompt_tokens": 1, "completion_tokens": 1, '
        '"stored_at": 1}',
    ],
)
def test_a_corrupt_entry_is_a_miss_and_is_overwritten(tmp_path: Path, raw: str) -> None:
    path = tmp_path / "a.sqlite"
    store = AnswerStore(Cache(path=path))
    store.put_many({"k": _entry()})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE answers SET entry = ? WHERE key = 'k'", (raw,))
    assert store.get_many(["k"]) == {}
    fresh = _entry("again")
    store.put_many({"k": fresh})
    assert store.get_many(["k"]) == {"k": fresh}


def test_a_file_that_is_not_a_database_is_moved_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.sqlite"
    path.write_bytes(b"this was never a SQLite file" * 100)
    with caplog.at_level(logging.WARNING, logger="splitter"):
        store = AnswerStore(Cache(path=path))
    store.put_many({"k": _entry()})
    assert store.get_many(["k"])["k"].text == "Paris"
    (aside,) = tmp_path.glob("a.sqlite.corrupt-*")
    assert aside.read_bytes().startswith(b"this was never")
    assert "moved to" in caplog.text


def test_a_store_that_breaks_later_misses_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.sqlite"
    store = AnswerStore(Cache(path=path))
    store.put_many({"k": _entry()})
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE answers")
    with caplog.at_level(logging.WARNING, logger="splitter"):
        assert store.get_many(["k"]) == {}
        store.put_many({"k": _entry()})
        assert store.get_many(["k"]) == {}
    assert caplog.text.count("stopped working") == 1


def test_equal_configurations_share_one_store(tmp_path: Path) -> None:
    first = store_for(Cache(path=tmp_path / "a.sqlite"))
    assert store_for(Cache(path=tmp_path / "a.sqlite")) is first
    assert store_for(Cache(path=tmp_path / "b.sqlite")) is not first


def test_the_key_changes_with_everything_that_decides_the_answer() -> None:
    base = _key()
    assert base is not None
    changed = [
        _key(isolation_key="tenant-a"),
        _key(base_url="https://other.example.com/v1"),
        _key(model="m2"),
        _key(messages=[{"role": "user", "content": "Capital of Spain?"}]),
        _key(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Capital of France?"},
            ]
        ),
        _key(params={"temperature": 0.7}),
        _key(params={"temperature": 0, "max_tokens": 5}),
    ]
    assert len({base, *changed}) == 1 + len(changed)
    assert _key(isolation_key="tenant-a") != _key(isolation_key="tenant-b")


def test_the_key_ignores_credentials_order_and_transport_parameters() -> None:
    base = _key(params={"temperature": 0, "max_tokens": 5})
    assert _key(params={"max_tokens": 5, "temperature": 0}) == base
    assert _key(base_url="https://user:sk-secret@api.example.com/v1/") == _key()
    transport = {"temperature": 0, "max_tokens": 5, "timeout": 3, "extra_headers": {"a": "b"}}
    assert _key(params=transport) == base


class _Reply(BaseModel):
    city: str


def test_a_pydantic_response_format_keys_by_its_schema_and_an_opaque_object_is_not_cached() -> None:
    with_model = _key(params={"response_format": _Reply})
    assert with_model is not None
    assert with_model == _key(params={"response_format": _Reply})
    assert with_model != _key()
    assert _key(params={"temperature": object()}) is None


def test_a_cache_rejects_a_non_positive_ttl_naming_the_field() -> None:
    with pytest.raises(ValueError, match="ttl"):
        Cache(ttl=0)
