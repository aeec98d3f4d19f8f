"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from splitter.testing import forget_endpoints, virtual_time

# CI draws the same hypothesis examples every run, so a red build is a reproducible bug
# rather than a roll of the dice; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> Iterator[str | tuple[str, dict[str, Any]]]:
    """Each backend in turn; on virtual time for tests marked ``virtual_time``."""
    if request.node.get_closest_marker("virtual_time") is None:
        yield str(request.param)
        return
    with virtual_time(request.param) as backend:
        yield backend


@pytest.fixture(params=["inprocess", "server"])
def door(request: pytest.FixtureRequest) -> str:
    """Which door of the simulated service a test reaches it through."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _fresh_endpoints() -> Iterator[None]:
    """Each test starts with nothing learned: endpoints are process-wide, and a loopback
    port (so a base URL) may be reused by the next test's server."""
    forget_endpoints()
    yield
    forget_endpoints()
