"""Integrations with engines that run splitter on many machines.

Each integration is its own module, imported on purpose (``splitter.integrations.ray``);
none imports its engine: the engine imports splitter, not the other way round.
"""

from __future__ import annotations

__all__: list[str] = []
