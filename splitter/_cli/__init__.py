"""The ``splitter`` command: ``demo``, ``bench``, ``ask``, ``run`` and ``plan``; one module a
command (``_main`` parses and dispatches)."""

from ._main import main

__all__ = ["main"]
