"""``wrap(client)``: the openai client as it was, except that a compound prompt is split.

The wrapped object is a real instance of the client's own class (a subclass made per
``wrap`` call), so ``isinstance``, type checkers and every attribute, method, resource,
``with_options``, ``with_raw_response``, ``with_streaming_response``, context manager and
``close`` behave as before. ``chat.completions.create`` looks at the request: when it
is one user message (with optional system/developer messages) holding several independent
sub-questions, and nothing in it must stay whole (tools or functions, ``n > 1``,
``response_format``, audio, non-text content, earlier turns), the parts are planned and run
by a ``Splitter`` on an unwrapped copy of the client, and the caller gets one
``ChatCompletion`` with the answers in the prompt's own numbering, ``usage`` summed, and
splitter's ``CompoundAnswer`` as ``completion.splitter_details``. With ``stream=True`` the
answer comes as ``ChatCompletionChunk``s in the same numbering: the first part live, token
by token, the later ones as their turn comes. ``responses.create`` splits the same way
when its ``input`` is one text (or one user message) and it asks for nothing beyond
``instructions``, ``temperature``, ``top_p`` and ``max_output_tokens``; it returns one
``Response``. Everything else goes to openai as it is, but through the rate-limit budget
and splitter's one retry layer (``_gate``).
"""

from __future__ import annotations

from typing import TypeVar

import openai

from .._events import EventHook, check_hook
from .._exceptions import InvalidInputError
from .._policy import Policy
from ._openai_class import _splitting_class
from ._owner import _unwrapped_class

ClientT = TypeVar("ClientT", openai.OpenAI, openai.AsyncOpenAI)


def wrap(
    client: ClientT, *, policy: Policy | None = None, on_event: EventHook | None = None
) -> ClientT:
    """``client`` with compound prompts split, planned and run by splitter.

    Works for ``openai.OpenAI``, ``AsyncOpenAI``, ``AzureOpenAI`` and ``AsyncAzureOpenAI``;
    the result is an instance of the same class, sharing the client's HTTP connections.
    ``on_event`` is called with every event of every split request's batch (as
    ``Splitter(on_event=...)``); clones made by ``with_options``/``copy`` keep it.
    """
    if not isinstance(client, openai.OpenAI | openai.AsyncOpenAI):
        raise InvalidInputError(
            f"wrap() takes an openai.OpenAI or openai.AsyncOpenAI client, "
            f"not {type(client).__name__}"
        )
    hook = check_hook(on_event)
    base = _unwrapped_class(type(client))
    wrapped = client.copy()
    wrapped.__class__ = _splitting_class(base, policy if policy is not None else Policy(), hook)
    return wrapped
