"""A FastAPI handler whose concurrent users' questions are planned together per tenant.

Each request names its tenant in the ``X-Tenant`` header and asks one question. The handler
calls ``Splitter.aask_one(question, isolation_key=tenant)``: requests of one tenant that
arrive within 50 ms of the first are answered by one batch, which the planner may merge
into fewer requests when the rate limit is tight; two tenants' questions never share a
prompt. Every user still gets exactly their own answer. Whether a batch is merged is the
planner's call: while the budget has room for a batch's requests it fans the batch out
concurrently, which is faster. Here the budget is tight on purpose (6 requests a minute,
a free tier's kind of limit): one request per caller would keep the last callers waiting
for the budget for a minute or more, so each tenant's batch goes out as one merged request.
The script prints, from the Splitter's events, how many batches and requests its callers
became.

Serve it (``pip install fastapi uvicorn``)::

    OPENAI_BASE_URL=... OPENAI_API_KEY=... uvicorn examples.aggregator_fastapi:app

Run as a script, it sends 12 concurrent requests from 3 tenants through the app in-process
and prints what came back. Against the bundled simulator:

    python -m splitter.sim --port 8000 &
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-sim \\
        python examples/aggregator_fastapi.py
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import httpx
import openai
from fastapi import FastAPI, Header, HTTPException, Request
from pydantic import BaseModel

import splitter

MODEL = os.environ.get("SPLITTER_MODEL", "gpt-4o-mini")
# A tight budget (6 requests a minute) is where aggregation pays: one merged request
# spends one request of the budget for up to four questions.
POLICY = splitter.Policy(aggregate_window_ms=50, limits=splitter.Limits(rpm=6))


class Tally:
    """What the Splitter's events say its callers became: batches, and requests sent."""

    def __init__(self) -> None:
        self.batches: list[splitter.BatchFinished] = []

    def __call__(self, event: splitter.Event) -> None:
        if isinstance(event, splitter.BatchFinished):
            self.batches.append(event)

    def summary(self, callers: int) -> str:
        sizes = sorted(b.questions for b in self.batches)
        requests = sum(b.requests for b in self.batches)
        return (
            f"aggregated: {callers} callers were asked in {len(self.batches)} batches "
            f"(questions per batch: {sizes}) sent as {requests} requests"
        )


TALLY = Tally()


class AskBody(BaseModel):
    question: str


class AskReply(BaseModel):
    tenant: str
    question: str
    answer: str
    via: str  # single, merged or repair


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One client and one Splitter for the whole app: the aggregator lives in the Splitter."""
    async with openai.AsyncOpenAI() as client:
        app.state.splitter = splitter.Splitter(client, policy=POLICY, model=MODEL, on_event=TALLY)
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/ask")
async def ask(body: AskBody, request: Request, x_tenant: Annotated[str, Header()]) -> AskReply:
    asker: splitter.Splitter = request.app.state.splitter
    try:
        answer = await asker.aask_one(body.question, isolation_key=x_tenant, temperature=0)
    except splitter.InvalidInputError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if not answer.ok or answer.text is None:
        raise HTTPException(status_code=502, detail=str(answer.error))
    return AskReply(tenant=x_tenant, question=body.question, answer=answer.text, via=answer.via)


QUESTIONS = {
    "acme": ["What is DNS?", "What is TLS?", "What is a CDN?", "What is BGP?"],
    "globex": ["Why is the sky blue?", "Why do cats purr?", "Why is ice slippery?", "Why yawn?"],
    "initech": ["Name a prime.", "Name a noble gas.", "Name a planet.", "Name a river."],
}


async def main() -> None:
    """Twelve users at once, through the app in-process (no server needed)."""
    async with (
        lifespan(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http,
    ):

        async def user(tenant: str, question: str) -> AskReply:
            response = await http.post(
                "/ask", json={"question": question}, headers={"X-Tenant": tenant}
            )
            response.raise_for_status()
            return AskReply.model_validate(response.json())

        replies = await asyncio.gather(
            *(user(tenant, q) for tenant, questions in QUESTIONS.items() for q in questions)
        )
    for reply in replies:
        print(f"[{reply.tenant}] {reply.question}\n   -> ({reply.via}) {reply.answer[:60]}")
    merged = sum(reply.via == "merged" for reply in replies)
    print(TALLY.summary(len(replies)))
    print(f"{merged} of {len(replies)} answers came from merged requests")


if __name__ == "__main__":
    asyncio.run(main())
