"""A reverse proxy in front of any OpenAI-compatible endpoint that injects HTTP-semantic faults.

Why: Toxiproxy works on TCP bytes; a memory engine's failure table is about *replies* (a 429 with
Retry-After, a 200 with an empty body, null content, truncated JSON). This proxy speaks HTTP and JSON,
faults chat-completion and embedding requests on a seeded schedule, and logs every injected fault
(request id, kind, path, time) as a JSON line so the runner can join it into `faults.parquet`.

Fault plans (`--faults`):
- `none`: forward everything.
- `random:RATE[:KINDS]`: each faultable request is faulted with probability RATE, the kind drawn uniformly
  from KINDS (default: all). The draw for the n-th faultable request depends only on (seed, n).
- `every:N[:KINDS]`: every N-th faultable request (the N-th, 2N-th, ...), kind drawn as above.
- `seq:ITEM,ITEM,...`: the n-th faultable request gets the n-th item, a kind or `ok` (forward); after the
  list, everything is forwarded. Meant for tests that aim a fault at one request.
KINDS is a comma list; `500`, `502`, `503`, `429` are accepted for the `http_*` kinds.
Only POSTs to `.../chat/completions` and `.../embeddings` are faultable; everything else is forwarded.
A logged fault's `request_id` is, in order of preference: the id in a `/rid/<id>/v1` base URL
(`ProxyHandle.url_for`), the `x-hymem-request-id` header, or the request's number (`seq`).

For embeddings the content kinds mean: `empty_content` → `data: []`, `null_content` → null vectors,
`truncated_json` → the body cut in half, `wrong_schema` → vectors under a wrong field name.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.arms.serve import DEFAULT_MAX_BODY, JSONHandler, ServerHandle, bind, wait_forever
from evals.core.redact import redact
from evals.core.urls import url_problem

KINDS = ("http_500", "http_502", "http_503", "http_429", "empty_body", "non_json_body", "empty_content",
         "null_content", "truncated_json", "wrong_schema", "latency", "drop_connection")
_ALIASES = {"500": "http_500", "502": "http_502", "503": "http_503", "429": "http_429"}
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
               "trailers", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}
REQUEST_ID_HEADER = "x-hymem-request-id"
_RID_PREFIX = re.compile(r"^/rid/([^/?]+)(?=/|$)")


def _kind(name: str) -> str:
    kind = _ALIASES.get(name.strip(), name.strip())
    if kind not in KINDS:
        raise ValueError(f"unknown proxy fault kind {name!r}: use one of {', '.join(KINDS)}")
    return kind


def _kinds(text: str) -> tuple[str, ...]:
    return tuple(_kind(k) for k in text.split(",") if k.strip()) or KINDS


@dataclass(frozen=True)
class ProxyPlan:
    """Which faultable request (0-based, in arrival order) gets which fault. See the module docstring."""

    mode: str  # none | random | every | seq
    rate: float = 0.0
    every: int = 0
    kinds: tuple[str, ...] = KINDS
    sequence: tuple[str | None, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> ProxyPlan:
        head, _, rest = spec.strip().partition(":")
        try:
            if head == "none" and not rest:
                return cls("none")
            if head == "random":
                rate_text, _, kinds = rest.partition(":")
                rate = float(rate_text)
                if not 0.0 < rate <= 1.0:
                    raise ValueError("RATE must be in (0, 1]")
                return cls("random", rate=rate, kinds=_kinds(kinds))
            if head == "every":
                n_text, _, kinds = rest.partition(":")
                if int(n_text) < 1:
                    raise ValueError("N must be >= 1")
                return cls("every", every=int(n_text), kinds=_kinds(kinds))
            if head == "seq" and rest:
                return cls("seq", sequence=tuple(None if i.strip() == "ok" else _kind(i) for i in rest.split(",")))
        except ValueError as exc:
            raise ValueError(f"--faults {spec!r}: {exc}") from None
        raise ValueError(f"--faults {spec!r}: use none, random:RATE[:KINDS], every:N[:KINDS] or seq:KIND|ok,...")

    def kind_for(self, index: int, seed: int) -> str | None:
        """The fault for the `index`-th faultable request, or None to forward it untouched."""
        if self.mode == "seq":
            return self.sequence[index] if index < len(self.sequence) else None
        draw = random.Random(f"hymem-proxy|{seed}|{index}")
        if self.mode == "random":
            return draw.choice(self.kinds) if draw.random() < self.rate else None
        if self.mode == "every" and (index + 1) % self.every == 0:
            return draw.choice(self.kinds)
        return None


class ProxyHandle(ServerHandle):
    """A running proxy; `.faults()` lists the faults injected so far (the log's records)."""

    def __init__(self, httpd: Any, state: _State):
        super().__init__(httpd)
        self._state = state

    def url_for(self, request_id: str) -> str:
        """A base URL that tags every request through it with `request_id` in the fault log.

        Why: DSPy's native HTTP engine cannot send a custom header (a `headers=` option silently moves the
        LM to LiteLLM, which classifies bad bodies differently), but it takes any `api_base`.
        """
        return f"http://127.0.0.1:{self.port}/rid/{urllib.parse.quote(request_id, safe='')}/v1"

    def faults(self) -> list[dict]:
        with self._state.lock:
            return [dict(r) for r in self._state.records]


class _State:
    """What the handler threads share: the plan, the request counter and the fault log."""

    def __init__(self, upstream: str, plan: ProxyPlan, seed: int, log_path: Path | None, fault_delay: float,
                 timeout: float, max_body: int = DEFAULT_MAX_BODY):
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream {upstream!r} must be an http(s) URL")
        self.upstream, self.upstream_host = parts, parts.hostname
        self.plan, self.seed, self.fault_delay, self.timeout = plan, seed, fault_delay, timeout
        self.log_path = log_path
        if max_body < 1:
            raise ValueError("the body limit must be at least 1 byte")
        self.max_body = int(max_body)
        self.lock = threading.Lock()
        self.count = 0
        self.records: list[dict] = []

    def next_fault(self) -> tuple[int, str | None]:
        """Number this faultable request and decide its fault (None: forward it)."""
        with self.lock:
            index = self.count
            self.count += 1
        return index, self.plan.kind_for(index, self.seed)

    def log(self, index: int, kind: str, path: str, request_id: str | None, applied: bool = True) -> None:
        """Record one injected fault, in memory and as a JSON line (never any header value)."""
        record = redact({"request_id": request_id or str(index), "seq": index, "kind": kind, "path": path,
                         "time": time.time(), "applied": applied})
        with self.lock:
            self.records.append(record)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(record) + "\n")

    def upstream_path(self, path: str) -> str:
        """`/v1/chat/completions` onto `https://host/api/v1` → `/api/v1/chat/completions`."""
        base = self.upstream.path.rstrip("/")
        if base and path.startswith("/v1/") and base.endswith("/v1"):
            path = path[len("/v1"):]
        return base + path


