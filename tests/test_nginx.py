"""A real nginx limit_req in front of the simulator (tests/nginx_support.py) really limits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import openai
import pytest
from nginx_support import NginxLimiter, nginx_binary

from splitter.sim import SimService, serve

pytestmark = pytest.mark.anyio

if nginx_binary() is None:
    if os.environ.get("CI"):
        pytest.fail("CI must have nginx (.ci/run installs nginx-light)", pytrace=False)
    pytest.skip("nginx is not installed (apt-get install nginx-light)", allow_module_level=True)


@pytest.fixture(name="nginx_url")
def nginx_url_fixture() -> Iterator[str]:
    """nginx ``limit_req rate=5r/s`` (no burst, nodelay, status 429) before a simulator."""
    with serve(SimService("instant", default_answer_tokens=3)) as upstream:
        port = int(upstream.rsplit(":", 1)[1].split("/", 1)[0])
        with NginxLimiter(port, rate=5, burst=0) as url:
            yield url


async def test_a_burst_meets_429s_without_headers(nginx_url: str) -> None:
    """Twenty requests at once through nginx get some 429s, with no rate-limit headers and
    no retry-after on any response, and nothing but 200s and 429s."""
    statuses: list[int] = []
    header_names: set[str] = set()

    async with openai.AsyncOpenAI(base_url=nginx_url, api_key="k", max_retries=0) as client:

        async def one() -> None:
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "Hi?"}]
                )
                response_headers = raw.headers
                statuses.append(raw.status_code)
            except openai.APIStatusError as exc:
                response_headers = exc.response.headers
                statuses.append(exc.status_code)
            header_names.update(name.lower() for name in response_headers)

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one)

    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(429) > 0, statuses
    assert not {n for n in header_names if n.startswith("x-ratelimit-")}, header_names
    assert not header_names & {"retry-after", "retry-after-ms"}, header_names


def test_config_is_nginx_limit_req(tmp_path: Path) -> None:
    """The config keeps every path inside the prefix and listens on loopback only."""
    limiter = NginxLimiter(8000, rate=0.5, burst=5)
    text = limiter.config(str(tmp_path))
    assert "rate=30r/m;" in text
    assert "limit_req zone=sim burst=5 nodelay;" in text
    assert "limit_req_status 429;" in text
    assert "listen 127.0.0.1:" in text
    assert "server 127.0.0.1:8000;" in text
    paths = [word.rstrip(";") for word in text.split() if word.startswith("/") and word != "/"]
    assert paths
    assert all(p.startswith(str(tmp_path)) for p in paths), paths


async def test_splitter_through_real_nginx_answers_every_question_with_its_own(
    nginx_url: str,
) -> None:
    """30 questions, one request each, from a cold endpoint through nginx at 5 r/s with no
    burst, no headers and no retry-after: every question gets its own answer, and the
    budget's search for the rate leaves most requests accepted (counts only: no timing)."""
    from splitter import Limits, Policy, Splitter
    from splitter._endpoint import forget_endpoints
    from splitter.sim import answer_text

    forget_endpoints()
    statuses: list[int] = []

    async def record(response: object) -> None:
        statuses.append(response.status_code)  # type: ignore[attr-defined]

    from splitter._compat import http_module

    http = http_module().AsyncClient(event_hooks={"response": [record]})
    questions = [f"Through nginx, question {i}?" for i in range(30)]
    async with openai.AsyncOpenAI(
        base_url=nginx_url, api_key="k", max_retries=0, http_client=http
    ) as client:
        policy = Policy(strategy="fanout", limits=Limits(max_concurrency=8))
        result = await Splitter(client, policy=policy).aask_many(questions, model="m")
    assert [a.text for a in result] == [answer_text(q, 3) for q in questions]
    assert statuses.count(200) == 30
    assert statuses.count(429) < statuses.count(200), statuses
