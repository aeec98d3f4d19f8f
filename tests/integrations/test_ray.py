"""Ray Data over splitter: ``map_batches(AskBatches)`` on a local Ray instance, a real
redis-server for the shared budget and the simulator on a real loopback port.

Skipped when Ray is not installed (``.ci/run`` installs it in the openai 3.x leg)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from splitter import InvalidInputError, Limits, Policy, SharedBudget
from splitter.integrations.ray import AskBatches
from splitter.sim import RequestRecord, SimService, answer_tag, serve

ray = pytest.importorskip("ray", reason="needs Ray: pip install -e '.[ray]'")
ray_data = pytest.importorskip("ray.data", reason="needs Ray Data: pip install -e '.[ray]'")
pandas = pytest.importorskip("pandas", reason="needs Ray Data: pip install -e '.[ray]'")

from budget.redis_support import RedisServer  # noqa: E402  (after the skip: needs no Ray)

# Ray's own processes (raylet, workers, a restarted actor) share the machine: beside two busy
# loops on 2 cores these tests took 85-174 s each (14-15 s alone), past the suite's 120 s.
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [f"Question {i}: what is {i} squared?" for i in range(200)]
RPM = 1200  # the budget's stated limit: 20 requests a second, shared by every actor
BURST = 0.01  # of a minute's budget at once: 12 requests
WINDOW = 3.0  # seconds: the window the log is counted in
ALLOWED = RPM / 60 * WINDOW + RPM * BURST  # 72 in any 3 s window; two private budgets: 144


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray instance on 2 CPUs: 2 actors at once."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # Ray Data's DataContext() sets each of its fields through a __setattr__ that warns
    # about the deprecated ones among them (Ray 2.60), whatever the caller configured; the
    # one context of this process is made here, its warnings unheard.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray_data.DataContext.get_current()
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A fresh redis-server on a free loopback port; in CI its absence is a failure."""
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; .ci/run installs it")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def sim() -> Iterator[tuple[SimService, str]]:
    """The simulator, unlimited: only the shared budget holds the rate."""
    service = SimService("instant")
    with serve(service) as base_url:
        yield service, base_url


def _policy(redis_url: str) -> Policy:
    shared = SharedBudget(url=redis_url, namespace="ray-test")
    return Policy(
        strategy="fanout", limits=Limits(rpm=RPM, burst=BURST, max_concurrency=16, shared=shared)
    )


def _ask(
    udf: type[AskBatches], base_url: str, redis_url: str, **kwargs: Any
) -> list[dict[str, Any]]:
    """The 200 questions through ``udf`` on a pool of 2 actors, in batches of 20."""
    client = functools.partial(openai.OpenAI, base_url=base_url, api_key="sk-ray")
    dataset = ray_data.from_items([{"question": q} for q in QUESTIONS])
    answered = dataset.map_batches(
        udf,
        fn_constructor_kwargs={
            "model": "m",
            "policy": _policy(redis_url),
            "client": client,
            **kwargs,
        },
        compute=ray_data.ActorPoolStrategy(size=2),
        batch_size=20,
    )
    rows: list[dict[str, Any]] = answered.take_all()
    return rows


def _assert_each_answered_once_with_its_own(rows: list[dict[str, Any]]) -> None:
    assert sorted(r["question"] for r in rows) == sorted(QUESTIONS)
    assert [r for r in rows if r["error"] is not None] == []
    wrong = [r["question"] for r in rows if not r["answer"].startswith(answer_tag(r["question"]))]
    assert wrong == []


def _answered_by_service(log: list[RequestRecord]) -> Counter[str]:
    """How many times the service answered each question."""
    return Counter(q for r in log if r.status == 200 for q in r.questions)


def _busiest_window(log: list[RequestRecord]) -> int:
    """The most requests that arrived in any ``WINDOW`` seconds (429s included)."""
    arrivals = sorted(r.arrived for r in log)
    return max(
        sum(1 for t in arrivals[i:] if t < start + WINDOW) for i, start in enumerate(arrivals)
    )


