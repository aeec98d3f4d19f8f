"""An OpenAI-compatible HTTP engine over a real continuous-batching decode on one GPU.

The model is a real architecture at real size with RANDOM weights (none can reach the device
machine): a Llama-3.1-8B-shaped ``LlamaConfig`` built directly on the GPU in bf16. Decode time
per token does not depend on the weights' values, answer quality does: this engine measures
speed only, and its answers are letters, not text.

Two backends, tried in order:

- ``hf-cb``: transformers' own continuous batching (``model.init_continuous_batching()``, a
  paged KV cache, requests joining and leaving the running batch between decode steps);
- ``slots``: a hand-written fallback, a fixed number of slots over a static KV cache, one
  batched decode step for every active slot at a time, new requests prefilled between steps.

Tokens are a byte-level stand-in: the prompt's UTF-8 bytes are its ids; generated ids become
letters (``id % 26``). EOS never ends a reply early: ``max_tokens`` is the exact answer length,
and ``usage`` counts those ids.

Run::

    python bench/gpu/engine.py --port 8000             # the 8B shape on CUDA
    python bench/gpu/engine.py --tiny --port 8000      # a tiny config on the CPU, for tests

It prints ``READY <port> <backend>`` on stdout once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from typing import Any

import torch
from aiohttp import web

MODEL_NAME = "llama-3.1-8b-shape-random"


def model_config(tiny: bool) -> Any:
    """Llama-3.1-8B's shape (or a tiny one for CPU tests); the weights are drawn at random."""
    from transformers import LlamaConfig

    rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
    }
    if tiny:
        shape: dict[str, Any] = dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=16384,
        )
        ids = dict(bos_token_id=1, eos_token_id=2)
    else:
        shape = dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            max_position_embeddings=131072,
        )
        ids = dict(bos_token_id=128000, eos_token_id=128001)
    return LlamaConfig(
        **shape,
        rms_norm_eps=1e-5,
        rope_parameters=rope,
        **ids,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def build_model(tiny: bool, device: str) -> Any:
    """The model, its weights drawn at random on ``device`` (bf16 on CUDA, fp32 on the CPU)."""
    from transformers import LlamaForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(model_config(tiny), dtype=dtype)
    return model.eval()


def encode(messages: list[dict[str, Any]]) -> list[int]:
    """The byte-level stand-in for a chat template: ``role: content`` lines, as UTF-8 bytes."""
    text = "".join(f"{m.get('role', 'user')}: {_content(m.get('content'))}\n" for m in messages)
    return list(text.encode("utf-8")) or [10]


def _content(content: Any) -> str:
    if isinstance(content, list):  # the content-parts form
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def decode(ids: list[int]) -> str:
    """Generated ids as letters; every 6th id a space, so replies look like words."""
    return "".join(" " if i % 6 == 5 else chr(97 + t % 26) for i, t in enumerate(ids))


class Stats:
    """What the engine did: requests, tokens, and the wall time it spent decoding."""

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.active = 0
        self.max_active = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class HFContinuousBatching:
    """transformers' continuous batching manager, driven from the event loop."""

    name = "hf-cb"

    def __init__(self, model: Any, tiny: bool, graphs: bool = False) -> None:
        from transformers import ContinuousBatchingConfig, GenerationConfig

        self.model = model
        self.generation = GenerationConfig(
            do_sample=False, max_new_tokens=256, eos_token_id=-1, pad_token_id=0
        )
        # On the CPU the cache cannot be sized from free GPU memory: give it a size.
        sized: dict[str, Any] = dict(num_blocks=512, block_size=32, max_batch_tokens=512)
        # graphs: CUDA graphs asked for although SDPA needs an attention mask (transformers
        # then leaves them off by default).
        asked: dict[str, Any] = dict(use_cuda_graph=True) if graphs else {}
        self.cb_config = ContinuousBatchingConfig(
            max_memory_percent=0.5,
            allow_block_sharing=False,
            **(sized if tiny else {}),
            **asked,
        )
        self.manager: Any = None
        self.details: dict[str, Any] = {}

    def start(self) -> None:
        self.manager = self.model.init_continuous_batching(
            generation_config=self.generation, continuous_batching_config=self.cb_config
        )
        if self.model.device.type == "cuda":
            t0 = time.perf_counter()
            self.manager.warmup()
            self.details["warmup_s"] = round(time.perf_counter() - t0, 2)
        self.manager.start()
        cfg = self.manager.continuous_batching_config
        self.details["attn_implementation"] = self.model.config._attn_implementation
        for key in ("num_blocks", "block_size", "max_batch_tokens", "use_cuda_graph"):
            self.details[key] = str(getattr(cfg, key, None))
        self.details["use_async_batching"] = str(getattr(cfg, "use_async_batching", None))

    async def generate(self, ids: list[int], n: int) -> AsyncIterator[list[int]]:
        """The new ids of one request as they are decoded, ``n`` in all."""
        outputs: asyncio.Queue[Any] = asyncio.Queue()
        rid = f"r-{uuid.uuid4().hex[:12]}"
        self.manager.register_result_handler(rid, outputs.put_nowait)
        self.manager.add_request(
            ids, request_id=rid, max_new_tokens=n, streaming=True, eos_token_id=-1
        )
        seen = 0
        while True:
            out = await outputs.get()
            if out.error is not None:
                raise RuntimeError(f"continuous batching failed the request: {out.error}")
            new = list(out.generated_tokens[seen:])
            seen += len(new)
            if new:
                yield new
            if out.is_finished():
                return

    def stop(self) -> None:
        if self.manager is not None:
            self.manager.stop(block=True, timeout=10)


class _Slot:
    def __init__(self, ids: list[int], n: int, deliver: Any) -> None:
        self.ids = ids
        self.n = n
        self.deliver = deliver  # called from the decode thread with (new ids, finished, error)
        self.made = 0
        self.pos = 0  # the next position to write in the KV cache
        self.last = 0  # the last id, fed to the next step


class SlotLoop:
    """The fallback: fixed slots over a static KV cache, one batched decode step at a time.

    It runs the Llama weights of ``model`` with its own code: RMSNorm, rotary embeddings at
    each slot's own position, grouped-query attention over the slot's cached keys (SDPA with
    a length mask), SwiGLU. Prefill is one request at a time, between decode steps."""

    name = "slots"

    def __init__(self, model: Any, slots: int = 16, max_len: int = 4096) -> None:
        cfg = model.config
        self.model = model
        self.slots = slots
        self.max_len = max_len
        self.layers = model.model.layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        dev, dtype = model.device, model.dtype
        shape = (len(self.layers), slots, self.n_kv, max_len, self.head_dim)
        self.k_cache = torch.zeros(shape, device=dev, dtype=dtype)
        self.v_cache = torch.zeros(shape, device=dev, dtype=dtype)
        rotary = model.model.rotary_emb
        self.inv_freq = rotary.inv_freq.to(dev, torch.float32)
        self.rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.waiting: queue.Queue[_Slot] = queue.Queue()
        self.active: dict[int, _Slot] = {}
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="slot-loop", daemon=True)
        self.details: dict[str, Any] = {"slots": slots, "max_len": max_len}

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=10)

    async def generate(self, ids: list[int], n: int) -> AsyncIterator[list[int]]:
        if len(ids) + n > self.max_len:
            raise ValueError(f"prompt + max_tokens = {len(ids) + n} > {self.max_len}")
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue[tuple[list[int], bool, str | None]] = asyncio.Queue()

        def deliver(new: list[int], done: bool, error: str | None) -> None:
            loop.call_soon_threadsafe(outputs.put_nowait, (new, done, error))

        self.waiting.put(_Slot(ids, n, deliver))
        self.wake.set()
        while True:
            new, done, error = await outputs.get()
            if error is not None:
                raise RuntimeError(error)
            if new:
                yield new
            if done:
                return

    # The decode thread.
    def _run(self) -> None:
        with torch.inference_mode():
            while not self.stopping:
                self._admit()
                if not self.active:
                    self.wake.wait(timeout=0.05)
                    self.wake.clear()
                    continue
                try:
                    self._step()
                except Exception as exc:  # fail every request in flight, keep serving
                    for slot in self.active.values():
                        slot.deliver([], True, f"decode step failed: {exc!r}")
                    self.active.clear()

    def _admit(self) -> None:
        free = [i for i in range(self.slots) if i not in self.active]
        while free and not self.waiting.empty():
            slot = self.waiting.get_nowait()
            index = free.pop(0)
            try:
                slot.last = self._prefill(index, slot.ids)
            except Exception as exc:
                slot.deliver([], True, f"prefill failed: {exc!r}")
                continue
            slot.pos = len(slot.ids)
            slot.made = 1
            slot.deliver([slot.last], slot.made >= slot.n, None)
            if slot.made < slot.n:
                self.active[index] = slot

    def _angles(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B, 1, T, d] of the rotary embedding at positions ``pos`` [B, T]."""
        freqs = pos[..., None].float() * self.inv_freq  # [B, T, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        dtype = self.k_cache.dtype
        cos = (emb.cos() * self.rope_scale).to(dtype)[:, None]
        return cos, (emb.sin() * self.rope_scale).to(dtype)[:, None]

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotary embedding of ``x`` [B, heads, T, d]."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * weight

    def _layers(
        self, x: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``x`` [B, T, H] through every layer; keys and values written at (slot, pos)."""
        b, t, _ = x.shape
        span = mask.shape[-1]
        cos, sin = self._angles(pos)
        for li, layer in enumerate(self.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = self._norm(x, layer.input_layernorm.weight)
            q = attn.q_proj(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            rows = slots[:, None].expand(b, t)
            self.k_cache[li][rows, :, pos] = k.transpose(1, 2)
            self.v_cache[li][rows, :, pos] = v.transpose(1, 2)
            keys = self.k_cache[li][slots, :, :span]
            values = self.v_cache[li][slots, :, :span]
            out = torch.nn.functional.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, enable_gqa=True
            )
            x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
            h = self._norm(x, layer.post_attention_layernorm.weight)
            x = x + mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
        return self._norm(x, self.model.model.norm.weight)

    def _logits_argmax(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(x).argmax(-1)

    def _prefill(self, index: int, ids: list[int]) -> int:
        dev = self.k_cache.device
        t = len(ids)
        tokens = torch.tensor([ids], device=dev)
        pos = torch.arange(t, device=dev)[None]
        mask = torch.ones(t, t, device=dev, dtype=torch.bool).tril()[None, None]
        x = self.model.model.embed_tokens(tokens)
        x = self._layers(x, pos, torch.tensor([index], device=dev), mask)
        return int(self._logits_argmax(x[:, -1])[0])

    def _step(self) -> None:
        dev = self.k_cache.device
        order = sorted(self.active)
        slots = [self.active[i] for i in order]
        tokens = torch.tensor([[s.last] for s in slots], device=dev)
        pos = torch.tensor([[s.pos] for s in slots], device=dev)
        span = max(s.pos for s in slots) + 1
        mask = (torch.arange(span, device=dev)[None] <= pos)[:, None, None, :]
        x = self.model.model.embed_tokens(tokens)
        x = self._layers(x, pos, torch.tensor(order, device=dev), mask)
        new = self._logits_argmax(x[:, -1]).tolist()
        for index, slot, token in zip(order, slots, new, strict=True):
            slot.last, slot.pos, slot.made = int(token), slot.pos + 1, slot.made + 1
            done = slot.made >= slot.n
            slot.deliver([slot.last], done, None)
            if done:
                del self.active[index]


def self_test(backend: Any, timeout: float = 90.0) -> None:
    """Two concurrent requests of 4 ids each, or the backend is not usable."""

    async def one(n: int) -> int:
        got = 0
        async for new in backend.generate(list(b"user: self test\n"), n):
            got += len(new)
        return got

    async def both() -> list[int]:
        return list(await asyncio.wait_for(asyncio.gather(one(4), one(4)), timeout))

    got = asyncio.run(both())
    if got != [4, 4]:
        raise RuntimeError(f"self test: expected 4 ids each, got {got}")


def make_backend(model: Any, tiny: bool, force: str | None, graphs: bool = False) -> Any:
    """transformers' continuous batching, or the slot loop if that fails to start."""
    errors: list[str] = []
    if force in (None, "hf-cb"):
        try:
            backend = HFContinuousBatching(model, tiny, graphs=graphs)
            backend.start()
            self_test(backend)
            return backend, errors
        except Exception as exc:
            errors.append(f"hf-cb failed: {exc!r}")
            traceback.print_exc(file=sys.stderr)
            try:
                backend.stop()
            except Exception as stop_exc:
                errors.append(f"hf-cb stop failed: {stop_exc!r}")
            model.set_attn_implementation("sdpa")
    backend = SlotLoop(model, slots=16 if not tiny else 8, max_len=4096)
    backend.start()
    self_test(backend)
    return backend, errors


def app(backend: Any, info: dict[str, Any], stats: Stats) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/v1/models")
    async def models(request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "bench"}]}
        )

    @routes.get("/stats")
    async def stats_route(request: web.Request) -> web.Response:
        return web.json_response({**info, "stats": stats.as_dict()})

    @routes.post("/v1/chat/completions")
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") or []
        n = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        if not isinstance(n, int) or n < 1:
            return _error(400, f"max_tokens must be a positive integer, not {n!r}")
        ids = encode(messages)
        model = body.get("model") or MODEL_NAME
        cid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        stats.requests += 1
        stats.prompt_tokens += len(ids)
        stats.active += 1
        stats.max_active = max(stats.max_active, stats.active)
        try:
            if body.get("stream"):
                return await _stream(request, backend, ids, n, model, cid, body, stats)
            made: list[int] = []
            async for new in backend.generate(ids, n):
                made.extend(new)
            stats.completion_tokens += len(made)
            return web.json_response(_completion(cid, model, decode(made), len(ids), len(made)))
        except Exception as exc:
            return _error(500, f"engine failed: {exc!r}")
        finally:
            stats.active -= 1

    application = web.Application(client_max_size=64 * 1024 * 1024)
    application.add_routes(routes)
    return application


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(cid: str, model: str, text: str, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
                "logprobs": None,
            }
        ],
        "usage": _usage(prompt, completion),
    }


