"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["inprocess", "server"])
def door(request: pytest.FixtureRequest) -> str:
    """Which door of the simulated service a test reaches it through."""
    return str(request.param)
