"""A ``Splitter``'s session: each call of the front door, from what the user passed to
its result — whole (``aask_many``), streamed (``astream``), in windows (``amap``), joined
with concurrent single calls (``aask_one``), or a compound prompt (``aask``).

The front door (``_splitter.py``) checks nothing and runs nothing itself: it hands each call
here, where the input is checked (``_inputs``), a prompt taken apart (``_compound``), the
call's events and progress bar set up, and the batch handed to the ``Runner``
(``_runner``: client, endpoints, plan, execute).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

from ._aggregate import Aggregator, BatchKey, batch_key
from ._compound import Parts, find_parts
from ._dag import build_graph
from ._decompose import Decomposition
from ._endpoint import Endpoint
from ._events import Emitter, check_hook
from ._exceptions import InvalidInputError
from ._inputs import (
    QuestionLike,
    check_context,
    check_isolation_key,
    check_map_input,
    check_params,
    choose_model,
    map_item,
    normalize_questions,
)
from ._map import MappedAnswers
from ._meter import InFlightMeter
from ._planner import Plan
from ._policy import Policy
from ._progress import progress_bar
from ._questions import Answer, BatchResult, CompoundAnswer, Question, check_sendable
from ._request_spec import RequestSpec, sends_cache_key
from ._responses_api import check_keywords
from ._runner import Client, Runner, Settings, base_url_of
from ._service_model import ServiceModel
from ._stream import AnswerStream, Relay
from ._sync import call_sync

__all__ = ["Session"]

_NO_HOOKS: tuple[object, object] = (None, False)  # a call's on_event and progress: none


class Session:
    """A Splitter's calls, checked and run on its ``Runner``."""

    def __init__(self, client: Client | None, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.runner = runner = Runner(client, settings)
        self.endpoints = runner.endpoints
        self.endpoint = runner.endpoint
        self.plan = runner.plan
        self.run = runner.run
        self._aggregator: Aggregator | None = None  # made by the first aask_one that needs it

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    def model(self, model: str | None) -> str:
        return choose_model(model, self.settings.model)

    def spec(
        self,
        model: str,
        system: str | None,
        params: dict[str, Any],
        isolation_key: str | None = None,
        context: str | None = None,
    ) -> RequestSpec:
        """What every request of a call is sent with, checked."""
        check_sendable(system, "system")
        check_isolation_key(isolation_key)
        context = check_context(context)
        if self.policy.api == "responses":
            check_keywords(params)
        params = check_params(params, self.policy)
        keyed = sends_cache_key(self.policy.prompt_cache_key, base_url_of(self.client))
        return RequestSpec(model, system, params, isolation_key, context=context, cache_keyed=keyed)

    async def ask_many(
        self,
        questions: Iterable[QuestionLike],
        model: str | None,
        system: str | None,
        params: dict[str, Any],
        hooks: tuple[object, object],
        raise_on_error: bool = False,
        isolation_key: str | None = None,
        context: str | None = None,
    ) -> BatchResult:
        """``Splitter.aask_many``; ``hooks`` are the call's ``on_event`` and ``progress``."""
        model = self.model(model)
        items = normalize_questions(questions, policy=self.policy, model=model)
        deps = build_graph(items)
        spec = self.spec(model, system, params, isolation_key, context)
        on_event, progress = hooks
        hook = check_hook(on_event)
        bar = progress_bar(progress)
        try:
            events = Emitter((self.settings.on_event, hook, bar))
            events.started(len(items), model)
            result = await self.run(items, deps, spec, events) if items else BatchResult(())
            events.finished(result)
        finally:
            if progress is True and bar is not None:
                bar.close()
        return result.raise_for_errors() if raise_on_error else result

    def stream(
        self,
        questions: Iterable[QuestionLike],
        model: str | None,
        system: str | None,
        params: dict[str, Any],
        ordered: bool,
        context: str | None = None,
    ) -> AnswerStream:
        """``Splitter.astream``: bad input raises here, before anything is sent."""
        model = self.model(model)
        items = normalize_questions(questions, policy=self.policy, model=model)
        spec = self.spec(model, system, params, context=context)
        deps = build_graph(items)

        async def produce(relay: Relay) -> BatchResult:
            events = Emitter((self.settings.on_event,))
            events.started(len(items), spec.model)
            result = await self.run(items, deps, spec, events, relay) if items else BatchResult(())
            events.finished(result)
            return result

        return AnswerStream(len(items), produce, ordered=ordered)

    def map(
        self,
        questions: Iterable[QuestionLike] | AsyncIterable[QuestionLike],
        model: str | None,
        system: str | None,
        params: dict[str, Any],
        window: int,
        ordered: bool,
        hooks: tuple[object, object],
        context: str | None = None,
    ) -> MappedAnswers:
        """``Splitter.amap``; ``hooks`` are the call's ``on_event`` and ``progress``."""
        check_map_input(questions, window)
        model = self.model(model)
        spec = self.spec(model, system, params, context=context)
        on_event, progress = hooks
        hook = check_hook(on_event)
        bar = progress_bar(progress)

        def check(index: int, item: object) -> Question:
            return map_item(index, item, policy=self.policy, model=model)

        batches = self.runner.batches(spec, hook, bar, own_bar=progress is True)
        return MappedAnswers(
            questions, window=window, ordered=ordered, check=check, batches=batches
        )

    def plan_of(
        self,
        questions: Iterable[QuestionLike],
        model: str | None,
        system: str | None,
        params: dict[str, Any],
        context: str | None = None,
    ) -> Plan:
        """``Splitter.plan``: the first wave's plan, indexed by position in ``questions``."""
        model = self.model(model)
        items = normalize_questions(questions, policy=self.policy, model=model)
        if not items:
            raise InvalidInputError("there is nothing to plan: the list of questions is empty")
        deps = build_graph(items)
        spec = self.spec(model, system, params, context=context)
        first = [i for i, needs in enumerate(deps) if not needs]
        endpoint = self.endpoint(self.client, model)
        return self.plan([items[i] for i in first], spec, endpoint, first)

    async def ask_one(
        self,
        question: QuestionLike,
        isolation_key: str | None,
        model: str | None,
        system: str | None,
        params: dict[str, Any],
    ) -> Answer:
        """``Splitter.aask_one``: alone, or in the batch of concurrent calls it may join."""
        joined = self.joining(question, isolation_key, model, system, params)
        if joined is None:
            alone = await self.ask_many(
                [question], model, system, params, _NO_HOOKS, False, isolation_key
            )
            return alone[0]
        item, key, window = joined

        async def run(batch: list[Question]) -> BatchResult:
            ask = self.ask_many
            return await ask(
                batch, key.model, system, dict(params), _NO_HOOKS, False, key.isolation_key
            )

        return await self.aggregator().aanswer(item, key, window, run)

    def ask_one_sync(
        self,
        question: QuestionLike,
        isolation_key: str | None,
        model: str | None,
        system: str | None,
        params: dict[str, Any],
    ) -> Answer:
        """``Splitter.ask_one``: sync calls join sync calls from any thread (never async
        ones); the first caller's thread waits the window and asks the batch."""
        joined = self.joining(question, isolation_key, model, system, params)
        if joined is None:
            return call_sync(self.ask_one, question, isolation_key, model, system, params)
        item, key, window = joined

        def run(batch: list[Question]) -> BatchResult:
            ask, iso = self.ask_many, key.isolation_key
            return call_sync(ask, batch, key.model, system, dict(params), _NO_HOOKS, False, iso)

        return self.aggregator().answer(item, key, window, run)

    async def answer_prompt(
        self,
        prompt: str,
        found: Decomposition | None,
        model: str | None,
        system: str | None,
        raise_on_error: bool,
        params: dict[str, Any],
    ) -> CompoundAnswer:
        """``Splitter.aask``, for a prompt that may already be taken apart by the rules
        (``found``: the drop-in wrapper decides on it before splitting)."""
        model = self.model(model)
        parts = await self.parts(prompt, model, found)
        questions = parts.questions
        result = await self.ask_many(questions, model, system, params, _NO_HOOKS, raise_on_error)
        return parts.answer(result)

    async def parts(self, prompt: str, model: str, found: Decomposition | None = None) -> Parts:
        """``prompt``'s parts as questions (see ``_compound.find_parts``); a model's
        decomposition is asked as a batch of this session, with its events."""

        async def ask(text: str, decomposer: str) -> BatchResult:
            return await self.ask_many([text], decomposer, None, {"temperature": 0}, _NO_HOOKS)

        def endpoint(model: str) -> Endpoint:
            return self.endpoint(self.client, model)

        return await find_parts(
            prompt, model, found, policy=self.policy, endpoint=endpoint, ask=ask
        )

    def joining(
        self,
        question: QuestionLike,
        isolation_key: str | None,
        model: str | None,
        system: str | None,
        params: dict[str, Any],
    ) -> tuple[Question, BatchKey, float] | None:
        """For ``aask_one``: the checked question, the batch it may join and the window in
        seconds; None when the call is to be asked alone. The checks are those
        ``aask_many`` makes, run here for this call alone, so one caller's bad input fails
        only that caller."""
        check_isolation_key(isolation_key)
        window = self.policy.aggregate_window_ms
        if window is None or isolation_key is None:
            return None
        chosen_model = self.model(model)
        (item,) = normalize_questions([question], policy=self.policy, model=chosen_model)
        build_graph([item])  # a lone question may refer to nothing: fail it now, alone
        check_params(dict(params), self.policy)
        key = batch_key(isolation_key, chosen_model, system, params)
        return None if key is None else (item, key, window / 1000)

    def aggregator(self) -> Aggregator:
        with Aggregator.creation_lock:
            if self._aggregator is None:
                self._aggregator = Aggregator()
            return self._aggregator

    def service_model(self, model: str | None) -> ServiceModel:
        endpoint = self.endpoint(self.client, self.model(model))
        endpoint.service.limits = endpoint.budget.learned()
        return endpoint.service

    def use_service_model(self, service: ServiceModel, model: str | None) -> None:
        endpoint = self.endpoint(self.client, self.model(model))
        endpoint.service = service
        endpoint.meter = InFlightMeter(service.slot_candidates)
        if service.limits:
            endpoint.budget.teach(service.limits)
