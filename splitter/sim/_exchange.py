"""One exchange's values: the request's state while handled, its log record, the response.

``Call`` is what the service knows of a request while it handles it; it becomes a
``RequestRecord`` in ``SimService.log``. ``SimResponse`` is what a door delivers: a body,
a ``BodyStream``, or an instruction to drop the connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncGenerator, AsyncIterator, Callable

    from splitter.sim._faults import FaultKind

__all__ = ["CLIENT_GONE", "JSON", "SSE", "BodyStream", "Call", "RequestRecord", "SimResponse"]

JSON = ("content-type", "application/json")
SSE = ("content-type", "text/event-stream; charset=utf-8")
CLIENT_GONE = 499  # nginx's code for "client closed request"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one HTTP request; appended to ``SimService.log`` when it ends.

    ``arrived``/``finished`` are the service clock's real seconds (splitter's clock by
    default). ``status`` is 0 when the connection was dropped before a complete response, and
    499 when the client went away first.
    """

    request_id: str
    path: str
    model: str
    arrived: float
    finished: float
    status: int
    error_code: str | None
    stream: bool
    user_text: str
    prompt_tokens: int
    completion_tokens: int
    questions: tuple[str, ...]
    prompt_cache_key: str | None = None  # the request's, when it sent one
    json_schema: bool = False  # it asked for a json_schema response format


class BodyStream:
    """A streaming body: the door iterates it and must ``aclose`` it however delivery ends."""

    def __init__(self, chunks: AsyncGenerator[bytes, None], on_close: Callable[[], None]) -> None:
        self._chunks = chunks
        self._on_close = on_close

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def aclose(self) -> None:
        """Stop the body and release what it holds (its engine slot, its log record)."""
        try:
            with anyio.CancelScope(shield=True):
                await self._chunks.aclose()
        finally:
            self._on_close()

    def abandon(self) -> None:
        """Release without running the body: it was never delivered."""
        self._on_close()


@dataclass(slots=True)
class SimResponse:
    """A response for a door to deliver; ``reset`` means drop the connection instead."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: BodyStream | None = None
    reset: bool = False


@dataclass(slots=True)
class Call:
    """One request's state while it is handled; becomes a ``RequestRecord``."""

    number: int
    path: str
    arrived: float
    rng: random.Random
    fault: FaultKind | None
    started: float = 0.0
    model: str = ""
    status: int = 0
    error_code: str | None = None
    stream: bool = False
    user_text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    questions: tuple[str, ...] = ()
    prompt_cache_key: str | None = None
    json_schema: bool = False
    finished: float | None = None
    closed: bool = False

    timings: dict[str, float] | None = None  # llama-server's, when the profile reports them

    @property
    def request_id(self) -> str:
        return f"req_{self.number}"

    def record(self, finished: float) -> RequestRecord:
        """Its ``SimService.log`` entry, once it ended at ``finished``."""
        return RequestRecord(
            request_id=self.request_id,
            path=self.path,
            model=self.model,
            arrived=self.arrived,
            finished=finished,
            status=self.status,
            error_code=self.error_code,
            stream=self.stream,
            user_text=self.user_text,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            questions=self.questions,
            prompt_cache_key=self.prompt_cache_key,
            json_schema=self.json_schema,
        )
