"""A simulated OpenAI-compatible LLM service: realistic, deterministic and fast.

``SimService`` answers chat completions, responses, embeddings and model listings with
checkable answers, timed by a continuous-batching engine under a latency ``Profile``, behind
rate limits (``SimLimits``) and injected ``Faults``. Reach it in-process
(``service.async_client()`` / ``service.transport()``), or over HTTP with ``serve(service)``
or ``python -m splitter.sim``. ``time_scale`` shrinks every simulated second to that many
real seconds.
"""

from __future__ import annotations

from splitter.sim._answers import answer_tag, answer_text
from splitter.sim._faults import Faults
from splitter.sim._limits import SimLimits, format_reset
from splitter.sim._profiles import PROFILES, Profile
from splitter.sim._server import serve
from splitter.sim._service import RequestRecord, SimService

__all__ = [
    "PROFILES",
    "Faults",
    "Profile",
    "RequestRecord",
    "SimLimits",
    "SimService",
    "answer_tag",
    "answer_text",
    "format_reset",
    "serve",
]
