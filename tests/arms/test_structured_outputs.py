"""The providers file's `structured` and `max_tokens` keys, on the wire: a real 127.0.0.1 server records every chat
request of a run (answered by the offline model) and the test reads what the harness sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evals.arms.serve import chat_completion
from evals.cli.main import main
from evals.record import read_manifest
from hymem.offline import OfflineEngine

CASE = {"id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}]}}


class Recorder:
    """An OpenAI-compatible chat endpoint that keeps every request body (the offline model answers)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        engine, bodies = OfflineEngine(), self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                bodies.append(body)
                reply = json.dumps(chat_completion(body, engine)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


PROVIDERS = {  # name -> (model, extra keys): one run, every provider on the same recording server
    "schema": ("openai/m-schema", 'structured = "json_schema"\nmax_tokens = 300'),
    "object": ("openai/m-object", 'structured = "json_object"'),
    "off": ("openai/gpt-4o-mini", 'structured = "off"'),  # a model DSPy would ask, told not to
    "unset-unknown": ("openai/m-unset", ""),
    "unset-known": ("openai/gpt-4o", ""),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run of one case through every provider; the recorded request bodies by model, and the manifest."""
    tmp_path = tmp_path_factory.mktemp("structured")
    recorder = Recorder()
    try:
        (tmp_path / "d.jsonl").write_text(json.dumps(CASE) + "\n", encoding="utf-8")
        tables = [f'[[provider]]\nname = "{name}"\nmodel = "{model}"\napi_base = "{recorder.url}"\n{extra}\n'
                  for name, (model, extra) in PROVIDERS.items()]
        (tmp_path / "providers.toml").write_text("\n".join(tables), encoding="utf-8")
        out = tmp_path / "run"
        code = main(["run", "--dataset", str(tmp_path / "d.jsonl"), "--providers", str(tmp_path / "providers.toml"),
                     "--faults", "none", "--embedder", "hash", "--out", str(out), "--no-progress", "--no-cache"])
        assert code == 0
    finally:
        recorder.close()
    bodies: dict[str, list[dict]] = {}
    for body in recorder.bodies:
        bodies.setdefault(next(n for n, (m, _) in PROVIDERS.items() if m.split("/")[1] == body["model"]), []).append(body)
    assert set(bodies) == set(PROVIDERS), "every provider sent its requests"
    return bodies, read_manifest(out).provider_specs


def test_json_schema_sends_each_signatures_output_schema_in_openais_form(run):
    bodies, specs = run
    extraction = next(b for b in bodies["schema"] if "conversation" in json.dumps(b["messages"]))
    fmt = extraction["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    schema = fmt["json_schema"]["schema"]
    assert schema["type"] == "object" and set(schema["required"]) == {"facts", "profile"}
    assert schema["additionalProperties"] is False
    fact = schema["$defs"]["ExtractedFact"]
    assert set(fact["required"]) == {"text", "subject", "owner"} and fact["properties"]["owner"]["enum"] == ["user", "agent"]
    # every call carries its own signature's schema (the reconciler's outputs are `ops`)
    shapes = {tuple(sorted(b["response_format"]["json_schema"]["schema"]["required"])) for b in bodies["schema"]}
    assert ("facts", "profile") in shapes and ("ops",) in shapes
    # the cap, under OpenAI's current name (DSPy sends max_completion_tokens)
    assert {b.get("max_completion_tokens", b.get("max_tokens")) for b in bodies["schema"]} == {300}
    assert specs["schema"]["structured"] == "json_schema" and specs["schema"]["max_tokens"] == 300


def test_json_object_sends_json_mode(run):
    bodies, specs = run
    assert {json.dumps(b["response_format"]) for b in bodies["object"]} == {'{"type": "json_object"}'}
    assert all("max_tokens" not in b and "max_completion_tokens" not in b for b in bodies["object"])  # no cap unasked
    assert specs["object"]["structured"] == "json_object" and "max_tokens" not in specs["object"]


def test_off_sends_no_response_format_even_for_a_model_dspy_would_ask(run):
    bodies, specs = run
    assert all("response_format" not in b for b in bodies["off"])
    assert specs["off"]["structured"] == "off"


@pytest.mark.parametrize(("name", "expected"), [("unset-unknown", "off"), ("unset-known", "json_schema")])
def test_unset_follows_dspys_choice_by_model_name_and_the_manifest_says_which(run, name, expected):
    bodies, specs = run
    assert {b.get("response_format", {}).get("type", "off") for b in bodies[name]} == {expected}
    assert specs[name]["structured"] == expected


def test_a_bad_structured_value_is_one_line_naming_the_key(tmp_path, capsys):
    (tmp_path / "providers.toml").write_text('[[provider]]\nname = "p"\nmodel = "openai/x"\nstructured = "yes"\n'
                                             'max_tokens = 0\n', encoding="utf-8")
    assert main(["run", "--providers", str(tmp_path / "providers.toml"), "--faults", "none", "--out",
                 str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "provider[0].structured:" in err and "provider[0].max_tokens:" in err
