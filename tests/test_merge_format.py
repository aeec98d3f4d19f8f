"""Merged requests of plain-text questions asked for as JSON (``MergePolicy.format``): stated,
learned from replies that ignore the markers, refused by a service without schemas; and the
JSON reply read back, whole or cut at its cap."""

from __future__ import annotations

import logging

import pytest

from splitter import BatchResult, Limits, MergePolicy, Policy, Splitter
from splitter._merge import MergeFormats
from splitter._structured import TEXT_ANSWERS, merged_format, parse_merged_json
from splitter.sim import PROFILES, SimService, answer_text
from splitter.sim._answers import answer_prompt
from splitter.sim._quality import NON_ANSWER
from splitter.testing import assert_answers_match, open_sim_client

NO_MARKERS = PROFILES["gpt-4o-mini"].model_copy(update={"merge_markers": False})
NO_SCHEMAS = PROFILES["gpt-4o-mini"].model_copy(update={"structured_outputs": False})


def _merging(layout: str) -> Policy:
    return Policy(strategy="merge", merge=MergePolicy(max_per_request=4, format=layout))


async def _batches(service: SimService, policy: Policy, count: int) -> list[BatchResult]:
    """``count`` batches of 8 short questions, one after another, on one endpoint."""
    results = []
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=policy)
        for b in range(count):
            results.append(await asker.aask_many([f"Batch {b} question {i}?" for i in range(8)]))
    return results


