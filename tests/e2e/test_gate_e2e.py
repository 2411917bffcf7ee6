"""The regression gate on real runs: the baseline passes against itself, planted attribution errors and engine
errors that take cases out of the metrics fail, a fault-free run gates cleanly against itself."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest

from evals.cli.main import main
from evals.pipeline import run_eval
from evals.report.compare import load_run
from evals.report.gate_inputs import case_hashes, restrict
from evals.run.runner import RunConfig

DATASET = "datasets/chat_en.jsonl"


def _run(out: Path) -> Path:
    return run_eval(RunConfig(datasets=[DATASET], embedder="hash", faults="random:0.05", seed=1, out=out,
                              progress=False)).run_dir


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("gate") / "baseline")


@pytest.mark.ci_heavy  # the baseline fixture's full sweep and a run each (issue 35: run by `nox -s heavy`)
def test_the_baseline_passes_its_own_gate(baseline, tmp_path):
    current = _run(tmp_path / "current")
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 0
    cases = ElementTree.parse(current / "gate.xml").getroot().iter("testcase")
    assert all(case.find("failure") is None for case in cases)


@pytest.mark.ci_heavy
def test_planted_attribution_errors_fail_the_gate(baseline, tmp_path, monkeypatch, capsys):
    """A bug that files every named person's fact under the user."""
    import hymem.client as client_module

    real = client_module._fact_from_model

    def everything_is_the_users(fact, kind="fact"):
        new = real(fact, kind)
        if new.subject not in ("user", "assistant"):
            new.subject = "user"
        return new

    monkeypatch.setattr(client_module, "_fact_from_model", everything_is_the_users)
    current = _run(tmp_path / "current")
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 1
    report = (current / "gate.md").read_text()
    assert "subject_accuracy" in report and "third_party_to_user_rate" in report
    failed = {case.get("name") for case in ElementTree.parse(current / "gate.xml").getroot().iter("testcase")
              if case.find("failure") is not None}
    assert any("subject_accuracy" in name for name in failed)
    assert not any("rollback_correct_rate" in name for name in failed)  # writes are still all-or-nothing


def _failed(run: Path) -> set[str]:
    return {case.get("name") for case in ElementTree.parse(run / "gate.xml").getroot().iter("testcase")
            if case.find("failure") is not None}


@pytest.mark.ci_heavy
def test_engine_errors_that_take_cases_out_of_the_metrics_fail_the_gate(baseline, tmp_path, monkeypatch, capsys):
    """A write that raises (instead of returning a failure) makes its case an infra error: its facts leave every
    rate, which can even rise. The gate fails on the infra errors and on the cases that dropped out."""
    import hymem.client as client_module

    real = client_module.HyMemoryClient.add

    def raises_for_some_users(self, messages, user_id, request_id=None):
        if zlib.crc32(user_id.encode()) % 4 == 0:
            raise RuntimeError("planted: nothing to remember raised as an error")
        return real(self, messages, user_id, request_id)

    monkeypatch.setattr(client_module.HyMemoryClient, "add", raises_for_some_users)
    current = _run(tmp_path / "current")
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 1
    failed = _failed(current)
    assert "no metric's n falls below the baseline's" in failed
    assert any(name.startswith("infra_error_rate") for name in failed) or any("anomaly" in n for n in failed)


def test_a_fault_free_run_passes_its_own_gate_with_the_fault_rules_skipped(chat_en_six_run, tmp_path, capsys):
    # six cases of DATASET, no faults (the session's shared run, copied: the gate writes its report into it)
    run = Path(shutil.copytree(chat_en_six_run, tmp_path / "none"))
    assert main(["gate", "--baseline", str(run), "--current", str(run)]) == 0
    report = (run / "gate.md").read_text()
    assert "| ⏭ skipped | rollback_correct_rate >= 1 | offline | all | — | — | measured in neither run |" in report
    assert not _failed(run)


@pytest.mark.ci_heavy
def test_gating_only_shared_cases_reproduces_the_reports_values_over_all_cases(baseline):
    """restrict() recomputes values from the per-case tables; over every case it must agree with metrics.parquet
    (rates and counts, pooled and per dataset), or a gate with --allow-different-inputs would read other numbers."""
    run = load_run(baseline)
    again = restrict(run, set(case_hashes(run)))
    merged = again.metrics.merge(run.metrics, on=["provider", "dataset", "metric"], suffixes=("", "_report"))
    assert len(merged) == len(again.metrics) and {"faulted_units", "anomaly_count", "fact_f1"} <= set(merged["metric"])
    pd.testing.assert_series_equal(merged["value"], merged["value_report"], check_names=False)
    assert set(merged["dataset"]) == {"all", "chat_en"}


@pytest.mark.ci_heavy
def test_a_bug_in_one_case_fails_the_case_by_case_check_of_the_deterministic_model(baseline, tmp_path, monkeypatch,
                                                                                     capsys):
    """The offline model repeats exactly, so a case made worse is the code's doing: here a profile update that loses
    the user's age (one case of the suite states one). The drop rule's CI calls one case of twenty noise; the check
    after each write (PROFILE_UPDATE_LOST) sees it too."""
    import hymem.client as client_module

    real = client_module._profile_updates

    def age_lost(profile, msgs):
        updates = real(profile, msgs)
        updates.pop("age", None)
        return updates

    monkeypatch.setattr(client_module, "_profile_updates", age_lost)
    current = _run(tmp_path / "current")
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 1
    failed = _failed(current)
    assert "no case worse with a deterministic model" in failed
    assert not any("profile_field_accuracy" in name for name in failed)  # within the drop rule's CI
    report = (current / "gate.md").read_text()
    assert "profile_field_accuracy: 1 case(s) worse with a deterministic model" in report
