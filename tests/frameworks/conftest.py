"""The framework tests' ``sim`` fixture (helpers are in ``framework_support``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from framework_support import Sim, running_sim


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[Sim]:
    """The simulator on a real loopback port, with wrapped clients for it (closed after)."""
    with running_sim() as found:
        yield found
        await found.close()


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: pydantic-ai, openai-agents and LangChain start asyncio tasks themselves."""
    return "asyncio"
