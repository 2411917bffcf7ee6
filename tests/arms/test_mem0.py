"""mem0 under the harness, offline over real HTTP on 127.0.0.1: each behaviour of the issue as a named finding.

mem0ai 2.2 with a local qdrant store and its history DB; its LLM and embedder talk to the local offline server,
faults are injected on the wire by the fault proxy. hymem replays the same cases as the reference.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest

from evals.arms.mem0_system import EXTRA_ERROR, Endpoint, Mem0System, import_mem0, local_endpoints, mem0_available
from evals.arms.serve import JSONHandler
from evals.cases.dataset import Case
from evals.cli.main import main
from evals.faults.plan import FaultPlan
from evals.record import AnomalyKind
from evals.run.replay import CaseReplayer, UnitModels
from evals.scoring.attribution import score_case

needs_mem0 = pytest.mark.skipif(not mem0_available(), reason="mem0ai is not installed (pip install 'hymem[mem0]')")

TWO_FACTS = {"id": "tim-two-facts", "lang": "en", "user_id": "tim",
             "turns": [[{"role": "user", "name": "Tim", "content": "I live in Berlin. I work at Stripe."}]],
             "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"},
                                  {"text": "The user works at Stripe.", "subject": "user", "owner": "user"}]}}
MOVED = {"id": "tim-moved", "lang": "en", "user_id": "tim",
         "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
         "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin."}]],
         "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}],
                    "updates": [{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}]}}
JOHN = {"id": "john-pilot", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "How was your week, John?"},
                   {"role": "assistant", "name": "John", "content": "Busy. I am a pilot."}]],
        "expect": {"facts": [{"text": "John is a pilot.", "subject": "John", "owner": "user"}]}}


@pytest.fixture(scope="module")
def server():
    if not mem0_available():
        pytest.skip("mem0ai is not installed")
    import_mem0()  # telemetry off before anything imports mem0
    from evals.arms.serve import start_server

    with start_server(embedder="hash") as handle:
        yield handle


class Aimed(Mem0System):
    """mem0 with the plan narrowed to the named faults: (write, site, kind, occurrence)."""

    def __init__(self, *args, aim: set[tuple[int, str, str, int]], **kw):
        super().__init__(*args, **kw)
        self.aim = aim

    def faults_for_write(self, plan, reached, seed, unit_key):
        write = int(unit_key.rsplit("|", 1)[1])
        return [f for f in super().faults_for_write(plan, reached, seed, unit_key)
                if (write, f.site, f.kind, f.occurrence) in self.aim]


class Scripted:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 whose every reply is `content`, after `delay` seconds:
    mem0's model, scripted. `most` is the most requests it held at once."""

    def __init__(self, content: str, delay: float = 0.0):
        body = json.dumps({"id": "s", "object": "chat.completion", "created": 0, "model": "scripted",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.most, held, lock = 0, [0], threading.Lock()
        self.requests: list[dict] = []  # every request body, as sent
        scripted = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:  # noqa: N802
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    scripted.requests.append(request)
                    held[0] += 1
                    scripted.most = max(scripted.most, held[0])
                time.sleep(delay)
                with lock:
                    held[0] -= 1
                self.send_bytes(200, body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.endpoint = Endpoint(f"http://127.0.0.1:{self.httpd.server_address[1]}/v1", "scripted", "x")

    def __enter__(self) -> Scripted:
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def replay_mem0(server, case: dict, aim: set = frozenset(), plan: str = "sweep", llm: Endpoint | None = None):
    local_llm, embed, dim = local_endpoints(server.url, "hash")
    llm = llm or local_llm
    return CaseReplayer(Case.model_validate(case), "d", "mem0/offline", UnitModels(), FaultPlan.parse(plan), 0,
                        system=lambda c, log: Aimed(llm, embed, dim, log=log, aim=set(aim))).run()


def replay_hymem(case: dict):
    from hymem.embedder import HashEmbedder
    from hymem.offline import offline_lm

    return CaseReplayer(Case.model_validate(case), "d", "offline",
                        UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                        0).run()


def kinds(record) -> dict[str, str]:
    return {a.kind: a.witness for a in record.anomalies}


def test_without_mem0ai_the_run_stops_with_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    import evals.arms.mem0_system as mem0_system

    monkeypatch.setattr(mem0_system, "mem0_available", lambda: False)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(TWO_FACTS) + "\n", encoding="utf-8")
    code = main(["run", "--system", "mem0", "--dataset", str(data), "--embedder", "hash", "--out",
                 str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [f"hymem-eval run: {EXTRA_ERROR}"]
    assert EXTRA_ERROR == "mem0 needs the extra: pip install 'hymem[mem0]'"
    assert not (tmp_path / "o").exists()


@needs_mem0
def test_a_tuned_program_with_no_hymem_arm_to_use_it_is_refused_in_one_line(tmp_path, capsys):
    from hymem.program import MemoryProgram

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(TWO_FACTS) + "\n", encoding="utf-8")
    (tmp_path / "tuned").mkdir()
    MemoryProgram().save(str(tmp_path / "tuned" / "program.json"))  # a real program: the arm is what is refused
    code = main(["run", "--system", "mem0", "--program", str(tmp_path / "tuned"), "--dataset", str(data),
                 "--embedder", "hash", "--faults", "none", "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "hymem-eval run: --program tunes hymem's prompts, and this run has no hymem arm (--system mem0): add "
        "--system hymem or leave --program out"]
    assert not (tmp_path / "o").exists()


@needs_mem0
def test_the_offline_model_answers_mem0s_own_prompt_and_never_sees_a_speaker_name(server):
    from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, generate_additive_extraction_prompt
    from mem0.memory.utils import parse_messages

    from evals.arms.mem0_offline import answer_mem0, is_mem0_prompt

    messages = [{"role": "user", "name": "Tim", "content": "I live in Berlin. I like tea."},
                {"role": "assistant", "name": "John", "content": "I am a pilot."}]
    prompt = generate_additive_extraction_prompt(existing_memories=[{"id": "0", "text": "The user likes tea."}],
                                                 new_messages=parse_messages(messages))
    assert is_mem0_prompt(ADDITIVE_EXTRACTION_PROMPT) and "John" not in prompt and "Tim" not in prompt
    assert json.loads(answer_mem0(prompt)) == {"memory": [
        {"id": "0", "text": "The user lives in Berlin.", "attributed_to": "user"}]}  # tea is known already


@needs_mem0
def test_an_empty_garbage_or_wrong_shape_extraction_is_degraded_success_with_the_saved_messages(server):
    aim = {(0, "lm.extract", kind, 0) for kind in ("empty_content", "truncated_json", "wrong_schema", "http_500")}
    run = replay_mem0(server, TWO_FACTS, aim)
    assert run.status == "ok", run.error
    by_kind = {f.kind: f for f in run.faults}
    for kind in ("empty_content", "truncated_json", "wrong_schema"):
        record = by_kind[kind]
        assert record.fired and record.outcome == "wrong" and record.actual.success is True
        witness = kinds(record)
        assert witness["DEGRADED_SUCCESS"].startswith("success=true under a fault that must fail; ops=0; "
                                                      "state diff: messages: +1 -0")
        assert "I live in Berlin. I work at Stripe." in witness["DEGRADED_SUCCESS"]
        assert witness["L1_NOT_ROLLED_BACK"].startswith("messages: +1 -0")
        assert "PARTIAL_WRITE" not in witness  # nothing was extracted, so no memory: only the conversation stayed
    failed = by_kind["http_500"]  # an HTTP error: mem0 raises and stores nothing
    assert failed.actual.success is False and failed.actual.get("raised") == "LLMError"
    assert set(kinds(failed)) == {"DOUBLE_WRITE"}  # re-sending the write saves the conversation again


@needs_mem0
def test_a_fact_whose_embedding_fails_is_silently_dropped_as_a_partial_write(server):
    run = replay_mem0(server, TWO_FACTS, {(0, "embed.facts", "http_503", 0)})
    assert run.writes[0].reached == {"embed.query": 1, "lm.extract": 1, "embed.facts": 2}
    [record] = run.faults
    assert record.fired and record.actual.success is True
    witness = kinds(record)
    assert witness["DEGRADED_SUCCESS"].startswith("success=true under a fault that must fail; ops=1")
    assert witness["PARTIAL_WRITE"].startswith("memories: +1 -0")
    assert "The user works at Stripe." in witness["PARTIAL_WRITE"]  # the other fact was stored ...
    assert "Berlin" not in witness["PARTIAL_WRITE"]  # ... the one whose embedding failed is gone, unreported


@needs_mem0
def test_a_retry_witness_names_the_rows_that_differ_not_every_row_mem0_gave_a_new_uuid(server):
    run = replay_mem0(server, TWO_FACTS, {(0, "embed.facts", "null_content", 0)})
    [record] = run.faults
    assert record.fired and record.actual.success is False  # mem0 raised, and kept the conversation
    witness = kinds(record)
    assert witness["L1_NOT_ROLLED_BACK"].startswith("messages: +1 -0")
    # the retry stored the same two memories under new ids: only the conversation saved twice differs
    assert witness["RETRY_DIVERGED"].startswith("messages: +1 -0") and "memories" not in witness["RETRY_DIVERGED"]
    assert "I live in Berlin. I work at Stripe." in witness["RETRY_DIVERGED"]


@needs_mem0
def test_mem0_is_add_only_so_a_contradiction_leaves_both_facts(server):
    case = Case.model_validate(MOVED)
    mem0_run, hymem_run = replay_mem0(server, MOVED, plan="none"), replay_hymem(MOVED)
    assert sorted(m["text"] for m in mem0_run.memories) == ["The user lives in Berlin.", "The user lives in Paris."]
    assert {op.op for w in mem0_run.writes for op in w.ops} == {"ADD"}
    assert score_case(case, mem0_run).tallies["same_subject_update_recall"] == (0, 1)
    assert score_case(case, hymem_run).tallies["same_subject_update_recall"] == (1, 1)


@needs_mem0
def test_mem0_keeps_no_profile_so_its_profile_metrics_are_not_measured_where_hymems_are(server):
    case = {**TWO_FACTS, "expect": {**TWO_FACTS["expect"], "profile": {"name": "Tim"}, "profile_excludes": ["pilot"]}}
    mem0_run, hymem_run = replay_mem0(server, case, plan="none"), replay_hymem(case)
    assert mem0_run.profile is None and hymem_run.profile["name"] == "Tim"
    mem0_tallies = score_case(Case.model_validate(case), mem0_run).tallies
    hymem_tallies = score_case(Case.model_validate(case), hymem_run).tallies
    assert not [m for m in mem0_tallies if m.startswith("profile_")]
    assert hymem_tallies["profile_name_accuracy"] == (1, 1) and hymem_tallies["profile_leak_rate"] == (0, 1)


@needs_mem0
def test_speaker_names_never_reach_mems_model_so_a_named_humans_facts_are_lost(server, tmp_path):
    case = Case.model_validate(JOHN)
    mem0_run, hymem_run = replay_mem0(server, JOHN, plan="none"), replay_hymem(JOHN)
    assert [m["text"] for m in hymem_run.memories] == ["John is a pilot."]
    assert mem0_run.memories == [] and mem0_run.writes[0].proposed_facts == []
    assert score_case(case, mem0_run).tallies["fact_recall"] == (0, 1)
    assert score_case(case, hymem_run).tallies["fact_recall"] == (1, 1)
    llm, embed, dim = local_endpoints(server.url, "hash")  # mem0 did keep the names, in its message log
    system = Mem0System(llm, embed, dim)
    system.open(tmp_path / "store")
    system.write("chat", JOHN["turns"][0], "tim", "w0")
    system.shutdown()
    saved = system.snapshot(tmp_path / "store").tables["messages"]
    assert sorted((m["name"], m["content"]) for m in saved) == [("John", "Busy. I am a pilot."),
                                                               ("Tim", "How was your week, John?")]


@needs_mem0
@pytest.mark.ci_heavy  # a default sweep of both engines (run by `nox -s heavy`)
def test_run_side_by_side_hymem_is_valid_where_mem0_shows_every_finding(server, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(TWO_FACTS) + "\n", encoding="utf-8")
    code = main(["run", "--system", "hymem", "--system", "mem0", "--dataset", str(data), "--embedder", "hash",
                 "--out", str(tmp_path / "run"), "--no-progress", "--fail-on-invalid"])
    assert code == 1  # mem0 makes the run invalid
    run = tmp_path / "run"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["providers"] == ["offline", "mem0/offline"]
    faults = pq.read_table(run / "faults.parquet").to_pandas()
    hymem, mem0 = faults[faults.system == "hymem"], faults[faults.system == "mem0"]
    assert len(hymem) > 20 and (hymem.outcome == "ok").all()  # the same plan: hymem is valid
    assert set(mem0.site) == {"embed.query", "lm.extract", "embed.facts"} and mem0.fired.all()
    anomalies = pq.read_table(run / "anomalies.parquet").to_pandas()
    assert set(anomalies.system) == {"mem0"}
    found = set(zip(anomalies.kind, anomalies.site, anomalies.fault, strict=True))
    assert {("DEGRADED_SUCCESS", "lm.extract", "empty_content"), ("PARTIAL_WRITE", "embed.facts", "http_500"),
            ("L1_NOT_ROLLED_BACK", "lm.extract", "wrong_schema")} <= found
    summary = (run / "summary.md").read_text()
    assert "## offline" in summary and "## mem0/offline" in summary


@needs_mem0
def test_a_subjectless_memory_mem0_attributes_to_the_assistant_is_the_assistants_not_a_leak_to_the_user(server):
    case = {"id": "sleep-tip", "lang": "en", "user_id": "u",
            "turns": [[{"role": "user", "content": "I have trouble sleeping. Any tips?"},
                       {"role": "assistant", "content": "I suggest that you stop drinking coffee after 2 pm."}]],
            "expect": {"facts": [
                {"text": "The user has trouble sleeping.", "subject": "user", "owner": "user"},
                {"text": "The assistant suggested that the user stop drinking coffee after 2 pm.",
                 "subject": "assistant", "owner": "agent"}]}}
    reply = {"memory": [{"id": "0", "text": "Has trouble sleeping", "attributed_to": "user"},
                        {"id": "1", "text": "Suggested stopping coffee after 2 pm", "attributed_to": "assistant"}]}
    with Scripted(json.dumps(reply)) as model:
        run = replay_mem0(server, case, plan="none", llm=model.endpoint)
    assert run.status == "ok", run.error
    assert sorted((m["text"], m["subject"], m["owner"]) for m in run.memories) == [
        ("Has trouble sleeping", "user", "user"), ("Suggested stopping coffee after 2 pm", "assistant", "agent")]
    assert [(o.subject, o.owner) for o in run.writes[0].ops] == [("user", "user"), ("assistant", "agent")]
    tallies = score_case(Case.model_validate(case), run).tallies
    for stage in ("", "proposed_"):
        assert tallies[f"{stage}ai_to_user_rate"] == (0, 1)  # mem0 said whose it was: not the user's
        assert tallies[f"{stage}subject_accuracy"] == (2, 2)


@needs_mem0
@pytest.mark.ci_heavy  # runs of both engines (run by `nox -s heavy`)
def test_the_same_priced_model_costs_the_same_whichever_engine_called_it(server, tmp_path):
    import pandas as pd

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(TWO_FACTS) + "\n", encoding="utf-8")
    lm = f"openai/gpt-4o-mini@{server.url}"  # the local server answers any model name; its price is in prices.toml
    for spec, out in ((lm, "http"), ("offline", "offline")):
        code = main(["run", "--system", "hymem", "--system", "mem0", "--lm", spec, "--dataset", str(data),
                     "--embedder", "hash", "--faults", "none", "--matcher", "text", "--no-cache", "--out",
                     str(tmp_path / out), "--no-progress"])
        assert code == 0
    attempts = pd.read_parquet(tmp_path / "http" / "attempts.parquet")
    lm_rows = attempts[attempts.site.str.startswith("lm.")]
    assert set(lm_rows.model) == {"openai/gpt-4o-mini"}  # one name for the one model, in both arms
    mem0_rows = lm_rows[lm_rows.provider == f"mem0/{lm}"]
    assert len(mem0_rows) == 1 and mem0_rows.prompt_tokens.iloc[0] > 0
    want = (mem0_rows.prompt_tokens * 0.15 + mem0_rows.completion_tokens * 0.60) / 1_000_000
    assert mem0_rows.cost_usd.tolist() == pytest.approx(want.tolist())
    for out, arm in (("http", f"mem0/{lm}"), ("offline", "mem0/offline")):
        metrics = pd.read_parquet(tmp_path / out / "metrics.parquet")
        total = metrics[(metrics.provider == arm) & (metrics.dataset == "all") & (metrics.metric == "cost_total")]
        assert total.value.iloc[0] == pytest.approx(want.sum() if out == "http" else 0.0)  # priced, not n/a


@needs_mem0
def test_mem0s_model_calls_hold_the_providers_connection_slots(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({**TWO_FACTS, "id": f"c{i}"}) + "\n" for i in range(4)), encoding="utf-8")
    with Scripted(json.dumps({"memory": []}), delay=0.3) as model:
        code = main(["run", "--system", "mem0", "--lm", f"openai/m@{model.endpoint.url}", "--dataset", str(data),
                     "--embedder", "hash", "--faults", "none", "--matcher", "text", "--concurrency", "4",
                     "--max-connections", "1", "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 0
    assert model.most == 1  # 5 units in flight, one connection: never more than one request at once


@needs_mem0
@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_mem0_samples_each_epoch_as_hymem_does_with_the_runs_temperature_and_epoch_seed(tmp_path, executor):
    from evals.run.runner import sampling_seed

    if executor == "ray":
        pytest.importorskip("ray")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(TWO_FACTS) + "\n", encoding="utf-8")
    with Scripted(json.dumps({"memory": []})) as model:
        code = main(["run", "--system", "mem0", "--lm", f"openai/m@{model.endpoint.url}", "--dataset", str(data),
                     "--embedder", "hash", "--faults", "none", "--matcher", "text", "--epochs", "2",
                     "--temperature", "0.7", "--seed", "3", "--executor", executor, "--out", str(tmp_path / "run"),
                     "--no-progress"])
    assert code == 0
    sent = sorted((r.get("temperature"), r.get("seed")) for r in model.requests)
    config = type("C", (), {"seed": 3, "epochs": 2})
    assert sent == sorted((0.7, sampling_seed(config, e)) for e in range(2))  # as hymem's requests carry them


def test_subject_and_owner_are_read_off_mem0s_plain_text():
    from evals.arms.mem0_system import owner_of, subject_of

    assert [subject_of(t) for t in ("The user lives in Berlin.", "User likes tea.", "John is a pilot.",
                                    "Jack, the user's friend, is a chef.", "王芳是护士。", "用户在北京工作。",
                                    "The assistant suggested tea.", "lives somewhere")] == [
        "user", "user", "John", "Jack", "王芳", "user", "assistant", "user"]
    assert [subject_of(t, "assistant") for t in ("Recommended chamomile tea", "The assistant suggested tea.")] == [
        "assistant", "assistant"]  # hymem's rule for a memory stored without a subject (memory_subject)
    assert (owner_of("assistant"), owner_of("user"), owner_of(None)) == ("agent", "user", "user")


def test_the_local_server_still_answers_hymems_own_prompts(tmp_path):
    import dspy

    from evals.arms.serve import start_server
    from hymem.client import HyMemoryClient

    with start_server(embedder="hash") as handle:
        lm = dspy.LM("openai/offline", api_base=handle.url, api_key="x", cache=False, num_retries=0, timeout=10)
        with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder=f"openai/hash@{handle.url}") as client:
            result = client.add([{"role": "user", "content": "I like green tea."}], user_id="ana")
            assert result.success and [m.text for m in client.get_all("ana")] == ["The user likes green tea."]


def test_mem0_sites_and_kinds_are_the_proxys():
    from evals.arms.mem0_system import KINDS, SITES, expected_outcome
    from evals.arms.proxy import KINDS as PROXY_KINDS

    assert KINDS == PROXY_KINDS  # one list: the kinds the proxy can inject
    assert all(not expected_outcome(s, k).success for s in SITES for k in KINDS if k != "latency")
    assert all(expected_outcome(s, "latency").success for s in SITES)  # slow but correct: must change nothing


def test_mem0_never_downloads_a_spacy_model_at_run_time(monkeypatch):
    """With spaCy installed but not its model, mem0 would download en_core_web_sm on first use; the harness
    makes that a failed load (no entity linking) instead, since nothing may be downloaded at run time."""
    import sys
    import types

    from evals.arms.mem0_system import import_mem0

    downloads: list[str] = []
    spacy = types.ModuleType("spacy")
    spacy.util = types.SimpleNamespace(is_package=lambda name: False)  # type: ignore[attr-defined]
    spacy.cli = types.SimpleNamespace(download=downloads.append)  # type: ignore[attr-defined]
    spacy.load = lambda *a, **k: pytest.fail("spacy.load called for a model that is not installed")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spacy", spacy)
    monkeypatch.setitem(sys.modules, "spacy.cli", spacy.cli)
    import_mem0()
    from mem0.utils import spacy_models

    monkeypatch.setattr(spacy_models, "_nlp_full", None)
    monkeypatch.setattr(spacy_models, "_load_failed_full", False)
    monkeypatch.setattr(spacy_models, "_nlp_lemma", None)
    monkeypatch.setattr(spacy_models, "_load_failed_lemma", False)
    assert spacy_models.get_nlp_full() is None and spacy_models.get_nlp_lemma() is None
    assert downloads == []


@needs_mem0
def test_a_reply_mem0_could_not_parse_but_reported_as_a_success_is_a_natural_degraded_success(server):
    with Scripted("Sure! The user lives in Berlin and works at Stripe.") as prose:
        run = replay_mem0(server, TWO_FACTS, plan="none", llm=prose.endpoint)
    assert run.status == "ok", run.error
    assert all(w.success for w in run.writes)  # mem0 swallows the reply it cannot read
    found = [(f.kind, f.check, f.write) for f in run.findings if f.check == "natural"]
    assert found == [(AnomalyKind.DEGRADED_SUCCESS, "natural", 0)]
