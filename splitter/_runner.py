"""Planning and running one batch on a ``Splitter``'s client: the endpoint it talks to
(one per base URL and model), the plan of each wave (``_estimate`` then ``_planner``), the
executor wired once per call, dependency waves (``_waves``), and ``amap``'s batches.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import openai

from ._cache import store_for
from ._cache_run import RunMisses, run_cached
from ._dag import Graph
from ._endpoint import Endpoint, endpoint_for
from ._estimate import load_encoder, plan_items, preamble_tokens
from ._events import Emitter, EventHook
from ._execute import Executor
from ._map import RunBatch
from ._openai import OpenAIBackend
from ._planner import Plan, plan_wave
from ._policy import Policy
from ._pricing import price_for
from ._progress import Progress
from ._questions import Answer, BatchResult, Question
from ._request_spec import RequestSpec
from ._stream import Relay
from ._waves import run_graph

__all__ = ["Client", "Runner", "Settings", "base_url_of"]

Client = openai.AsyncOpenAI | openai.OpenAI


class Settings(Protocol):
    """What is read from the ``Splitter`` at each call (each may be reassigned)."""

    policy: Policy
    model: str | None
    on_event: EventHook | None


class Runner:
    """One client's batches: its endpoints' state, planning and running."""

    def __init__(self, client: Client | None, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.endpoints: dict[tuple[str, str], Endpoint] = {}

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    def endpoint(self, client: Client | None, model: str) -> Endpoint:
        base_url = base_url_of(client)
        key = (base_url, model)
        if key not in self.endpoints:
            api_key = client.api_key if client is not None else os.environ.get("OPENAI_API_KEY")
            self.endpoints[key] = endpoint_for(
                self.policy, base_url=base_url, api_key=api_key, model=model
            )
        return self.endpoints[key]

    def plan(
        self,
        items: list[Question],
        spec: RequestSpec,
        endpoint: Endpoint,
        indexes: list[int] | None = None,
        *,
        first_alone: bool = False,
    ) -> Plan:
        """Plan ``items``; ``first_alone`` keeps the first of them in a request of its own
        (it is streamed live while the rest wait their turn)."""
        planned = plan_items(items, spec, endpoint.lengths, indexes)
        return plan_wave(
            planned,
            estimate=endpoint.service.estimate(),
            budget=endpoint.budget_snapshot(),
            concurrency=endpoint.concurrency.current,
            policy=self.policy,
            preamble_tokens=preamble_tokens(spec),
            alone=planned[0].index if first_alone else None,
            merge_success=endpoint.merges.success(
                self.policy.merge.format, schema=spec.structured is not None
            ),
            agreement=endpoint.canaries.agreement,
            canaries=lambda merged, requests: endpoint.canaries.due_count(
                self.policy.merge, merged, requests
            ),
        )

    async def run(
        self,
        items: list[Question],
        deps: Graph,
        spec: RequestSpec,
        events: Emitter,
        relay: Relay | None = None,
    ) -> BatchResult:
        """Plan and send ``items`` (in dependency waves if any depends on another)."""
        return self._priced(await self._run(items, deps, spec, events, relay), spec.model)

    def _priced(self, result: BatchResult, model: str) -> BatchResult:
        """``result`` with its cost, where the policy prices ``model``."""
        price = price_for(self.policy.pricing, model)
        if price is None:
            return result
        stats = dataclasses.replace(result.stats, cost=result.usage.cost(price))
        return dataclasses.replace(result, stats=stats)

    async def _run(
        self,
        items: list[Question],
        deps: Graph,
        spec: RequestSpec,
        events: Emitter,
        relay: Relay | None,
    ) -> BatchResult:
        await load_encoder(spec.model)  # the first plan's tokenizer, off the event loop
        async with self._client_for() as client:
            endpoint, executor = self._executor(client, spec.model)
            to_relay = _answers_to(relay, events)
            live = relay is not None and relay.ordered
            if not any(deps):

                async def send(
                    wave: list[Question], sent: list[int], told: Callable[[Answer], None] | None
                ) -> BatchResult:
                    plan = self.plan(wave, spec, endpoint, first_alone=live)
                    events.planned(plan, 0, sent)
                    return await executor.run(
                        wave, plan, spec, on_answer=told, relay=relay, positions=sent, events=events
                    )

                return await self._at_once(client, items, spec, send, to_relay)

            def plan_wave(wave: list[Question]) -> Plan:
                return self.plan(wave, spec, endpoint, first_alone=live)

            async def execute(
                wave: list[Question],
                wave_plan: Plan,
                on_answer: Callable[[Answer], None],
                positions: list[int],
            ) -> BatchResult:
                return await executor.run(
                    wave,
                    wave_plan,
                    spec,
                    on_answer=on_answer,
                    relay=relay,
                    positions=positions,
                    events=events,
                )

            return await run_graph(
                items,
                deps,
                plan=plan_wave,
                execute=execute,
                deadline=self.policy.deadline,
                on_answer=to_relay,
                events=events,
            )

    @asynccontextmanager
    async def batches(
        self,
        spec: RequestSpec,
        hook: EventHook | None = None,
        bar: Progress | None = None,
        *,
        own_bar: bool = False,
    ) -> AsyncIterator[RunBatch]:
        """How ``amap`` sends each batch: planned like ``aask_many``'s questions, every
        batch under one concurrency limit, its events told by input position. A bar made
        for this map (``own_bar``) is closed with it."""
        async with self._client_for() as client:
            endpoint, executor = self._executor(client, spec.model)

            async def run_batch(
                items: list[Question], start: int, on_answer: Callable[[Answer], None]
            ) -> BatchResult:
                positions = range(start, start + len(items))
                events = Emitter((self.settings.on_event, hook, bar))
                events.started(len(items), spec.model)

                def arrive(answer: Answer) -> None:
                    on_answer(answer)
                    events.answer(answer, positions[answer.index])

                async def send(
                    wave: list[Question], sent: list[int], told: Callable[[Answer], None] | None
                ) -> BatchResult:
                    plan = self.plan(wave, spec, endpoint)
                    where = [positions[i] for i in sent]
                    events.planned(plan, 0, where)
                    return await executor.run(
                        wave, plan, spec, on_answer=told, positions=where, events=events
                    )

                result = await self._at_once(client, items, spec, send, arrive)
                result = self._priced(result, spec.model)
                events.finished(result, positions)
                return result

            try:
                yield run_batch
            finally:
                if own_bar and bar is not None:
                    bar.close()

    async def _at_once(
        self,
        client: Client,
        items: list[Question],
        spec: RequestSpec,
        send: RunMisses,
        on_answer: Callable[[Answer], None] | None,
    ) -> BatchResult:
        """Questions that need no other's answer: sent as one planned batch, or through the
        response cache when the policy has one (which sends only what it cannot give)."""
        cache = self.policy.cache
        if cache is None:
            return await send(items, list(range(len(items))), on_answer)
        store, base_url = store_for(cache), base_url_of(client)
        return await run_cached(
            items, spec, store=store, base_url=base_url, run=send, on_answer=on_answer
        )

    def _executor(self, client: Client, model: str) -> tuple[Endpoint, Executor]:
        endpoint = self.endpoint(client, model)
        policy = self.policy
        backend = OpenAIBackend(
            client,
            max_threads=policy.limits.max_concurrency,
            api=policy.api,
            readings=endpoint.service.engine,
        )
        return endpoint, Executor(backend, self.policy, endpoint)

    @asynccontextmanager
    async def _client_for(self) -> AsyncIterator[Client]:
        """The splitter's client, or one from the ``OPENAI_*`` variables while it is used."""
        if self.client is not None:
            yield self.client
            return
        async with openai.AsyncOpenAI() as client:
            yield client


def _answers_to(relay: Relay | None, events: Emitter) -> Callable[[Answer], None] | None:
    """Where each final answer goes as it is known: the stream's relay and the events."""
    if not events.detailed:
        return relay.answer if relay is not None else None
    if relay is None:
        return events.answer
    to_relay = relay.answer

    def both(answer: Answer) -> None:
        to_relay(answer)
        events.answer(answer)

    return both


def base_url_of(client: Client | None) -> str:
    if client is not None:
        return str(client.base_url)
    # What openai.AsyncOpenAI() will use when splitter builds the client itself.
    return os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