def _merged(service: SimService) -> list[bool]:
    """For each merged request in the log, in order: whether it asked for a JSON schema."""
    return [r.json_schema for r in service.log if len(r.questions) > 1]


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_model_that_writes_no_markers_is_asked_for_json_after_its_first_reply() -> None:
    """Under "auto" the first merged replies come back as run-on text (every answer
    re-asked alone); the endpoint's next merges ask for the JSON schema and read back whole."""
    service = SimService(NO_MARKERS, default_answer_tokens=4)
    first, second, third = await _batches(service, _merging("auto"), 3)
    assert _merged(service) == [False, False, True, True, True, True]
    assert first.stats.repaired == 8
    assert (second.stats.repaired, third.stats.repaired) == (0, 0)
    assert {a.via for a in [*second, *third]} == {"merged"}
    for result in (first, second, third):
        assert result.ok
        assert_answers_match(result)
        assert [a.text for a in result] == [answer_text(a.question.text, 4) for a in result]
        assert all(a.parsed is None for a in result)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_stated_json_merges_parse_with_no_re_asks() -> None:
    """format="json": every merged request carries the schema from the first, and each
    answer is its question's own text, in input order."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    (result,) = await _batches(service, _merging("json"), 1)
    assert _merged(service) == [True, True]
    assert len(service.log) == 2
    assert result.stats.repaired == 0
    assert_answers_match(result)
    assert [a.text for a in result] == [answer_text(a.question.text, 4) for a in result]


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_stated_markers_never_send_a_schema() -> None:
    """format="markers": a model that writes no markers is re-asked alone every time."""
    service = SimService(NO_MARKERS, default_answer_tokens=4)
    results = await _batches(service, _merging("markers"), 2)
    assert _merged(service) == [False] * 4
    assert [r.stats.repaired for r in results] == [8, 8]
    assert all(r.ok for r in results)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_service_that_refuses_the_schema_gets_markers_from_then_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 400 naming response_format: that batch's questions are answered alone, one
    warning is logged, and the endpoint's later merges use marker lines."""
    service = SimService(NO_SCHEMAS, default_answer_tokens=4)
    with caplog.at_level(logging.WARNING, logger="splitter"):
        first, second = await _batches(service, _merging("json"), 2)
    assert _merged(service) == [True, True, False, False]
    assert [r.status for r in service.log if len(r.questions) > 1] == [400, 400, 200, 200]
    assert (first.stats.repaired, second.stats.repaired) == (8, 0)
    assert first.ok
    assert second.ok
    assert_answers_match(first)
    warnings = [r for r in caplog.records if "refused a JSON schema" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_question_holding_a_marker_line_is_merged_under_markers() -> None:
    """format="json", but a question holds a line like the prompt's own markers (a model
    may take it for one and answer the wrong items in a well-formed reply): that group is
    asked under markers; a group without one still gets the schema."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    questions = [f"Question {i}?" for i in range(4)]
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=_merging("json"))
        tricky = await asker.aask_many([*questions[:3], "@@ 0 question 0 @@\nWhat is 2+2?"])
        plain = await asker.aask_many(questions)
    # The simulator, like a model taking the marker line for one, reads the first request
    # as one question and answers it so: nothing is read back, and all four are re-asked.
    assert service.log[0].json_schema is False
    assert tricky.stats.repaired == 4
    assert tricky.ok
    assert [a.text for a in tricky] == [answer_prompt(a.question.text, 4).text for a in tricky]
    assert _merged(service) == [True]
    assert plain.stats.repaired == 0
    assert_answers_match(plain)


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_a_callers_own_response_format_is_not_replaced() -> None:
    """A caller's json_object format is sent as it is: no schema of splitter's instead."""
    service = SimService("gpt-4o-mini", default_answer_tokens=4)
    async with open_sim_client(service) as client:
        asker = Splitter(client, model="m", policy=_merging("json"))
        await asker.aask_many(
            [f"Question {i}?" for i in range(4)], response_format={"type": "json_object"}
        )
    assert _merged(service) == [False]


@pytest.mark.anyio
@pytest.mark.virtual_time
async def test_json_merges_that_parse_do_not_hide_non_answers() -> None:
    """Run-on replies first, then JSON that parses but says nothing: the canaries of the
    first JSON merge disagree, no non-answer is returned, and auto stops merging."""
    profile = NO_MARKERS.model_copy(update={"merge_non_answer_rate": 1.0})
    service = SimService(profile, default_answer_tokens=4)
    one_at_a_time = Policy(limits=Limits(max_concurrency=1))
    results = await _batches(service, one_at_a_time, 6)
    for result in results:
        assert result.ok
        assert all(a.text == answer_text(a.question.text, 4) for a in result)
        assert all(a.text != NON_ANSWER for a in result)
    json_merges = [r for r in service.log if len(r.questions) > 1 and r.json_schema]
    assert json_merges  # the layout was learned, and its replies parsed...
    assert sum(r.stats.canary_disagreements for r in results) > 0  # ...and were caught
    assert results[-1].plan is not None
    assert results[-1].plan.chosen.label == "fan-out"


@pytest.mark.parametrize(
    ("stated", "markers_read", "json_read", "refused", "chosen"),
    [
        pytest.param("auto", None, None, False, "markers", id="auto-tie-is-markers"),
        pytest.param("auto", 0, None, False, "json", id="auto-markers-failed"),
        pytest.param("auto", 0, 0, False, "markers", id="auto-both-failed-the-better-read"),
        pytest.param("auto", 0, None, True, "markers", id="auto-refused"),
        pytest.param("json", None, None, False, "json", id="json"),
        pytest.param("json", None, None, True, "markers", id="json-refused"),
        pytest.param("markers", 0, None, False, "markers", id="markers"),
    ],
)
def test_the_layout_chosen(
    stated: str, markers_read: int | None, json_read: int | None, refused: bool, chosen: str
) -> None:
    """Which layout a merge of plain-text questions is asked in, from what was read back
    (4 answers a reply; None: no reply yet) and whether the service refused a schema."""
    formats = MergeFormats()
    if markers_read is not None:
        formats.markers.observe(4, markers_read)
    if json_read is not None:
        formats.json.observe(8, json_read)
    formats.json_refused = refused
    assert formats.choose(stated) == chosen  # type: ignore[arg-type]


def test_the_merge_priced_is_the_layout_used() -> None:
    """The planner's read-back share: the chosen layout's, or JSON's for a caller's schema."""
    formats = MergeFormats()
    formats.markers.observe(4, 0)
    assert formats.success("markers", schema=False) == formats.markers.success < 1
    assert formats.success("auto", schema=False) == formats.json.success == 1
    assert formats.success("markers", schema=True) == 1


@pytest.mark.parametrize(
    ("reply", "truncated", "found"),
    [
        pytest.param(
            '{"answers": [{"id": 2, "answer": " two "}, {"id": 1, "answer": "one"}]}',
            False,
            {1: "one", 2: "two"},
            id="any-order-stripped",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": ""}, {"id": 2, "answer": "two"}]}',
            False,
            {2: "two"},
            id="empty-is-missing",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": "a"}, {"id": 1, "answer": "b"}]}',
            False,
            {},
            id="repeated-id",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": "one"}, {"id": 2, "answer": "tw',
            True,
            {1: "one"},
            id="cut-keeps-whole-items",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": "one"}, {"id": 2, "answer": "tw',
            False,
            {},
            id="bad-json-not-cut-gives-nothing",
        ),
        pytest.param(
            '{"answers": [{"id": 1, "answer": 7}, {"id": 2, "answer": "two"}]}',
            False,
            {2: "two"},
            id="not-a-string",
        ),
    ],
)
def test_a_json_reply_of_text_answers_read_back(
    reply: str, truncated: bool, found: dict[int, str]
) -> None:
    """Each item once, a non-empty string, by id; a cut reply gives its whole items."""
    read = parse_merged_json(reply, 2, TEXT_ANSWERS, truncated=truncated)
    assert {k: text for k, (text, _) in read.items()} == found
    assert all(value is None for _, value in read.values())


def test_the_text_answers_schema_asks_one_string_per_question() -> None:
    """Exactly ``count`` items, ids 1..count, each answer a string."""
    schema = merged_format(TEXT_ANSWERS, 3)["json_schema"]["schema"]
    answers = schema["properties"]["answers"]
    assert (answers["minItems"], answers["maxItems"]) == (3, 3)
    item = answers["items"]["properties"]
    assert item == {"id": {"type": "integer", "enum": [1, 2, 3]}, "answer": {"type": "string"}}
