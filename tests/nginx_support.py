"""A real nginx ``limit_req`` in front of an upstream (the simulator), on loopback only.

``NginxLimiter(upstream_port, rate=5, burst=0)`` writes a config into its own temporary prefix
(pid, error log, temp paths: nothing outside it is touched), runs ``nginx -p PREFIX -c CONF``
in the foreground (``daemon off; master_process off``) on a free 127.0.0.1 port, waits until it
listens, and stops it on exit. Every request goes through one ``limit_req_zone`` keyed by the
client address (all of loopback is one client), with ``nodelay`` and ``limit_req_status 429``:
nginx's leaky bucket to the millisecond, no rate-limit headers, and a 429 without
``retry-after``. Used by tests/test_nginx.py and bench/limiters.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["NginxLimiter", "nginx_binary"]

_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    limit_req_zone $binary_remote_addr zone=sim:1m rate={rate};
    limit_req_status {status};
    upstream sim {{
        server 127.0.0.1:{upstream_port};
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            limit_req zone=sim{burst}{nodelay};
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """The nginx executable on PATH or in /usr/sbin, or None."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _nginx_rate(per_second: float) -> str:
    """nginx's ``rate=``: whole requests per second, else per minute."""
    if per_second == int(per_second):
        return f"{int(per_second)}r/s"
    per_minute = per_second * 60
    if per_minute != int(per_minute) or per_minute < 1:
        raise ValueError(f"nginx cannot express a rate of {per_second} r/s")
    return f"{int(per_minute)}r/m"


class NginxLimiter:
    """nginx ``limit_req zone=sim burst=B nodelay`` at ``rate`` r/s before ``upstream_port``."""

    def __init__(
        self,
        upstream_port: int,
        *,
        rate: float,
        burst: int = 0,
        nodelay: bool = True,
        status: int = 429,
    ) -> None:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
        self.binary = binary
        self.upstream_port = upstream_port
        self.rate = rate
        self.burst = burst
        self.nodelay = nodelay
        self.status = status
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL through nginx."""
        return f"http://127.0.0.1:{self.port}/v1"

    def config(self, prefix: str) -> str:
        """The nginx.conf this limiter runs with, its paths under ``prefix``."""
        return _CONFIG.format(
            prefix=prefix,
            rate=_nginx_rate(self.rate),
            status=self.status,
            upstream_port=self.upstream_port,
            port=self.port,
            burst=f" burst={self.burst}" if self.burst else "",
            nodelay=" nodelay" if self.nodelay else "",
        )

    def start(self) -> str:
        """Start nginx and wait until it listens; returns the base URL."""
        self._dir = tempfile.TemporaryDirectory(prefix="splitter-nginx-")
        prefix = self._dir.name
        self.port = _free_port()
        conf = Path(prefix, "nginx.conf")
        conf.write_text(self.config(prefix))
        error_log = os.path.join(prefix, "error.log")
        args = [self.binary, "-p", prefix, "-c", str(conf), "-e", error_log]
        with open(os.path.join(prefix, "stderr.log"), "wb") as stderr:
            self._process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                said = "".join(
                    path.read_text() for path in Path(prefix).glob("*.log") if path.is_file()
                )
                self.stop()
                raise RuntimeError(f"nginx did not start: {said}")
            time.sleep(0.01)
        return self.base_url

    def stop(self) -> None:
        """Stop nginx (SIGTERM: its fast shutdown) and remove its prefix."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=10)
            self._process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
