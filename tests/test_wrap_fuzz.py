"""``wrap(client)``, fuzzed: any compound prompt, any mix of unset and set parameters, any
system message, through a wrapped client over loopback HTTP to the simulator.

Properties: a request goes whole exactly when something in it must stay whole (a parameter
that changes what it means, a system message that dictates the format) or the rules find
one request in it; whole, the service gets it as sent, once; split, it gets one request per
part and the caller one reply with every part's answer, in the prompt's order, streamed or
not."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import splitter
from splitter import CompoundAnswer, Policy, decompose
from splitter._wrap._route import _KEEP_WHOLE, dictates_format
from splitter.sim import SimService, serve

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
MODEL = "gpt-4o-mini"
line = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=30
).filter(lambda t: t.strip() != "")
questions = st.lists(line.map(lambda t: t.strip() + "?"), min_size=2, max_size=4)
# How frameworks leave a parameter unset: openai's sentinels, or an empty list where the
# parameter is a list (None and {} are in the routing table test; the service may refuse
# them when the request goes whole, as it would unwrapped).
LISTS = {"tools", "functions", "modalities"}
unset_params = st.sampled_from(sorted(_KEEP_WHOLE | {"n", "stream_options"})).flatmap(
    lambda key: st.tuples(
        st.just(key),
        st.sampled_from([openai.NOT_GIVEN, openai.omit, *([[]] if key in LISTS else [])]),
    )
)
# Parameters that keep a prompt whole, as they would be sent set (the simulator takes each).
SET = {
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "response_format": {"type": "json_object"},
    "logprobs": True,
}
systems = st.one_of(
    st.none(),
    st.sampled_from(["Be concise.", "Answer in JSON.", "Respond with a list.", "Be kind."]),
    line,
)


@pytest.fixture(scope="module")
def wrapped() -> Any:
    service = SimService(MODEL, time_scale=0.001, default_answer_tokens=4)
    with (
        serve(service) as base_url,
        openai.OpenAI(base_url=base_url, api_key="sk-fuzz") as plain,
    ):
        yield service, splitter.wrap(plain, policy=Policy(strategy="fanout"))


@FUZZ
@given(
    questions,
    systems,
    st.lists(unset_params, max_size=6).map(dict),
    st.one_of(st.none(), st.sampled_from(sorted(SET))),
    st.booleans(),
)
@example(["00?", "0?", "00?"], None, {}, None, False)  # a repeated part: order by position
def test_a_wrapped_request_goes_whole_or_comes_back_as_its_parts_in_order(
    wrapped: Any,
    asked: list[str],
    system: str | None,
    unset: dict[str, Any],
    set_param: str | None,
    stream: bool,
) -> None:
    service, client = wrapped
    prompt = "\n".join(f"{k}. {q}" for k, q in enumerate(asked, 1))
    messages = [{"role": "user", "content": prompt}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    params = {**unset, **({set_param: SET[set_param]} if set_param else {})}
    if stream and set_param is None:
        params["stream"] = True
    whole = set_param is not None or dictates_format(system) or decompose(prompt).single
    sent = len(service.log)
    reply = client.chat.completions.create(model=MODEL, messages=messages, **params)
    if params.get("stream"):
        with reply as chunks:
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        details = reply.splitter_details if not whole else None
    else:
        text = reply.choices[0].message.content or ""
        details = getattr(reply, "splitter_details", None)
    new = service.log[sent:]
    event("whole" if whole else ("split, streamed" if params.get("stream") else "split"))
    if whole:
        assert details is None
        assert [r.user_text for r in new] == [prompt]
        return
    assert isinstance(details, CompoundAnswer)
    assert details.ok
    assert text == details.text
    assert len(new) == len(details.parts)
    at = 0
    for part in details.parts:  # each part's answer after the one before (parts may repeat)
        found = text.find(part.text or "\0", at)
        assert found >= 0, (part.text, text)
        at = found + len(part.text or "")
