"""splitter: ask many questions of an LLM at once, merged or fanned out, in your order.

The public API lives here; everything in ``splitter._*`` is private.
"""

from __future__ import annotations

from ._exceptions import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    DeadlineExceededError,
    InvalidInputError,
    InvalidResponseError,
    PartialFailure,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    SplitterError,
)
from ._policy import Limits, Policy, RetryPolicy
from ._questions import Answer, BatchResult, Question, RunStats, Usage
from ._splitter import Splitter, aask_many, ask_many

__version__ = "0.1.0.dev0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "Answer",
    "BatchResult",
    "DeadlineExceededError",
    "InvalidInputError",
    "InvalidResponseError",
    "Limits",
    "PartialFailure",
    "Policy",
    "Question",
    "QuotaExceededError",
    "RateLimitError",
    "RetryPolicy",
    "RunStats",
    "ServerError",
    "Splitter",
    "SplitterError",
    "Usage",
    "__version__",
    "aask_many",
    "ask_many",
]

# Reprs, tracebacks and docs show the public path, not the private module.
for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and not isinstance(_obj, str):
        _obj.__module__ = "splitter"
del _name, _obj
