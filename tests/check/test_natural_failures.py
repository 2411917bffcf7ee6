"""Natural failures: a fault-free write that the model's own reply broke is measured, never dropped.

The model here is real enough to fail the way real ones do: the offline reference model behind a wrapper that
breaks chosen calls (prose, a schema echo, truncated JSON, an unknown id), a real HTTP server on 127.0.0.1 that
answers prose, and the offline server behind the fault proxy breaking a share of replies.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dspy
import pandas as pd
import pytest
from dspy import lm15

import hymem.client as client_module
from evals.arms.proxy import start_proxy
from evals.arms.serve import JSONHandler, start_server
from evals.cases.dataset import Case
from evals.check.natural import read_reply
from evals.cli.main import main
from evals.faults.plan import FaultPlan
from evals.record import AnomalyKind, CaseRun
from evals.run.replay import CaseReplayer, UnitModels
from evals.scoring import TextMatcher, attribution_metrics
from hymem.embedder import HashEmbedder
from hymem.offline._engine import MODEL, OfflineEngine
from hymem.sites import current_call_site

PROSE = "Sure! Here is what I remember: the user moved to Berlin and plays the cello."

FOUR = Case.model_validate({
    "id": "four-writes", "lang": "en", "user_id": "tim", "tags": [],
    "turns": [[{"role": "user", "content": "I work at Stripe."}],
              [{"role": "user", "content": "I moved to Berlin last year."}],
              [{"role": "user", "content": "I have two cats."}],
              [{"role": "user", "content": "I play the cello."}]],
    "expect": {"facts": [{"text": "The user works at Stripe.", "subject": "user", "owner": "user"},
                         {"text": "The user lives in Berlin.", "subject": "user", "owner": "user"},
                         {"text": "The user has two cats.", "subject": "user", "owner": "user"},
                         {"text": "The user plays the cello.", "subject": "user", "owner": "user"}]},
})

WORKING = Case.model_validate({
    "id": "working", "lang": "en", "user_id": "dev", "path": "working", "tags": [],
    "turns": [[{"role": "user", "content": "Fix the failing test."},
               {"role": "assistant", "content": "Done: the test needed a fixed random seed."}],
              [{"role": "user", "content": "The build is slow."},
               {"role": "assistant", "content": "Caching the dependencies cut the build from 9 to 3 minutes."}],
              [{"role": "user", "content": "Deploy it."},
               {"role": "assistant", "content": "Deployed; the lesson: run migrations before the deploy."}]],
})


class BreakingEngine:
    """The offline model, except that chosen calls (the Nth call at a site, counted from 0) get a broken reply."""

    def __init__(self, broken: dict[tuple[str, int], str]):
        self.inner, self.broken = OfflineEngine(), dict(broken)
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def complete(self, request: Any) -> lm15.Response:
        site = current_call_site() or "lm"
        with self.lock:
            n = self.seen.get(site, 0)
            self.seen[site] = n + 1
        reply = self.broken.get((site, n))
        if reply is None:
            return self.inner.complete(request)
        return lm15.Response(id=None, model=MODEL, message=lm15.Message.assistant([lm15.TextPart(reply)]),
                             finish_reason="stop", usage=lm15.Usage(input_tokens=1, output_tokens=1, total_tokens=2))


def replay(case: Case, broken: dict[tuple[str, int], str], plan: str = "none") -> CaseRun:
    engine = BreakingEngine(broken)
    models = UnitModels(lm_factory=lambda c: dspy.LM(MODEL, engine=engine, cache=False, num_retries=0),
                        embedder=HashEmbedder())
    run = CaseReplayer(case, "natural", "flaky", models, FaultPlan.parse(plan), seed=0).run()
    assert run.status == "ok", run.error
    return run


# --------------------------------------------------------------------------- the harness's reading of a reply


@pytest.mark.parametrize("site, reply, cause", [
    ("lm.extract", PROSE, "parse"),
    ("lm.extract", "I'm sorry, but I can't help with extracting personal information.", "refused"),
    ("lm.extract", "   ", "empty"),
    ("lm.extract", '{"facts": [{"text": "The user lives in Berl', "parse"),
    ("lm.extract", '["#/$defs/ExtractedFact"] ```python\nfacts = []\n```', "parse"),
    ("lm.extract", '{"facts": null, "profile": {}}', "schema"),
    ("lm.extract", '{"facts": [{"text": "x", "subject": "user", "owner": "somebody"}], "profile": {}}', "schema"),
    ("lm.extract", '{"properties": {"facts": {"type": "array"}}, "required": ["facts", "profile"]}', "schema"),
    ("lm.extract", '{"facts": [], "profile": {"age": 31}}', "schema"),
    ("lm.extract", '{"facts": [{"text": "x", "subject": "My daughter is a musician. She plays the violin, and she '
                   'plays with me.", "owner": "user"}], "profile": {}}', "schema"),  # seen from SmolLM2
    ("lm.extract", '{"facts": [{"text": "  ", "subject": "user", "owner": "user"}], "profile": {}}', "schema"),
    ("lm.extract", '```json\n{"facts": [], "profile": {"name": null}}\n```', None),
    ("lm.extract_working", '{"experiences": [], "facts": []}', None),
    ("lm.extract_working", '{"lessons": ["x"]}', "schema"),
    ("lm.reconcile", '{"ops": []}', None),
    ("lm.reconcile", '{"ops": [{"op": "MERGE", "fact": 0}]}', "schema"),
    ("lm.reconcile", '{"ops": [{"op": "ADD", "fact": "0"}]}', "schema"),
])
def test_a_reply_is_read_against_the_output_contract_not_the_engines_account(site, reply, cause):
    assert read_reply(site, reply).cause == cause


def test_a_reconcile_op_naming_a_memory_the_prompt_did_not_offer_is_a_broken_reply():
    prompt = ('[[ ## new_facts ## ]]\n[{"index": 0, "text": "The user lives in Berlin."}]\n\n'
              '[[ ## existing ## ]]\n[{"id": 4, "text": "The user lives in Lyon."}]\n\nRespond with a JSON object')
    assert read_reply("lm.reconcile", '{"ops": [{"op": "SUPERSEDE", "fact": 0, "id": 4}]}', prompt).cause is None
    unknown = read_reply("lm.reconcile", '{"ops": [{"op": "SUPERSEDE", "fact": 0, "id": 7}]}', prompt)
    assert unknown.cause == "schema" and "id 7" in unknown.detail
    assert read_reply("lm.reconcile", '{"ops": [{"op": "ADD", "fact": 3}]}', prompt).cause == "schema"


def test_an_excerpt_of_a_broken_reply_never_holds_a_key():
    reading = read_reply("lm.extract", "Error: invalid api_key=sk-abcdefghijklmnop1234 for this model")
    assert reading.cause == "parse" and "sk-abcdefghijklmnop1234" not in reading.reply


# --------------------------------------------------------------------------- mid-case failures at every site


@pytest.mark.parametrize("site, reply, cause, code", [
    ("lm.extract", PROSE, "parse", {"error_code": "JSON_PARSE_FAILED"}),
    ("lm.extract", "", "empty", {"error_code": "EMPTY_RESPONSE"}),
    ("lm.reconcile", '{"ops": [{"op": "UPDATE", "fact": 0, "id": 999}]}', "schema",
     {"agent_error_code": "RECONCILE_FAILED", "reconcile_error_code": "JSON_PARSE_FAILED"}),
])
def test_a_case_whose_second_write_fails_naturally_goes_on_and_scores_the_other_three(site, reply, cause, code):
    # Write 1 is the second write; its reconcile is the second reconcile call (write 0 reconciles too).
    run = replay(FOUR, {(site, 1): reply})
    assert [w.success for w in run.writes] == [True, False, True, True]
    failure = run.writes[1].failure
    assert failure is not None and failure.cause == cause and failure.site == site and failure.checked
    assert {k: run.writes[1].codes.get(k) for k in code} == code
    assert failure.retry_success is True  # the retry under a new request id, on a copy, got a good reply
    assert run.findings == []  # the engine kept the contract: nothing stored, the right codes, a clean retry
    texts = {m["text"] for m in run.memories}
    assert {"The user works at Stripe.", "The user has two cats.", "The user plays the cello."} <= texts
    assert not any("Berlin" in t for t in texts)  # the failed write stored nothing
    rows = {r.metric: r for r in attribution_metrics([(FOUR, run)], seed=0, matcher=TextMatcher())
            if r.dataset == "all"}
    assert rows["fact_recall"].value == pytest.approx(0.75)  # the failed write's gold fact is a miss, not dropped
    assert rows["fact_recall"].n == 1


def test_a_working_trajectory_whose_extraction_breaks_mid_case_goes_on():
    run = replay(WORKING, {("lm.extract_working", 1): '{"experiences": "none"}'})
    assert [w.success for w in run.writes] == [True, False, True]
    assert run.writes[1].failure.cause == "schema" and run.writes[1].failure.site == "lm.extract_working"
    assert run.findings == []


def test_a_natural_failure_that_leaves_its_raw_messages_behind_is_an_anomaly(monkeypatch):
    real = client_module.HyMemoryClient._write

    def leaky(self, user_id, request_id, *rest):  # the bug: a failed write's L1 raw is kept
        result = real(self, user_id, request_id, *rest)
        if not result.success:
            with self.store.write() as tx:
                tx.append_l1_raw(user_id, result.request_id, "[user]: I moved to Berlin last year.")
        return result

    monkeypatch.setattr(client_module.HyMemoryClient, "_write", leaky)
    run = replay(FOUR, {("lm.extract", 1): PROSE})
    kinds = {(f.kind, f.check, f.write) for f in run.findings}
    assert (AnomalyKind.L1_NOT_ROLLED_BACK, "natural", 1) in kinds


def test_an_engine_that_repairs_a_truncated_reply_into_a_success_is_a_degraded_success(monkeypatch):
    from hymem import llm

    monkeypatch.setattr(llm.StrictJSONAdapter, "parse", dspy.JSONAdapter.parse)  # the bug: lenient repair
    run = replay(FOUR, {("lm.extract", 1): '{"facts": [{"text": "The user lives in Berlin.", "subject": "user", '
                                         '"owner": "user"}], "profile": {"location": "Berl'})
    assert [(f.kind, f.check, f.write) for f in run.findings][:1] == [(AnomalyKind.DEGRADED_SUCCESS, "natural", 1)]


def test_a_sweep_faults_a_naturally_failed_write_only_where_it_reached_and_finds_nothing():
    run = replay(FOUR, {("lm.reconcile", 1): PROSE}, plan="sweep")
    on_failed = [f for f in run.faults if f.write == 1]
    assert on_failed and {f.site for f in on_failed} <= {"lm.extract", "embed", "lm.reconcile"}
    assert not any(f.site.startswith("store.") for f in on_failed)  # never reached: the write failed before
    assert all(f.outcome == "ok" for f in run.faults), [(f.site, f.kind, f.anomalies) for f in run.faults
                                                        if f.outcome != "ok"]
    assert run.findings == []


# --------------------------------------------------------------------------- over real HTTP, through the CLI


class _Prose(JSONHandler):
    """An OpenAI-compatible endpoint whose model never follows the output format."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_bytes(200, json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": "prose",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": PROSE}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22}}).encode())


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(c.model_dump(exclude_none=True)) + "\n" for c in (FOUR,)), encoding="utf-8")
    return path


