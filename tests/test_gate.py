"""The regression gate on small hand-written run directories: exit codes, rule outcomes, JUnit XML."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
import pytest

from evals.cli import main
from evals.compare import Run
from evals.gate import GateInputError, RuleSet, evaluate_rules, junit_xml, load_rules
from evals.manifest import Manifest

N_CASES = 20


def write_run(path: Path, metrics: list[tuple], cases: list[tuple], providers: tuple[str, ...] = ("p",)) -> Path:
    """A run directory as write_report leaves it, reduced to what the gate reads."""
    path.mkdir(parents=True)
    manifest = Manifest(run_id=path.name, datasets=["d"], dataset_hash="h", n_cases=N_CASES, providers=list(providers),
                        embedder="hash", faults="sweep", seed=3, concurrency=1, engine_version="0.1.0",
                        prompt_hash="x", verdict="valid")
    (path / "manifest.json").write_text(manifest.model_dump_json())
    pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame(cases, columns=["provider", "dataset", "case_id", "metric", "num", "den"]
                 ).to_parquet(path / "case_metrics.parquet")
    return path


def run_frames(owner_nums: list[int], *, rollback: float = 1.0, anomalies: float = 0.0, provider: str = "p",
               extra: tuple[str, ...] = ()) -> tuple[list[tuple], list[tuple]]:
    """Metric and case rows: owner_accuracy from per-case numerators over 5 facts, plus fault metrics."""
    cases = [(provider, "d", f"c{i:02d}", "owner_accuracy", float(num), 5.0) for i, num in enumerate(owner_nums)]
    cases += [(provider, "d", f"c{i:02d}", "rollback_correct_rate", rollback * 4, 4.0) for i in range(len(owner_nums))]
    owner = sum(owner_nums) / (5 * len(owner_nums))
    metrics = [(provider, "all", "owner_accuracy", owner, owner - 0.05, owner + 0.05, len(owner_nums), None),
               (provider, "all", "rollback_correct_rate", rollback, rollback, rollback, 4 * len(owner_nums), None),
               (provider, "all", "anomaly_count", anomalies, anomalies, anomalies, len(owner_nums), None)]
    metrics += [(provider, "all", name, 0.5, 0.4, 0.6, len(owner_nums), None) for name in extra]
    return metrics, cases


def as_run(owner_nums: list[int], **kw) -> Run:
    metrics, cases = run_frames(owner_nums, **kw)
    return Run(metrics=pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high",
                                                      "n", "note"]),
               case_metrics=pd.DataFrame(cases, columns=["provider", "dataset", "case_id", "metric", "num", "den"]))


def rules(*rows: dict) -> RuleSet:
    return RuleSet.model_validate({"rule": list(rows)})


def gate(tmp_path: Path, baseline: Path, current: Path, *extra: str) -> int:
    return main(["gate", "--baseline", str(baseline), "--current", str(current), *extra])


PERFECT = [5] * N_CASES


def test_identical_runs_pass_the_default_rules(tmp_path: Path, capsys):
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    assert gate(tmp_path, run, run) == 0
    out = capsys.readouterr().out
    assert "Regression gate: PASS" in out
    assert (run / "gate.xml").is_file() and (run / "gate.md").read_text() == out


def test_owner_accuracy_drop_beyond_tolerance_fails(tmp_path: Path):
    base = write_run(tmp_path / "base", *run_frames(PERFECT))
    cur = write_run(tmp_path / "cur", *run_frames([3, 4] * (N_CASES // 2)))  # every case lost 1 or 2 of 5
    assert gate(tmp_path, base, cur) == 1
    suite = ET.parse(cur / "gate.xml").getroot()
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["owner_accuracy may drop at most 0.02"]
    result = evaluate_rules(load_rules(), as_run(PERFECT), as_run([3, 4] * (N_CASES // 2)), seed=0)
    check = next(r for r in result if r.rule.metric == "owner_accuracy").checks[0]
    assert check.delta == pytest.approx(-0.3) and check.ci_high < -0.02 and check.n == N_CASES


def test_a_drop_whose_ci_reaches_the_tolerance_passes():
    """One case of twenty lost one fact: the mean drop is 0.01 and its CI reaches 0, so it is noise."""
    current = [5] * (N_CASES - 1) + [4]
    [result] = evaluate_rules(rules({"metric": "owner_accuracy", "max_drop": 0.02}), as_run(PERFECT),
                              as_run(current), seed=0)
    assert result.status == "pass"
    assert result.checks[0].ci_high >= -0.02


def test_a_violated_floor_fails(tmp_path: Path):
    base = write_run(tmp_path / "base", *run_frames(PERFECT))
    cur = write_run(tmp_path / "cur", *run_frames(PERFECT, rollback=0.75))
    assert gate(tmp_path, base, cur) == 1
    [result] = evaluate_rules(rules({"metric": "rollback_correct_rate", "min": 1.0}), as_run(PERFECT),
                              as_run(PERFECT, rollback=0.75))
    assert result.status == "fail" and "0.750 violates >= 1" in result.checks[0].detail


def test_an_exact_count_rule_uses_the_value():
    [ok, bad] = evaluate_rules(rules({"metric": "anomaly_count", "equals": 0}, {"metric": "anomaly_count", "max": 2}),
                               as_run(PERFECT), as_run(PERFECT, anomalies=3.0))
    assert (ok.status, bad.status) == ("fail", "fail")
    assert ok.checks[0].current == 3.0
    [same] = evaluate_rules(rules({"metric": "anomaly_count", "max_drop": 0}), as_run(PERFECT), as_run(PERFECT))
    assert same.status == "pass" and "no per-case values" in same.checks[0].detail


def test_absent_metrics_are_skipped_or_fail_by_which_run_lacks_them():
    baseline = as_run(PERFECT, extra=("fact_f1",))
    current = as_run(PERFECT)
    results = evaluate_rules(rules({"metric": "ai_to_user_rate", "max_rise": 0.02},
                                   {"metric": "fact_f1", "max_drop": 0.02},
                                   {"metric": "fact_f1", "min": 0.1}), baseline, current)
    assert [r.status for r in results] == ["skipped", "fail", "fail"]
    assert results[0].checks[0].detail == "absent from both runs"
    assert "absent from the current run" in results[1].checks[0].detail
    [new] = evaluate_rules(rules({"metric": "fact_f1", "max_drop": 0.02}), current, baseline)
    assert new.status == "skipped"  # nothing to compare a new metric with


def test_an_unmeasured_value_fails_a_floor():
    run = as_run(PERFECT, rollback=float("nan"))
    [result] = evaluate_rules(rules({"metric": "rollback_correct_rate", "min": 1.0}), run, run)
    assert result.status == "fail" and "NaN" in result.checks[0].detail


def test_max_rise_fails_when_the_whole_ci_is_above_tolerance():
    low, high = as_run([0] * N_CASES), as_run([2, 3] * (N_CASES // 2))
    rule = {"metric": "owner_accuracy", "max_rise": 0.02}  # read here as an error rate
    assert evaluate_rules(rules(rule), low, high)[0].status == "fail"
    assert evaluate_rules(rules(rule), high, low)[0].status == "pass"


def test_a_rule_covers_each_shared_provider_unless_it_names_one():
    both = Run(metrics=pd.concat([as_run(PERFECT).metrics, as_run(PERFECT, provider="q", rollback=0.5).metrics]),
               case_metrics=pd.concat([as_run(PERFECT).case_metrics,
                                       as_run(PERFECT, provider="q", rollback=0.5).case_metrics]))
    [every, only_p] = evaluate_rules(rules({"metric": "rollback_correct_rate", "min": 1.0},
                                           {"metric": "rollback_correct_rate", "min": 1.0, "provider": "p"}),
                                     both, both)
    assert [(c.provider, c.status) for c in every.checks] == [("p", "pass"), ("q", "fail")]
    assert every.status == "fail" and only_p.status == "pass"


def test_junit_has_one_testcase_per_rule_with_failures_and_skips_marked():
    results = evaluate_rules(rules({"metric": "rollback_correct_rate", "min": 1.0},
                                   {"metric": "owner_accuracy", "max_drop": 0.02, "name": "owner <stable>"},
                                   {"metric": "missing_metric", "min": 0.0}),
                             as_run(PERFECT), as_run([3] * N_CASES))
    root = ET.fromstring(junit_xml(results, baseline="b", current="c"))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["rollback_correct_rate >= 1", "owner <stable>", "missing_metric >= 0"]
    assert [c.find("failure") is not None for c in cases] == [False, True, False]
    assert cases[2].find("skipped") is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")


@pytest.mark.parametrize("text", ["[[rule]\nmetric = 'x'", "[[rule]]\nmetric = 'x'\nmin = 1\nmax = 2",
                                  "[[rule]]\nmetric = 'x'\nfloor = 1", "confidence = 0.9"])
def test_a_malformed_rules_file_is_a_usage_error(tmp_path: Path, text: str, capsys):
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    (tmp_path / "rules.toml").write_text(text)
    with pytest.raises(GateInputError):
        load_rules(tmp_path / "rules.toml")
    assert gate(tmp_path, run, run, "--rules", str(tmp_path / "rules.toml")) == 2
    assert "rules file" in capsys.readouterr().err


def test_a_missing_or_foreign_run_is_a_usage_error(tmp_path: Path):
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    assert gate(tmp_path, tmp_path / "nope", run) == 2
    foreign = write_run(tmp_path / "foreign", *run_frames(PERFECT))
    pd.DataFrame({"provider": ["p"], "metric": ["x"]}).to_parquet(foreign / "metrics.parquet")
    assert gate(tmp_path, run, foreign) == 2
    other = write_run(tmp_path / "other", *run_frames(PERFECT, provider="q"))
    assert gate(tmp_path, run, other) == 2  # no provider in both runs


def test_outputs_go_where_asked_and_to_the_ci_step_summary(tmp_path: Path, monkeypatch):
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert gate(tmp_path, run, run, "--junit", str(tmp_path / "ci/junit.xml"), "--summary",
                str(tmp_path / "ci/gate.md")) == 0
    assert ET.parse(tmp_path / "ci/junit.xml").getroot().tag == "testsuites"
    assert step.read_text() == "earlier step\n" + (tmp_path / "ci/gate.md").read_text()
    assert not (run / "gate.xml").exists()


def test_the_shipped_rules_parse():
    shipped = load_rules()
    assert {"rollback_correct_rate", "anomaly_count", "owner_accuracy", "cross_subject_merge_applied_rate"} <= {
        r.metric for r in shipped.rule}