def _content_fault(kind: str, embeddings: bool, request: dict) -> bytes:
    """A synthesized 200 reply for `empty_content`, `null_content` or `wrong_schema` (no upstream call)."""
    if embeddings:
        inputs = request.get("input")
        count = len(inputs) if isinstance(inputs, list) else 1
        rows: list[dict] = []
        if kind == "null_content":
            rows = [{"object": "embedding", "index": i, "embedding": None} for i in range(count)]
        elif kind == "wrong_schema":
            rows = [{"object": "embedding", "index": i, "vector": [0.0, 1.0]} for i in range(count)]
        return json.dumps({"object": "list", "data": rows, "model": request.get("model")}).encode()
    content = {"empty_content": "", "null_content": None,
               "wrong_schema": json.dumps({"unexpected": "field", "items": [1, 2, 3]})}[kind]
    return json.dumps({
        "id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()), "model": request.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }).encode()


def _truncate(body: bytes, embeddings: bool) -> bytes | None:
    """Chat: cut the reply content so it no longer parses as JSON. Embeddings: cut the body itself."""
    if embeddings:
        return body[: len(body) // 2] if body else None
    try:
        reply = json.loads(body)
        content = reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str) or not content:
        return None
    cut = content[: max(1, len(content) // 2)]
    while cut:
        try:
            json.loads(cut)
        except ValueError:
            break
        cut = cut[:-1]
    reply["choices"][0]["message"]["content"] = cut or "{"
    return json.dumps(reply, ensure_ascii=False).encode("utf-8")


def _handler(state: _State) -> type[JSONHandler]:
    class FaultProxyHandler(JSONHandler):
        max_body = state.max_body

        def get(self) -> None:
            self._tagged_id()
            self._forward(b"")

        def do_DELETE(self) -> None:
            self._guarded(self.get)

        def post(self) -> None:
            body = self.read_body()
            path_id = self._tagged_id()
            route = self.path.split("?", 1)[0].rstrip("/")
            if not route.endswith(("/chat/completions", "/embeddings")):
                self._forward(body)
                return
            index, kind = state.next_fault()
            if kind is None:
                self._forward(body)
                return
            request_id = path_id or self.headers.get(REQUEST_ID_HEADER)
            if kind == "truncated_json":  # needs the real reply first; logged as not applied if it cannot be cut
                status, headers, reply = self._upstream(body)
                cut = _truncate(reply, route.endswith("/embeddings")) if status == 200 else None
                state.log(index, kind, route, request_id, applied=cut is not None)
                self._relay(status, headers, reply if cut is None else cut)
                return
            state.log(index, kind, route, request_id)
            self._inject(kind, body, route.endswith("/embeddings"))

        def _tagged_id(self) -> str | None:
            """Strip a `/rid/<id>` prefix off the path (see ProxyHandle.url_for) and return the id."""
            match = _RID_PREFIX.match(self.path)
            if match is None:
                return None
            self.path = self.path[match.end():] or "/"
            return urllib.parse.unquote(match.group(1))

        def _inject(self, kind: str, body: bytes, embeddings: bool) -> None:
            if kind.startswith("http_"):
                status = int(kind[5:])
                extra = {"Retry-After": "1"} if status == 429 else None
                self.send_error_json(status, f"injected fault {kind}", "rate_limit_error" if status == 429
                                     else "server_error", headers=extra)
            elif kind == "empty_body":
                self.send_bytes(200, b"")
            elif kind == "non_json_body":
                self.send_bytes(200, b"<html><body>502 Bad Gateway (injected)</body></html>", "text/html")
            elif kind == "drop_connection":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:  # the client went first
                    pass
            elif kind == "latency":
                time.sleep(state.fault_delay)
                self._forward(body)
            else:
                self.send_bytes(200, _content_fault(kind, embeddings, _json_or_empty(body)))

        def _forward(self, body: bytes) -> None:
            self._relay(*self._upstream(body))

        def _upstream(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            parts = state.upstream
            conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = conn_class(state.upstream_host, parts.port, timeout=state.timeout)
            drop = _HOP_BY_HOP | {h.strip().lower() for h in self.headers.get("Connection", "").split(",")}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
            headers["Accept-Encoding"] = "identity"  # so a reply can be rewritten as it is
            try:
                conn.request(self.command, state.upstream_path(self.path), body=body or None, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                kept = [(k, v) for k, v in reply.getheaders() if k.lower() not in _HOP_BY_HOP | {"content-type"}]
                kept.insert(0, ("Content-Type", reply.getheader("Content-Type", "application/json")))
                return reply.status, kept, data
            except (OSError, http.client.HTTPException) as exc:  # a real upstream failure, not an injected one
                message = json.dumps({"error": {"message": f"proxy: upstream unreachable: {type(exc).__name__}",
                                                "type": "upstream_error", "code": None}}).encode()
                return 502, [("Content-Type", "application/json")], message
            finally:
                conn.close()

        def _relay(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return FaultProxyHandler


def _json_or_empty(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: fault it as an empty request
        return {}
    return value if isinstance(value, dict) else {}


def start_proxy(upstream: str, plan: str | ProxyPlan, seed: int = 0, port: int = 0,
                log_path: str | Path | None = None, fault_delay: float = 1.0, timeout: float = 600.0,
                max_body: int = DEFAULT_MAX_BODY) -> ProxyHandle:
    """Start the fault proxy on 127.0.0.1 in a background thread, in front of `upstream` (e.g. `.../v1`).

    `log_path` gets one JSON line per injected fault (`request_id`, `seq`, `kind`, `path`, `time`, `applied`); headers,
    and so Authorization values, are never logged. `fault_delay` is the seconds a `latency` fault adds. A request
    body over `max_body` bytes is refused with 413 and never forwarded.
    """
    if (problem := url_problem(upstream)) is not None:  # a bad port made every request a 500
        raise ValueError(f"--upstream: {problem}")
    if not math.isfinite(fault_delay) or fault_delay < 0:
        raise ValueError(f"--fault-delay: {fault_delay!r}: use a finite number of seconds >= 0")
    plan = ProxyPlan.parse(plan) if isinstance(plan, str) else plan
    log = Path(log_path) if log_path is not None else None
    if log is not None:
        if not str(log_path).strip() or log.is_dir():
            raise ValueError(f"--log {str(log_path)!r}: a directory, not a file to append the fault log to")
        log.parent.mkdir(parents=True, exist_ok=True)
    state = _State(upstream, plan, seed, log, fault_delay, timeout, max_body)
    return ProxyHandle(bind(_handler(state), port), state)


def run_proxy(upstream: str, plan: str, seed: int = 0, port: int = 0, log_path: str | Path | None = None,
              fault_delay: float = 1.0, max_body: int = DEFAULT_MAX_BODY) -> int:
    """`hymem-eval proxy`: run the proxy in the foreground until Ctrl-C."""
    handle = start_proxy(upstream, plan, seed, port, log_path, fault_delay, max_body=max_body)
    return wait_forever(handle, f"fault proxy -> {upstream} (faults {plan}, seed {seed})")


__all__ = ["KINDS", "REQUEST_ID_HEADER", "ProxyHandle", "ProxyPlan", "run_proxy", "start_proxy"]
