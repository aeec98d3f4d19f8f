"""``decompose(prompt)``: the independent sub-questions in one prompt, and which ones need
another's answer. ``_split`` chooses the parts from the units ``_units`` cuts, reading each
with ``_reading`` by the rule tables of ``_rules``; ``_dependencies`` finds what each part
needs; ``_types`` holds ``Part`` and ``Decomposition``."""

from ._split import decompose
from ._types import Decomposition, Part

__all__ = ["Decomposition", "Part", "decompose"]
