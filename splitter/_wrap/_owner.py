"""A wrapped client's own ``Splitter``, on an unwrapped copy of the client."""

from __future__ import annotations

from typing import Any, cast

from .._splitter import Splitter


def _unwrapped_class(cls: type[Any]) -> type[Any]:
    while getattr(cls, "_splitter_policy", None) is not None:
        cls = cls.__mro__[1]
    return cls


def _splitter_for(client: Any) -> Splitter:
    """The wrapped client's Splitter, built once, on an unwrapped copy of the client (so
    its own requests are never split again)."""
    found = client.__dict__.get("_splitter_instance")
    if found is None:
        plain = client.copy()
        plain.__class__ = _unwrapped_class(type(client))
        found = Splitter(
            plain,
            policy=type(client)._splitter_policy,
            on_event=getattr(type(client), "_splitter_on_event", None),
        )
        client.__dict__["_splitter_instance"] = found
    return cast(Splitter, found)
