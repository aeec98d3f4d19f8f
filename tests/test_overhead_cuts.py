"""Per-request overhead cuts (issue #21): each keeps what is sent and learned, and does
less work per request; checked by counts, never by elapsed time."""

from __future__ import annotations

import openai
import pytest

from splitter import Splitter, _openai
from splitter.sim import SimService
from splitter.testing import open_sim_client

pytestmark = pytest.mark.anyio


async def test_a_new_splitter_reuses_the_platform_its_client_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """openai reads the platform for its headers once per client, in a worker thread; the
    ``with_options`` copy a Splitter sends through starts with what was read already, so a
    burst of first requests starts no thread for it."""
    monkeypatch.setattr(_openai, "_PLATFORM", None, raising=False)
    reads = 0
    real = openai._base_client.get_platform

    def counted() -> openai._base_client.Platform:
        nonlocal reads
        reads += 1
        return real()

    monkeypatch.setattr(openai._base_client, "get_platform", counted)
    async with open_sim_client(SimService("instant")) as client:
        for _ in range(3):
            result = await Splitter(client).aask_many(
                ["What is 1 + 1?", "What is 2 + 2?"], model="instant"
            )
            assert result.stats.failed == 0
    assert reads == 1
