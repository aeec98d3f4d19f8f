"""With ``_raw`` (its raw-response classes), the only module that touches openai's private
client API (``request``, ``_process_response``, ``_idempotency_key``): the per-``wrap``
subclass of the client's own class."""

from __future__ import annotations

import functools
from typing import Any

import openai

from .._budget import _wire as wire
from .._events import EventHook
from .._policy import Policy
from .._sync import run_sync
from . import _gate as gate
from ._owner import _splitter_for
from ._resources import (
    _AsyncSplittingChat,
    _AsyncSplittingResponses,
    _SplittingChat,
    _SplittingResponses,
)


def _splitting_class(
    base: type[Any], policy: Policy, on_event: EventHook | None = None
) -> type[Any]:
    """A subclass of ``base`` whose ``chat`` and ``responses`` split and whose every other
    request passes the gate (budget, retries); ``policy`` rides on the class so that
    ``with_options``/``copy`` (which build ``self.__class__(...)``) keep splitting, and so
    does ``on_event``, the hook of the wrapped client's Splitter."""
    is_async = issubclass(base, openai.AsyncOpenAI)
    chat_cls = _AsyncSplittingChat if is_async else _SplittingChat
    responses_cls = _AsyncSplittingResponses if is_async else _SplittingResponses

    def chat(self: Any) -> Any:
        return chat_cls(self)

    def responses(self: Any) -> Any:
        return responses_cls(self)

    def gate_options(self: Any, options: Any) -> dict[str, Any]:
        if options.idempotency_key is None and options.method.lower() != "get":
            # One key for every attempt, as openai keeps it across its own retries.
            options = options.model_copy()
            options.idempotency_key = self._idempotency_key()
        splitter = _splitter_for(self)
        plain = splitter._client
        return {
            "options": options,
            "endpoint": lambda model: splitter._endpoint(plain, model),
            "retry": policy.retry,
        }

    async def async_request(
        self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
    ) -> Any:
        async def call(once: Any) -> Any:
            return await base.request(self, cast_to, once, stream=stream, stream_cls=stream_cls)

        wire.install(self)  # the budget's last gate, at the HTTP write
        return await gate.send(call, **gate_options(self, options))

    def sync_request(
        self: Any, cast_to: Any, options: Any, *, stream: bool = False, stream_cls: Any = None
    ) -> Any:
        async def call(once: Any) -> Any:
            return base.request(self, cast_to, once, stream=stream, stream_cls=stream_cls)

        kwargs = gate_options(self, options)
        return run_sync(lambda: gate.send(call, **kwargs))

    async def async_process_response(self: Any, **kwargs: Any) -> Any:
        gate.remember_headers(kwargs["response"].headers)
        return await base._process_response(self, **kwargs)

    def sync_process_response(self: Any, **kwargs: Any) -> Any:
        gate.remember_headers(kwargs["response"].headers)
        return base._process_response(self, **kwargs)

    namespace = {
        "_splitter_policy": policy,
        "_splitter_on_event": staticmethod(on_event) if on_event is not None else None,
        "chat": functools.cached_property(chat),
        "responses": functools.cached_property(responses),
        "request": async_request if is_async else sync_request,
        "_process_response": async_process_response if is_async else sync_process_response,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    }
    return type(base.__name__, (base,), namespace)
