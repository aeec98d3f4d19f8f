"""Refusals: the error responses of the service (401, 400, the limiters' 429s, injected faults).

Each function fills in the call's status and error code and returns the ``SimResponse`` a
real service of that kind would send, worded as it words it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from splitter.sim import _wire
from splitter.sim._exchange import JSON, Call, SimResponse
from splitter.sim._faults import FaultKind
from splitter.sim._limits import format_reset

if TYPE_CHECKING:
    from splitter.sim._faults import Faults
    from splitter.sim._limits import Admission, SimLimits
    from splitter.sim._profiles import Profile
    from splitter.sim._requests import GenerationRequest

__all__ = [
    "FAULT_ERRORS",
    "context_too_long",
    "error",
    "fault_error",
    "rate_limited",
    "retry_headers",
    "schema_unsupported",
    "unauthorized",
    "unservable",
]

_NGINX_429 = (
    b"<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body>\r\n"
    b"<center><h1>429 Too Many Requests</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
FAULT_ERRORS: dict[FaultKind, tuple[int, str, str | None, str]] = {
    FaultKind.QUOTA: (
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
        "insufficient_quota",
    ),
    FaultKind.E500: (
        500,
        "The server had an error while processing your request. Sorry about that!",
        None,
        "server_error",
    ),
    FaultKind.E502: (502, "Bad gateway.", None, "server_error"),
    FaultKind.E503: (
        503,
        "The server is overloaded or not ready yet.",
        None,
        "server_error",
    ),
}


def error(
    call: Call,
    status: int,
    message: str,
    type_: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> SimResponse:
    """OpenAI's error envelope with ``status``; the call records it."""
    call.status = status
    call.error_code = call.error_code or code or type_
    body = _wire.error_body(message, type_, param=param, code=code)
    return SimResponse(status, [JSON, *(headers or [])], body)


def unauthorized(call: Call, api_key: str | None, authorization: str | None) -> SimResponse | None:
    """OpenAI's 401 when a key is required and another was given, else None."""
    if api_key is None or authorization == f"Bearer {api_key}":
        return None
    given = (authorization or "").removeprefix("Bearer ")
    shown = f"{given[:3]}{'*' * max(0, len(given) - 7)}{given[-4:]}" if given else "(none)"
    message = (
        f"Incorrect API key provided: {shown}. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )
    return error(call, 401, message, "invalid_request_error", code="invalid_api_key")


def rate_limited(
    call: Call, limits: SimLimits, verdict: Admission, model: str, cost: int, time_scale: float
) -> SimResponse:
    """The 429 of the limiter ``limits`` describes, for a request ``verdict`` refused."""
    kind = verdict.limit or "requests"
    real = verdict.retry_after * time_scale
    retry = retry_headers(real) if limits.sends_retry_after else []
    if limits.kind == "leaky_bucket":  # nginx answers itself, with its HTML page
        call.status, call.error_code = 429, "rate_limit_exceeded"
        return SimResponse(429, [("content-type", "text/html"), *retry], _NGINX_429)
    if limits.kind != "token_bucket":
        message = _limiter_message(limits, kind, real if retry else None)
        return error(call, 429, message, kind, code="rate_limit_exceeded", headers=retry)
    limit = limits.rpm if kind == "requests" else limits.tpm
    unit = "RPM" if kind == "requests" else "TPM"
    where = f"for {model} in organization org-splitter-sim on {kind} per min ({unit})"
    if verdict.too_large:
        message = f"Request too large {where}: Limit {limit}, Requested {cost}."
        return error(call, 429, message, kind, code="rate_limit_exceeded")
    wait = format_reset(real)
    message = f"Rate limit reached {where}: Limit {limit}. Please try again in {wait}."
    return error(call, 429, message, kind, code="rate_limit_exceeded", headers=retry)


def fault_error(call: Call, faults: Faults, fault: FaultKind, time_scale: float) -> SimResponse:
    """The error response of an injected fault (a 429, a quota error or a 5xx)."""
    if fault is FaultKind.RATE_LIMIT:
        real = faults.retry_after * time_scale
        message = f"Rate limit reached (simulated). Please try again in {format_reset(real)}."
        return error(
            call, 429, message, "requests", code="rate_limit_exceeded", headers=retry_headers(real)
        )
    status, message, code, type_ = FAULT_ERRORS[fault]
    call.error_code = code or type_
    return error(call, status, message, type_, code=code)


def context_too_long(call: Call, window: int, requested: int) -> SimResponse:
    """OpenAI's 400 ``context_length_exceeded``."""
    message = (
        f"This model's maximum context length is {window} tokens. "
        f"However, you requested {requested} tokens."
    )
    return error(
        call,
        400,
        message,
        "invalid_request_error",
        param="messages",
        code="context_length_exceeded",
    )


def _limiter_message(limits: SimLimits, kind: str, real_wait: float | None) -> str:
    """The 429 message of a limiter that is not OpenAI's (its wait, when it tells it)."""
    if limits.kind == "azure":
        # Azure OpenAI's wording; "call rate limit" for requests, "token rate limit" for tokens.
        which = "call" if kind == "requests" else "token"
        after = (
            ""
            if real_wait is None
            else f" Please retry after {max(1, math.ceil(real_wait))} seconds."
        )
        return (
            "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
            f"2024-10-21 have exceeded {which} rate limit of your current OpenAI S0 pricing tier."
            f"{after}"
        )
    after = "" if real_wait is None else f" Please try again in {format_reset(real_wait)}."
    return f"Rate limit exceeded: {limits.limit} requests per {limits.window:g} s.{after}"


def retry_headers(real_seconds: float) -> list[tuple[str, str]]:
    """``retry-after`` in whole seconds (as OpenAI sends it) and the precise ``retry-after-ms``."""
    return [
        ("retry-after", str(max(1, math.ceil(real_seconds)))),
        ("retry-after-ms", str(max(0, round(real_seconds * 1000)))),
    ]


def schema_unsupported(call: Call, api: str) -> SimResponse:
    """The 400 of a server that cannot enforce a ``json_schema`` response format."""
    param = "response_format" if api == "chat" else "text.format"
    message = (
        f"Invalid parameter: '{param}' of type 'json_schema' is not supported with this model."
    )
    return error(call, 400, message, "invalid_request_error", param=param)


def unservable(call: Call, profile: Profile, request: GenerationRequest) -> SimResponse | None:
    """The 400 of a request the deployment cannot serve at all: longer than its context
    window (prompt and ``max_tokens``), or a ``json_schema`` it cannot enforce; else None."""
    requested = call.prompt_tokens + (request.max_tokens or 0)
    if requested > profile.context_window:
        return context_too_long(call, profile.context_window, requested)
    if request.response_format and not profile.structured_outputs:
        return schema_unsupported(call, request.api)
    return None
