"""What goes in (``Question``) and what comes out (``Answer``, ``BatchResult``).

Every question carries a stable ``id`` (the caller's, or its input position), and every
answer is stored in the slot of its question's index: reassembly never depends on the
order in which responses happen to arrive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ._exceptions import InvalidInputError, PartialFailure

if TYPE_CHECKING:
    from ._decompose import Decomposition
    from ._exceptions import SplitterError
    from ._planner import Plan
    from ._pricing import Pricing

#: How an answer was obtained: its own request, a merged one, re-asked alone after a merge,
#: or given without a request (the response cache, or an identical question of the batch).
Via = Literal["single", "merged", "repair", "cache"]

__all__ = ["Answer", "BatchResult", "CompoundAnswer", "Question", "RunStats", "Usage", "Via"]


class Question(BaseModel):
    """One question, with the per-question knobs the planner may use.

    ``system``, ``context``, ``messages`` and ``params`` make the question's request its own:
    each one given replaces (``system``, ``context``) or extends (``params``, key by key) what
    the batch passes (``ask_many(system=..., context=..., **params)``); ``max_tokens`` here
    wins over both. Questions are merged into one request only when their requests agree on
    all of these, and a question with ``messages`` (a conversation before it) is always asked
    alone.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(description="The question as the model should read it.")
    id: str | None = Field(None, description="Your key for it; defaults to its input position.")
    max_tokens: int | None = Field(None, ge=1, description="Cap on this answer's length.")
    expected_tokens: int | None = Field(None, ge=1, description="Your guess of the answer length.")
    depends_on: tuple[int | str, ...] = Field(
        (),
        description="Questions whose answers this one needs: their ids, or 0-based positions. "
        "It is sent once they are answered, with their answers in its prompt.",
    )
    system: str | None = Field(
        None,
        description="Its own system prompt, in place of the batch's system=; '' for none.",
    )
    context: str | None = Field(
        None,
        description="Its own shared context (a document the question is about), in place of "
        "the batch's context=; '' for none. Sent after the system prompt (docs/context.md).",
    )
    messages: tuple[dict[str, Any], ...] = Field(
        (),
        description="Chat messages sent before the question (its history), as they are; "
        "after the system prompt. A question with history is never merged with another.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Request keywords of its own (temperature, max_tokens, response_format, "
        "...), each over the batch's keyword of the same name.",
    )
    metadata: Any = Field(
        None,
        description="Anything of yours carried to its answer (Answer.question.metadata) "
        "and to splitter run's output line; never sent.",
    )

    def __hash__(self) -> int:
        # Over the hashable fields only (messages, params and metadata may hold dicts):
        # equal questions still hash alike.
        fields = (self.text, self.id, self.max_tokens, self.expected_tokens, self.depends_on)
        return hash((*fields, self.system, self.context))

    @property
    def has_own_request(self) -> bool:
        """Whether it brings a system prompt, history or request keywords of its own."""
        own = self.system is not None or self.context is not None
        return own or bool(self.messages) or bool(self.params)

    @field_validator("system", "context")
    @classmethod
    def _sendable(cls, text: str | None, info: ValidationInfo) -> str | None:
        what = "the system prompt" if info.field_name == "system" else "the context"
        if text is not None and (at := unsendable_at(text)) is not None:
            raise ValueError(_UNSENDABLE.format(what=what, at=at))
        return text

    @field_validator("messages", mode="before")
    @classmethod
    def _chat_messages(cls, messages: object) -> tuple[dict[str, Any], ...]:
        if isinstance(messages, str | bytes | dict) or not isinstance(messages, list | tuple):
            raise ValueError(
                f"messages must be a list of chat messages, not {type(messages).__name__}"
            )
        return tuple(_chat_message(k, m) for k, m in enumerate(messages))

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("the question is blank")
        if (at := unsendable_at(text)) is not None:
            raise ValueError(_UNSENDABLE.format(what="the question", at=at))
        return text


_UNSENDABLE = "{what} holds a lone surrogate at position {at}, which cannot be sent as UTF-8"
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _chat_message(k: int, message: object) -> dict[str, Any]:
    """``messages[k]`` checked as a chat message: a dict with a known ``role`` and a
    ``content`` (an assistant's may have ``tool_calls`` instead); a copy of it."""
    if not isinstance(message, dict):
        raise ValueError(
            f"messages[{k}] must be a chat message (a dict with 'role' and 'content'), "
            f"not {type(message).__name__}"
        )
    role = message.get("role")
    if role not in _ROLES:
        raise ValueError(f"messages[{k}] has role {role!r}, not one of {sorted(_ROLES)}")
    if "content" not in message and not (role == "assistant" and "tool_calls" in message):
        raise ValueError(f"messages[{k}] has no 'content'")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise ValueError(
            f"messages[{k}] content must be a string or a list of parts, "
            f"not {type(content).__name__}"
        )
    if isinstance(content, str) and (at := unsendable_at(content)) is not None:
        raise ValueError(_UNSENDABLE.format(what=f"messages[{k}] content", at=at))
    return dict(message)


