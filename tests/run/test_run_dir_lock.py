"""A run directory is owned by one process at a time: a second `run` (or a `--resume`) of the same `--out` while
another process writes it exits 2 at once, naming the holder, and leaves the first run's record whole. Real
processes, and a real HTTP server on 127.0.0.1 that holds the first run's model calls until the second is done."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evals.arms.serve import start_server
from evals.run.rundir_lock import RunDirLock

REPO = Path(__file__).resolve().parents[2]
CASES = [
    {"id": "a", "lang": "en", "user_id": "tim",
     "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
     "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}},
    {"id": "b", "lang": "en", "user_id": "ann",
     "turns": [[{"role": "user", "content": "I am a nurse."}]], "expect": {"facts": [{"text": "The user is a nurse."}]}},
]


def _gated_forwarder(upstream: str, gate: threading.Event) -> ThreadingHTTPServer:
    """An OpenAI-compatible endpoint that holds every request until `gate` is set, then forwards it upstream."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the base class's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            gate.wait(120)
            request = urllib.request.Request(upstream.rsplit("/v1", 1)[0] + self.path, data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as reply:
                data = reply.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evals.cli.main", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HYMEM_MATCHER": "text", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.mark.slow
def test_a_second_run_of_the_same_out_exits_2_naming_the_holder_and_the_first_run_stays_whole(tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    out = tmp_path / "run"
    gate = threading.Event()
    with start_server() as offline:
        httpd = _gated_forwarder(offline.url, gate)
        try:
            url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
            args = ["run", "--dataset", str(dataset), "--lm", f"openai/offline@{url}", "--embedder", "hash",
                    "--faults", "none", "--no-progress", "--out", str(out)]
            first = subprocess.Popen(_cli(*args), cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 120
                while not (out / "manifest.json").is_file():  # the first run is under way (its calls held)
                    assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                    time.sleep(0.1)
                started = time.monotonic()
                second = subprocess.run(_cli(*args), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                                        timeout=120)
                waited = time.monotonic() - started
                resumed = subprocess.run(_cli(*args, "--resume"), cwd=tmp_path, env=_env(), capture_output=True,
                                         text=True, timeout=120)
            finally:
                gate.set()
                stdout, stderr = first.communicate(timeout=300)
        finally:
            httpd.shutdown()
            httpd.server_close()
    assert second.returncode == 2, (second.stdout, second.stderr)
    assert f"pid {first.pid} on host {socket.gethostname()}, started " in second.stderr, second.stderr
    assert "in use by another run" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert waited < 30  # at once: it did not wait for the first run's units (which wait for the gate)
    assert resumed.returncode == 2 and f"pid {first.pid} on host" in resumed.stderr, resumed.stderr
    assert first.returncode == 0, stderr
    units = [json.loads(line) for line in (out / "units.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(u["case_id"] for u in units) == ["a", "b"]  # one run's units, each once: nothing interleaved
    assert "verdict:" in stdout  # the first run's report was printed, not lost


@pytest.mark.slow
def test_resume_takes_the_lock_too_and_gets_it_once_the_holder_lets_go(tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    out = tmp_path / "run"
    args = ["run", "--dataset", str(dataset), "--embedder", "hash", "--faults", "none", "--no-progress",
            "--out", str(out)]
    assert subprocess.run(_cli(*args), cwd=tmp_path, env=_env(), capture_output=True, timeout=300).returncode == 0
    manifest = (out / "manifest.json").read_bytes()
    with RunDirLock.acquire(out):  # this process holds the run directory now
        resumed = subprocess.run(_cli(*args, "--resume"), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                                 timeout=300)
    assert resumed.returncode == 2, resumed.stderr
    assert f"in use by another run (pid {os.getpid()} on host {socket.gethostname()}" in resumed.stderr
    assert (out / "manifest.json").read_bytes() == manifest  # untouched while refused
    again = subprocess.run(_cli(*args, "--resume"), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr  # the lock went with its holder