def test_an_endpoint_that_answers_prose_is_measured_not_an_infra_error(dataset, tmp_path, capsys):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Prose)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        code = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--no-progress", "--faults", "none",
                     "--matcher", "text", "--lm", f"openai/prose@http://127.0.0.1:{httpd.server_address[1]}/v1",
                     "--out", str(tmp_path / "r")])
    finally:
        httpd.shutdown()
    out = capsys.readouterr().out
    assert code == 0, out
    metrics = pd.read_parquet(tmp_path / "r" / "metrics.parquet").query("dataset == 'all'").set_index("metric")
    assert metrics.loc["infra_error_rate", "value"] == 0
    assert metrics.loc["write_failure_rate", "value"] == 1.0 and metrics.loc["write_failure_parse_rate", "value"] == 1.0
    assert metrics.loc["fact_recall", "value"] == 0.0 and metrics.loc["fact_recall", "n"] == 1  # the case counts
    failures = pd.read_parquet(tmp_path / "r" / "write_failures.parquet")
    assert len(failures) == 4 and failures.checked.all() and (failures.n_anomalies == 0).all()
    assert set(failures.cause) == {"parse"} and not failures.injected.any() and PROSE[:40] in failures.reply[0]
    assert "verdict: valid" in out and "4 fault-free writes failed on the model's own replies (parse ×4)" in out


