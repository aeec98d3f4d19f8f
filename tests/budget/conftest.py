"""A real redis-server on a free loopback port for the shared-budget tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from redis_support import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server; in CI its absence is a failure, elsewhere a skip."""
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; .ci/run installs it")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()
