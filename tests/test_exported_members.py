"""The public front door: every exported name imports and shows the public path."""

from __future__ import annotations

import splitter


def test_all_names_import_and_are_public() -> None:
    """Every name in __all__ exists, and classes/functions report module 'splitter'."""
    for name in splitter.__all__:
        obj = getattr(splitter, name)
        if callable(obj):
            assert obj.__module__ == "splitter", name


def test_all_is_sorted_and_has_no_private_names() -> None:
    """__all__ is sorted and exports nothing private."""
    assert sorted(splitter.__all__) == splitter.__all__
    assert not [n for n in splitter.__all__ if n.startswith("_") and n != "__version__"]