def test_a_share_of_broken_replies_through_the_fault_proxy_is_measured_per_write(dataset, tmp_path, capsys):
    with start_server() as server, start_proxy(server.url, "random:0.3:truncated_json,wrong_schema,empty_content",
                                               seed=5) as proxy:
        code = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--no-progress", "--faults", "none",
                     "--matcher", "text", "--lm", f"openai/offline@{proxy.url}", "--out", str(tmp_path / "r")])
        broken = len(proxy.faults())
    assert code == 0
    metrics = pd.read_parquet(tmp_path / "r" / "metrics.parquet").query("dataset == 'all'").set_index("metric")
    failures = pd.read_parquet(tmp_path / "r" / "write_failures.parquet")
    assert broken > 0 and metrics.loc["infra_error_rate", "value"] == 0
    assert metrics.loc["write_failure_rate", "value"] == len(failures) / 4 and len(failures) > 0
    assert set(failures.cause) <= {"parse", "schema", "empty"} and failures.checked.all()
    assert (failures.n_anomalies == 0).all()
    assert "verdict: valid" in capsys.readouterr().out


def test_a_provider_never_reached_is_still_an_infra_error(dataset, tmp_path, capsys, no_retry_waits):
    code = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--no-progress", "--faults", "none",
                 "--lm", "openai/offline@http://127.0.0.1:9/v1", "--out", str(tmp_path / "r")])
    assert code == 1
    assert "never reached" in pd.read_parquet(tmp_path / "r" / "cases.parquet").error[0]