def unsendable_at(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (which no request body can carry), if it does."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_sendable(text: str | None, what: str) -> None:
    """``InvalidInputError`` naming ``what`` when ``text`` cannot be sent as UTF-8."""
    if text is not None and (at := unsendable_at(text)) is not None:
        raise InvalidInputError(_UNSENDABLE.format(what=what, at=at))


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens billed. ``cached_tokens`` is the part of ``prompt_tokens`` the service read
    from its prompt cache (``usage.prompt_tokens_details.cached_tokens``), often billed at
    a lower price: see :class:`Pricing` and :meth:`cost`."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )

    def cost(self, pricing: Pricing) -> float:
        """What these tokens cost at ``pricing`` (in its currency)."""
        return pricing.cost(self.prompt_tokens, self.cached_tokens, self.completion_tokens)


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome for one question: its text, or the error that stopped it."""

    index: int
    question: Question
    text: str | None
    error: SplitterError | None = None
    usage: Usage = field(default_factory=Usage)
    attempts: int = 0
    request_id: str | None = None  # the provider's id of the request that answered it
    finish_reason: str | None = None
    via: Via = "single"
    wave: int = 0  # 0 for questions sent at once; n for those sent after n rounds of answers
    #: With ``response_format=`` a pydantic class: the answer validated into an instance of
    #: it; a ``json_schema`` dict: the answer's JSON value; None otherwise (or on error).
    parsed: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def id(self) -> str:
        return self.question.id if self.question.id is not None else str(self.index)


@dataclass(frozen=True, slots=True)
class RunStats:
    """What running a batch took."""

    wall_time: float = 0.0
    requests: int = 0  # HTTP requests sent, retries included
    retries: int = 0
    rate_limited: int = 0  # 429 responses received
    failed: int = 0  # questions left without an answer
    repaired: int = 0  # questions re-asked alone: missed by a merged reply, or invalid JSON
    predicted_wall_time: float | None = None  # what the planner expected wall_time to be
    cache_hits: int = 0  # questions answered without a request (Policy.cache)
    cost: float | None = None  # what the batch's usage cost, with Policy.pricing set
    canaries: int = 0  # merged items also asked alone, to check the merged answer
    canary_disagreements: int = 0  # of those, merged answers replaced by the solo one


@dataclass(frozen=True, slots=True)
class BatchResult(Sequence[Answer]):
    """The answers in the caller's order, with totals."""

    answers: tuple[Answer, ...]
    stats: RunStats = field(default_factory=RunStats)
    plan: Plan | None = None  # how the questions were sent, with every candidate priced
    # With dependencies: one plan per set of questions sent together, in the order sent.
    plans: tuple[Plan, ...] = ()

    @overload
    def __getitem__(self, index: int) -> Answer: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Answer]: ...
    def __getitem__(self, index: int | slice) -> Answer | Sequence[Answer]:
        return self.answers[index]

    def __len__(self) -> int:
        return len(self.answers)

    def __iter__(self) -> Iterator[Answer]:
        return iter(self.answers)

    @property
    def texts(self) -> list[str | None]:
        """Each answer's text (None where it failed), in input order."""
        return [a.text for a in self.answers]

    @property
    def usage(self) -> Usage:
        return sum((a.usage for a in self.answers), Usage())

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.answers)

    @property
    def failed(self) -> Sequence[Answer]:
        return [a for a in self.answers if not a.ok]

    def raise_for_errors(self) -> BatchResult:
        """Raise ``PartialFailure`` if any question failed; return self otherwise."""
        if not self.ok:
            raise PartialFailure(self)
        return self

    def explain(self) -> str:
        """How the batch was answered: from the cache, and each plan's table (see
        :meth:`Plan.explain`) for the questions that were sent."""
        lines = []
        if self.stats.cache_hits:
            sent = len(self.answers) - self.stats.cache_hits
            lines.append(
                f"cache: {self.stats.cache_hits} of {len(self.answers)} questions answered "
                f"without a request; {sent} sent"
            )
        plans = self.plans or ((self.plan,) if self.plan is not None else ())
        lines.extend(plan.explain() for plan in plans)
        usage = self.usage
        if self.stats.cost is not None:
            lines.append(
                f"billed: {usage.prompt_tokens} prompt tokens ({usage.cached_tokens} cached) + "
                f"{usage.completion_tokens} completion tokens = {self.stats.cost:.6f}"
            )
        return "\n".join(lines) if lines else "nothing was sent"


@dataclass(frozen=True, slots=True)
class CompoundAnswer:
    """The answer to one prompt holding several questions (``Splitter.ask``).

    ``text`` is every part's answer under the prompt's own label ("1.", "(a)", ...; parts
    without one are numbered), in the prompt's order; ``parts`` the per-part answers.
    """

    text: str
    parts: BatchResult
    decomposition: Decomposition
    decomposed_by: Literal["heuristic", "llm"] = "heuristic"
    decompose_usage: Usage = field(default_factory=Usage)  # the llm decomposer's tokens

    @property
    def ok(self) -> bool:
        return self.parts.ok

    @property
    def usage(self) -> Usage:
        return self.parts.usage + self.decompose_usage
