"""What the framework tests share: the bundled simulator on a real loopback port, and a
``wrap(AsyncOpenAI(base_url=...))`` client for it, which each framework is given as its
openai client. A framework that is not installed, or whose own openai pin excludes the
installed openai, is skipped with the reason (``.ci/run`` installs the ``frameworks`` extra)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import openai
import pytest
from packaging.requirements import Requirement

import splitter
from splitter.sim import RequestRecord, SimService, answer_tag, serve

# Two requests in one prompt, the second joined by "And": the framework tests' compound prompt.
FIRST = "What is the capital of France?"
SECOND = "And what is 2+2?"
COMPOUND = f"{FIRST} {SECOND}"
MODEL = "gpt-4o-mini"


def require(distribution: str, module: str, *, extra: str = "") -> None:
    """Skip unless ``distribution`` is installed and its openai pin (with ``extra``, the
    extra that pulls openai in) admits the installed openai."""
    pytest.importorskip(module, reason=f"needs {distribution}: pip install -e '.[frameworks]'")
    pin = excluding_pin(importlib.metadata.requires(distribution) or [], openai.__version__, extra)
    if pin is not None:
        version = importlib.metadata.version(distribution)
        pytest.skip(
            f"{distribution} {version} requires {pin}; openai {openai.__version__} is installed"
        )


def excluding_pin(requirements: list[str], installed: str, extra: str = "") -> str | None:
    """The openai requirement among ``requirements`` (a distribution's, with ``extra``
    chosen) that ``installed`` does not meet, or None."""
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name != "openai":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            return str(requirement.specifier)
    return None


@dataclass
class Sim:
    """The simulated service, its HTTP base URL, and a wrapped client for it."""

    service: SimService
    base_url: str
    opened: list[openai.AsyncOpenAI | openai.OpenAI] = field(default_factory=list)

    def client(self) -> openai.AsyncOpenAI:
        """A ``wrap(AsyncOpenAI(base_url=...))`` client, closed at the test's end."""
        client = splitter.wrap(openai.AsyncOpenAI(base_url=self.base_url, api_key="sk-sim"))
        self.opened.append(client)
        return client

    def sync_client(self) -> openai.OpenAI:
        client = splitter.wrap(openai.OpenAI(base_url=self.base_url, api_key="sk-sim"))
        self.opened.append(client)
        return client

    async def close(self) -> None:
        for client in self.opened:
            if isinstance(client, openai.AsyncOpenAI):
                await client.close()
            else:
                client.close()

    @property
    def chats(self) -> list[RequestRecord]:
        return [r for r in self.service.log if r.path.endswith("/chat/completions")]


@contextmanager
def running_sim() -> Iterator[Sim]:
    """A fresh simulated service served on a free loopback port."""
    service = SimService("instant")
    with serve(service) as base_url:
        yield Sim(service, base_url)


def assert_split_and_joined(sim: Sim, text: str) -> None:
    """The prompt went out as its two parts, one request each, and the framework got one
    answer holding both parts' answers, in the prompt's order."""
    assert sorted(r.user_text for r in sim.chats) == sorted([FIRST, SECOND])
    first, second = text.find(answer_tag(FIRST)), text.find(answer_tag(SECOND))
    assert 0 <= first < second, text
    assert text.startswith("1. ")
    assert "\n\n2. " in text


def assert_sent_whole(sim: Sim) -> None:
    """No request carried a part: every one held the whole prompt."""
    assert sim.chats
    assert all(COMPOUND in r.user_text or not r.user_text for r in sim.chats), [
        r.user_text for r in sim.chats
    ]
