"""The harness end to end: replay, fault sweep, checker verdicts, planted bugs, resume, replay by seed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.core.errors import UsageError
from evals.pipeline import run_eval
from evals.run.runner import RunConfig

CASES = [
    {"id": "tim-john", "lang": "en", "user_id": "tim", "tags": ["named-human", "update"],
     "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
     "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."},
                {"role": "assistant", "name": "John", "content": "I am a nurse."}]],
     "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"},
                          {"text": "The user works at Stripe.", "subject": "user", "owner": "user"},
                          {"text": "John is a nurse.", "subject": "John", "owner": "user"}],
                "updates": [{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}]}},
    {"id": "ana-two-turns", "lang": "en", "user_id": "ana", "tags": ["multi-turn"],
     "turns": [[{"role": "user", "content": "I like green tea."}],
               [{"role": "user", "content": "I have a cat."}]],
     "expect": {"facts": [{"text": "The user likes green tea.", "subject": "user", "owner": "user"},
                          {"text": "The user has a cat.", "subject": "user", "owner": "user"}]}},
    {"id": "zh-1", "lang": "zh", "user_id": "li", "tags": ["zh"],
     "turns": [[{"role": "user", "name": "小李", "content": "我在北京工作。"}]],
     "expect": {"facts": [{"text": "用户在北京工作。", "subject": "user", "owner": "user"}]}},
]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in CASES) + "\n", encoding="utf-8")
    return path


def config(dataset: Path, out: Path, **kw) -> RunConfig:
    return RunConfig(datasets=[str(dataset)], embedder="hash", out=out, progress=False, **kw)


def test_sweep_on_a_correct_engine_is_valid_with_full_coverage_of_reached_sites(dataset, tmp_path):
    outcome = run_eval(config(dataset, tmp_path / "run"))
    assert outcome.verdict == "valid"
    run = outcome.run_dir
    for name in ("manifest.json", "cases.parquet", "faults.parquet", "anomalies.parquet", "metrics.parquet",
                 "summary.md"):
        assert (run / name).exists(), name
    faults = pd.read_parquet(run / "faults.parquet")
    assert len(faults) > 50 and (faults["outcome"] == "ok").all()
    assert set(faults["site"]) >= {"lm.extract", "lm.reconcile", "embed", "store.commit", "store.faiss"}
    assert len(pd.read_parquet(run / "anomalies.parquet")) == 0
    metrics = pd.read_parquet(run / "metrics.parquet")
    row = metrics[(metrics.metric == "rollback_correct_rate") & (metrics.dataset == "all")].iloc[0]
    assert row.value == 1.0 and row.n == len(faults)  # n counts the checked faulted units
    assert metrics[(metrics.metric == "faulted_units") & (metrics.dataset == "all")].value.iloc[0] == len(faults)
    assert "valid" in (run / "summary.md").read_text()


def _plant_add_all_fallback(monkeypatch):
    """The bug the spec removed: a failed reconcile adds every extracted fact and reports success."""
    import hymem.client as client_module
    from hymem.chain import ChainError
    from hymem.reconciler import direct_plan

    real = client_module.reconcile

    def add_all_on_failure(predictor, lm, facts, candidates):
        try:
            return real(predictor, lm, facts, candidates)
        except ChainError:
            return direct_plan(facts)

    monkeypatch.setattr(client_module, "reconcile", add_all_on_failure)


@pytest.mark.ci_heavy  # a default sweep run twice or three times (run by `nox -s heavy`)
def test_planted_add_all_fallback_is_reported_as_degraded_success_with_witness(dataset, tmp_path, monkeypatch):
    _plant_add_all_fallback(monkeypatch)
    outcome = run_eval(config(dataset, tmp_path / "run"))
    assert outcome.verdict == "invalid"
    anomalies = pd.read_parquet(outcome.run_dir / "anomalies.parquet")
    degraded = anomalies[anomalies.kind == "DEGRADED_SUCCESS"]
    assert len(degraded) > 0
    assert set(degraded.site) == {"lm.reconcile"}
    witness = degraded.iloc[0]
    assert witness.case_id in {c["id"] for c in CASES} and witness.fault
    assert "RECONCILE_FAILED" in witness.expected
    assert "PARTIAL_WRITE" in set(anomalies.kind)
    assert main(["run", "--dataset", str(dataset), "--embedder", "hash", "--out", str(tmp_path / "r2"),
                 "--no-progress", "--fail-on-invalid"]) == 1


@pytest.mark.ci_heavy  # a default sweep; planted bugs in the default run: tests/check (run by `nox -s heavy`)
def test_planted_l1_raw_outside_the_transaction_is_reported(dataset, tmp_path, monkeypatch):
    """L1 raw written before extraction, in its own transaction, and never rolled back."""
    import hymem.client as client_module

    real_chain = client_module.HyMemoryClient._chat_chain

    def chain_with_early_l1(self, msgs, user_id, rid):
        with self.store.write() as tx:
            tx.append_l1_raw(user_id, rid, client_module.render_conversation(msgs))
        work = real_chain(self, msgs, user_id, rid)
        work.pop("l1_raw")
        return work

    monkeypatch.setattr(client_module.HyMemoryClient, "_chat_chain", chain_with_early_l1)
    outcome = run_eval(config(dataset, tmp_path / "run"))
    anomalies = pd.read_parquet(outcome.run_dir / "anomalies.parquet")
    l1 = anomalies[anomalies.kind == "L1_NOT_ROLLED_BACK"]
    assert outcome.verdict == "invalid" and len(l1) > 0
    assert {"lm.extract", "lm.reconcile", "embed"} <= set(l1.site)
    assert "l1_raw" in l1.iloc[0].witness


@pytest.mark.ci_heavy  # a default sweep run twice or three times (run by `nox -s heavy`)
def test_resume_redoes_only_unfinished_units_and_refuses_other_inputs(dataset, tmp_path, monkeypatch):
    full = run_eval(config(dataset, tmp_path / "full", faults="random:0.5", seed=3))
    out = tmp_path / "partial"
    first = run_eval(config(dataset, out, faults="random:0.5", seed=3))
    lines = (out / "units.jsonl").read_text().splitlines()
    (out / "units.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # a crash mid-line

    import evals.run.runner as runner_module

    ran = []
    real = runner_module.CaseReplayer.run

    def counting(self):
        ran.append(self.case.id)
        return real(self)

    monkeypatch.setattr(runner_module.CaseReplayer, "run", counting)
    resumed = run_eval(config(dataset, out, faults="random:0.5", seed=3, resume=True))
    assert len(ran) == len(CASES) - 1
    assert resumed.verdict == full.verdict == first.verdict
    cols = ["case_id", "write", "site", "kind", "outcome"]
    a = pd.read_parquet(full.run_dir / "faults.parquet")[cols].sort_values(cols).reset_index(drop=True)
    b = pd.read_parquet(out / "faults.parquet")[cols].sort_values(cols).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(UsageError, match="manifest hash"):
        run_eval(config(dataset, out, faults="random:0.5", seed=4, resume=True))


@pytest.mark.ci_heavy  # a default sweep run twice or three times (run by `nox -s heavy`)
def test_a_plan_and_its_seed_replay_the_identical_run(dataset, tmp_path):
    def faults(out, seed):
        run_eval(config(dataset, tmp_path / out, faults="random:0.3", seed=seed))
        frame = pd.read_parquet(tmp_path / out / "faults.parquet")
        return frame.drop(columns=["seconds"]).sort_values(["case_id", "write", "site", "kind"]).reset_index(drop=True)

    first, again, other = faults("a", 11), faults("b", 11), faults("c", 12)
    pd.testing.assert_frame_equal(first, again)
    assert not first[["case_id", "write", "site", "kind"]].equals(other[["case_id", "write", "site", "kind"]])


def test_bad_dataset_line_refuses_to_start_with_file_line_field(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    good = json.dumps(CASES[1])
    broken = json.loads(good)
    broken["id"] = "x2"
    broken["turns"] = []
    bad.write_text(good + "\n" + json.dumps(broken) + "\n{not json\n")
    code = main(["run", "--dataset", str(bad), "--embedder", "hash", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}:2: turns" in err and f"{bad}:3:" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.ci_heavy  # a run of three cases; tests/run/test_run_verdict.py's headline test checks the same lines on one (run by `nox -s heavy`)
def test_run_cli_prints_verdict_and_report_path(dataset, tmp_path, capsys):
    code = main(["run", "--dataset", str(dataset), "--embedder", "hash", "--faults", "none", "--out",
                 str(tmp_path / "o"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "verdict: unknown" in out  # nothing was checked under --faults none: never a pass
    assert str(tmp_path / "o" / "summary.md") in out


def test_usage_errors_exit_2(dataset, tmp_path):
    assert main(["run", "--dataset", str(dataset), "--faults", "often", "--out", str(tmp_path / "o")]) == 2
    assert main(["run", "--dataset", str(dataset), "--embedder", "nope", "--out", str(tmp_path / "o")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["run", "--bogus"])
    assert exc.value.code == 2


@pytest.mark.ci_heavy  # a default sweep (run by `nox -s heavy`)
def test_a_finished_run_leaves_no_unit_scratch_directory_behind(dataset, tmp_path, monkeypatch):
    """Units' scratch directories are removed in the background, and all of them are gone when run_eval returns."""
    import tempfile

    import evals.run.scratch

    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(prefix=None, **kwargs):
        if prefix != "hymem-case-":
            return real_mkdtemp(prefix=prefix, **kwargs)
        made.append(Path(real_mkdtemp(prefix=prefix, dir=tmp_path, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(evals.run.scratch.tempfile, "mkdtemp", mkdtemp)
    run_eval(config(dataset, tmp_path / "out", faults="random:0.3", seed=3, concurrency=3))
    assert len(made) == len(CASES)
    assert [p for p in made if p.exists()] == []
