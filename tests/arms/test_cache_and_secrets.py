"""The response cache never credits one endpoint's replies to another, a faulted call never comes from the
cache, and no key (configured or shaped like one) reaches any output; on real servers on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from evals.arms.serve import start_server
from evals.cli.main import main
from evals.core.redact import redact_text, register_secret
from evals.pipeline import run_eval
from evals.run.runner import RunConfig
from tests.conftest import TWO_CASES

CASES = TWO_CASES


class _EchoKey401(BaseHTTPRequestHandler):
    """A provider that refuses every request and echoes the key it was sent (as some real ones do)."""

    hits = 0

    def do_POST(self) -> None:  # noqa: N802 (the base class's name)
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        body = json.dumps({"error": {
            "message": f"Incorrect API key provided: {key}. Also seen: sk-proj-UNCONFIGUREDabcdef123456, "
                       f"Authorization: Bearer tok_ABCDEFGHIJKLMNOP1234 and api_key=qwertyuiop123",
            "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_server():
    handler = type("Handler", (_EchoKey401,), {"hits": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CASES) + "\n", encoding="utf-8")
    return path


def _providers_file(tmp_path: Path, url: str, name: str = "mini") -> Path:
    path = tmp_path / f"providers-{url.rsplit(':', 1)[1].split('/')[0]}.toml"
    path.write_text(f'[[provider]]\nname = "{name}"\nmodel = "openai/offline"\napi_base = "{url}"\n'
                    f'api_key_env = "HYMEM_TEST_KEY"\n', encoding="utf-8")
    return path


def test_a_cached_reply_of_one_endpoint_is_never_credited_to_another(dataset, tmp_path, refusing_server,
                                                                     monkeypatch):
    monkeypatch.setenv("HYMEM_TEST_KEY", "local-test-key-1")
    handler, refusing_url = refusing_server
    cache = tmp_path / "cache.sqlite"
    with start_server() as good:
        first = run_eval(RunConfig(datasets=[str(dataset)], providers_file=_providers_file(tmp_path, good.url),
                                   embedder="hash", faults="none", out=tmp_path / "a", progress=False, cache_dir=cache))
    assert (pd.read_parquet(first.run_dir / "cases.parquet").status == "ok").all()
    # The same provider name and model, pointed at a server that refuses everything: nothing may come from A.
    second = run_eval(RunConfig(datasets=[str(dataset)], providers_file=_providers_file(tmp_path, refusing_url),
                                embedder="hash", faults="none", out=tmp_path / "b", progress=False, cache_dir=cache))
    assert handler.hits > 0
    attempts = pd.read_parquet(second.run_dir / "attempts.parquet")
    assert not attempts[attempts.site != "embed"].cache_hit.any()
    assert (pd.read_parquet(second.run_dir / "cases.parquet").status == "infra_error").all()


# five runs each (run by `nox -s heavy`); the default run keeps the explicit endpoint's cache test above and how the
# environment's endpoint is read (test_the_endpoint_is_the_explicit_one_else_the_environment_s_for_the_prefix)
@pytest.mark.ci_heavy
@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "OPENAI_API_BASE"])
def test_an_endpoint_set_by_the_environment_is_part_of_the_cache_key(dataset, tmp_path, monkeypatch, variable):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    cache = tmp_path / "cache.sqlite"

    def run(url: str, out: str) -> pd.DataFrame:
        monkeypatch.setenv(variable, url)
        outcome = run_eval(RunConfig(datasets=[str(dataset)], providers=["openai/offline"], embedder="hash",
                                     faults="none", out=tmp_path / out, progress=False, cache_dir=cache))
        assert (pd.read_parquet(outcome.run_dir / "cases.parquet").status == "ok").all()
        attempts = pd.read_parquet(outcome.run_dir / "attempts.parquet")
        return attempts[attempts.site != "embed"]

    with start_server() as a, start_server() as b:
        assert not run(a.url, "a").cache_hit.any()
        assert not run(b.url, "b").cache_hit.any()  # B is asked itself, never answered from A's replies
        assert run(a.url, "a2").cache_hit.all()  # and A's own replies are still reused
    with socket.socket() as free:  # a port nothing listens on: A's cached replies must not answer for it
        free.bind(("127.0.0.1", 0))
        monkeypatch.setenv(variable, f"http://127.0.0.1:{free.getsockname()[1]}/v1")
    dead = run_eval(RunConfig(datasets=[str(dataset)], providers=["openai/offline"], embedder="hash", faults="none",
                              out=tmp_path / "dead", progress=False, cache_dir=cache))
    assert dead.units and dead.infra_error_units == dead.units


def test_the_endpoint_is_the_explicit_one_else_the_environment_s_for_the_prefix(monkeypatch):
    from evals.arms.providers import endpoint

    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert endpoint("openai/m") is None  # the provider's own default
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:1/v1")
    assert endpoint("openai/m") == "http://127.0.0.1:1/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:2/v1")  # LiteLLM reads this one first for openai/
    assert endpoint("openai/m") == "http://127.0.0.1:2/v1"
    assert endpoint("openai/m", "http://127.0.0.1:3/v1") == "http://127.0.0.1:3/v1"
    assert endpoint("anthropic/m") is None
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:4")
    monkeypatch.setenv("ANTHROPIC_API_BASE", "http://127.0.0.1:5")  # and this one for anthropic/
    assert endpoint("anthropic/m") == "http://127.0.0.1:5"


def test_the_cache_key_covers_every_request_parameter_and_the_prompt_hash(tmp_path):
    from evals.arms.accounting import ResponseCache

    one, other = ResponseCache(tmp_path / "c.sqlite", prompt_hash="p1"), ResponseCache(tmp_path / "d.sqlite", "p2")
    base = {"api_base": "http://127.0.0.1:1/v1", "model": "openai/m", "params": {"temperature": 0.0},
            "messages": [{"role": "user", "content": "hi"}]}
    key = one.key(**base)
    assert one.key(**{**base, "params": {"temperature": 0.7}}) != key
    assert one.key(**{**base, "params": {"temperature": 0.0, "max_tokens": 5}}) != key
    assert one.key(**{**base, "api_base": "http://127.0.0.1:2/v1"}) != key
    assert one.key(**{**base, "model": "openai/n"}) != key
    assert other.key(**base) != key  # another program's prompts
    assert one.key(**base, epoch=1) != key  # another epoch
    assert one.key(**{**base, "params": {"temperature": 0.0, "api_key": "another-key"}}) == key  # not a reply shaper


def test_no_key_reaches_any_output_when_the_provider_echoes_it(dataset, tmp_path, refusing_server, monkeypatch,
                                                              capsys):
    secret = "xq-local-SECRET-value-42"  # not shaped like any known key: only configuration says it is one
    monkeypatch.setenv("HYMEM_TEST_KEY", secret)
    handler, url = refusing_server
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--dataset", str(dataset), "--providers", str(_providers_file(tmp_path, url)), "--lm", "mini",
                 "--embedder", "hash", "--faults", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    assert handler.hits > 0 and code in (0, 1)
    printed = capsys.readouterr()
    leaks = (secret, "sk-proj-UNCONFIGURED", "tok_ABCDEFGHIJKLMNOP1234", "qwertyuiop123")
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".toml" and p.name != "d.jsonl"]
    assert any(p.name == "units.jsonl" for p in written) and any(p.name == "summary.md" for p in written)
    for path in written:
        data = path.read_bytes()
        for leak in leaks:
            assert leak.encode() not in data, (path, leak)
    for leak in leaks:
        assert leak not in printed.out + printed.err
    units = (tmp_path / "run" / "units.jsonl").read_text(encoding="utf-8")
    assert "[REDACTED]" in units and "Incorrect API key provided" in units  # the error is kept, the key is not
    errors = pd.read_parquet(tmp_path / "run" / "attempts.parquet").error.dropna()
    assert errors.str.contains("[REDACTED]", regex=False).any()


def test_redaction_keeps_ordinary_text():
    register_secret("configured-key-XYZ")
    text = 'key configured-key-XYZ, "api_key": "abcdefgh99", Bearer abcdefghijklmnop, sk-ant-0123456789'
    assert redact_text(text) == 'key [REDACTED], "api_key": "[REDACTED]", Bearer [REDACTED], [REDACTED]'
    ordinary = "The user's task-force asked about a risk-free bearer bond; my password is private."
    assert redact_text(ordinary) == ordinary
