"""Policy(cache=...): batches through the response cache, against the simulator over the real
openai client. Requests are counted from the simulator's own log."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from splitter import Cache, Policy, Question, Splitter
from splitter import _cache as cache_module
from splitter.sim import SimService
from splitter.testing import assert_answers_match, open_sim_client

pytestmark = pytest.mark.anyio

MODEL = "gpt-4o-mini"


@pytest.fixture(autouse=True)
def _no_open_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test opens its stores afresh, as a new process would (the registry is per
    process; an in-memory cache of one test must not answer another's questions)."""
    monkeypatch.setattr(cache_module, "_stores", {})


def _policy(path: Path | None = None, **kwargs: object) -> Policy:
    return Policy(cache=Cache(path=path), **kwargs)  # type: ignore[arg-type]


def _service() -> SimService:
    return SimService(MODEL, time_scale=0.002)


async def test_a_rerun_of_the_same_100_questions_sends_no_request(
    door: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    questions = [f"Cache question {i}" for i in range(100)]
    service = _service()
    async with open_sim_client(service, door=door) as client:
        first = await Splitter(client, policy=_policy(tmp_path / "a.sqlite")).aask_many(
            questions, model=MODEL
        )
        sent = len(service.log)
        monkeypatch.setattr(cache_module, "_stores", {})  # read back from the file, not memory
        again = await Splitter(client, policy=_policy(tmp_path / "a.sqlite")).aask_many(
            questions, model=MODEL
        )
    assert first.ok
    assert sent >= 1
    assert len(service.log) == sent  # not one request more
    assert again.stats.requests == 0
    assert again.stats.cache_hits == 100
    assert again.texts == first.texts
    assert {a.via for a in again} == {"cache"}
    assert again.usage.total_tokens == 0  # nothing billed twice
    assert_answers_match(again)
    assert "100 of 100 questions answered without a request" in again.explain()


async def test_identical_questions_in_one_batch_are_asked_once(door: str) -> None:
    questions = ["Alpha?", "Beta?", "Alpha?", Question(text="Alpha?", id="again")]
    service = _service()
    policy = _policy(strategy="fanout")
    async with open_sim_client(service, door=door) as client:
        result = await Splitter(client, policy=policy).aask_many(questions, model=MODEL)
    assert Counter(r.user_text for r in service.log) == {"Alpha?": 1, "Beta?": 1}
    assert [a.index for a in result] == [0, 1, 2, 3]
    assert [a.question.text for a in result] == ["Alpha?", "Beta?", "Alpha?", "Alpha?"]
    assert result[3].id == "again"
    assert result[0].text == result[2].text == result[3].text
    assert [a.via for a in result] == ["single", "single", "cache", "cache"]
    assert result.stats.cache_hits == 2
    assert_answers_match(result)


async def test_two_isolation_keys_never_share_an_answer() -> None:
    service = _service()
    splitter_ = Splitter(policy=_policy(), model=MODEL)
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        a = await splitter_.aask_many(["Shared question?"], isolation_key="tenant-a")
        b = await splitter_.aask_many(["Shared question?"], isolation_key="tenant-b")
        a_again = await splitter_.aask_many(["Shared question?"], isolation_key="tenant-a")
        plain = await splitter_.aask_many(["Shared question?"])
    assert [r.user_text for r in service.log] == ["Shared question?"] * 3
    assert (a[0].via, b[0].via, a_again[0].via, plain[0].via) == (
        "single",
        "single",
        "cache",
        "single",
    )


async def test_aask_one_keeps_its_isolation_key_in_the_cache() -> None:
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        first = await splitter_.aask_one("Who?", isolation_key="u1")
        other = await splitter_.aask_one("Who?", isolation_key="u2")
        again = await splitter_.aask_one("Who?", isolation_key="u1")
    assert len(service.log) == 2
    assert (first.via, other.via, again.via) == ("single", "single", "cache")


async def test_a_changed_parameter_or_system_prompt_is_asked_again() -> None:
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        await splitter_.aask_many(["Param?"], temperature=0)
        await splitter_.aask_many(["Param?"], temperature=0.5)
        await splitter_.aask_many(["Param?"], temperature=0, system="Be terse.")
        hit = await splitter_.aask_many(["Param?"], temperature=0)
    assert len(service.log) == 3
    assert hit[0].via == "cache"


async def test_an_answer_cut_at_its_cap_is_not_kept() -> None:
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        cut = await splitter_.aask_many(["Long one [len=40]"], max_tokens=5)
        again = await splitter_.aask_many(["Long one [len=40]"], max_tokens=5)
    assert cut[0].finish_reason == "length"
    assert again[0].via != "cache"
    assert len(service.log) == 2


async def test_a_corrupt_cache_file_is_survived(tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    path.write_bytes(b"\x00garbage, not SQLite" * 64)
    service = _service()
    async with open_sim_client(service) as client:
        result = await Splitter(client, policy=_policy(path)).aask_many(
            ["One?", "Two?"], model=MODEL
        )
    assert result.ok
    assert_answers_match(result)
    assert len(list(tmp_path.glob("answers.sqlite.corrupt-*"))) == 1


async def test_corrupt_entries_are_asked_again_never_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "answers.sqlite"
    questions = ["First?", "Second?", "Third?"]
    service = _service()
    async with open_sim_client(service) as client:
        await Splitter(client, policy=_policy(path)).aask_many(questions, model=MODEL)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE answers SET entry = '{\"text\": 42}'")
        monkeypatch.setattr(cache_module, "_stores", {})
        before = len(service.log)
        again = await Splitter(client, policy=_policy(path)).aask_many(questions, model=MODEL)
    assert len(service.log) > before
    assert again.stats.cache_hits == 0
    assert again.ok
    assert_answers_match(again)


async def test_a_stream_gives_cached_answers_in_order() -> None:
    questions = [f"Streamed {i}?" for i in range(4)]
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        await splitter_.aask_many(questions[:2])  # two of the four are kept
        async with splitter_.astream(questions) as events:
            finals = [event.answer async for event in events if event.answer is not None]
            result = events.result
    assert [a.index for a in finals] == [0, 1, 2, 3]
    assert [a.via for a in finals][:2] == ["cache", "cache"]
    assert result is not None
    assert result.stats.cache_hits == 2
    assert_answers_match(result)


async def test_map_answers_a_second_pass_from_the_cache() -> None:
    questions = [f"Mapped {i}?" for i in range(30)]
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        async with splitter_.amap(questions, window=8) as answers:
            first = [a async for a in answers]
        sent = len(service.log)
        async with splitter_.amap(questions, window=8) as answers:
            second = [a async for a in answers]
    assert len(service.log) == sent
    assert [a.index for a in second] == list(range(30))
    assert [a.text for a in second] == [a.text for a in first]
    assert {a.via for a in second} == {"cache"}


async def test_dependent_questions_are_sent_as_they_are() -> None:
    questions = [Question(text="Base?", id="b"), Question(text="Use {answer:b}", depends_on=("b",))]
    service = _service()
    async with open_sim_client(service) as client:
        splitter_ = Splitter(client, policy=_policy(), model=MODEL)
        await splitter_.aask_many(questions)
        again = await splitter_.aask_many(questions)
    assert len(service.log) == 4
    assert again.ok
    assert again.stats.cache_hits == 0


def test_a_policy_takes_a_cache_config_and_refuses_anything_else() -> None:
    assert Policy(cache=Cache()).cache == Cache()
    with pytest.raises(ValueError, match="cache"):
        Policy(cache="yes please")  # type: ignore[arg-type]
