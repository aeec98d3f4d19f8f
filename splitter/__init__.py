"""splitter: ask many questions of an LLM at once, merged or fanned out, in your order.

The public API lives here; everything in ``splitter._*`` is private.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from ._cache import Cache
from ._checkpoint import FileRun
from ._cost_model import ServiceEstimate
from ._decompose import Decomposition, Part, decompose
from ._events import (
    AnswerDone,
    AnswerFailed,
    BatchFinished,
    BatchPlanned,
    BatchStarted,
    Event,
    RateLimitWait,
    RequestFinished,
    RequestStarted,
    RetryScheduled,
)
from ._exceptions import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    BudgetError,
    DeadlineExceededError,
    DependencyError,
    InvalidInputError,
    InvalidResponseError,
    PartialFailure,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    SplitterError,
    StreamInterruptedError,
)
from ._map import MappedAnswers
from ._planner import Candidate, Group, Plan, Requests
from ._policy import (
    DecomposePolicy,
    Limits,
    MergePolicy,
    Policy,
    RetryPolicy,
    SharedBudget,
    Weighted,
)
from ._pricing import Pricing
from ._progress import Progress
from ._questions import Answer, BatchResult, CompoundAnswer, Question, RunStats, Usage
from ._service_model import Observation, ServiceModel, ServicePrior
from ._splitter import Splitter, aask_many, ask_many
from ._stream import AnswerStream, StreamEvent, SyncAnswerStream
from ._wrap import wrap

try:
    __version__ = _metadata.version("splitter-llm")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "Answer",
    "AnswerDone",
    "AnswerFailed",
    "AnswerStream",
    "BatchFinished",
    "BatchPlanned",
    "BatchResult",
    "BatchStarted",
    "BudgetError",
    "Cache",
    "Candidate",
    "CompoundAnswer",
    "DeadlineExceededError",
    "DecomposePolicy",
    "Decomposition",
    "DependencyError",
    "Event",
    "FileRun",
    "Group",
    "InvalidInputError",
    "InvalidResponseError",
    "Limits",
    "MappedAnswers",
    "MergePolicy",
    "Observation",
    "Part",
    "PartialFailure",
    "Plan",
    "Policy",
    "Pricing",
    "Progress",
    "Question",
    "QuotaExceededError",
    "RateLimitError",
    "RateLimitWait",
    "RequestFinished",
    "RequestStarted",
    "Requests",
    "RetryPolicy",
    "RetryScheduled",
    "RunStats",
    "ServerError",
    "ServiceEstimate",
    "ServiceModel",
    "ServicePrior",
    "SharedBudget",
    "Splitter",
    "SplitterError",
    "StreamEvent",
    "StreamInterruptedError",
    "SyncAnswerStream",
    "Usage",
    "Weighted",
    "__version__",
    "aask_many",
    "ask_many",
    "decompose",
    "wrap",
]

# Reprs, tracebacks and docs show the public path, not the private module.
for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and not isinstance(_obj, str):
        _obj.__module__ = "splitter"
del _name, _obj
