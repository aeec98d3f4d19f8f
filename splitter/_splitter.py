"""``Splitter`` and ``ask_many``: the application-facing front door.

Input is checked before any request goes out: a bad item is an ``InvalidInputError``
naming its index, a keyword splitter owns is an error naming the keyword.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import openai
from pydantic import ValidationError

from ._endpoint import Endpoint
from ._estimate import count_tokens
from ._exceptions import InvalidInputError
from ._execute import Executor, RequestSpec
from ._openai import OpenAIBackend
from ._planner import Plan, PlanItem, plan_wave
from ._policy import Policy
from ._questions import BatchResult, Question
from ._service_model import InFlightMeter, ServiceModel
from ._sync import run_sync

__all__ = ["Splitter", "aask_many", "ask_many"]

QuestionLike = str | Question
_MESSAGE_OVERHEAD = 4  # tokens a chat message costs beyond its text
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
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | openai.OpenAI | None = None,
        *,
        policy: Policy | None = None,
        model: str | None = None,
    ) -> None:
        self.policy = policy if policy is not None else Policy()
        self.model = model
        self._client = client
        self._endpoints: dict[tuple[str, str], Endpoint] = {}

    def __repr__(self) -> str:
        return f"Splitter(model={self.model!r}, policy={self.policy!r})"

    async def aask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        **params: Any,
    ) -> BatchResult:
        """Answer every question; answers come back in input order.

        Extra keywords (``temperature``, ``max_tokens``, ``extra_body``, ...) go to every
        request as ``chat.completions.create`` takes them.
        """
        chosen_model = self._model(model)
        items = normalize_questions(questions, policy=self.policy, model=chosen_model)
        spec = RequestSpec(chosen_model, system, self._params(params))
        if not items:
            return BatchResult(())
        if self._client is not None:
            result = await self._run(self._client, items, spec)
        else:
            async with openai.AsyncOpenAI() as client:
                result = await self._run(client, items, spec)
        return result.raise_for_errors() if raise_on_error else result

    def ask_many(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        raise_on_error: bool = False,
        **params: Any,
    ) -> BatchResult:
        """The sync twin of :meth:`aask_many`; also works inside a running event loop."""
        questions = list(questions) if not isinstance(questions, str) else questions

        async def call() -> BatchResult:
            return await self.aask_many(
                questions, model=model, system=system, raise_on_error=raise_on_error, **params
            )

        return run_sync(call)

    def plan(
        self,
        questions: Iterable[QuestionLike],
        *,
        model: str | None = None,
        system: str | None = None,
        **params: Any,
    ) -> Plan:
        """How :meth:`aask_many` would send these questions now, every option priced.

        Pure: no request is sent. ``plan(...).explain()`` renders it as a table.
        """
        chosen_model = self._model(model)
        items = normalize_questions(questions, policy=self.policy, model=chosen_model)
        if not items:
            raise InvalidInputError("there is nothing to plan: the list of questions is empty")
        spec = RequestSpec(chosen_model, system, self._params(params))
        return self._plan(items, spec, self._endpoint(self._client, chosen_model))

    def service_model(self, model: str | None = None) -> ServiceModel:
        """What has been learned about this client's service for ``model`` (save it with
        ``.save(path)``; bring it back with :meth:`use_service_model`)."""
        return self._endpoint(self._client, self._model(model)).service

    def use_service_model(self, service: ServiceModel, model: str | None = None) -> None:
        """Start from a saved service model instead of the policy's prior."""
        endpoint = self._endpoint(self._client, self._model(model))
        endpoint.service = service
        endpoint.meter = InFlightMeter(service.slot_candidates)

    def _endpoint(self, client: openai.AsyncOpenAI | openai.OpenAI | None, model: str) -> Endpoint:
        base_url = _base_url(client)
        key = (base_url, model)
        if key not in self._endpoints:
            api_key = client.api_key if client is not None else os.environ.get("OPENAI_API_KEY")
            self._endpoints[key] = Endpoint.for_policy(
                self.policy, base_url=base_url, api_key=api_key, model=model
            )
        return self._endpoints[key]

    def _plan(self, items: list[Question], spec: RequestSpec, endpoint: Endpoint) -> Plan:
        cap = spec.params.get("max_tokens", spec.params.get("max_completion_tokens"))
        plan_items = [
            PlanItem(
                index=i,
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
        )

    async def _run(
        self, client: openai.AsyncOpenAI | openai.OpenAI, items: list[Question], spec: RequestSpec
    ) -> BatchResult:
        endpoint = self._endpoint(client, spec.model)
        plan = self._plan(items, spec, endpoint)
        backend = OpenAIBackend(client, max_threads=self.policy.limits.max_concurrency)
        return await Executor(backend, self.policy, endpoint).run(items, plan, spec)

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


def normalize_questions(
    questions: Iterable[QuestionLike], *, policy: Policy, model: str
) -> list[Question]:
    """Check and convert the caller's items; errors name the item's index."""
    if isinstance(questions, str | bytes):
        raise InvalidInputError("questions must be a list of questions, not a single string")
    items = [_to_question(i, item) for i, item in enumerate(questions)]
    seen: dict[str, int] = {}
    for i, q in enumerate(items):
        tokens = count_tokens(q.text, model)
        if tokens > policy.max_question_tokens:
            raise InvalidInputError(
                f"questions[{i}] is ~{tokens} tokens, over max_question_tokens="
                f"{policy.max_question_tokens}",
                index=i,
            )
        if q.id is not None:
            if q.id in seen:
                raise InvalidInputError(
                    f"questions[{i}] repeats id {q.id!r} of questions[{seen[q.id]}]", index=i
                )
            seen[q.id] = i
    return items


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
    """Answer every question concurrently; see :meth:`Splitter.aask_many`."""
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
