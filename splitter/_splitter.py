"""``Splitter`` and ``ask_many``: the application-facing front door.

Input is checked before any request goes out: a bad item is an ``InvalidInputError``
naming its index, a keyword splitter owns is an error naming the keyword.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import openai
from pydantic import ValidationError

from ._aggregate import Aggregator, BatchKey, batch_key
from ._checkpoint import (
    Checkpoint,
    FileRun,
    checked_questions,
    pending_questions,
    refuse_same_file,
)
from ._dag import PLACEHOLDER, Graph, build_graph
from ._decompose import Decomposition, decompose
from ._endpoint import Endpoint, endpoint_for
from ._estimate import count_tokens
from ._events import Emitter, EventHook, check_hook
from ._exceptions import InvalidInputError
from ._execute import Executor, RequestSpec
from ._llm_decompose import INSTRUCTION, parse_plan, request_text
from ._map import DEFAULT_WINDOW, MappedAnswers, RunBatch
from ._meter import InFlightMeter
from ._openai import OpenAIBackend
from ._planner import Plan, PlanItem, plan_wave
from ._policy import Policy
from ._progress import Progress
from ._questions import Answer, BatchResult, CompoundAnswer, Question, Usage, check_sendable
from ._service_model import ServiceModel
from ._stream import AnswerStream, Relay, StreamEvent
from ._sync import iterate_sync, run_sync
from ._waves import run_graph

__all__ = ["Splitter", "aask_many", "ask_many"]

QuestionLike = str | Question
_MESSAGE_OVERHEAD = 4  # tokens a chat message costs beyond its text
# A decomposition call's token costs, for pricing it before it is made: its instruction is
# read once (about 4 characters a token in English), and each sub-question written back
# costs its text plus the JSON around it ({"text": "...", "depends_on": [..]},).
INSTRUCTION_TOKENS = len(INSTRUCTION) // 4
PART_TOKENS = 12
_log = logging.getLogger("splitter")
# Keywords splitter builds itself; passing them would silently fight the plan.
_OWNED_PARAMS = {
    "messages": "splitter builds the messages; pass system= for a shared system prompt",
    "model": "pass model= as its own argument",
    "stream": "ask_many returns whole answers",
    "n": "one answer per question is all splitter can keep in order",
}


class Splitter:
    """Asks many questions through one openai client, under one policy.

    ``client`` is an ``openai.AsyncOpenAI`` or ``openai.OpenAI`` (a sync client is driven from
    worker threads). Without one, an ``AsyncOpenAI`` is built from the ``OPENAI_*``
    environment variables. Its own retries are switched off: splitter's retry layer decides.

    ``on_event`` is called with every event of every batch this Splitter runs (its
    ``aask_many``, ``aask``, ``aask_one`` and ``astream`` calls): a plain function for your
    own telemetry; what it raises is logged and never touches an answer (docs/events.md).
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | openai.OpenAI | None = None,
        *,
        policy: Policy | None = None,
        model: str | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        self.policy = policy if policy is not None else Policy()
        self.model = model
        self.on_event = check_hook(on_event)
        self._client = client
        self._endpoints: dict[tuple[str, str], Endpoint] = {}
        self._aggregator: Aggregator | None = None  # made by the first aask_one that needs it

    def __repr__(self) -> str:
        return f"Splitter(model={self.model!r}, policy={self.policy!r})"

    async def aask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> BatchResult:
        """Answer every question; answers come back in input order.

        Extra keywords (``temperature``, ``max_tokens``, ``extra_body``, ...) go to every
        request as ``chat.completions.create`` takes them. ``on_event`` sees this call's
        events (after the Splitter's own hook); ``progress=True`` shows a progress bar on
        stderr for this call (needs the ``progress`` extra), or pass a :class:`Progress`
        to follow several calls on one bar.
        """
        chosen_model = self._model(model)
        items = normalize_questions(questions, policy=self.policy, model=chosen_model)
        deps = build_graph(items)
        check_sendable(system, "system")
        spec = RequestSpec(chosen_model, system, self._params(params))
        hook = check_hook(on_event)
        bar = _progress_bar(progress)
        try:
            events = Emitter((self.on_event, hook, bar))
            events.started(len(items), chosen_model)
            result = await self._run_with_client(items, deps, spec, events) if items else None
            result = result if result is not None else BatchResult(())
            events.finished(result)
        finally:
            if progress is True and bar is not None:
                bar.close()
        return result.raise_for_errors() if raise_on_error else result

    async def _run_with_client(
        self,
        items: list[Question],
        deps: Graph,
        spec: RequestSpec,
        events: Emitter,
        relay: Relay | None = None,
    ) -> BatchResult:
        if self._client is not None:
            return await self._run(self._client, items, deps, spec, events, relay)
        async with openai.AsyncOpenAI() as client:
            return await self._run(client, items, deps, spec, events, relay)

    def ask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> BatchResult:
        """The sync twin of :meth:`aask_many`; also works inside a running event loop
        (``on_event`` is then called on the helper thread that runs the batch)."""
        questions = list(questions) if not isinstance(questions, str) else questions

        async def call() -> BatchResult:
            return await self.aask_many(
                questions,
                model=model,
                system=system,
                raise_on_error=raise_on_error,
                on_event=on_event,
                progress=progress,
                **params,
            )

        return run_sync(call)

    async def aask(
        self,
        prompt: str,
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        **params: Any,
    ) -> CompoundAnswer:
        """Answer one prompt that may hold several questions.

        Its parts are found (:func:`splitter.decompose`, or a model call when
        ``Policy.decompose`` says so and it is priced worth it), then sent like
        :meth:`aask_many`'s questions — each with the prompt's shared preamble and
        postscript, dependent parts after the answers they need — and put back together
        under the prompt's own numbering. A prompt that is one question is one request.
        """
        return await self._answer_prompt(
            prompt, None, self._model(model), system, raise_on_error, params
        )

    def ask(
        self,
        prompt: str,
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        **params: Any,
    ) -> CompoundAnswer:
        """The sync twin of :meth:`aask`."""

        async def call() -> CompoundAnswer:
            return await self.aask(
                prompt, model=model, system=system, raise_on_error=raise_on_error, **params
            )

        return run_sync(call)

    async def aask_one(
        self,
        question: QuestionLike,
        *,
        isolation_key: str | None = None,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Answer:
        """Answer one question, planned together with concurrent calls of the same tenant.

        With ``Policy.aggregate_window_ms`` set and an ``isolation_key``, calls with the same
        key, model, system prompt and keywords that arrive on this event loop within the
        window of the first are answered by one :meth:`aask_many` call, so the planner may
        merge them when the rate-limit budget is tight; each caller gets its own answer
        (index 0, its own ``Question``). Different keys never share a batch, so never a
        prompt: use one key per user or tenant whose questions may be seen together.
        Without a key (the default) or a window, the call is asked alone. Bad input raises
        ``InvalidInputError`` to its own caller before it joins a batch. See
        docs/aggregate.md.
        """
        joined = self._aggregation(question, isolation_key, model, system, params)
        if joined is None:
            return (await self.aask_many([question], model=model, system=system, **params))[0]
        item, key, window = joined

        async def run(batch: list[Question]) -> BatchResult:
            return await self.aask_many(batch, model=key.model, system=system, **params)

        return await self._aggregator_of_calls().aanswer(item, key, window, run)

    def ask_one(
        self,
        question: QuestionLike,
        *,
        isolation_key: str | None = None,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Answer:
        """The sync twin of :meth:`aask_one`. Sync calls aggregate with sync calls from any
        thread of the process (never with async ones): the first caller's thread waits the
        window and asks the batch, the others block until it is answered."""
        joined = self._aggregation(question, isolation_key, model, system, params)
        if joined is None:

            async def call() -> Answer:
                return await self.aask_one(question, model=model, system=system, **params)

            return run_sync(call)
        item, key, window = joined

        def run(batch: list[Question]) -> BatchResult:
            return self.ask_many(batch, model=key.model, system=system, **params)

        return self._aggregator_of_calls().answer(item, key, window, run)

    def _aggregation(
        self,
        question: QuestionLike,
        isolation_key: str | None,
        model: str | None,
        system: str | None,
        params: dict[str, Any],
    ) -> tuple[Question, BatchKey, float] | None:
        """The checked question, the batch it may join and the window in seconds; None
        when the call is to be asked alone. The checks are those :meth:`aask_many` makes,
        run here for this call alone, so one caller's bad input fails only that caller."""
        if isolation_key is not None and not isinstance(isolation_key, str):
            raise InvalidInputError(
                f"isolation_key must be a str or None, not {type(isolation_key).__name__}"
            )
        window = self.policy.aggregate_window_ms
        if window is None or isolation_key is None:
            return None
        chosen_model = self._model(model)
        (item,) = normalize_questions([question], policy=self.policy, model=chosen_model)
        build_graph([item])  # a lone question may refer to nothing: fail it now, alone
        self._params(dict(params))
        key = batch_key(isolation_key, chosen_model, system, params)
        return None if key is None else (item, key, window / 1000)

    def _aggregator_of_calls(self) -> Aggregator:
        with Aggregator.creation_lock:
            if self._aggregator is None:
                self._aggregator = Aggregator()
            return self._aggregator

    async def _answer_prompt(
        self,
        prompt: str,
        found: Decomposition | None,
        model: str,
        system: str | None,
        raise_on_error: bool,
        params: dict[str, Any],
    ) -> CompoundAnswer:
        """:meth:`aask`, for a prompt that may already be taken apart by the rules
        (``found``: the drop-in wrapper decides on it before splitting)."""
        parts = await self._parts(prompt, model, found)
        result = await self.aask_many(
            parts.questions, model=model, system=system, raise_on_error=raise_on_error, **params
        )
        return parts.answer(result)

    async def _parts(self, prompt: str, model: str, found: Decomposition | None = None) -> _Parts:
        """``prompt``'s parts as questions: by the rules (``found``, if the caller already
        applied them), or by a model call when the policy asks for one and it is priced
        worth it."""
        if not isinstance(prompt, str):
            raise InvalidInputError(f"prompt must be a str, not {type(prompt).__name__}")
        if not prompt.strip():
            raise InvalidInputError("the prompt is blank")
        check_sendable(prompt, "the prompt")
        decomposition = found if found is not None else decompose(prompt)
        by: Literal["heuristic", "llm"] = "heuristic"
        spent = Usage()
        wanted = self.policy.decompose
        if wanted.mode == "llm":
            decomposer = wanted.model or model
            if self._llm_decomposition_pays(prompt, decomposition, decomposer):
                found, spent = await self._llm_decompose(prompt, decomposer)
                if found is not None:
                    decomposition, by = found, "llm"
        return _Parts(prompt, decomposition, by, spent)

    def astream(
        self,
        questions: Iterable[QuestionLike],
        *,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> AnswerStream:
        """Answer like :meth:`aask_many`, delivering the answers as they are produced.

        ``async with splitter.astream(questions) as events: async for event in events``.
        In order (the default), the question being delivered streams token by token and
        the others wait in a buffer for their turn; with ``ordered=False`` each answer comes
        whole as soon as it is final. Each question's last event carries its ``Answer``;
        ``events.result`` is the ``BatchResult`` at the end. Bad input raises here, before
        anything is sent.
        """
        chosen_model = self._model(model)
        items = normalize_questions(questions, policy=self.policy, model=chosen_model)
        check_sendable(system, "system")
        spec = RequestSpec(chosen_model, system, self._params(params))
        return self._stream(items, spec, ordered=ordered)

    def stream(
        self,
        questions: Iterable[QuestionLike],
        *,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Iterator[StreamEvent]:
        """The sync twin of :meth:`astream`: an iterator of events (the questions run on an
        event loop in a helper thread; stopping early cancels what is still running)."""
        return iterate_sync(
            self.astream(questions, ordered=ordered, model=model, system=system, **params)
        )

    def amap(
        self,
        questions: Iterable[QuestionLike] | AsyncIterable[QuestionLike],
        *,
        window: int = DEFAULT_WINDOW,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> MappedAnswers:
        """Answer an input of any length, holding at most ``window`` questions at once.

        ``async with splitter.amap(questions, model=...) as answers: async for answer in
        answers``. ``questions`` is any iterable or async iterable (a generator, a file
        being read), consumed lazily; questions read together are planned and sent as one
        batch. Answers come in input order (``ordered=False``: as they finish), each with
        its input position as ``Answer.index``. Items are checked as :meth:`aask_many`
        checks them, when they are read; a bad item, or an error of the iterable itself,
        stops the reading and is raised once everything read before it is answered.
        Questions may not depend on each other here (``depends_on``, ``{answer:ID}``).
        ``on_event`` and ``progress`` as in :meth:`aask_many`, over every batch (the events
        name questions by input position). See docs/batch-files.md.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidInputError(f"window must be a positive int, not {window!r}")
        if isinstance(questions, str | bytes):
            raise InvalidInputError("questions must be an iterable of questions, not a string")
        if not isinstance(questions, Iterable | AsyncIterable):
            raise InvalidInputError(
                f"questions must be an iterable, not {type(questions).__name__}"
            )
        chosen_model = self._model(model)
        check_sendable(system, "system")
        spec = RequestSpec(chosen_model, system, self._params(params))
        hook = check_hook(on_event)
        bar = _progress_bar(progress)

        def check(index: int, item: object) -> Question:
            return _map_item(index, item, policy=self.policy, model=chosen_model)

        batches = self._batches(spec, hook, bar, own_bar=progress is True)
        return MappedAnswers(
            questions, window=window, ordered=ordered, check=check, batches=batches
        )

    def map(
        self,
        questions: Iterable[QuestionLike],
        *,
        window: int = DEFAULT_WINDOW,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> Generator[Answer, None, None]:
        """The sync twin of :meth:`amap`: a generator of answers (the questions run on an
        event loop in a helper thread, which also reads ``questions``; closing the
        generator early cancels what is still running)."""
        mapped = self.amap(
            questions,
            window=window,
            ordered=ordered,
            model=model,
            system=system,
            on_event=on_event,
            progress=progress,
            **params,
        )
        return iterate_sync(mapped)

    async def arun_file(
        self,
        questions: str | os.PathLike[str],
        out: str | os.PathLike[str],
        *,
        model: str | None = None,
        system: str | None = None,
        window: int = DEFAULT_WINDOW,
        retry_failed: bool = True,
        sync_every: int = 100,
        sync_seconds: float = 1.0,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> FileRun:
        """Answer a JSONL file of questions into a JSONL file of answers, resumably.

        Input lines: ``{"id": ..., "question": ...}`` (plus ``expected_tokens``,
        ``max_tokens``); the whole file is checked before any request. Each answer is
        appended to ``out`` as ``{"id": ..., "answer": ..., "error": ...}`` when it
        finishes (flushed at once, fsynced every ``sync_every`` lines or ``sync_seconds``).
        Run it again after a crash: ids answered in ``out`` are skipped, failed ones asked
        again (``retry_failed=False`` keeps their errors). An existing ``out`` holding any
        line that is not such an answer line, or ``out`` naming the input file, is an
        ``InvalidInputError`` and neither file is changed. Runs on :meth:`amap`, so memory
        stays bounded by ``window``, plus the set of ids. ``progress=True``: a bar over
        the whole file, starting at the ids done before. See docs/batch-files.md.
        """
        chosen_model = self._model(model)
        source, target = Path(questions), Path(out)
        refuse_same_file(source, target)

        def check(index: int, item: object) -> Question:
            return _map_item(index, item, policy=self.policy, model=chosen_model)

        ids = checked_questions(source, check)
        checkpoint = Checkpoint(target, sync_every=sync_every, sync_seconds=sync_seconds)
        done = checkpoint.resume(retry_failed=retry_failed)
        total, skipped = len(ids), len(done & ids)
        del ids
        bar = _progress_bar(progress, total=total, initial=skipped)
        answered = failed = 0
        mapped = self.amap(
            pending_questions(source, done),
            window=window,
            ordered=False,
            model=chosen_model,
            system=system,
            on_event=on_event,
            progress=bar or False,
            **params,
        )
        with checkpoint, bar if progress is True and bar is not None else nullcontext():
            async with mapped as answers:
                async for answer in answers:
                    checkpoint.write(answer)
                    answered += answer.ok
                    failed += not answer.ok
        return FileRun(questions=total, skipped=skipped, answered=answered, failed=failed)

    def run_file(
        self,
        questions: str | os.PathLike[str],
        out: str | os.PathLike[str],
        *,
        model: str | None = None,
        system: str | None = None,
        window: int = DEFAULT_WINDOW,
        retry_failed: bool = True,
        sync_every: int = 100,
        sync_seconds: float = 1.0,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> FileRun:
        """The sync twin of :meth:`arun_file`."""

        async def call() -> FileRun:
            return await self.arun_file(
                questions,
                out,
                model=model,
                system=system,
                window=window,
                retry_failed=retry_failed,
                sync_every=sync_every,
                sync_seconds=sync_seconds,
                on_event=on_event,
                progress=progress,
                **params,
            )

        return run_sync(call)

    @asynccontextmanager
    async def _batches(
        self,
        spec: RequestSpec,
        hook: EventHook | None = None,
        bar: Progress | None = None,
        *,
        own_bar: bool = False,
    ) -> AsyncIterator[RunBatch]:
        """How :meth:`amap` sends each batch: planned like :meth:`aask_many`'s questions,
        every batch under one concurrency limit, its events told by input position. A bar
        made for this map (``own_bar``) is closed with it."""
        async with self._client_for() as client:
            endpoint = self._endpoint(client, spec.model)
            backend = OpenAIBackend(client, max_threads=self.policy.limits.max_concurrency)
            executor = Executor(backend, self.policy, endpoint)

            async def run_batch(
                items: list[Question], start: int, on_answer: Callable[[Answer], None]
            ) -> BatchResult:
                positions = range(start, start + len(items))
                events = Emitter((self.on_event, hook, bar))
                events.started(len(items), spec.model)
                plan = self._plan(items, spec, endpoint)
                events.planned(plan, 0, positions)

                def arrive(answer: Answer) -> None:
                    on_answer(answer)
                    events.answer(answer, positions[answer.index])

                result = await executor.run(
                    items, plan, spec, on_answer=arrive, positions=positions, events=events
                )
                events.finished(result, positions)
                return result

            try:
                yield run_batch
            finally:
                if own_bar and bar is not None:
                    bar.close()

    @asynccontextmanager
    async def _client_for(self) -> AsyncIterator[openai.AsyncOpenAI | openai.OpenAI]:
        """The splitter's client, or one from the ``OPENAI_*`` variables while it is used."""
        if self._client is not None:
            yield self._client
            return
        async with openai.AsyncOpenAI() as client:
            yield client

    def _stream(self, items: list[Question], spec: RequestSpec, *, ordered: bool) -> AnswerStream:
        deps = build_graph(items)

        async def produce(relay: Relay) -> BatchResult:
            events = Emitter((self.on_event,))
            events.started(len(items), spec.model)
            result = (
                await self._run_with_client(items, deps, spec, events, relay)
                if items
                else BatchResult(())
            )
            events.finished(result)
            return result

        return AnswerStream(len(items), produce, ordered=ordered)

    def _llm_decomposition_pays(self, prompt: str, heuristic: Decomposition, model: str) -> bool:
        """Is a decomposition call cheap beside answering the prompt? Priced with what the
        endpoint has learned: the call reads the prompt and writes out the sub-questions
        (sized by what the rules found), against one request answering the whole prompt."""
        wanted = self.policy.decompose
        tokens = count_tokens(prompt, model)
        if tokens < wanted.min_prompt_tokens:
            return False
        endpoint = self._endpoint(self._client, model)
        estimate = endpoint.service.estimate()
        written = min(
            tokens, sum(count_tokens(p.text, model) + PART_TOKENS for p in heuristic.parts)
        )
        call = estimate.latency(tokens + INSTRUCTION_TOKENS, written, 1)
        answer = estimate.latency(tokens, endpoint.lengths.estimate(prompt), 1)
        return call <= wanted.max_share * answer

    async def _llm_decompose(self, prompt: str, model: str) -> tuple[Decomposition | None, Usage]:
        """The model's decomposition, or None (with the reason logged) to keep the rules'."""
        result = await self.aask_many([request_text(prompt)], model=model, temperature=0)
        answer = result[0]
        if not answer.ok or answer.text is None:
            _log.info("llm decomposition failed (%s); using the rules", answer.error)
            return None, result.usage
        try:
            return parse_plan(answer.text, prompt), result.usage
        except ValueError as exc:
            _log.info("llm decomposition unusable (%s); using the rules", exc)
            return None, result.usage

    def plan(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Plan:
        """How :meth:`aask_many` would send these questions now, every option priced.

        Pure: no request is sent. ``plan(...).explain()`` renders it as a table. With
        dependencies, only the questions that can be sent at once are planned (the rest wait
        for answers); the plan's indexes are still positions in ``questions``.
        """
        chosen_model = self._model(model)
        items = normalize_questions(questions, policy=self.policy, model=chosen_model)
        if not items:
            raise InvalidInputError("there is nothing to plan: the list of questions is empty")
        deps = build_graph(items)
        check_sendable(system, "system")
        spec = RequestSpec(chosen_model, system, self._params(params))
        first = [i for i, needs in enumerate(deps) if not needs]
        return self._plan(
            [items[i] for i in first], spec, self._endpoint(self._client, chosen_model), first
        )

    def service_model(self, model: str | None = None) -> ServiceModel:
        """What has been learned about this client's service for ``model`` (save it with
        ``.save(path)``; bring it back with :meth:`use_service_model`)."""
        endpoint = self._endpoint(self._client, self._model(model))
        endpoint.service.limits = endpoint.budget.learned()
        return endpoint.service

    def use_service_model(self, service: ServiceModel, model: str | None = None) -> None:
        """Start from a saved service model instead of the policy's prior."""
        endpoint = self._endpoint(self._client, self._model(model))
        endpoint.service = service
        endpoint.meter = InFlightMeter(service.slot_candidates)
        if service.limits:
            endpoint.budget.teach(service.limits)

    def _endpoint(self, client: openai.AsyncOpenAI | openai.OpenAI | None, model: str) -> Endpoint:
        base_url = _base_url(client)
        key = (base_url, model)
        if key not in self._endpoints:
            api_key = client.api_key if client is not None else os.environ.get("OPENAI_API_KEY")
            self._endpoints[key] = endpoint_for(
                self.policy, base_url=base_url, api_key=api_key, model=model
            )
        return self._endpoints[key]

    def _plan(
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
        cap = spec.params.get("max_tokens", spec.params.get("max_completion_tokens"))
        plan_items = [
            PlanItem(
                index=i if indexes is None else indexes[i],
                input_tokens=count_tokens(q.text, spec.model) + _MESSAGE_OVERHEAD,
                output_tokens=endpoint.lengths.estimate(
                    q.text, expected=q.expected_tokens, cap=q.max_tokens or cap
                ),
                max_tokens=q.max_tokens or cap,
            )
            for i, q in enumerate(items)
        ]
        system = count_tokens(spec.system, spec.model) + _MESSAGE_OVERHEAD if spec.system else 0
        return plan_wave(
            plan_items,
            estimate=endpoint.service.estimate(),
            budget=endpoint.budget_snapshot(),
            concurrency=endpoint.concurrency.current,
            policy=self.policy,
            preamble_tokens=system,
            alone=plan_items[0].index if first_alone else None,
            merge_success=endpoint.merges.success,
        )

    async def _run(
        self,
        client: openai.AsyncOpenAI | openai.OpenAI,
        items: list[Question],
        deps: Graph,
        spec: RequestSpec,
        events: Emitter,
        relay: Relay | None = None,
    ) -> BatchResult:
        endpoint = self._endpoint(client, spec.model)
        backend = OpenAIBackend(client, max_threads=self.policy.limits.max_concurrency)
        executor = Executor(backend, self.policy, endpoint)
        to_relay = _answers_to(relay, events)
        live = relay is not None and relay.ordered
        if not any(deps):
            plan = self._plan(items, spec, endpoint, first_alone=live)
            events.planned(plan, 0)
            return await executor.run(
                items, plan, spec, on_answer=to_relay, relay=relay, events=events
            )

        def plan_wave(wave: list[Question]) -> Plan:
            return self._plan(wave, spec, endpoint, first_alone=live)

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

    def _model(self, model: str | None) -> str:
        chosen = model or self.model
        if not chosen:
            raise InvalidInputError("model is required: pass model=... here or to Splitter()")
        return chosen

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        for key, why in _OWNED_PARAMS.items():
            if key in params and not (key == "n" and params[key] == 1):
                raise InvalidInputError(f"keyword {key!r} is not accepted: {why}")
        if self.policy.timeout is not None:
            params.setdefault("timeout", self.policy.timeout)
        return params


@dataclass(frozen=True, slots=True)
class _Parts:
    """A prompt taken apart: the questions to send, and how to put their answers back."""

    prompt: str
    decomposition: Decomposition
    by: Literal["heuristic", "llm"]
    spent: Usage

    @property
    def questions(self) -> list[Question]:
        d = self.decomposition
        return [
            Question(text=self.prompt if d.single else d.question_text(k), depends_on=p.depends_on)
            for k, p in enumerate(d.parts)
        ]

    def label(self, index: int) -> str:
        """What part ``index``'s answer goes under in the reassembled text."""
        return self.decomposition.parts[index].label or f"{index + 1}."

    def answer(self, result: BatchResult) -> CompoundAnswer:
        return CompoundAnswer(
            _reassemble(self.decomposition, result), result, self.decomposition, self.by, self.spent
        )


def _progress_bar(
    progress: object, *, total: int | None = None, initial: int = 0
) -> Progress | None:
    """The bar ``progress=`` asks for: a new one for True, of ``total`` from ``initial``."""
    if not isinstance(progress, bool | Progress):
        raise InvalidInputError(
            f"progress must be True, False or a splitter.Progress, not {type(progress).__name__}"
        )
    return Progress(total=total, initial=initial) if progress is True else progress or None


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


def _reassemble(decomposition: Decomposition, result: BatchResult) -> str:
    """The parts' answers under the prompt's own labels, in its order."""
    if decomposition.single:
        return result[0].text or ""
    pieces = []
    for k, (part, answer) in enumerate(zip(decomposition.parts, result, strict=True)):
        body = (
            answer.text if answer.ok and answer.text is not None else f"[no answer: {answer.error}]"
        )
        pieces.append(f"{part.label or f'{k + 1}.'} {body}")
    return "\n\n".join(pieces)


def normalize_questions(
    questions: Iterable[QuestionLike], *, policy: Policy, model: str
) -> list[Question]:
    """Check and convert the caller's items; errors name the item's index."""
    if isinstance(questions, str | bytes):
        raise InvalidInputError("questions must be a list of questions, not a single string")
    if not isinstance(questions, Iterable):
        raise InvalidInputError(
            f"questions must be a list of questions, not {type(questions).__name__}"
        )
    items = [_to_question(i, item) for i, item in enumerate(questions)]
    seen: dict[str, int] = {}
    for i, q in enumerate(items):
        _check_size(i, q, policy, model)
        if q.id is not None:
            if q.id in seen:
                raise InvalidInputError(
                    f"questions[{i}] repeats id {q.id!r} of questions[{seen[q.id]}]", index=i
                )
            seen[q.id] = i
    return items


def _check_size(index: int, question: Question, policy: Policy, model: str) -> None:
    tokens = count_tokens(question.text, model)
    if tokens > policy.max_question_tokens:
        raise InvalidInputError(
            f"questions[{index}] is ~{tokens} tokens, over max_question_tokens="
            f"{policy.max_question_tokens}",
            index=index,
        )


def _map_item(index: int, item: object, *, policy: Policy, model: str) -> Question:
    """One item of :meth:`Splitter.amap`'s input, checked as ``aask_many`` checks it; a
    question that depends on another is refused (map answers each on its own)."""
    question = _to_question(index, item)
    _check_size(index, question, policy, model)
    refs = [*question.depends_on, *(m["ref"] for m in PLACEHOLDER.finditer(question.text))]
    if refs:
        raise InvalidInputError(
            f"questions[{index}] depends on {refs[0]!r}: map answers every question on its own; "
            "ask questions that depend on each other with aask_many",
            index=index,
        )
    return question


def _to_question(index: int, item: object) -> Question:
    if isinstance(item, Question):
        return item
    if not isinstance(item, str):
        raise InvalidInputError(
            f"questions[{index}] must be a str or Question, not {type(item).__name__}", index=index
        )
    try:
        return Question(text=item)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise InvalidInputError(f"questions[{index}]: {reason}", index=index) from None


def _base_url(client: openai.AsyncOpenAI | openai.OpenAI | None) -> str:
    if client is not None:
        return str(client.base_url)
    # What openai.AsyncOpenAI() will use when splitter builds the client itself.
    return os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"


async def aask_many(
    questions: Iterable[QuestionLike],
    *,
    model: str,
    client: openai.AsyncOpenAI | openai.OpenAI | None = None,
    policy: Policy | None = None,
    **kwargs: Any,
) -> BatchResult:
    """Answer every question concurrently; see :meth:`Splitter.aask_many` (``on_event`` and
    ``progress`` included)."""
    return await Splitter(client, policy=policy).aask_many(questions, model=model, **kwargs)


def ask_many(
    questions: Iterable[QuestionLike],
    *,
    model: str,
    client: openai.AsyncOpenAI | openai.OpenAI | None = None,
    policy: Policy | None = None,
    **kwargs: Any,
) -> BatchResult:
    """The sync twin of :func:`aask_many`."""
    return Splitter(client, policy=policy).ask_many(questions, model=model, **kwargs)
