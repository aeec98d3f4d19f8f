"""``Splitter`` and ``ask_many``: the application-facing front door.

Each method checks nothing and runs nothing itself: it hands the call to the Splitter's
session (``_session``), which checks the input (``_inputs``: a bad item is an
``InvalidInputError`` naming its index, a keyword splitter owns is an error naming the
keyword), plans and runs it. Compound prompts are taken apart and put back together by
``_compound``; files of questions are run by ``_file_run``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, Generator, Iterable
from typing import Any, Literal

import openai

from ._checkpoint import FileRun
from ._events import EventHook, check_hook
from ._file_run import FileSettings, run_file
from ._inputs import QuestionLike
from ._map import DEFAULT_WINDOW, MappedAnswers
from ._planner import Plan
from ._policy import Policy
from ._progress import Progress
from ._questions import Answer, BatchResult, CompoundAnswer
from ._service_model import ServiceModel
from ._session import Session
from ._stream import AnswerStream, SyncAnswerStream
from ._sync import call_sync, iterate_sync

__all__ = ["Splitter", "aask_many", "ask_many"]


class Splitter:
    """Asks many questions through one openai client, under one policy.

    ``client`` is an ``openai.AsyncOpenAI`` or ``openai.OpenAI`` (a sync client is driven from
    worker threads); without one, an ``AsyncOpenAI`` is built from the ``OPENAI_*`` variables.
    Its own retries are switched off: splitter's retry layer decides. ``on_event`` is called
    with every event of every batch this Splitter runs: a plain function for your telemetry;
    what it raises is logged, never touches an answer (events.md).
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
        self._session = session = Session(client, self)
        # What the wrapper (``_wrap``) reaches for: the client, its endpoints, compound prompts.
        self._client, self._endpoints, self._endpoint = client, session.endpoints, session.endpoint
        self._answer_prompt, self._parts = session.answer_prompt, session.parts

    def __repr__(self) -> str:
        return f"Splitter(model={self.model!r}, policy={self.policy!r})"

    async def aask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        raise_on_error: bool = False,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        isolation_key: str | None = None,
        **params: Any,
    ) -> BatchResult:
        """Answer every question; answers come back in input order.

        Extra keywords (``temperature``, ``max_tokens``, ``extra_body``, ...) go to every request
        as ``chat.completions.create`` takes them. ``on_event`` sees this call's events (after
        the Splitter's own hook); ``progress=True`` shows a progress bar on stderr (``progress``
        extra), or pass a :class:`Progress` to share one bar between calls. ``isolation_key``:
        cached answers (``Policy.cache``) never cross keys. ``context``: what the questions are
        about (a document), sent after ``system``, the same bytes in every request so prefix
        caches serve it, once in a merged request (docs/context.md)."""
        ask, hooks, key = self._session.ask_many, (on_event, progress), isolation_key
        return await ask(questions, model, system, params, hooks, raise_on_error, key, context)

    def ask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        raise_on_error: bool = False,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        isolation_key: str | None = None,
        **params: Any,
    ) -> BatchResult:
        """The sync twin of :meth:`aask_many`, also inside a running event loop (``on_event``
        is then called on the helper thread that runs the batch)."""
        questions = list(questions) if not isinstance(questions, str) else questions
        ask, hooks, key = self._session.ask_many, (on_event, progress), isolation_key
        return call_sync(ask, questions, model, system, params, hooks, raise_on_error, key, context)

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
        under the prompt's own numbering. A prompt that is one question is one request."""
        answer = self._session.answer_prompt
        return await answer(prompt, None, model, system, raise_on_error, params)

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
        answer = self._session.answer_prompt
        return call_sync(answer, prompt, None, model, system, raise_on_error, params)

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

        With ``Policy.aggregate_window_ms`` set and an ``isolation_key``, calls with the same key,
        model, system prompt and keywords arriving on this event loop within the window of the first
        are answered by one :meth:`aask_many` call (the planner may merge them when the rate-limit
        budget is tight); each caller gets its own answer (index 0, its own ``Question``). Different
        keys never share a batch, so never a prompt: use one key per user or tenant whose questions
        may be seen together. Without a key (the default) or window, it is asked alone. Bad input
        raises ``InvalidInputError`` to its own caller before it joins a batch (docs/aggregate.md).
        """
        return await self._session.ask_one(question, isolation_key, model, system, params)

    def ask_one(
        self,
        question: QuestionLike,
        *,
        isolation_key: str | None = None,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Answer:
        """The sync twin of :meth:`aask_one`: sync calls aggregate with sync calls from any
        thread (never async ones); the first caller's thread waits the window and asks the
        batch, the others block until it is answered."""
        return self._session.ask_one_sync(question, isolation_key, model, system, params)

    def astream(
        self,
        questions: Iterable[QuestionLike],
        *,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        **params: Any,
    ) -> AnswerStream:
        """Answer like :meth:`aask_many`, delivering the answers as they are produced.

        ``async with splitter.astream(questions) as events: async for event in events``.
        In order (the default), the question being delivered streams token by token and the
        others wait in a buffer for their turn; ``ordered=False``: each answer whole once
        final. Each question's last event carries its ``Answer``; ``events.result`` is the
        ``BatchResult`` at the end. Bad input raises here, before anything is sent.
        """
        return self._session.stream(questions, model, system, params, ordered, context)

    def stream(
        self,
        questions: Iterable[QuestionLike],
        *,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        **params: Any,
    ) -> SyncAnswerStream:
        """The sync twin of :meth:`astream`: an iterator of the same events, ``result`` at its
        end (the questions run on an event loop in a helper thread; ``close()`` stops early
        and cancels what is still running)."""
        stream = self._session.stream(questions, model, system, params, ordered, context)
        return SyncAnswerStream(stream)

    def amap(
        self,
        questions: Iterable[QuestionLike] | AsyncIterable[QuestionLike],
        *,
        window: int = DEFAULT_WINDOW,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> MappedAnswers:
        """Answer an input of any length, holding at most ``window`` questions at once.

        ``async with splitter.amap(questions, model=...) as answers: async for answer in
        answers``. ``questions``: any (async) iterable (a generator, a file being read),
        read lazily; questions read together are planned and sent as one batch. Answers come
        in input order (``ordered=False``: as they finish), ``Answer.index`` their input
        position. Items are checked as :meth:`aask_many` checks them, when read; a bad item,
        or an error of the iterable, stops the reading and is raised once everything read
        before it is answered. Questions may not depend on each other (``depends_on``,
        ``{answer:ID}``). ``on_event``, ``progress``, ``context`` as in :meth:`aask_many`,
        over every batch (events name questions by input position). See docs/batch-files.md.
        """
        hooks = (on_event, progress)
        return self._session.map(questions, model, system, params, window, ordered, hooks, context)

    def map(
        self,
        questions: Iterable[QuestionLike],
        *,
        window: int = DEFAULT_WINDOW,
        ordered: bool = True,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        on_event: EventHook | None = None,
        progress: bool | Progress = False,
        **params: Any,
    ) -> Generator[Answer, None, None]:
        """The sync twin of :meth:`amap`: a generator of answers (the questions run on an event
        loop in a helper thread, which also reads ``questions``; closing it early cancels what
        is still running)."""
        hooks, session = (on_event, progress), self._session
        mapped = session.map(questions, model, system, params, window, ordered, hooks, context)
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
        output_format: Literal["splitter", "batch"] = "splitter",
        skip_invalid: bool = False,
        **params: Any,
    ) -> FileRun:
        """Answer a JSONL file of questions into a JSONL file of answers, resumably.

        Lines: splitter's (``{"id": ..., "question": ...}``) or Batch API requests (no ``model``:
        the bodies'), all checked first: a malformed one is an ``InvalidInputError``, or, with
        ``skip_invalid=True``, left out and named in the ``FileRun``. Answers are appended to
        ``out`` as they finish (``output_format="batch"``: Batch API lines), fsynced every
        ``sync_every`` lines or ``sync_seconds``. A rerun skips answered ids, asks failed ones
        again (``retry_failed=False`` keeps them). An ``out`` with other lines is refused."""
        settings = FileSettings(window, retry_failed, sync_every, sync_seconds, output_format)
        settings = settings._replace(skip_invalid=skip_invalid)
        hooks, session = (on_event, progress), self._session
        return await run_file(session, questions, out, model, system, settings, hooks, params)

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
        output_format: Literal["splitter", "batch"] = "splitter",
        skip_invalid: bool = False,
        **params: Any,
    ) -> FileRun:
        """The sync twin of :meth:`arun_file`."""
        settings = FileSettings(window, retry_failed, sync_every, sync_seconds, output_format)
        settings = settings._replace(skip_invalid=skip_invalid)
        hooks, session = (on_event, progress), self._session
        return call_sync(run_file, session, questions, out, model, system, settings, hooks, params)

    def plan(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        context: str | None = None,
        **params: Any,
    ) -> Plan:
        """How :meth:`aask_many` would send these questions now, every option priced; pure,
        nothing is sent. ``plan(...).explain()`` renders it as a table. With dependencies,
        only the questions ready at once are planned (indexes stay positions)."""
        return self._session.plan_of(questions, model, system, params, context)

    def service_model(self, model: str | None = None) -> ServiceModel:
        """What has been learned about this client's service for ``model`` (save it with
        ``.save(path)``; bring it back with :meth:`use_service_model`)."""
        return self._session.service_model(model)

    def use_service_model(self, service: ServiceModel, model: str | None = None) -> None:
        """Start from a saved service model instead of the policy's prior."""
        self._session.use_service_model(service, model)


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
