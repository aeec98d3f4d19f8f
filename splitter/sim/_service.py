"""SimService: one simulated deployment, routing a request to its response.

The service is door-agnostic: ``handle(method, path, body)`` returns a ``SimResponse`` (status,
headers, and a body or a stream, or an instruction to drop the connection), and the doors in
``_transport`` (in-process) and ``_asgi`` (a real server) deliver it. Each request:

1. arrives (logged, counted in ``in_flight``, its fault drawn), waits half the round trip;
2. is parsed (400), charged to the rate limits (429), and suffers its fault if any;
3. runs through the batching engine (non-streaming waits for the last token; streaming
   hands back a body that emits tokens as the engine produces them);
4. waits the other half of the round trip and is delivered.

Times: simulated seconds are multiplied by ``time_scale`` into real waits; everything reported
to clients (retry-after, reset headers, processing ms) is real time. ``RequestRecord`` times
come from the service clock: splitter's clock (``time.monotonic``, or the virtual time of
a ``splitter.testing`` run) unless another clock is injected.

A service may serve the caller's event loop (in-process door) or the uvicorn thread's loop
(``serve``), but not both at once: its state is not locked.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from typing import TYPE_CHECKING, Any

import anyio
import openai

from splitter import _clock
from splitter.sim import _refusals, _wire
from splitter.sim._answers import answer_prompt, prompt_tokens
from splitter.sim._asgi import make_asgi_app
from splitter.sim._cache import prompt_token_keys
from splitter.sim._engine import Engine
from splitter.sim._exchange import (
    CLIENT_GONE,
    JSON,
    SSE,
    BodyStream,
    Call,
    RequestRecord,
    SimResponse,
)
from splitter.sim._faults import FaultKind, Faults, draw_fault, request_rng, sloppy_answer
from splitter.sim._limits import RateLimiter, SimLimits
from splitter.sim._profiles import PROFILES, Profile
from splitter.sim._quality import merged_quality
from splitter.sim._replies import (
    Reply,
    chat_choices,
    decide_reply,
)
from splitter.sim._requests import (
    BadRequest,
    GenerationRequest,
    openai_path,
    parse_chat,
    parse_embeddings,
    parse_responses,
)
from splitter.sim._streams import chat_sse, response_sse
from splitter.sim._timings import props_response, timings_of
from splitter.sim._transport import make_transport

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from splitter.sim._asgi import ASGIApp

__all__ = ["BodyStream", "RequestRecord", "SimResponse", "SimService"]

# Each service gets its own host name, so clients that key what they learn by base URL
# (as splitter does) keep two simulated services apart, as they would two real ones.
_BASE_URL = "http://sim-{}.splitter.invalid/v1"
_instances = itertools.count(1)


class SimService:
    """A simulated OpenAI-compatible service with one latency profile."""

    def __init__(
        self,
        profile: str | Profile = "gpt-4o-mini",
        *,
        time_scale: float = 1.0,
        limits: SimLimits | None = None,
        faults: Faults | None = None,
        default_answer_tokens: int = 50,
        seed: int = 0,
        clock: Callable[[], float] = _clock.now,
        scripted: Mapping[str, str] | None = None,
        api_key: str | None = None,
        max_choices: int = 1,
    ) -> None:
        """``clock`` gives real seconds for the engine, the rate limits and the log.

        ``api_key``, when given, is the only key accepted: any other bearer token gets
        OpenAI's 401 ``invalid_api_key``, whose message shows the key masked as OpenAI does.

        ``scripted`` maps a piece of prompt text to the exact answer for any prompt holding
        it (the first match, in the mapping's order), for tests of code that parses what
        a model says; every other prompt gets the usual generated answer.

        ``max_choices`` is the largest ``n`` accepted (at most 128, as OpenAI); a larger one
        gets a 400 naming ``n``. The default 1 refuses ``n`` > 1, as some servers do.
        """
        if isinstance(profile, str):
            if profile not in PROFILES:
                raise ValueError(f"unknown profile {profile!r}; known: {sorted(PROFILES)}")
            profile = PROFILES[profile]
        if default_answer_tokens < 1:
            raise ValueError("default_answer_tokens must be at least 1")
        self.profile = profile
        self.limits = limits or SimLimits()
        self.faults = faults or Faults()
        self.default_answer_tokens = default_answer_tokens
        self.scripted = dict(scripted or {})
        self.api_key = api_key
        if not 1 <= max_choices <= 128:
            raise ValueError("max_choices must be from 1 to 128")
        self.max_choices = max_choices
        self.seed = seed
        self._clock = clock
        self._engine = Engine(profile, time_scale=time_scale, clock=clock)
        self._limiter = RateLimiter(self.limits, self._engine.now())
        self._admitted = self._engine.now()  # the latest moment a request was counted at
        self._count = 0
        self.log: list[RequestRecord] = []
        self.in_flight = 0
        self.asgi_app: ASGIApp = make_asgi_app(self)
        #: The in-process door's base URL (``serve()`` yields the loopback one).
        self.base_url = _BASE_URL.format(next(_instances))

    @property
    def time_scale(self) -> float:
        """Real seconds per simulated second. Settable: simulated time goes on from where it
        is at the new pace, so one server can serve a slow first run and a fast rerun."""
        return self._engine.time_scale

    @time_scale.setter
    def time_scale(self, time_scale: float) -> None:
        self._engine.rescale(time_scale)

    # -- doors ----------------------------------------------------------------------------

    def transport(self) -> Any:
        """An async transport of openai's HTTP library that serves requests in-process."""
        return make_transport(self)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` wired to this service in-process (close it when done)."""
        http_client = openai.DefaultAsyncHttpxClient(transport=self.transport())
        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key="sk-sim-test", http_client=http_client, **kwargs
        )

    # -- handling -------------------------------------------------------------------------

    def clock(self) -> float:
        """The service's clock (real seconds; splitter's clock by default)."""
        return self._clock()

    async def handle(
        self,
        method: str,
        path: str,
        body: bytes,
        *,
        authorization: str | None = None,
        arrived: float | None = None,
    ) -> SimResponse:
        """Serve one request; a returned stream is owned (and must be closed) by the door.

        ``authorization`` is the request's Authorization header (checked when the service
        was given an ``api_key``); ``arrived``: when the door received its headers, on
        :meth:`clock` (default: now), the moment its rate limits count it at."""
        call = self._open(path, arrived)
        response: SimResponse | None = None
        try:
            await self._sleep(self.profile.rtt / 2)
            call.started = self._clock()
            refused = _refusals.unauthorized(call, self.api_key, authorization)
            response = refused or await self._route(call, method, path, body)
            response.headers += self._common_headers(call)
            await self._sleep(self.profile.rtt / 2)
        except BaseException:
            call.status = CLIENT_GONE
            if response is not None and response.stream is not None:
                response.stream.abandon()
            raise
        finally:
            if response is None or response.stream is None:
                self._close(call)
        return response

    def _open(self, path: str, arrived: float | None = None) -> Call:
        self._count += 1
        rng = request_rng(self.seed, self._count)
        fault = draw_fault(self.faults, rng)
        self.in_flight += 1
        return Call(self._count, path, self._clock() if arrived is None else arrived, rng, fault)

    def _close(self, call: Call) -> None:
        if call.closed:
            return
        call.closed = True
        self.in_flight -= 1
        self.log.append(call.record(self._clock() if call.finished is None else call.finished))

    async def _sleep(self, sim_seconds: float) -> None:
        if sim_seconds > 0:
            await anyio.sleep(sim_seconds * self.time_scale)

    async def _route(self, call: Call, method: str, path: str, body: bytes) -> SimResponse:
        routes: dict[tuple[str, str], Callable[[Call, bytes], Awaitable[SimResponse]]] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/responses"): self._responses,
            ("POST", "/v1/embeddings"): self._embeddings,
            ("GET", "/v1/models"): self._models,
            ("GET", "/props"): lambda call, _: props_response(call, self.profile),
        }
        handler = routes.get((method.upper(), openai_path(path).rstrip("/")))
        if handler is None:
            message = f"Invalid URL ({method.upper()} {path})"
            return _refusals.error(call, 404, message, "invalid_request_error", code=None)
        try:
            return await handler(call, body)
        except BadRequest as exc:
            return _refusals.error(call, 400, exc.message, "invalid_request_error", param=exc.param)

    def _common_headers(self, call: Call) -> list[tuple[str, str]]:
        processing_ms = max(0, round((self._clock() - call.started) * 1000))
        return [
            ("x-request-id", call.request_id),
            ("openai-processing-ms", str(processing_ms)),
            ("openai-version", "2020-10-01"),
            *self._limiter.headers(self.time_scale, self._engine.now()),
        ]

    # -- endpoints ------------------------------------------------------------------------

    async def _chat(self, call: Call, body: bytes) -> SimResponse:
        request = parse_chat(body)
        if request.n > self.max_choices:
            raise BadRequest(f"The simulator supports only n={self.max_choices}.", "n")
        return await self._generate(call, request)

    async def _responses(self, call: Call, body: bytes) -> SimResponse:
        return await self._generate(call, parse_responses(body))

    async def _embeddings(self, call: Call, body: bytes) -> SimResponse:
        request = parse_embeddings(body)
        call.model = request.model
        call.prompt_tokens = prompt_tokens(request.inputs)
        refusal = self._admit(call, call.prompt_tokens, request.model)
        if refusal is not None:
            return refusal
        await self._sleep(self.profile.prefill_seconds(call.prompt_tokens))
        call.status = 200
        payload = _wire.embeddings(
            model=request.model,
            inputs=list(request.inputs),
            base64_=request.base64,
            prompt=call.prompt_tokens,
        )
        return SimResponse(200, [JSON], payload)

    async def _models(self, call: Call, body: bytes) -> SimResponse:
        call.status = 200
        names = list(dict.fromkeys([self.profile.name, "gpt-4o-mini"]))
        return SimResponse(200, [JSON], _wire.models_list(names, int(time.time())))

    def _admit(self, call: Call, cost: int, model: str) -> SimResponse | None:
        """None when the rate limits let the request through, else its 429."""
        # Counted when it reached the service (half the simulated round trip after it
        # arrived at the door), not after its body was read and parsed; never before one
        # counted already.
        reached = self._engine.at(call.arrived) + self.profile.rtt / 2
        self._admitted = max(self._admitted, min(reached, self._engine.now()))
        verdict = self._limiter.admit(cost, self._admitted)
        if verdict.allowed:
            return None
        return _refusals.rate_limited(call, self.limits, verdict, model, cost, self.time_scale)

    async def _generate(self, call: Call, request: GenerationRequest) -> SimResponse:
        call.model, call.stream, call.user_text = request.model, request.stream, request.user_text
        call.prompt_cache_key = request.prompt_cache_key
        call.json_schema = bool(request.response_format)
        call.prompt_tokens = prompt_tokens(request.contents)
        answer = answer_prompt(request.user_text, self.default_answer_tokens)
        script = next((t for k, t in self.scripted.items() if k in request.user_text), None)
        if script is not None:
            answer = dataclasses.replace(answer, text=script, parts=(), nonce=None)
        call.questions = tuple(q.text for q in answer.questions)
        unservable = _refusals.unservable(call, self.profile, request)
        if unservable is not None:
            return unservable
        # Without max_tokens the limiter cannot know the output; it charges the default length.
        cost = call.prompt_tokens + (request.max_tokens or self.default_answer_tokens)
        refusal = self._admit(call, cost, request.model)
        if refusal is not None:
            return refusal
        fault = call.fault
        if fault in _refusals.FAULT_ERRORS or fault is FaultKind.RATE_LIMIT:
            assert fault is not None
            return _refusals.fault_error(call, self.faults, fault, self.time_scale)
        if fault is FaultKind.RESET:
            call.error_code = "reset"
            return SimResponse(0, reset=True)
        if fault is FaultKind.STALL:
            call.error_code = "stall"
            await self._sleep(self.faults.stall_seconds)
        answer = merged_quality(
            answer,
            self.profile,
            seed=self.seed,
            number=call.number,
            default_tokens=self.default_answer_tokens,
        )
        text = answer.text
        if fault is FaultKind.SLOPPY:
            text, call.error_code = sloppy_answer(answer, call.rng, swaps=self.faults.sloppy_swaps)
        reply = decide_reply(request, answer, text)
        call.completion_tokens = reply.completion_tokens
        if request.stream:
            return self._start_stream(call, request, reply)
        keys = prompt_token_keys(request.contents, self.profile.prefix_cache)
        with self._engine.sequence(call.prompt_tokens, reply.choice_tokens, keys) as seq:
            await self._engine.wait_tokens(seq, reply.choice_tokens)
            call.cached_tokens = seq.cached
            call.timings = timings_of(seq, self.profile, self.time_scale)
        if fault is FaultKind.TRUNCATE:
            call.error_code = "truncated"
            return SimResponse(0, reset=True)
        call.status = 200
        return SimResponse(200, [JSON], self._body(call, request, reply))

    def _body(self, call: Call, request: GenerationRequest, reply: Reply) -> bytes:
        if request.api == "chat":
            return _wire.chat_completion(
                id_=f"chatcmpl-sim{call.number}",
                created=int(time.time()),
                model=request.model,
                choices=chat_choices(reply, str(call.number)),
                prompt=call.prompt_tokens,
                completion=call.completion_tokens,
                cached=self._cached(call),
                extra=None if call.timings is None else {"timings": call.timings},
            )
        return _wire.dumps(self._response(call, request, reply))

    def _response(self, call: Call, request: GenerationRequest, reply: Reply) -> dict[str, Any]:
        return _wire.response_dict(
            id_=f"resp_sim{call.number}",
            created=int(time.time()),
            model=request.model,
            text=reply.content or "",
            incomplete=reply.finish == "length",
            prompt=call.prompt_tokens,
            completion=call.completion_tokens,
            instructions=request.instructions,
            max_output_tokens=request.max_tokens,
            cached=call.cached_tokens,
        )

    # -- streaming ------------------------------------------------------------------------

    def _start_stream(self, call: Call, request: GenerationRequest, reply: Reply) -> SimResponse:
        seq = self._engine.submit(
            call.prompt_tokens,
            reply.choice_tokens,
            prompt_token_keys(request.contents, self.profile.prefix_cache),
        )
        # A truncated stream stops halfway, with neither its end event nor [DONE].
        half = len(reply.pieces) // 2 if call.fault is FaultKind.TRUNCATE else None
        stream = chat_sse if request.api == "chat" else response_sse
        chunks = stream(self, call, request, seq, reply, half)

        def on_close() -> None:
            self._engine.release(seq)
            if call.finished is None:  # the client left before the end of the stream
                call.status = CLIENT_GONE
                call.error_code = call.error_code or "client_disconnected"
            self._close(call)

        call.status = 200
        return SimResponse(200, [SSE], stream=BodyStream(chunks, on_close))

    def _cached(self, call: Call) -> int | None:
        """``usage.prompt_tokens_details.cached_tokens``, reported only with a prefix cache."""
        return None if self.profile.prefix_cache == "none" else call.cached_tokens
