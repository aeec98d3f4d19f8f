"""``python -m splitter.sim``: run the simulated service in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, get_args

from pydantic import ValidationError

from splitter.sim._faults import Faults
from splitter.sim._limits import LimiterKind, SimLimits
from splitter.sim._profiles import PROFILES
from splitter.sim._server import serve
from splitter.sim._service import SimService

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

_FAULTS = ("429", "quota", "500", "502", "503", "reset", "stall", "truncate", "sloppy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m splitter.sim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--profile", default="gpt-4o-mini", choices=sorted(PROFILES))
    parser.add_argument("--time-scale", type=float, default=1.0, help="real seconds per sim second")
    parser.add_argument(
        "--limiter",
        default="token_bucket",
        choices=get_args(LimiterKind),
        help="how the rate limits count (default: OpenAI's per-minute token bucket)",
    )
    parser.add_argument("--rpm", type=int, default=None, help="token_bucket, azure: requests/min")
    parser.add_argument("--tpm", type=int, default=None, help="token_bucket, azure: tokens/min")
    parser.add_argument("--limit", type=int, default=None, help="window kinds: requests/window")
    parser.add_argument("--window", type=float, default=None, help="window kinds: sim seconds")
    parser.add_argument("--rate", type=float, default=None, help="leaky_bucket: requests/second")
    parser.add_argument("--burst", type=int, default=None, help="leaky_bucket: nginx's burst=")
    parser.add_argument(
        "--rate-headers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send x-ratelimit-* headers (default: as the limiter kind does)",
    )
    parser.add_argument(
        "--retry-after-header",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="put retry-after(-ms) on a 429 (default: as the limiter kind does)",
    )
    parser.add_argument(
        "--count-rejected",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a 429 counts against the limit too (default: only for token_bucket)",
    )
    parser.add_argument(
        "--prefix-cache",
        choices=["none", "slot", "shared"],
        default=None,
        help="prefix cache: per slot (llama.cpp), shared blocks (vLLM) or none (the profile's)",
    )
    parser.add_argument(
        "--timings",
        action="store_true",
        help="report like llama-server: timings in each response, GET /props",
    )
    parser.add_argument("--answer-tokens", type=int, default=50, help="default answer length")
    parser.add_argument("--seed", type=int, default=0)
    for name in _FAULTS:
        parser.add_argument(f"--fault-{name}", type=float, default=0.0, metavar="RATE")
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    return parser


def _limits(args: argparse.Namespace) -> SimLimits:
    """The ``SimLimits`` the options name; options left out keep the kind's defaults."""
    given = {
        "rpm": args.rpm,
        "tpm": args.tpm,
        "limit": args.limit,
        "window": args.window,
        "rate": args.rate,
        "burst": args.burst,
        "headers": args.rate_headers,
        "retry_after": args.retry_after_header,
        "count_rejected": args.count_rejected,
    }
    fields = {name: value for name, value in given.items() if value is not None}
    return SimLimits.model_validate({"kind": args.limiter, **fields})


def _service(args: argparse.Namespace, limits: SimLimits) -> SimService:
    rates = {f"rate_{name}": getattr(args, f"fault_{name}") for name in _FAULTS}
    faults = Faults(**rates, stall_seconds=args.stall_seconds, retry_after=args.retry_after)
    profile = PROFILES[args.profile]
    if args.prefix_cache is not None:
        profile = profile.model_copy(update={"prefix_cache": args.prefix_cache})
    if args.timings:
        profile = profile.model_copy(update={"timings": True})
    return SimService(
        profile,
        time_scale=args.time_scale,
        limits=limits,
        faults=faults,
        default_answer_tokens=args.answer_tokens,
        seed=args.seed,
    )


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, serve, and block until interrupted (SIGINT or SIGTERM)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        limits = _limits(args)
    except ValidationError as exc:
        parser.error(f"--limiter {args.limiter}: {_first_error(exc)}")
    service = _service(args, limits)
    signal.signal(signal.SIGTERM, _interrupt)  # terminate() shuts down as cleanly as Ctrl-C
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(serve(service, host=args.host, port=args.port))
        except OSError as exc:  # the port is taken, or the host is not this machine's
            where = f"{args.host}:{args.port}"
            print(
                f"{parser.prog}: error: cannot listen on {where}: {exc.strerror}", file=sys.stderr
            )
            return 1
        except RuntimeError as exc:  # uvicorn (the sim extra) is not installed
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 1
        print(f"splitter.sim serving {service.profile.name} at {url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
