"""Ray Data: answer a column of questions with ``Dataset.map_batches``, one shared budget.

:class:`AskBatches` is the callable class ``map_batches`` runs in each actor of a pool::

    from splitter.integrations.ray import AskBatches

    answered = dataset.map_batches(
        AskBatches,
        fn_constructor_kwargs={"model": "gpt-4o-mini", "policy": policy},
        compute=ray.data.ActorPoolStrategy(size=8),
        batch_size=200,
    )

Each actor builds one :class:`~splitter.Splitter` (one openai client, one endpoint's
learning) and keeps it for every batch it is given; the policy's ``Limits(shared=...)``
puts every actor on one Redis budget for the key, so the pool stays under the key's
limits together. A batch comes back with its columns as they were, plus the answer and
the error of each row (one of the two is None). Nothing here imports Ray: Ray imports
this class by name in its workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import openai

from .._exceptions import InvalidInputError, SplitterError
from .._policy import Policy
from .._questions import Answer
from .._splitter import Splitter

__all__ = ["AskBatches"]

ClientFactory = Callable[[], openai.OpenAI]


class AskBatches:
    """Answers a batch's question column; made once per Ray actor.

    :param model: the model every question is asked of.
    :param policy: splitter's policy; its ``limits.shared`` must name the Redis server the
        actors share (a pool of N actors on N private budgets would send N times the
        limit).
    :param client: makes the actor's ``openai.OpenAI`` client (or a subclass such as
        ``AzureOpenAI``), called once, in the actor; by default ``openai.OpenAI()``, which
        reads ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` from the worker's environment (Ray's
        ``runtime_env={"env_vars": ...}``), so the key is not pickled with the task.
    :param question_column: the column holding each row's question (a string).
    :param answer_column: the column added with each answer's text (None when it failed).
    :param error_column: the column added with each failure, as ``"ErrorClass: message"``
        (None when answered).
    :param system: a system prompt for every question.
    :param params: further keywords of every request (``max_tokens``, ``temperature``...).
    """

    def __init__(
        self,
        *,
        model: str,
        policy: Policy,
        client: ClientFactory | None = None,
        question_column: str = "question",
        answer_column: str = "answer",
        error_column: str = "error",
        system: str | None = None,
        **params: Any,
    ) -> None:
        if policy.limits.shared is None:
            raise InvalidInputError(
                "AskBatches needs a budget the actors share: "
                "Policy(limits=Limits(shared=SharedBudget(url='redis://...')))"
            )
        self.model = model
        self.question_column = question_column
        self.answer_column = answer_column
        self.error_column = error_column
        self.system = system
        self.params = params
        self.client = client() if client is not None else openai.OpenAI()
        self.splitter = Splitter(self.client, policy=policy, model=model)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch's columns, with the answer and error columns added (numpy arrays, as
        Ray's default ``batch_format="numpy"`` hands them; a pandas batch works too)."""
        import numpy as np  # Ray's own dependency; only needed once Ray calls this

        questions = list(batch[self.question_column])
        answers, errors = self.answer(questions)
        out = {name: batch[name] for name in batch}
        out[self.answer_column] = np.array(answers, dtype=object)
        out[self.error_column] = np.array(errors, dtype=object)
        return out

    def answer(self, questions: Sequence[Any]) -> tuple[list[str | None], list[str | None]]:
        """Each question's answer text and error, in order. A question splitter refuses
        (not a string, empty, too long) gets its error and stops nothing else."""
        answers: list[str | None] = [None] * len(questions)
        errors: list[str | None] = [None] * len(questions)
        pending = list(range(len(questions)))
        while pending:
            try:
                result = self.splitter.ask_many(
                    [questions[i] for i in pending], system=self.system, **self.params
                )
            except InvalidInputError as exc:
                if exc.index is None:  # a keyword or the policy: every row would fail alike
                    raise
                errors[pending.pop(exc.index)] = _described(exc)
                continue
            for row, found in zip(pending, result, strict=True):
                answers[row], errors[row] = _outcome(found)
            break
        return answers, errors

    def close(self) -> None:
        """Close the actor's openai client; Ray Data calls ``__del__`` (so this) when it
        shuts the pool down gracefully."""
        self.client.close()

    def __del__(self) -> None:
        if "client" in vars(self):  # not when __init__ stopped before making it
            self.close()


def _outcome(answer: Answer) -> tuple[str | None, str | None]:
    if answer.error is not None:
        return None, _described(answer.error)
    return answer.text, None


def _described(error: SplitterError) -> str:
    return f"{type(error).__name__}: {error}"
