"""The public front doors: every exported name imports and shows the public path, and
``__all__`` is exactly what each public namespace offers."""

from __future__ import annotations

import importlib
import types

import pytest

import splitter

PUBLIC = [
    "splitter",
    "splitter.events",
    "splitter.sim",
    "splitter.testing",
    "splitter.otel",
    "splitter.integrations",
    "splitter.integrations.ray",
]


def offered(module: types.ModuleType, public: list[types.ModuleType]) -> set[str]:
    """The classes and functions ``module`` offers under a public name: made in it or in a
    private module (``splitter._x``, ``splitter.sim._x``), and not another public
    namespace's own name imported for use (``splitter.testing`` uses ``SimService``)."""
    names = set()
    for name, obj in vars(module).items():
        if name.startswith("_") or not isinstance(obj, type | types.FunctionType):
            continue
        owner = obj.__module__
        made_here = owner == module.__name__ or (
            owner.startswith("splitter") and any(p.startswith("_") for p in owner.split("."))
        )
        borrowed = any(
            other is not module and getattr(other, name, None) is obj
            for other in public
            if name in getattr(other, "__all__", ())
        )
        if made_here and not borrowed:
            names.add(name)
    return names


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


@pytest.mark.parametrize("name", PUBLIC)
def test_all_matches_what_the_namespace_offers_both_ways(name: str) -> None:
    """Each name in ``__all__`` exists, and each class or function the namespace offers
    is in its ``__all__`` (nothing public is left out, nothing listed is missing)."""
    public = [importlib.import_module(n) for n in PUBLIC]
    module = importlib.import_module(name)
    assert [n for n in module.__all__ if not hasattr(module, n)] == []
    assert sorted(offered(module, public) - set(module.__all__)) == []


def test_the_check_finds_a_name_left_out_of_all() -> None:
    """The both-ways check is not vacuous: a function made in a module but not listed, or
    a private module's class imported under a public name, is found."""
    module = types.ModuleType("splitter.fake")
    module.__all__ = ["listed"]  # type: ignore[attr-defined]

    def listed() -> None: ...

    def forgotten() -> None: ...

    for f in (listed, forgotten):
        f.__module__ = "splitter.fake"
        setattr(module, f.__name__, f)
    module.InFlightMeter = splitter._meter.InFlightMeter  # type: ignore[attr-defined]
    module.Splitter = splitter.Splitter  # type: ignore[attr-defined]  # another door's: borrowed
    assert offered(module, [splitter]) == {"listed", "forgotten", "InFlightMeter"}


def test_the_events_namespace_holds_the_same_classes_as_the_top_level() -> None:
    """``splitter.events.X`` is ``splitter.X`` for every event class (one class, two doors)."""
    import splitter.events

    for name in splitter.events.__all__:
        if name in splitter.__all__:
            assert getattr(splitter.events, name) is getattr(splitter, name), name
    assert {n for n in splitter.__all__ if n.endswith(("Done", "Failed", "Wait"))} <= set(
        splitter.events.__all__
    )
