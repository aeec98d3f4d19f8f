"""``python -m splitter.sim``: run the simulated service in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING

from splitter.sim._faults import Faults
from splitter.sim._limits import SimLimits
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
    parser.add_argument("--rpm", type=int, default=None, help="requests per minute")
    parser.add_argument("--tpm", type=int, default=None, help="tokens per minute")
    parser.add_argument("--answer-tokens", type=int, default=50, help="default answer length")
    parser.add_argument("--seed", type=int, default=0)
    for name in _FAULTS:
        parser.add_argument(f"--fault-{name}", type=float, default=0.0, metavar="RATE")
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    return parser


def _service(args: argparse.Namespace) -> SimService:
    rates = {f"rate_{name}": getattr(args, f"fault_{name}") for name in _FAULTS}
    faults = Faults(**rates, stall_seconds=args.stall_seconds, retry_after=args.retry_after)
    return SimService(
        args.profile,
        time_scale=args.time_scale,
        limits=SimLimits(rpm=args.rpm, tpm=args.tpm),
        faults=faults,
        default_answer_tokens=args.answer_tokens,
        seed=args.seed,
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, serve, and block until interrupted (SIGINT or SIGTERM)."""
    args = _parser().parse_args(argv)
    service = _service(args)
    signal.signal(signal.SIGTERM, _interrupt)  # terminate() shuts down as cleanly as Ctrl-C
    with serve(service, host=args.host, port=args.port) as url:
        print(f"splitter.sim serving {service.profile.name} at {url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