def test_a_model_that_stops_answering_mid_case_is_a_natural_failure_but_one_never_reached_is_an_infra_error():
    from evals.check.natural import reached_provider, why_failed
    from evals.record import Attempt

    ok = Attempt(provider="p", model="m", case_id="c", site="lm.extract")
    embedded = Attempt(provider="p", model="m", case_id="c", site="embed")
    down = Attempt(provider="p", model="m", case_id="c", site="lm.reconcile", status="LMServerError", error="503")
    reading = why_failed([{"site": "lm.reconcile", "text": ""}], [down])
    assert reading.cause == "unavailable" and reading.site == "lm.reconcile" and "503" in reading.detail
    assert reached_provider([ok, down], "lm.reconcile")  # the model answered before: its failure is measured
    assert not reached_provider([embedded, down], "lm.reconcile")  # only the embedder ever answered


@pytest.mark.parametrize("kind, cause, code", [("non_json_body", "parse", "JSON_PARSE_FAILED"),
                                               ("empty_body", "empty", "EMPTY_RESPONSE")])
def test_an_http_200_whose_body_is_broken_is_a_broken_reply_not_an_unavailable_provider(dataset, tmp_path, capsys,
                                                                                        kind, cause, code):
    # The second call's body is not an OpenAI reply at all: DSPy raises, and the failure table calls it a parse
    # (or empty) failure, so the engine's JSON_PARSE_FAILED (EMPTY_RESPONSE) is right, not a wrong code.
    with start_server() as server, start_proxy(server.url, f"seq:ok,{kind}", seed=0) as proxy:
        code_ = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--no-progress", "--faults", "none",
                      "--matcher", "text", "--no-cache", "--lm", f"openai/offline@{proxy.url}",
                      "--out", str(tmp_path / "r")])
    assert code_ == 0
    failures = pd.read_parquet(tmp_path / "r" / "write_failures.parquet")
    row = failures.iloc[0]
    assert failures.cause.tolist() == [cause]
    assert code in (row.actual_error_code, row.actual_reconcile_error_code)  # at whichever call the proxy broke
    assert (failures.n_anomalies == 0).all() and "verdict: valid" in capsys.readouterr().out
