"""Shared fixtures: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# CI draws the same hypothesis examples every run, so a red build is a reproducible bug
# rather than a roll of the dice; local runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["inprocess", "server"])
def door(request: pytest.FixtureRequest) -> str:
    """Which door of the simulated service a test reaches it through."""
    return str(request.param)