async def _stream(
    request: web.Request,
    backend: Any,
    ids: list[int],
    n: int,
    model: str,
    cid: str,
    body: dict[str, Any],
    stats: Stats,
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    created = int(time.time())

    async def send(delta: dict[str, Any], finish: str | None, usage: Any = None) -> None:
        chunk: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage:
            chunk["usage"] = usage
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    await send({"role": "assistant", "content": ""}, None)
    made = 0
    async for new in backend.generate(ids, n):
        text = "".join(" " if (made + i) % 6 == 5 else chr(97 + t % 26) for i, t in enumerate(new))
        made += len(new)
        await send({"content": text}, None)
    stats.completion_tokens += made
    await send({}, "length")
    if (body.get("stream_options") or {}).get("include_usage"):
        await send({}, None, _usage(len(ids), made))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "engine_error", "code": status}}, status=status
    )


def versions() -> dict[str, str]:
    import platform

    import aiohttp
    import transformers

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "aiohttp": aiohttp.__version__,
        "cuda": str(torch.version.cuda),
    }
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name(0)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tiny", action="store_true", help="a tiny config (CPU tests)")
    parser.add_argument("--backend", choices=("hf-cb", "slots"), default=None)
    parser.add_argument("--device", default=None, help="default: cuda if there is one")
    parser.add_argument(
        "--cb-graphs", action="store_true", help="hf-cb: ask for CUDA graphs (off by default)"
    )
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.perf_counter()
    model = build_model(args.tiny, device)
    params = sum(p.numel() for p in model.parameters())
    built = time.perf_counter() - t0
    backend, errors = make_backend(model, args.tiny, args.backend, graphs=args.cb_graphs)
    info = {
        "backend": backend.name,
        "backend_details": backend.details,
        "fallback_errors": errors,
        "model": MODEL_NAME if not args.tiny else "tiny-llama-random",
        "parameters": params,
        "dtype": str(model.dtype),
        "device": device,
        "versions": versions(),
        "build_s": round(built, 2),
        "ready_s": round(time.perf_counter() - t0, 2),
        "weights": "random (speed only)",
    }
    print(json.dumps({"engine": info}), file=sys.stderr, flush=True)
    stats = Stats()

    async def serve() -> None:
        runner = web.AppRunner(app(backend, info, stats), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"READY {port} {backend.name}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        backend.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
