"""Compound prompts: one prompt in, its parts out as questions, and their answers put back
together under the prompt's own numbering.

The parts are found by the rules (:func:`splitter.decompose`), or by a model call when
``Policy.decompose`` asks for one and it is priced worth it. :func:`no_answer` is the one
text a failed part's answer reads as, and :meth:`Parts.heading` the one heading a part's
answer goes under, in ``ask``'s whole text as in a stream's chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from ._decompose import Decomposition, decompose
from ._endpoint import Endpoint
from ._estimate import count_tokens, load_encoder
from ._exceptions import InvalidInputError
from ._llm_decompose import INSTRUCTION, parse_plan, request_text
from ._policy import Policy
from ._questions import Answer, BatchResult, CompoundAnswer, Question, Usage, check_sendable

__all__ = ["DECOMPOSE_INSTRUCTION_TOKENS", "PART_TOKENS", "Parts", "find_parts", "no_answer"]

# A decomposition call's token costs, for pricing it before it is made: its instruction is
# read once (about 4 characters a token in English), and each sub-question written back
# costs its text plus the JSON around it ({"text": "...", "depends_on": [..]},).
DECOMPOSE_INSTRUCTION_TOKENS = len(INSTRUCTION) // 4
PART_TOKENS = 12
_log = logging.getLogger("splitter")

# Asks the model its decomposition request: (the request's text, model) -> the batch.
AskModel = Callable[[str, str], Awaitable[BatchResult]]


def no_answer(error: object) -> str:
    """What a part that got no answer reads as in the reassembled text."""
    return f"[no answer: {error}]"


@dataclass(frozen=True, slots=True)
class Parts:
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

    def heading(self, index: int, *, first: bool) -> str:
        """What comes before part ``index``'s answer: nothing for a single question, else
        its label (after a blank line unless it is the ``first`` shown)."""
        if self.decomposition.single:
            return ""
        return f"{'' if first else chr(10) * 2}{self.label(index)} "

    def text(self, result: BatchResult) -> str:
        """The parts' answers under the prompt's own labels, in its order."""
        if self.decomposition.single:
            return result[0].text or ""
        pairs = enumerate(zip(self.decomposition.parts, result, strict=True))
        return "".join(self.heading(k, first=k == 0) + _body(answer) for k, (_, answer) in pairs)

    def answer(self, result: BatchResult) -> CompoundAnswer:
        return CompoundAnswer(self.text(result), result, self.decomposition, self.by, self.spent)


def _body(answer: Answer) -> str:
    return answer.text if answer.ok and answer.text is not None else no_answer(answer.error)


async def find_parts(
    prompt: str,
    model: str,
    found: Decomposition | None,
    *,
    policy: Policy,
    endpoint: Callable[[str], Endpoint],
    ask: AskModel,
) -> Parts:
    """``prompt``'s parts as questions: by the rules (``found``, if the caller already
    applied them), or by a model call (``ask``) when the policy asks for one and it is
    priced worth it on what ``endpoint(model)`` has learned."""
    if not isinstance(prompt, str):
        raise InvalidInputError(f"prompt must be a str, not {type(prompt).__name__}")
    if not prompt.strip():
        raise InvalidInputError("the prompt is blank")
    check_sendable(prompt, "the prompt")
    decomposition = found if found is not None else decompose(prompt)
    by: Literal["heuristic", "llm"] = "heuristic"
    spent = Usage()
    wanted = policy.decompose
    if wanted.mode == "llm":
        decomposer = wanted.model or model
        await load_encoder(decomposer)  # priced in its tokens: made off the event loop
        if _llm_decomposition_pays(prompt, decomposition, decomposer, policy, endpoint):
            found, spent = await _llm_decompose(prompt, decomposer, ask)
            if found is not None:
                decomposition, by = found, "llm"
    return Parts(prompt, decomposition, by, spent)


def _llm_decomposition_pays(
    prompt: str,
    heuristic: Decomposition,
    model: str,
    policy: Policy,
    endpoint_of: Callable[[str], Endpoint],
) -> bool:
    """Is a decomposition call cheap beside answering the prompt? Priced with what the
    endpoint has learned: the call reads the prompt and writes out the sub-questions
    (sized by what the rules found), against one request answering the whole prompt."""
    wanted = policy.decompose
    tokens = count_tokens(prompt, model)
    if tokens < wanted.min_prompt_tokens:
        return False
    endpoint = endpoint_of(model)
    estimate = endpoint.service.estimate()
    written = min(tokens, sum(count_tokens(p.text, model) + PART_TOKENS for p in heuristic.parts))
    call = estimate.latency(tokens + DECOMPOSE_INSTRUCTION_TOKENS, written, 1)
    answer = estimate.latency(tokens, endpoint.lengths.estimate(prompt), 1)
    return call <= wanted.max_share * answer


async def _llm_decompose(
    prompt: str, model: str, ask: AskModel
) -> tuple[Decomposition | None, Usage]:
    """The model's decomposition, or None (with the reason logged) to keep the rules'."""
    result = await ask(request_text(prompt), model)
    answer = result[0]
    if not answer.ok or answer.text is None:
        _log.info("llm decomposition failed (%s); using the rules", answer.error)
        return None, result.usage
    try:
        return parse_plan(answer.text, prompt), result.usage
    except ValueError as exc:
        _log.info("llm decomposition unusable (%s); using the rules", exc)
        return None, result.usage
