"""One exception tree for everything splitter raises or records on an answer.

    SplitterError
    ├── InvalidInputError (also ValueError)   a question or argument is unusable; names the item
    ├── APIError                               a request did not produce an answer
    │   ├── APIStatusError                     the service answered with an error status
    │   │   ├── RateLimitError                 429: retried after the service's retry-after
    │   │   │   └── QuotaExceededError         429 insufficient_quota: never retried, it cannot pass
    │   │   └── ServerError                    5xx: retried
    │   ├── APIConnectionError                 no usable HTTP response (reset, refused, ...)
    │   │   └── APITimeoutError                the per-request timeout passed
    │   ├── InvalidResponseError               a 2xx whose body holds no answer
    │   └── StreamInterruptedError             a stream broke after you saw part of it: not retried
    ├── BudgetError                            a request larger than the whole token budget
    ├── DeadlineExceededError                  the batch deadline passed before this question's turn
    ├── DependencyError                        not asked: a question it depends on failed
    └── PartialFailure                         raise_on_error=True and some questions failed

openai's and the HTTP library's exceptions are translated in exactly one place
(``splitter._openai``) and kept as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._questions import Answer, BatchResult

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "BudgetError",
    "DeadlineExceededError",
    "DependencyError",
    "InvalidInputError",
    "InvalidResponseError",
    "PartialFailure",
    "QuotaExceededError",
    "RateLimitError",
    "ServerError",
    "SplitterError",
    "StreamInterruptedError",
]


class SplitterError(Exception):
    """Root of every exception splitter raises."""


class InvalidInputError(SplitterError, ValueError):
    """A question or argument cannot be sent; ``index`` names the question when there is one."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class APIError(SplitterError):
    """A request to the service did not produce an answer."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class APIStatusError(APIError):
    """The service answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        request_id: str | None = None,
        code: str | None = None,
        type: str | None = None,
        retry_after: float | None = None,
        rate_headers: Mapping[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message, request_id=request_id)
        self.status_code = status_code
        #: The request parameter the error body names, if any (e.g. "response_format").
        self.param = param
        #: The response's ``x-ratelimit-*`` headers (the budget reads them on errors too).
        self.rate_headers: Mapping[str, str] = rate_headers or {}
        self.code = code
        #: The error body's type; for a 429, which limit ran out ("requests" or "tokens").
        self.type = type
        #: Seconds the service asked us to wait (retry-after-ms / retry-after), if it said.
        self.retry_after = retry_after


class RateLimitError(APIStatusError):
    """429: the rate limit is exhausted for now."""


class QuotaExceededError(RateLimitError):
    """429 ``insufficient_quota``: the account is out of credit; retrying cannot help."""


class ServerError(APIStatusError):
    """5xx: the service failed; worth retrying."""


class APIConnectionError(APIError):
    """No usable HTTP response arrived (connection refused or reset, protocol error)."""


class APITimeoutError(APIConnectionError):
    """The per-request timeout passed before the answer arrived."""


class InvalidResponseError(APIError):
    """The service answered 2xx but the body holds no usable answer."""


class StreamInterruptedError(APIError):
    """A streamed answer broke off after part of it had reached you; it is not re-asked,
    because a second attempt could not continue the text you were already shown."""


class BudgetError(SplitterError):
    """The request can never fit the rate-limit budget (Limits(oversized="error"))."""


class DeadlineExceededError(SplitterError):
    """The batch's overall deadline passed before this question was answered."""


class DependencyError(SplitterError):
    """Not asked: a question whose answer it needs failed (``needs`` holds its index)."""

    def __init__(self, message: str, *, needs: int) -> None:
        super().__init__(message)
        self.needs = needs


class PartialFailure(SplitterError):
    """Some questions failed; ``result`` holds every answer, ``failed`` the failed ones."""

    def __init__(self, result: BatchResult) -> None:
        self.result = result
        self.failed: Sequence[Answer] = result.failed
        shown = ", ".join(f"#{a.index} ({type(a.error).__name__})" for a in self.failed[:5])
        more = f" and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        first = f"; #{self.failed[0].index}: {self.failed[0].error}" if self.failed else ""
        super().__init__(
            f"{len(self.failed)} of {len(result)} questions failed: {shown}{more}{first}"
        )
