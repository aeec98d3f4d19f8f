"""The labelled questions of bench/merge_quality.py and its scorer (no engine needed)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "checkable_questions.jsonl"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "merge_quality", ROOT / "bench" / "merge_quality.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mq = _bench()
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]


def test_the_set_has_at_least_100_rows_with_unique_ids_of_every_kind() -> None:
    assert len(ROWS) >= 100
    ids = [row["id"] for row in ROWS]
    assert not [i for i, n in Counter(ids).items() if n > 1]
    kinds = Counter(row["kind"] for row in ROWS)
    assert set(kinds) == {"arith", "unit", "capital", "fact"}
    assert min(kinds.values()) >= 15
    for row in ROWS:
        assert set(row) == {"id", "kind", "question", "accept"}
        assert row["id"].startswith(row["kind"] + "-")
        assert row["question"].strip().endswith("?")
        assert row["accept"]
        assert all(isinstance(p, str) and p for p in row["accept"])


def test_every_accept_pattern_compiles_and_questions_are_unique() -> None:
    for row in ROWS:
        for pattern in row["accept"]:
            re.compile(pattern, re.IGNORECASE)
    texts = Counter(row["question"].lower() for row in ROWS)
    assert not [q for q, n in texts.items() if n > 1]


def test_echoing_the_question_scores_nothing() -> None:
    """A model that repeats the question (a merged reply often does) earns no credit: no
    question's own text matches its accept patterns."""
    for q in mq.load(DATA):
        assert not mq.correct(q.question, q.accept), q.id
        assert not mq.correct(f"{q.question} I am not sure.", q.accept), q.id


def _row(qid: str) -> tuple[re.Pattern[str], ...]:
    accept: tuple[re.Pattern[str], ...] = next(q.accept for q in mq.load(DATA) if q.id == qid)
    return accept


@pytest.mark.parametrize(
    ("qid", "reply", "expected"),
    [
        ("capital-01", "The capital of France is Paris.", True),
        ("capital-01", "paris", True),
        ("capital-01", "It is Lyon.", False),
        ("capital-01", "Parisian food is great.", False),
        ("capital-07", "Beijing", True),
        ("arith-01", "7 plus 5 equals 12.", True),
        ("arith-01", "Twelve", True),
        ("arith-01", "120", False),
        ("arith-01", "12.5", False),
        ("arith-01", "The answer is 13.", False),
        ("unit-02", "There are 3,000 metres in 3 kilometres.", True),
        ("unit-02", "3000 m", True),
        ("unit-02", "300", False),
        ("fact-09", "Water freezes at 0 °C.", True),
        ("fact-09", "Water freezes at 10 degrees.", False),
        ("fact-11", "H2O", True),
        ("fact-11", "H₂O", True),
        ("fact-19", "The blue whale.", True),
        ("fact-19", "The Blue Buffalo Maxx", False),
    ],
)
def test_scorer_is_strict_but_fair(qid: str, reply: str, expected: bool) -> None:
    assert mq.correct(reply, _row(qid)) is expected


def test_no_answer_is_never_correct() -> None:
    accept = _row("capital-01")
    assert not mq.correct(None, accept)
    assert not mq.correct("", accept)


def test_schema_parser_takes_each_id_once_in_range() -> None:
    good = json.dumps({"answers": [{"id": 2, "answer": "b"}, {"id": 1, "answer": "a"}]})
    assert mq.parse_schema(good, 2) == {1: "a", 2: "b"}
    dup = json.dumps({"answers": [{"id": 1, "answer": "a"}, {"id": 1, "answer": "c"}]})
    assert mq.parse_schema(dup, 2) == {}
    out = json.dumps({"answers": [{"id": 3, "answer": "x"}, {"id": 1, "answer": " "}]})
    assert mq.parse_schema(out, 2) == {}
    assert mq.parse_schema('{"answers": [{"id": 1, "answer": "a"', 2) == {}


def test_schema_request_fixes_the_array_length_and_caps_answers() -> None:
    text, fmt = mq.schema_request(["What is 2 plus 2?", "What is the capital of Peru?"])
    assert "1. What is 2 plus 2?" in text
    assert "2. What is the capital of Peru?" in text
    schema = fmt["json_schema"]["schema"]["properties"]["answers"]
    assert schema["minItems"] == schema["maxItems"] == 2
    assert schema["items"]["properties"]["id"]["enum"] == [1, 2]
    assert schema["items"]["properties"]["answer"]["maxLength"] == mq.SCHEMA_ANSWER_CHARS
