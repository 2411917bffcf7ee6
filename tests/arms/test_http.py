"""The offline OpenAI-compatible server and the fault proxy, driven over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dspy
import numpy as np
import openai
import pytest

from evals.arms.proxy import KINDS, ProxyPlan, start_proxy
from evals.arms.serve import start_server
from evals.cli.main import main as cli_main
from hymem import HashEmbedder, HyMemoryClient, make_embedder
from hymem.offline import answer

SECRET = "sk-never-log-this-1234"
PROMPT = ("[[ ## conversation ## ]]\n[user]: Hi! I work at Stripe and I live in Lisbon.\n\n"
          "Respond with a JSON object in the following order of fields: `facts`, then `profile`.")
TALK = [
    [{"role": "user", "content": "Hi, I'm Anna. I live in Berlin and I work at Siemens."},
     {"role": "assistant", "content": "Nice to meet you! I suggest trying the U-Bahn."}],
    [{"role": "user", "name": "Anna", "content": "I moved to Munich. I love hiking."},
     {"role": "assistant", "name": "John", "content": "I am a nurse. I like coffee."}],
]


@pytest.fixture
def server():
    with start_server() as handle:
        yield handle


def http_lm(url: str, api_key: str = "x") -> dspy.LM:
    return dspy.LM("openai/offline", api_base=url, api_key=api_key, cache=False, num_retries=0, timeout=30)


def memories(client: HyMemoryClient) -> list[tuple[str, str, str, str]]:
    return [(m.text, m.subject, m.owner, m.kind) for m in client.get_all("u1")]


# --------------------------------------------------------------------------- serve


def test_openai_client_gets_the_offline_models_chat_reply(server):
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    reply = client.chat.completions.create(model="any-name", response_format={"type": "json_object"},
                                           messages=[{"role": "system", "content": "Extract facts."},
                                                     {"role": "user", "content": PROMPT}])
    assert reply.model == "any-name"
    assert reply.choices[0].message.content == answer(PROMPT)
    assert json.loads(reply.choices[0].message.content)["facts"]
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_a_prompt_the_offline_model_cannot_read_is_a_400(server):
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="offline model"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])


def test_embeddings_match_the_in_process_hash_embedder_in_float_and_base64(server):
    texts = ["The user lives in Munich.", "John is a nurse."]
    expected = HashEmbedder().embed(texts)
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    as_floats = client.embeddings.create(model="m", input=texts, encoding_format="float")
    as_base64 = client.embeddings.create(model="m", input=texts)  # the openai client's default wire format
    for reply in (as_floats, as_base64):
        assert [d.index for d in reply.data] == [0, 1]
        assert np.allclose([d.embedding for d in reply.data], expected, atol=1e-6)
    assert np.array_equal(make_embedder("openai/x@" + server.url).embed(texts), expected)


def test_models_lists_the_offline_model(server):
    models = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0).models.list()
    assert [m.id for m in models.data] == ["offline"]


def test_latency_is_applied_to_every_request():
    with start_server(latency=0.25) as slow:
        client = openai.OpenAI(base_url=slow.url, api_key="x", max_retries=0)
        start = time.perf_counter()
        client.models.list()
        client.embeddings.create(model="m", input="x")
        assert time.perf_counter() - start >= 2 * 0.25


def test_dspy_over_http_stores_the_same_memories_as_the_in_process_model(server, tmp_path):
    with HyMemoryClient(path=tmp_path / "http", lm=http_lm(server.url), embedder="hash") as over_http, \
            HyMemoryClient(path=tmp_path / "local", lm="offline", embedder="hash") as local:
        for turn in TALK:
            remote, direct = over_http.add(turn, user_id="u1"), local.add(turn, user_id="u1")
            assert remote.success and direct.success
            assert [(o.op, o.text, o.subject) for o in remote.ops] == [(o.op, o.text, o.subject) for o in direct.ops]
        assert memories(over_http) == memories(local)
        assert ("John is a nurse.", "John", "user", "fact") in memories(over_http)


# --------------------------------------------------------------------------- proxy

LM_EXPECTED = {"http_500": "LLM_ERROR", "http_502": "LLM_ERROR", "http_503": "LLM_ERROR", "http_429": "LLM_ERROR",
               "drop_connection": "LLM_ERROR", "empty_body": "EMPTY_RESPONSE", "empty_content": "EMPTY_RESPONSE",
               "null_content": "EMPTY_RESPONSE", "non_json_body": "JSON_PARSE_FAILED",
               "truncated_json": "JSON_PARSE_FAILED", "wrong_schema": "JSON_PARSE_FAILED", "latency": None}


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_on_extraction_gives_the_documented_error_code(server, tmp_path, kind):
    log = tmp_path / "faults.jsonl"
    with start_proxy(server.url, f"seq:{kind}", seed=1, log_path=log, fault_delay=0.2) as proxy, \
            HyMemoryClient(path=tmp_path / "store", lm=http_lm(proxy.url, api_key=SECRET), embedder="hash") as client:
        start = time.perf_counter()
        result = client.add(TALK[0], user_id="u1")
        assert result.error_code == LM_EXPECTED[kind], result.message
        assert result.success is (kind == "latency")
        if kind == "latency":
            assert time.perf_counter() - start >= 0.2 and memories(client)
        else:
            assert memories(client) == []  # a failed write stores nothing
        assert [(f["kind"], f["seq"], f["path"], f["applied"]) for f in proxy.faults()] == \
            [(kind, 0, "/v1/chat/completions", True)]
    assert read_log(log) == proxy.faults()
    assert SECRET not in log.read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_on_embedding_gives_embedding_failed(server, tmp_path, kind):
    # request 0 is the client's dimension probe; request 1 embeds the write's facts
    with start_proxy(server.url, f"seq:ok,{kind}", fault_delay=0.1) as proxy, \
            HyMemoryClient(path=tmp_path, lm="offline", embedder="openai/x@" + proxy.url) as client:
        result = client.add(TALK[0], user_id="u1")
        assert result.error_code == (None if kind == "latency" else "EMBEDDING_FAILED"), result.message
        assert [(f["kind"], f["seq"], f["path"]) for f in proxy.faults()] == [(kind, 1, "/v1/embeddings")]


def test_proxy_logs_the_clients_request_id_and_lets_models_through(server, tmp_path):
    with start_proxy(server.url, "every:1:500", log_path=tmp_path / "log.jsonl") as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=SECRET, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["offline"]
        with pytest.raises(openai.InternalServerError):
            client.embeddings.create(model="m", input="x", extra_headers={"x-hymem-request-id": "write-7"})
        with HyMemoryClient(path=tmp_path / "s", lm=http_lm(proxy.url_for("write 8/a")), embedder="hash") as mem:
            assert mem.add(TALK[0], user_id="u1").error_code == "LLM_ERROR"
        tagged = openai.OpenAI(base_url=proxy.url_for("write-9"), api_key="x", max_retries=0)
        assert [m.id for m in tagged.models.list().data] == ["offline"]  # the tag is stripped before forwarding
    assert [(f["request_id"], f["kind"]) for f in read_log(tmp_path / "log.jsonl")] == \
        [("write-7", "http_500"), ("write 8/a", "http_500")]


def test_a_429_carries_retry_after(server):
    with start_proxy(server.url, ProxyPlan.parse("seq:429")) as proxy:  # a plan object works as well as a string
        with pytest.raises(openai.RateLimitError) as caught:
            openai.OpenAI(base_url=proxy.url, api_key="x", max_retries=0).embeddings.create(model="m", input="x")
    assert caught.value.response.headers["retry-after"] == "1"


def test_plans_are_seeded_and_deterministic_in_request_order():
    plan = ProxyPlan.parse("random:0.5")
    draws = [plan.kind_for(i, seed=3) for i in range(200)]
    assert draws == [plan.kind_for(i, seed=3) for i in range(200)]
    assert draws != [plan.kind_for(i, seed=4) for i in range(200)]
    assert 60 < sum(d is not None for d in draws) < 140 and set(draws) - {None} == set(KINDS)
    every = ProxyPlan.parse("every:3:http_503,latency")
    assert [every.kind_for(i, seed=0) is not None for i in range(6)] == [False, False, True] * 2
    assert {every.kind_for(i, seed=s) for i in (2, 5) for s in range(20)} == {"http_503", "latency"}
    assert [ProxyPlan.parse("seq:500,ok,empty_body").kind_for(i, 0) for i in range(4)] == \
        ["http_500", None, "empty_body", None]
    assert ProxyPlan.parse("none").kind_for(0, 0) is None
    for bad in ("sometimes", "random:2", "every:0", "seq:http_999", "random:0.1:bogus"):
        with pytest.raises(ValueError, match="--faults"):
            ProxyPlan.parse(bad)


def test_cli_rejects_a_bad_fault_plan(capsys):
    assert cli_main(["proxy", "--upstream", "http://127.0.0.1:9/v1", "--faults", "often"]) == 2
    assert "--faults 'often'" in capsys.readouterr().err


def test_cli_serve_prints_its_url_and_stops_on_ctrl_c():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "evals.cli.main", "serve", "--latency", "0"], stdout=subprocess.PIPE,
                            text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # even under nohup/CI
    try:
        line = proc.stdout.readline()
        url = line.split("listening on ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "/models", timeout=10) as reply:
            assert json.load(reply)["data"][0]["id"] == "offline"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
