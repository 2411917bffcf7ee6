"""A local OpenAI-compatible server backed by the offline reference model and a local embedder.

Why: tests and benchmarks must drive the real HTTP stack (DSPy's HTTP engine, the openai client,
timeouts, the fault proxy) without a network or a paid provider. The server answers whatever model
name it is asked for, so `openai/offline@http://127.0.0.1:PORT/v1` scores exactly like `offline`.

Endpoints: POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models. Streaming is refused (400);
prompts the offline model cannot read get a 400 with its message, as a real provider rejects bad input.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

import hymem.embedder as hymem_embedder  # called through the module, as evals.arms.embedders does
from hymem.sites import SITE_HEADER

MODEL_ID = "offline"
DEFAULT_MAX_BODY = 32 * 1024 * 1024  # bytes of a request body; a larger one is refused with 413 before it is read
LISTEN_BACKLOG = 1024  # pending connections the kernel queues (it caps this at net.core.somaxconn)
_DRAIN_CAP = 256 * 1024 * 1024  # a refused body up to this size is read and discarded, so the client sees the 413
_DIGITS = re.compile(r"[0-9]+")
# What a client hanging up looks like from the server's side: not an error of the server.
_HANGUPS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class RequestError(Exception):
    """A request the server answers with a JSON error (`status`, `message`) instead of handling it."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def parse_size(text: str) -> int:
    """`1048576`, `64K`, `32M` or `1G` as bytes (at least 1); ValueError otherwise."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"body limit {text!r}: use a positive number of bytes, e.g. 1048576, 64K, 32M or 1G")
    return int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " ")


class ServerHandle:
    """A server running in a background thread; `.url` ends in `/v1`. Close it (or use `with`)."""

    def __init__(self, httpd: ThreadingHTTPServer):
        self._httpd = httpd
        self.port: int = httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"hymem-http-{self.port}", daemon=True)
        self._thread.start()
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QuietServer(ThreadingHTTPServer):
    """A threaded server with a deep listen backlog that treats a client hanging up as normal.

    Why: the standard library queues 5 pending connections (a burst of 200 clients saw 173 resets) and
    prints a traceback for every client that disconnects before its reply is written.
    """

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, _HANGUPS):
            return
        print(f"hymem-eval: request from {client_address[0]}:{client_address[1]} failed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def bind(handler: type[BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
    """A threaded HTTP server on 127.0.0.1 only (port 0 picks a free port)."""
    return QuietServer(("127.0.0.1", port), handler)


_PRINT = functools.partial(print, flush=True)  # a parent process reads the URL line through a pipe


def wait_forever(handle: ServerHandle, what: str, out: Callable[[str], Any] = _PRINT) -> int:
    """Run a started server in the foreground until Ctrl-C; 0 on a clean stop."""
    out(f"{what} listening on {handle.url}  (Ctrl-C to stop)")
    stop = threading.Event()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        out(f"{what} stopped")
    finally:
        handle.close()
    return 0


class JSONHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive handler with JSON helpers; quiet (no per-request stderr line).

    Subclasses implement `post()` and `get()`. A bad request (a malformed Content-Length, a body over
    `max_body`, JSON nested too deep, a wrong shape) raises RequestError and is answered with a JSON
    error; so is any unexpected exception (500), so a client never sees a dropped connection.
    """

    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection frees its thread after this
    max_body = DEFAULT_MAX_BODY

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle's algorithm and the client's delayed ACK add ~40 ms to every small reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass

    def post(self) -> None:
        self.send_error_json(404, f"no route POST {self.path}")

    def get(self) -> None:
        self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        self._guarded(self.post)

    def do_GET(self) -> None:
        self._guarded(self.get)

    def _guarded(self, handle: Callable[[], None]) -> None:
        try:
            handle()
        except RequestError as exc:
            self.send_error_json(exc.status, str(exc))
        except _HANGUPS:
            raise  # the client is gone; QuietServer drops it without a word
        except Exception as exc:  # a bug must still answer, and say so once on stderr
            print(f"hymem-eval: {self.command} {self.path}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            self.close_connection = True
            self.send_error_json(500, f"internal error: {type(exc).__name__}", "server_error")

    def body_length(self, drain: bool = True) -> int:
        """The declared Content-Length; RequestError (400, 411, 413) when it is malformed, missing or too big.

        A body over the limit is never kept: with `drain` it is read and dropped (up to a cap) so that the
        client, still sending, gets to read the 413 instead of a reset.
        """
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # the chunked body is still on the wire, unread
            raise RequestError(411, "chunked request bodies are not supported: send a Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return 0
        text = values[0].strip()
        if len(values) > 1 or not _DIGITS.fullmatch(text):
            self.close_connection = True  # where this request's body ends is unknown
            raise RequestError(400, f"malformed Content-Length header {', '.join(values)!r}: want one "
                                    "non-negative integer")
        length = int(text)
        if length > self.max_body:
            self.close_connection = True
            remaining = length if drain and length <= _DRAIN_CAP else 0
            while remaining > 0 and (chunk := self.rfile.read(min(65536, remaining))):
                remaining -= len(chunk)
            raise RequestError(413, f"request body of {length} bytes is over the limit of {self.max_body} bytes")
        return length

    def read_body(self) -> bytes:
        length = self.body_length()
        return self.rfile.read(length) if length > 0 else b""

    def handle_expect_100(self) -> bool:
        """Refuse a bad or oversized body before the client sends it (`Expect: 100-continue`)."""
        try:
            self.body_length(drain=False)
        except RequestError as exc:
            self.close_connection = True
            self.send_error_json(exc.status, str(exc))
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's protocol errors (bad request line, 501 unknown method), as JSON."""
        self.close_connection = True
        text = message or self.responses.get(code, ("error",))[0]
        self.send_error_json(code, text + (f": {explain}" if explain else ""))

    def send_bytes(self, status: int, body: bytes, content_type: str = "application/json",
                   headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(value, ensure_ascii=False).encode("utf-8"), headers=headers)

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error",
                        headers: dict[str, str] | None = None) -> None:
        """An error in OpenAI's shape: {"error": {"message", "type", "code"}}."""
        self.send_json(status, {"error": {"message": message, "type": kind, "code": None}}, headers=headers)


def parse_json_body(raw: bytes) -> Any:
    """The request body as JSON; RequestError(400) when it is not JSON or is nested too deep to parse."""
    try:
        return json.loads(raw or b"null")
    except RecursionError:
        raise RequestError(400, "the request body is JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise RequestError(400, f"the request body is not JSON: {exc}") from None


# --------------------------------------------------------------------------- OpenAI JSON <-> offline model

def _text_of(content: Any, where: str) -> str:
    """The text of an OpenAI message content: a string or a list of {"type": "text", "text"} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text":
                if not isinstance(part.get("text"), str):
                    raise ValueError(f"{where}[{i}].text must be a string, got {type(part.get('text')).__name__}")
                texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"{where} must be a string or a list of parts, got {type(content).__name__}")


def lm15_request(body: dict) -> Any:
    """An OpenAI chat request as the `dspy.lm15.Request` the offline engine reads.

    System/developer messages become the system text; user and assistant messages are kept in order;
    tool messages are dropped (the offline model answers from the last user message only).
    """
    from dspy import lm15

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    system, turns = [], []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{index}] must be an object")
        role, text = message.get("role"), _text_of(message.get("content"), f"messages[{index}].content")
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            turns.append(lm15.Message.user(text or " "))
        elif role == "assistant":
            turns.append(lm15.Message.assistant([lm15.TextPart(text or " ")]))
        elif role not in ("tool", "function"):
            raise ValueError(f"messages[{index}].role {role!r} is not supported")
    if not turns:
        raise ValueError("the request has no user or assistant message")
    return lm15.Request(model=str(body.get("model") or MODEL_ID), messages=tuple(turns),
                        system="\n\n".join(system) or None)


def chat_completion(body: dict, engine: Any, site: str | None = None) -> dict:
    """One OpenAI chat.completion for an OpenAI chat request, answered by `engine` (an OfflineEngine).

    `site`: the call site the caller named in the `X-Hymem-Call-Site` header (None: the model tells the
    task from the prompt, as any model reads its prompt).
    """
    response = engine.complete(lm15_request(body), site)
    usage = response.usage
    prompt, completion = usage.input_tokens or 0, usage.output_tokens or 0
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or MODEL_ID),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.text or ""},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def embeddings_reply(body: dict, embed: Callable[[list[str]], np.ndarray]) -> dict:
    """An OpenAI embeddings list; honours `encoding_format` ("float" or "base64", the openai client's default)."""
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("'input' must be a string or a non-empty list of strings (token arrays are not supported)")
    vectors = np.asarray(embed(texts), dtype=np.float32)
    b64 = body.get("encoding_format") == "base64"
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode() if b64 else row.tolist()}
            for i, row in enumerate(vectors)]
    tokens = sum(max(1, len(t) // 4) for t in texts)
    return {"object": "list", "data": data, "model": str(body.get("model") or MODEL_ID),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def models_reply() -> dict:
    return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "hymem"}]}


# --------------------------------------------------------------------------- the server

def _sleep_until(deadline: float) -> None:
    """Sleep until `deadline` (time.monotonic()); at once when it has passed."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def _handler(latency: float, embed: Callable[[list[str]], np.ndarray], body_limit: int, engine: Any) -> type[JSONHandler]:
    class OfflineHandler(JSONHandler):
        max_body = body_limit

        def get(self) -> None:
            _sleep_until(time.monotonic() + latency)
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self.send_json(200, models_reply())
            else:
                self.send_error_json(404, f"no route GET {self.path}")

        def post(self) -> None:
            raw = self.read_body()
            deadline = time.monotonic() + latency  # the model's own work happens inside the latency, as a provider's
            route = self.path.split("?", 1)[0].rstrip("/")
            try:
                reply = self._reply(route, raw) if route.endswith(("/chat/completions", "/embeddings")) else None
            finally:
                _sleep_until(deadline)
            if reply is None:
                self.send_error_json(404, f"no route POST {self.path}")
            else:
                self.send_json(200, reply)

        def _reply(self, route: str, raw: bytes) -> dict:
            body = parse_json_body(raw)
            try:
                if not isinstance(body, dict):
                    raise ValueError("the request body must be a JSON object")
                if route.endswith("/embeddings"):
                    return embeddings_reply(body, embed)
                if body.get("stream"):
                    raise ValueError("streaming is not supported by the offline server")
                return chat_completion(body, engine, self.headers.get(SITE_HEADER))
            except ValueError as exc:  # a bad shape, or a prompt the offline model cannot read
                raise RequestError(400, str(exc)) from None

    return OfflineHandler


def _embed_function(embedder: str) -> Callable[[list[str]], np.ndarray]:
    if embedder not in ("hash", "minilm"):
        raise ValueError(f"embedder {embedder!r}: the server offers hash or minilm")

    model = hymem_embedder.make_embedder(embedder)
    lock = threading.Lock()  # a torch model is not safe to call from several request threads

    def embed(texts: list[str]) -> np.ndarray:
        with lock:
            return model.embed(texts)

    return embed


def start_server(port: int = 0, latency: float = 0.0, embedder: str = "hash",
                 max_body: int = DEFAULT_MAX_BODY, engine: Any = None) -> ServerHandle:
    """Start the offline OpenAI-compatible server on 127.0.0.1 in a background thread.

    Every reply leaves `latency` seconds after its request was read, or at once when computing it took longer
    (the model's work is part of the latency, as at a provider); `embedder` is `hash` (default) or `minilm`; a request body
    over `max_body` bytes is refused with 413. `engine` answers the chat requests (`complete(request, site)`);
    default: the offline model, which also answers mem0's extraction prompt (`--system mem0 --lm offline`).
    """
    if not math.isfinite(latency) or not 0 <= latency <= 86400:  # inf/nan/1e10 would hold every reply forever
        raise ValueError(f"--latency {latency!r}: use a number of seconds from 0 to 86400")
    if max_body < 1:
        raise ValueError("the body limit must be at least 1 byte")
    if engine is None:
        from evals.arms.mem0_offline import Mem0AwareEngine  # lazy: the CLI's parser imports this module

        engine = Mem0AwareEngine()
    return ServerHandle(bind(_handler(float(latency), _embed_function(embedder), int(max_body), engine), port))


def run_server(port: int = 0, latency: float = 0.0, embedder: str = "hash", max_body: int = DEFAULT_MAX_BODY) -> int:
    """`hymem-eval serve`: run the server in the foreground until Ctrl-C."""
    return wait_forever(start_server(port, latency, embedder, max_body),
                        f"offline OpenAI-compatible server (model {MODEL_ID!r})")


__all__ = ["DEFAULT_MAX_BODY", "MODEL_ID", "JSONHandler", "RequestError", "ServerHandle", "chat_completion",
           "embeddings_reply", "lm15_request", "parse_json_body", "parse_size", "run_server", "start_server"]
