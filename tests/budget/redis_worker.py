"""One process of the shared-budget tests: ask N questions under a Redis-shared budget.

Usage: redis_worker.py BASE_URL REDIS_URL N WORKER_ID; prints one JSON line of counts.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import openai

from splitter import Limits, Policy, RetryPolicy, SharedBudget, Splitter


def main() -> None:
    base_url, redis_url, n, worker = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    policy = Policy(
        strategy="fanout",
        limits=Limits(max_concurrency=8, shared=SharedBudget(url=redis_url, namespace="mp")),
        retry=RetryPolicy(max_attempts=20, initial_wait=0.01, max_wait=0.1),
    )
    questions = [f"Worker {worker} question {i}?" for i in range(n)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = openai.OpenAI(base_url=base_url, api_key="sk-shared-key")
        first_sent = time.monotonic()
        result = Splitter(client, policy=policy).ask_many(questions, model="m")
        last_sent = time.monotonic()
        client.close()
    print(
        json.dumps(
            {
                "answered": sum(a.ok for a in result),
                "requests": result.stats.requests,
                "rate_limited": result.stats.rate_limited,
                "first_sent": first_sent,
                "last_sent": last_sent,
                "fallback_warnings": sum("unreachable" in str(w.message) for w in caught),
            }
        )
    )


if __name__ == "__main__":
    main()
