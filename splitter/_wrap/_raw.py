"""The raw doors for a split request: what ``with_raw_response`` / ``with_streaming_response``
return when splitter answered the request itself. Beside ``_openai_class``, the one module
touching openai's private API (its response classes and the header that marks the doors)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from openai._constants import RAW_RESPONSE_HEADER
from openai._legacy_response import LegacyAPIResponse
from openai._models import FinalRequestOptions
from openai._response import APIResponse, AsyncAPIResponse

from .._compat import http_module
from .._questions import Answer, CompoundAnswer
from ._reply import DETAILS_ATTRIBUTE

__all__ = ["door_of", "through_door"]


def door_of(kwargs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``kwargs`` without the raw doors' marker header, and which door it marked: ``"true"``
    (``with_raw_response``), ``"stream"`` (``with_streaming_response``) or None."""
    headers = kwargs.get("extra_headers")
    if not isinstance(headers, Mapping) or RAW_RESPONSE_HEADER not in headers:
        return kwargs, None
    rest = {k: v for k, v in headers.items() if k != RAW_RESPONSE_HEADER}
    return {**kwargs, "extra_headers": rest or None}, str(headers[RAW_RESPONSE_HEADER])


def through_door(
    client: Any, door: str | None, reply: Any, cast_to: type[Any], path: str, *, is_async: bool
) -> Any:
    """``reply`` as the door it was asked through returns it: itself (the plain call), or a
    raw response whose ``parse()`` gives it, with the first part's request id as
    ``x-request-id`` (every part's in ``x-splitter-request-ids``) and its JSON as the body."""
    if door is None:
        return reply
    ids = _request_ids(getattr(reply, DETAILS_ATTRIBUTE, None))
    headers = {"content-type": "application/json"}
    if ids:
        headers["x-request-id"] = ids[0]
        headers["x-splitter-request-ids"] = ",".join(ids)
    to_json = getattr(reply, "to_json", None)
    body = to_json(indent=None) if callable(to_json) else json.dumps(None)
    http = http_module()
    url = f"{str(client.base_url).rstrip('/')}/{path.lstrip('/')}"
    raw = http.Response(
        200, headers=headers, content=body.encode(), request=http.Request("POST", url)
    )
    options = FinalRequestOptions.construct(method="post", url=path)
    cls: type[Any] = LegacyAPIResponse
    if door == "stream":
        cls = AsyncAPIResponse if is_async else APIResponse
    response = cls(
        raw=raw, cast_to=cast_to, client=client, stream=False, stream_cls=None, options=options
    )
    response._parsed_by_type[cast_to] = reply  # parse() gives the reply itself, details and all
    return response


def _request_ids(details: Answer | CompoundAnswer | None) -> list[str]:
    if isinstance(details, CompoundAnswer):
        return [a.request_id for a in details.parts if a.request_id]
    if isinstance(details, Answer) and details.request_id:
        return [details.request_id]
    return []
