"""HTTP providers through the runner, on real servers on 127.0.0.1: same scores as in-process,
Retry-After honoured and counted, keys never written, the response cache, and a missing key."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.arms.proxy import start_proxy
from evals.arms.serve import start_server
from evals.cli.main import main
from evals.pipeline import run_eval
from evals.run.runner import RunConfig

CASES = [
    {"id": "a", "lang": "en", "user_id": "tim",
     "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."},
                {"role": "assistant", "name": "John", "content": "I am a nurse."}]],
     "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"},
                          {"text": "The user works at Stripe.", "subject": "user", "owner": "user"},
                          {"text": "John is a nurse.", "subject": "John", "owner": "user"}]}},
    {"id": "b", "lang": "zh", "user_id": "li",
     "turns": [[{"role": "user", "content": "我在北京工作。"}], [{"role": "user", "content": "我喜欢喝茶。"}]],
     "expect": {"facts": [{"text": "用户在北京工作。", "subject": "user", "owner": "user"},
                          {"text": "用户喜欢喝茶。", "subject": "user", "owner": "user"}]}},
]
ATTRIBUTION = ["fact_f1", "fact_precision", "fact_recall", "subject_accuracy", "owner_accuracy"]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in CASES) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def server():
    with start_server() as handle:
        yield handle


def _run(dataset: Path, out: Path, lm: str, **kw):
    config = RunConfig(datasets=[str(dataset)], providers=[lm], embedder="hash", faults="none", out=out,
                       progress=False, cache_dir=out.parent / f"{out.name}-cache.sqlite", **kw)
    return run_eval(config)


def _metrics(run_dir: Path) -> pd.Series:
    frame = pd.read_parquet(run_dir / "metrics.parquet")
    return frame[(frame.dataset == "all") & frame.metric.isin(ATTRIBUTION)].set_index("metric")["value"]


def test_an_eval_through_serve_scores_the_same_as_the_in_process_model(dataset, tmp_path, server):
    local = _run(dataset, tmp_path / "local", "offline")
    remote = _run(dataset, tmp_path / "remote", f"openai/offline@{server.url}")
    pd.testing.assert_series_equal(_metrics(local.run_dir), _metrics(remote.run_dir))
    facts = [pd.read_parquet(r.run_dir / "facts.parquet").drop(columns=["provider"]) for r in (local, remote)]
    pd.testing.assert_frame_equal(facts[0], facts[1])


def test_a_429_with_retry_after_is_waited_out_and_counted(dataset, tmp_path, server):
    log = tmp_path / "proxy.jsonl"
    with start_proxy(server.url, "seq:429", seed=0, log_path=log) as proxy:
        outcome = _run(dataset, tmp_path / "run", f"openai/offline@{proxy.url}")
        injected = proxy.faults()
    assert [f["kind"] for f in injected] == ["http_429"]
    attempts = pd.read_parquet(outcome.run_dir / "attempts.parquet")
    lm = attempts[attempts.site != "embed"]
    first = lm[lm.status == "LMRateLimitError"]
    assert len(first) == 1 and first.iloc[0].attempt == 1
    retried = lm[(lm.case_id == first.iloc[0].case_id) & (lm.write == first.iloc[0].write) & (lm.attempt == 2)]
    assert len(retried) == 1 and retried.iloc[0].status == "ok"
    assert retried.iloc[0].latency_s < 5
    metrics = pd.read_parquet(outcome.run_dir / "metrics.parquet").set_index(["dataset", "metric"])
    assert metrics.loc[("all", "lm_retries"), "value"] == 1
    cases = pd.read_parquet(outcome.run_dir / "cases.parquet")
    assert (cases.status == "ok").all()  # the retry made the write succeed


def test_keys_never_appear_in_any_output(dataset, tmp_path, server, monkeypatch, capsys):
    secret = "sk-test-DO-NOT-LEAK-4242"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    log = tmp_path / "proxy.jsonl"
    with start_proxy(server.url, "seq:ok,500", seed=0, log_path=log) as proxy:
        code = main(["run", "--dataset", str(dataset), "--lm", f"openai/offline@{proxy.url}", "--embedder", "hash",
                     "--faults", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr()
    assert secret not in printed.out + printed.err
    for path in [*(tmp_path / "run").rglob("*"), log]:
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_reruns_hit_the_cache_and_failures_are_never_cached(dataset, tmp_path, server):
    cache = tmp_path / "cache.sqlite"
    with start_proxy(server.url, "seq:ok,empty_content", seed=0) as proxy:
        first = run_eval(RunConfig(datasets=[str(dataset)], providers=[f"openai/offline@{proxy.url}"],
                                   embedder="hash", faults="none", out=tmp_path / "one", progress=False,
                                   cache_dir=cache))
        second = run_eval(RunConfig(datasets=[str(dataset)], providers=[f"openai/offline@{proxy.url}"],
                                    embedder="hash", faults="none", out=tmp_path / "two", progress=False,
                                    cache_dir=cache))
    one = pd.read_parquet(first.run_dir / "attempts.parquet")
    two = pd.read_parquet(second.run_dir / "attempts.parquet")
    failed_case = one[one.status != "ok"].case_id.unique().tolist()
    assert len(failed_case) == 1 and one[one.status != "ok"].iloc[0].status == "empty_content"
    cases = pd.read_parquet(first.run_dir / "cases.parquet").set_index("case_id")
    assert cases.loc[failed_case[0], "status"] == "ok"  # the empty reply failed a write, measured, not dropped
    failures = pd.read_parquet(first.run_dir / "write_failures.parquet")
    assert failures.case_id.tolist() == failed_case and failures.cause.tolist() == ["empty"]
    two_lm = two[two.site != "embed"]
    reached = two_lm[~two_lm.cache_hit]
    assert set(reached.case_id) == set(failed_case)  # only the failed case had to ask the model again
    assert two_lm.cache_hit.sum() > 0


def test_a_missing_key_is_a_one_line_error_before_any_work(dataset, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["run", "--dataset", str(dataset), "--lm", "openai/gpt-4o-mini", "--embedder", "hash",
                 "--faults", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "OPENAI_API_KEY" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("system", ["hymem", "mem0"])
def test_an_embedding_endpoint_that_does_not_answer_is_a_one_line_error_not_a_traceback(dataset, tmp_path, capsys,
                                                                                        system):
    from evals.arms.mem0_system import mem0_available

    if system == "mem0" and not mem0_available():
        pytest.skip("mem0ai is not installed")
    with start_server() as handle:  # a port that was just listened on and is closed now: connection refused
        url = handle.url
    code = main(["run", "--system", system, "--dataset", str(dataset), "--embedder", f"openai@{url}",
                 "--faults", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == [f"hymem-eval run: --embedder openai@{url}: the endpoint did not answer a dimension "
                                "probe: APIConnectionError: Connection error."]


@pytest.mark.ci_heavy  # a default sweep over HTTP (run by `nox -s heavy`); the fault-free eval through serve stays
def test_a_sweep_over_http_faults_the_wire_and_the_checker_finds_hymem_valid(dataset, tmp_path, server):
    """Every wire fault kind at every reached LM call: the documented codes, nothing stored, the proxy's log joined."""
    outcome = run_eval(RunConfig(datasets=[str(dataset)], providers=[f"openai/offline@{server.url}"],
                                 embedder="hash", faults="sweep", out=tmp_path / "run", progress=False, cache=False))
    assert outcome.verdict == "valid"
    faults = pd.read_parquet(outcome.run_dir / "faults.parquet")
    wire = faults[faults.site.str.startswith("lm.")]
    assert set(wire.kind) == {"http_500", "http_502", "http_503", "http_429", "drop_connection", "empty_body",
                              "empty_content", "null_content", "non_json_body", "truncated_json", "wrong_schema",
                              "latency"}
    assert (wire.outcome == "ok").all() and wire.fired.all()
    def code(value):
        return None if pd.isna(value) else value

    codes = {(r.site, r.kind): (code(r.actual_error_code), code(r.actual_reconcile_error_code))
             for r in wire.itertuples()}
    assert codes[("lm.extract", "http_503")] == ("LLM_ERROR", None)
    assert codes[("lm.extract", "empty_body")] == ("EMPTY_RESPONSE", None)
    assert codes[("lm.reconcile", "null_content")] == (None, "EMPTY_RESPONSE")
    assert codes[("lm.reconcile", "non_json_body")] == (None, "JSON_PARSE_FAILED")
    assert codes[("lm.extract", "latency")] == (None, None)
    logged = wire[wire.kind == "truncated_json"].wire_log.map(json.loads)
    assert all(len(entries) == 1 and entries[0]["kind"] == "truncated_json" for entries in logged)
    assert {"embed", "store.commit"} <= set(faults.site)  # the rest stays in-process


