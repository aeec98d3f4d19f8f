"""``wrap(client)``: the openai client as it was, except that a compound prompt is split. One
module a concept: ``_build`` (``wrap``), ``_openai_class`` (the only one touching openai's
private API), ``_route`` (whole or split), ``_reply`` (openai objects), ``_streams``,
``_resources`` (``chat.completions``, ``responses``), ``_owner`` (the wrapper's Splitter)
and ``_gate`` (budget and retries for every request that goes whole)."""

from ._build import wrap
from ._reply import DETAILS_ATTRIBUTE
from ._streams import AsyncSplitStream, SplitStream

__all__ = ["DETAILS_ATTRIBUTE", "AsyncSplitStream", "SplitStream", "wrap"]