def test_a_pool_of_actors_answers_every_question_once_on_one_budget(
    local_ray: None, redis_url: str, sim: tuple[SimService, str]
) -> None:
    """200 questions over 2 actors: every question answered exactly once with its own
    answer, both actors did work, and the requests the service saw in any 3 s window
    stayed within what the one shared budget allows (two private budgets would send
    twice that)."""
    service, base_url = sim

    class WithPid(AskBatches):  # made here: Ray ships it to the actors by value
        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            out = super().__call__(batch)
            out["pid"] = [os.getpid()] * len(out["question"])
            return out

    rows = _ask(WithPid, base_url, redis_url)
    _assert_each_answered_once_with_its_own(rows)
    assert len({r["pid"] for r in rows}) == 2
    assert _answered_by_service(service.log) == dict.fromkeys(QUESTIONS, 1)
    assert len(service.log) == 200  # one request each: nothing was refused or retried
    busiest = _busiest_window(service.log)
    assert busiest <= ALLOWED * 1.2, f"{busiest} requests in {WINDOW} s; allowed {ALLOWED:.0f}"


def test_an_actor_that_dies_mid_batch_loses_no_question(
    local_ray: None, redis_url: str, sim: tuple[SimService, str], tmp_path: Path
) -> None:
    """One actor dies after its first batch was sent and before it returned: Ray restarts
    it and runs the batch again, so every row comes back once with its own answer; the
    service answered that batch's questions twice (at-least-once at the service)."""
    service, base_url = sim
    marker = str(tmp_path / "died")

    class DiesOnce(AskBatches):
        def __init__(self, *, marker: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.marker = marker

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            out = super().__call__(batch)
            try:
                died = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return out
            os.write(died, str(len(out["question"])).encode())
            os.close(died)
            os._exit(1)  # the first batch anywhere: answered, then lost with its actor

    rows = _ask(DiesOnce, base_url, redis_url, marker=marker)
    _assert_each_answered_once_with_its_own(rows)
    by_service = _answered_by_service(service.log)
    assert set(by_service) == set(QUESTIONS)
    lost = int(Path(marker).read_text())
    assert lost > 0
    assert sorted(Counter(by_service.values()).items()) == [(1, 200 - lost), (2, lost)]


@pytest.mark.parametrize("batch_format", ["numpy", "pandas"])
def test_a_question_splitter_refuses_fails_alone(
    redis_url: str, sim: tuple[SimService, str], batch_format: str
) -> None:
    """Rows whose question is not a question get an error; the rest of the batch is
    answered (called as Ray would, without Ray, on a dict of columns or a DataFrame)."""
    _, base_url = sim
    ask = AskBatches(
        model="m",
        policy=_policy(redis_url),
        client=functools.partial(openai.OpenAI, base_url=base_url, api_key="sk-ray"),
    )
    columns = {"question": ["What is 1 + 1?", 7, "What is 2 + 2?", ""], "id": [1, 2, 3, 4]}
    out = ask(columns if batch_format == "numpy" else pandas.DataFrame(columns))
    ask.close()
    assert list(out["id"]) == [1, 2, 3, 4]
    assert out["answer"][0].startswith(answer_tag("What is 1 + 1?"))
    assert out["answer"][2].startswith(answer_tag("What is 2 + 2?"))
    assert [out["answer"][1], out["answer"][3]] == [None, None]
    assert [e is None for e in out["error"]] == [True, False, True, False]
    assert out["error"][1].startswith("InvalidInputError: questions[1]")


def test_a_pool_without_a_shared_budget_is_refused() -> None:
    """N actors on N private budgets would send N times the limit: refused at once."""
    with pytest.raises(InvalidInputError, match="share"):
        AskBatches(model="m", policy=Policy(), client=lambda: openai.OpenAI(api_key="sk-x"))


def test_the_docs_recipe_runs(local_ray: None, redis_url: str, sim: tuple[SimService, str]) -> None:
    """The recipe in docs/ray.md (the block titled ray_recipe.py) runs as written and
    answers its questions."""
    service, base_url = sim
    doc = (ROOT / "docs" / "ray.md").read_text()
    (recipe,) = re.findall(r'^```python title="ray_recipe.py"\n(.*?)^```', doc, re.S | re.M)
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-ray", "REDIS_URL": redis_url}
    namespace: dict[str, Any] = {"__name__": "ray_recipe"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        exec(compile(recipe, "docs/ray.md", "exec"), namespace)
    rows = namespace["answered"].take_all()
    assert sorted(r["id"] for r in rows) == list(range(100))
    assert [r["error"] for r in rows] == [None] * 100
    assert all(r["answer"].startswith(answer_tag(r["question"])) for r in rows)
    assert _answered_by_service(service.log) == {r["question"]: 1 for r in rows}