@pytest.mark.ci_heavy  # six runs over HTTP (run by `nox -s heavy`)
def test_resume_refuses_a_provider_whose_model_endpoint_or_prices_changed(dataset, tmp_path, server, capsys,
                                                                          monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    providers, out = tmp_path / "providers.toml", tmp_path / "run"

    def run(table: str, *args: str) -> int:
        providers.write_text(f'[[provider]]\nname = "x"\n{table}', encoding="utf-8")
        return main(["run", "--dataset", str(dataset), "--providers", str(providers), "--lm", "x", "--embedder",
                     "hash", "--faults", "none", "--out", str(out), "--no-progress", "--no-cache", *args])

    base = f'model = "openai/offline"\napi_base = "{server.url}"\n'
    assert run(base) == 0
    lines = (out / "units.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "units.jsonl").write_text(lines[0], encoding="utf-8")
    capsys.readouterr()
    for table, change in [
        (base.replace("openai/offline", "openai/other"), "provider x: model 'openai/offline' -> 'openai/other'"),
        (base.replace("127.0.0.1", "localhost"), f"provider x: api_base {server.url!r} -> "
                                                  f"{server.url.replace('127.0.0.1', 'localhost')!r}"),
        (base + "input_price = 5.0\n", "provider x: input_price None -> 5.0"),
    ]:
        assert run(table, "--resume") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"different inputs ({change})" in err, err
    # the endpoint an environment variable sets is the provider's too
    monkeypatch.setenv("OPENAI_BASE_URL", server.url.replace("127.0.0.1", "localhost"))
    assert run('model = "openai/offline"\n', "--resume") == 2
    assert f"api_base {server.url!r} -> " in capsys.readouterr().err
    monkeypatch.delenv("OPENAI_BASE_URL")
    # transport settings are not what is asked: a longer timeout resumes the same run
    assert run(base + "timeout = 99\nmax_connections = 1\n", "--resume") == 0
    attempts = pd.read_parquet(out / "attempts.parquet")
    assert set(attempts[attempts.site != "embed"].model) == {"openai/offline"}
    assert sorted(pd.read_parquet(out / "cases.parquet").case_id) == ["a", "b"]
