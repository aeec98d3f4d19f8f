"""The loopback server against the in-process door: what a kept-alive request costs.

The same trivial chat completion is sent one at a time to one ``SimService("instant")``
(zero simulated latency: what is left is the transport) through each door of the
simulator: over real loopback HTTP (``splitter.sim.serve``, uvicorn in a thread) and
in-process (``SimService.async_client``). Per door: the median of ``--requests`` requests
after the first (which opens the connection). Printed: both medians in ms and their ratio.

The ratio checks the server's TCP_NODELAY: without it a response's body waits for the ACK
of its headers, which a client on loopback delays by ~40 ms (Nagle's algorithm against
delayed ACKs), over 10x the whole request here. Target: over HTTP < 8 x in-process. A
measurement: it exits 0 whatever the ratio (tests/sim/test_server.py checks the socket
option itself).

Run from the repository root::

    python bench/loopback.py [--requests 21]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import anyio
import openai

from splitter.sim import SimService, serve

TARGET = 8.0


async def median_seconds(client: openai.AsyncOpenAI, requests: int) -> float:
    """Median real seconds of ``requests`` sequential requests, the first left out."""
    times = []
    for _ in range(requests + 1):
        started = time.perf_counter()
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])  # the first opens the connection


async def measure(requests: int) -> tuple[float, float]:
    """(median seconds over HTTP, median seconds in-process)."""
    service = SimService("instant")
    with serve(service) as url:
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            over_http = await median_seconds(client, requests)
    async with service.async_client(max_retries=0) as client:
        in_process = await median_seconds(client, requests)
    return over_http, in_process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=21, help="timed requests per door")
    args = parser.parse_args(argv)
    over_http, in_process = anyio.run(measure, args.requests)
    print(f"{'door':<12}{'median ms':>10}")
    print(f"{'http':<12}{over_http * 1000:>10.2f}")
    print(f"{'in-process':<12}{in_process * 1000:>10.2f}")
    print(f"loopback: http / in-process = {over_http / in_process:.2f} (target < {TARGET:g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
