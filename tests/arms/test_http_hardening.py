"""`hymem-eval serve` and `proxy` as a client meets them: bad requests get a JSON 400/413 (never a dropped
connection), a burst of clients is accepted, and a client hanging up is not an error on the server's stderr.

Each server runs as its own process through the CLI on 127.0.0.1, as a user starts it.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * 1024  # --max-body of the servers under test
EMBED = {"model": "m", "input": ["I work at Stripe."]}


class Server:
    """A `hymem-eval` server process; its stderr goes to a file the tests read after it stops."""

    def __init__(self, args: list[str], stderr: Path):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.stderr_path = stderr
        self._err = stderr.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "evals.cli.main", *args], stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, env=env,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        line = self.proc.stdout.readline()
        assert "listening on " in line, (line, stderr.read_text())
        self.url = line.split("listening on ", 1)[1].split()[0]
        self.port = int(self.url.split(":")[2].split("/")[0])

    def stop(self) -> str:
        """Ctrl-C, wait, and return everything it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return self.stderr_path.read_text()


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, Server]]:
    tmp = tmp_path_factory.mktemp("servers")
    serve = Server(["serve", "--max-body", str(LIMIT)], tmp / "serve.err")
    proxy = Server(["proxy", "--upstream", serve.url, "--max-body", str(LIMIT)], tmp / "proxy.err")
    yield {"serve": serve, "proxy": proxy}
    proxy.stop()
    serve.stop()


@pytest.fixture(params=["serve", "proxy"])
def server(request, servers) -> Server:
    return servers[request.param]


def raw_request(port: int, head: str, body: bytes = b"") -> tuple[int, dict]:
    """Send bytes as they are (no client-side checks) and parse the reply; a dropped connection fails."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        reply = http.client.HTTPResponse(sock)
        reply.begin()  # raises RemoteDisconnected when the server hangs up without a reply
        data = reply.read()
    assert reply.getheader("Content-Type", "").startswith("application/json"), data[:200]
    return reply.status, json.loads(data)


def post(path: str, length: str, extra: str = "") -> str:
    return f"POST {path} HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\nContent-Length: {length}\n{extra}"


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "12, 12", ""])
def test_a_malformed_content_length_is_a_json_400(server, length):
    status, body = raw_request(server.port, post("/v1/chat/completions", length), b"{}")
    assert status == 400
    assert "Content-Length" in body["error"]["message"]


def test_deeply_nested_json_is_a_json_400(server):
    nested = b"[" * 30_000 + b"]" * 30_000  # within the body limit, far beyond the parser's recursion limit
    status, body = raw_request(server.port, post("/v1/chat/completions", str(len(nested))), nested)
    assert status == 400
    assert "nested" in body["error"]["message"]


@pytest.mark.parametrize("text", [42, None, ["a"], {"t": 1}])
def test_a_non_string_text_part_is_a_json_400(server, text):
    request = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    data = json.dumps(request).encode()
    status, body = raw_request(server.port, post("/v1/chat/completions", str(len(data))), data)
    assert status == 400
    assert "messages[0].content[0].text" in body["error"]["message"]


def test_a_body_over_the_limit_is_a_json_413_without_reading_it_whole(server):
    big = b" " * (LIMIT + 1)
    status, body = raw_request(server.port, post("/v1/embeddings", str(len(big))), big)
    assert status == 413
    assert str(LIMIT) in body["error"]["message"]
    # declared far beyond the limit and never sent: answered at once, not after reading 100 MB
    started = time.monotonic()
    status, _ = raw_request(server.port, post("/v1/embeddings", str(100 * 1024 * 1024), "Expect: 100-continue\n"))
    assert status == 413 and time.monotonic() - started < 5


def test_a_good_request_still_works_and_an_unknown_method_is_json(server):
    data = json.dumps(EMBED).encode()
    status, body = raw_request(server.port, post("/v1/embeddings", str(len(data))), data)
    assert status == 200 and len(body["data"][0]["embedding"]) > 0
    status, body = raw_request(server.port, "PATCH /v1/models HTTP/1.1\nHost: x\nContent-Length: 0\n")
    assert status == 501 and body["error"]["message"]


def _burst(port: int, clients: int) -> list[str]:
    """`clients` threads connect at the same instant and each POST one embedding request; their failures."""
    barrier = threading.Barrier(clients)
    failures: list[str] = []
    data = json.dumps({"model": "m", "input": ["I live in Lisbon."]}).encode()

    def one() -> None:
        try:
            barrier.wait(timeout=30)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/embeddings", body=data, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            conn.close()
            if reply.status != 200:
                failures.append(f"status {reply.status}")
        except Exception as exc:  # a reset, a refused connection, a timeout: all count
            failures.append(repr(exc))

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return failures


def test_200_simultaneous_clients_are_all_answered(servers):
    for name in ("serve", "proxy"):
        failures = _burst(servers[name].port, 200)
        assert failures == [], f"{name}: {len(failures)} of 200 failed, e.g. {failures[:3]}"


def test_clients_that_hang_up_leave_no_traceback(tmp_path):
    serve = Server(["serve", "--latency", "0.3"], tmp_path / "serve.err")
    proxy = Server(["proxy", "--upstream", serve.url], tmp_path / "proxy.err")
    try:
        data = json.dumps(EMBED).encode()
        for port in (serve.port, proxy.port):
            for partial in (False, True):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(post("/v1/embeddings", str(len(data))).replace("\n", "\r\n").encode() + b"\r\n"
                             + (data[:5] if partial else data))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
                sock.close()
        time.sleep(1.0)  # the server has slept its latency and written to the dead sockets
        for port in (serve.port, proxy.port):
            assert raw_request(port, post("/v1/embeddings", str(len(data))), data)[0] == 200
    finally:
        errors = {"proxy": proxy.stop(), "serve": serve.stop()}
    for name, text in errors.items():
        assert "Traceback" not in text and "Error" not in text, f"{name} stderr:\n{text}"
