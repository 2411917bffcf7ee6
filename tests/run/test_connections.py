"""`--concurrency C` against a real server: the server never sees more than C requests at once (nor more than
`--max-connections` or a providers file's `max_connections` when they set fewer), all C are used, and the runner
keeps the documented units in flight (C + ceil(C/4) by default, `--units-in-flight` otherwise)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from evals.arms.serve import start_server
from evals.cli.main import main
from evals.record import read_manifest
from evals.run.runner import units_in_flight

CASES = [{"id": f"c{i}", "lang": "en", "user_id": f"u{i}",
          "turns": [[{"role": "user", "content": f"I work at Shop{i}."}]],
          "expect": {"facts": [{"text": f"The user works at Shop{i}.", "subject": "user", "owner": "user"}]}}
         for i in range(8)]


class CountingServer:
    """In front of `serve`: counts the requests in flight and keeps the peak. The first requests are held until
    `fill` of them are in flight at once (or 10 s passed), so a limit that allows `fill` is seen to be used."""

    def __init__(self, upstream: str, fill: int):
        self.upstream, self.fill = upstream, fill
        self.in_flight = self.peak = self.requests = 0
        self._cond = threading.Condition()
        self._filled = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._cond:
                    outer.in_flight += 1
                    outer.requests += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                    if outer.in_flight >= outer.fill:
                        outer._filled = True
                        outer._cond.notify_all()
                    outer._cond.wait_for(lambda: outer._filled, timeout=10)
                try:
                    upstream = outer.upstream.rstrip("/").removesuffix("/v1") + self.path
                    request = urllib.request.Request(upstream, data=body, method="POST",
                                                     headers={"Content-Type": "application/json"})
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        payload, status = reply.read(), reply.status
                finally:
                    with outer._cond:
                        outer.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def upstream() -> Iterator[str]:
    with start_server() as handle:
        yield handle.url


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CASES) + "\n", encoding="utf-8")
    return path


def _run(dataset: Path, out: Path, lm: str, *extra: str) -> int:
    return main(["run", "--dataset", str(dataset), "--lm", lm, "--embedder", "hash", "--faults", "none",
                 "--no-cache", "--no-progress", "--out", str(out), *extra])


def _served(upstream: str, fill: int, dataset: Path, out: Path, *extra: str, lm: str | None = None) -> CountingServer:
    server = CountingServer(upstream, fill)
    try:
        assert _run(dataset, out, lm or f"openai/offline@{server.url}", *extra) == 0
    finally:
        server.close()
    return server


def test_units_in_flight_is_c_plus_a_quarter_of_c_rounded_up():
    assert [units_in_flight(c) for c in (1, 2, 3, 4, 5, 8, 16, 32)] == [2, 3, 4, 5, 7, 10, 20, 40]


def test_concurrency_is_the_requests_a_provider_sees_at_once_and_all_of_them_are_used(upstream, dataset, tmp_path):
    server = _served(upstream, 3, dataset, tmp_path / "run", "--concurrency", "3")
    assert server.peak == 3  # never more than C at once, and the C connections were all in use
    manifest = read_manifest(tmp_path / "run")
    assert manifest.concurrency == 3 and manifest.units_in_flight == units_in_flight(3) == 4
    assert list(manifest.max_connections.values()) == [3]
    attempts = pd.read_parquet(tmp_path / "run" / "attempts.parquet")
    assert len(attempts[attempts.site != "embed"]) == server.requests == 2 * len(CASES)  # extract + reconcile each


@pytest.mark.ci_heavy  # a run against a real server; the default run keeps two (run by `nox -s heavy`)
def test_max_connections_below_concurrency_bounds_the_requests_at_once(upstream, dataset, tmp_path):
    server = _served(upstream, 2, dataset, tmp_path / "run", "--concurrency", "4", "--max-connections", "2")
    assert server.peak == 2
    manifest = read_manifest(tmp_path / "run")
    assert manifest.units_in_flight == 5 and list(manifest.max_connections.values()) == [2]


@pytest.mark.ci_heavy  # a run against a real server; the default run keeps two (run by `nox -s heavy`)
def test_a_providers_file_limit_holds_whatever_the_concurrency(upstream, dataset, tmp_path):
    server = CountingServer(upstream, 1)
    try:
        providers = tmp_path / "providers.toml"
        providers.write_text(f'[[provider]]\nname = "local"\nmodel = "openai/offline"\napi_base = "{server.url}"\n'
                             'max_connections = 1\n', encoding="utf-8")
        assert _run(dataset, tmp_path / "run", "local", "--providers", str(providers), "--concurrency", "4") == 0
    finally:
        server.close()
    assert server.peak == 1
    assert read_manifest(tmp_path / "run").max_connections == {"local": 1}


@pytest.mark.ci_heavy  # a third run against the counting server; the default run keeps the concurrency one (run by `nox -s heavy`)
def test_units_in_flight_can_be_set_and_never_raises_the_connections(upstream, dataset, tmp_path):
    server = _served(upstream, 2, dataset, tmp_path / "run", "--concurrency", "2", "--units-in-flight", "6")
    assert server.peak == 2
    assert read_manifest(tmp_path / "run").units_in_flight == 6


def test_units_in_flight_must_be_positive_and_goes_with_the_local_executor(dataset, tmp_path, capsys):
    assert _run(dataset, tmp_path / "a", "offline", "--units-in-flight", "0") == 2
    assert "--units-in-flight must be at least 1" in capsys.readouterr().err
    assert _run(dataset, tmp_path / "b", "offline", "--units-in-flight", "2", "--executor", "ray") == 2
    assert "--units-in-flight goes with the local executor" in capsys.readouterr().err
