"""The regression gate on small hand-written run directories: exit codes, rule outcomes, JUnit XML."""

from __future__ import annotations

import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pandas as pd
import pytest

from evals.cli.main import main
from evals.report.compare import Run, load_run
from evals.report.gate import GateInputError, RuleSet, evaluate_rules, junit_xml, load_rules
from evals.run.provenance import Manifest

N_CASES = 20


def write_run(path: Path, metrics: list[tuple], cases: list[tuple], providers: tuple[str, ...] = ("p",),
              **manifest_fields) -> Path:
    """A finished run directory as write_report leaves it, reduced to what the gate reads."""
    path.mkdir(parents=True)
    fields = {"dataset_hash": "h", "faults": "sweep", "seed": 3, "embedder": "hash", "finished": time.time(),
              "verdict": "valid"} | manifest_fields
    manifest = Manifest(run_id=path.name, datasets=["d"], n_cases=N_CASES, providers=list(providers),
                        concurrency=1, engine_version="0.1.0", prompt_hash="x", **fields)
    (path / "manifest.json").write_text(manifest.model_dump_json())
    pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame(cases, columns=["provider", "dataset", "case_id", "metric", "num", "den"]
                 ).to_parquet(path / "case_metrics.parquet")
    return path


def run_frames(owner_nums: list[int], *, rollback: float = 1.0, anomalies: float = 0.0, provider: str = "p",
               extra: tuple[str, ...] = (), ids: list[str] | None = None) -> tuple[list[tuple], list[tuple]]:
    """Metric and case rows: owner_accuracy from per-case numerators over 5 facts, plus fault metrics."""
    ids = ids or [f"c{i:02d}" for i in range(len(owner_nums))]
    cases = [(provider, "d", ids[i], "owner_accuracy", float(num), 5.0) for i, num in enumerate(owner_nums)]
    cases += [(provider, "d", ids[i], "rollback_correct_rate", rollback * 4, 4.0) for i in range(len(owner_nums))]
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


def rules(*rows: dict, builtin: bool = False) -> RuleSet:
    """These rules alone, or (builtin) with the checks on vanished metrics and falling n and the case-by-case one."""
    return RuleSet.model_validate({"rule": list(rows), "require_baseline_metrics": builtin,
                                   "require_baseline_n": builtin, "compare_cases_when_deterministic": builtin})


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
    [same] = evaluate_rules(rules({"metric": "anomaly_count", "max_rise": 0}), as_run(PERFECT), as_run(PERFECT))
    assert same.status == "pass" and "no per-case values" in same.checks[0].detail


def test_absent_metrics_are_skipped_or_fail_by_which_run_lacks_them():
    baseline = as_run(PERFECT, extra=("fact_f1",))
    current = as_run(PERFECT)
    results = evaluate_rules(rules({"metric": "ai_to_user_rate", "max_rise": 0.02},
                                   {"metric": "fact_f1", "max_drop": 0.02},
                                   {"metric": "fact_f1", "min": 0.1}), baseline, current)
    assert [r.status for r in results] == ["skipped", "fail", "fail"]
    assert results[0].checks[0].detail == "measured in neither run"
    assert "measured in the baseline but not in the current run" in results[1].checks[0].detail
    [new] = evaluate_rules(rules({"metric": "fact_f1", "max_drop": 0.02}), current, baseline)
    assert new.status == "skipped"  # nothing to compare a new metric with


def test_a_value_neither_run_measured_is_skipped_and_one_only_the_baseline_measured_fails(tmp_path: Path, capsys):
    """A `--faults none` run measures no rollback rate (NaN): gated against itself it passes, the rule skipped."""
    unmeasured = write_run(tmp_path / "none", *run_frames(PERFECT, rollback=float("nan")))
    assert gate(tmp_path, unmeasured, unmeasured) == 0
    out = capsys.readouterr().out
    assert "⏭ skipped | rollback_correct_rate >= 1 | p | all | — | — | measured in neither run" in out
    measured = write_run(tmp_path / "sweep", *run_frames(PERFECT))
    assert gate(tmp_path, measured, unmeasured) == 1
    assert "❌ fail | rollback_correct_rate >= 1 | p | all | 1.000 | — | measured in the baseline but not in the " \
        "current run" in capsys.readouterr().out


def _as_error_rate(run: Run) -> Run:
    """The same numbers read as a lower-is-better metric."""
    rename = {"owner_accuracy": "third_party_to_user_rate"}
    return Run(metrics=run.metrics.replace({"metric": rename}), case_metrics=run.case_metrics.replace({"metric": rename}))


def test_max_rise_fails_when_the_whole_ci_is_above_tolerance():
    low, high = _as_error_rate(as_run([0] * N_CASES)), _as_error_rate(as_run([2, 3] * (N_CASES // 2)))
    rule = {"metric": "third_party_to_user_rate", "max_rise": 0.02}
    assert evaluate_rules(rules(rule), low, high)[0].status == "fail"
    assert evaluate_rules(rules(rule), high, low)[0].status == "pass"


@pytest.mark.parametrize("rule", ["metric = 'third_party_to_user_rate'\nmax_drop = 0.02",
                                  "metric = 'owner_accuracy'\nmax_rise = 0.02",
                                  "metric = 'fact_f1'\nmax_increase = 0"])
def test_a_tolerance_against_the_metrics_declared_direction_is_refused(tmp_path: Path, rule: str, capsys):
    """A drop rule on an error rate would pass every regression; the catalogue says which way is better."""
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    (tmp_path / "rules.toml").write_text(f"[[rule]]\n{rule}\n")
    assert gate(tmp_path, run, run, "--rules", str(tmp_path / "rules.toml")) == 2
    assert "the metric catalogue declares" in capsys.readouterr().err


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
                                   {"metric": "fact_f1", "min": 0.0}),  # measured in neither run
                             as_run(PERFECT), as_run([3] * N_CASES))
    root = ET.fromstring(junit_xml(results, baseline="b", current="c"))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["rollback_correct_rate >= 1", "owner <stable>", "fact_f1 >= 0"]
    assert cases[0].get("classname") == "gate.rollback_correct_rate"
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


@pytest.mark.parametrize(("scope", "field", "message"), [
    ("metric = 'owner_acuracy'", "[[rule]] 1, metric", "not a metric of the catalogue (evals/record/catalogue.py); "
                                                       "did you mean 'owner_accuracy'?"),
    ("metric = 'owner_accuracy'\ndataset = 'd.jsonl'", "dataset", "'d.jsonl' is in neither run (they have all)"),
    ("metric = 'owner_accuracy'\nprovider = 'p2'", "provider", "'p2' is in neither run (they have p)"),
])
def test_a_rule_naming_what_neither_run_has_is_a_rules_file_error_not_a_skip(tmp_path: Path, capsys, scope, field,
                                                                             message):
    """A typo in a rule must not skip it and let a real regression pass."""
    base = write_run(tmp_path / "base", *run_frames(PERFECT))
    cur = write_run(tmp_path / "cur", *run_frames(WORSE))
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(f"[[rule]]\n{scope}\nmax_drop = 0.02\n")
    assert gate(tmp_path, base, cur, "--rules", str(rules_file)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"hymem-eval gate: rules file {rules_file}: [[rule]] 1")
    assert field in err and message in err


def test_a_current_run_with_another_embedder_is_gated_with_a_note_at_the_top(tmp_path: Path, capsys):
    """The README's CI job without minilm installed falls back to the hash embedder: the report must say so."""
    base = write_run(tmp_path / "base", *run_frames(PERFECT), embedder="minilm")
    cur = write_run(tmp_path / "cur", *run_frames(PERFECT))
    assert gate(tmp_path, base, cur) == 0
    assert "**The runs used different embedders (minilm, hash)" in capsys.readouterr().out.split("| status |")[0]


def test_a_run_stopped_before_its_report_was_finished_is_not_gated(tmp_path: Path, capsys):
    """Killed while writing its report: the tables are there, the verdict is not; the gate must not pass it."""
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    killed = write_run(tmp_path / "killed", *run_frames(PERFECT), finished=None, verdict=None)
    for baseline, current in ((run, killed), (killed, run)):
        assert gate(tmp_path, baseline, current) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{killed}: the run has not finished" in err and "--resume" in err
    assert not (killed / "gate.md").exists()


def test_a_missing_or_foreign_run_is_a_usage_error(tmp_path: Path):
    run = write_run(tmp_path / "run", *run_frames(PERFECT))
    assert gate(tmp_path, tmp_path / "nope", run) == 2
    foreign = write_run(tmp_path / "foreign", *run_frames(PERFECT))
    pd.DataFrame({"provider": ["p"], "metric": ["x"]}).to_parquet(foreign / "metrics.parquet")
    assert gate(tmp_path, run, foreign) == 2
    two = write_run(tmp_path / "two", *_providers(("q", PERFECT), ("r", PERFECT)), providers=("q", "r"))
    assert gate(tmp_path, run, two) == 2  # no provider in both runs, and no single one on each side


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


# ---- pairing providers (issue 13.8) ----------------------------------------------------------------------


def _providers(*arms: tuple[str, list[int]]) -> tuple[list[tuple], list[tuple]]:
    """The frames of one run with several providers: (name, owner numerators) each."""
    metrics, cases = [], []
    for name, nums in arms:
        m, c = run_frames(nums, provider=name)
        metrics, cases = metrics + m, cases + c
    return metrics, cases


WORSE = [3, 4] * (N_CASES // 2)  # every case lost 1 or 2 of 5 facts


def test_a_model_switch_pairs_the_only_provider_of_each_run_and_says_so(tmp_path: Path, capsys):
    base = write_run(tmp_path / "base", *run_frames(PERFECT, provider="offline"), providers=("offline",))
    same = write_run(tmp_path / "same", *run_frames(PERFECT, provider="gpt"), providers=("gpt",))
    worse = write_run(tmp_path / "worse", *run_frames(WORSE, provider="gpt"), providers=("gpt",))
    assert gate(tmp_path, base, same) == 0
    out = capsys.readouterr().out
    assert "Paired automatically (each run has one provider): `offline` (baseline) with `gpt` (current)." in out
    assert gate(tmp_path, base, worse) == 1
    assert "| ❌ fail | owner_accuracy may drop at most 0.02 | offline → gpt | all |" in capsys.readouterr().out


def test_a_provider_or_engine_arm_gone_from_the_current_run_fails_the_gate(tmp_path: Path, capsys):
    base = write_run(tmp_path / "base", *_providers(("offline", PERFECT), ("mem0/offline", WORSE)),
                     providers=("offline", "mem0/offline"))
    cur = write_run(tmp_path / "cur", *_providers(("offline", PERFECT)), providers=("offline",))
    assert gate(tmp_path, base, cur) == 1  # mem0's arm, and every metric of it, vanished
    out = capsys.readouterr().out
    assert ("| ❌ fail | every provider of the baseline is in the current run | mem0/offline | all | — | — | in the "
            "baseline, absent from the current run |") in out
    assert gate(tmp_path, base, base) == 0
    assert gate(tmp_path, base, cur, "--pair", "offline=offline") == 0  # pairs chosen: the rest is left out on purpose


def test_pair_chooses_which_provider_is_gated_against_which(tmp_path: Path, capsys):
    base = write_run(tmp_path / "base", *_providers(("p", PERFECT), ("q", WORSE)), providers=("p", "q"))
    cur = write_run(tmp_path / "cur", *_providers(("r", PERFECT), ("s", WORSE)), providers=("r", "s"))
    assert gate(tmp_path, base, cur) == 2
    assert "share none: pair them with --pair BASELINE=CURRENT" in capsys.readouterr().err
    assert gate(tmp_path, base, cur, "--pair", "p=r", "--pair", "q=s") == 0
    out = capsys.readouterr().out
    assert "Paired as asked: `p` (baseline) with `r` (current), `q` (baseline) with `s` (current)." in out
    assert "| p → r | all |" in out and "| q → s | all |" in out
    assert gate(tmp_path, base, cur, "--pair", "p=s") == 1
    out = capsys.readouterr().out
    assert "| ❌ fail | owner_accuracy may drop at most 0.02 | p → s | all |" in out
    assert "Providers not gated: q (baseline), r (current)." in out
    for bad, message in (("p=nope", "the current run has no provider 'nope' (it has r, s)"),
                         ("x=r", "the baseline has no provider 'x'"), ("p", "use BASELINE_PROVIDER=CURRENT_PROVIDER")):
        assert gate(tmp_path, base, cur, "--pair", bad) == 2
        assert message in capsys.readouterr().err


# ---- runs of different inputs (issue 13.10) ----------------------------------------------------------------


def test_runs_of_different_datasets_are_refused_unless_allowed_then_only_shared_cases_are_gated(tmp_path: Path,
                                                                                                 capsys):
    base = write_run(tmp_path / "base", *run_frames(PERFECT), dataset_hash="aaaa")
    ids = [f"c{i:02d}" for i in range(10)] + [f"x{i:02d}" for i in range(10)]  # 10 shared, 10 new and all wrong
    cur = write_run(tmp_path / "cur", *run_frames([5] * 10 + [0] * 10, ids=ids), dataset_hash="bbbb")
    assert gate(tmp_path, base, cur) == 2
    err = capsys.readouterr().err
    assert "the datasets differ (hash aaaa vs bbbb; cases: 10 shared; 10 only in the baseline (e.g. d/c10" in err
    assert "10 only in the current run (e.g. d/x00" in err and "--allow-different-inputs" in err
    assert gate(tmp_path, base, cur, "--allow-different-inputs") == 0
    report = (cur / "gate.md").read_text().splitlines()
    assert report[2].startswith("**Different inputs: the datasets differ") and "Only the 10 cases in both runs" in \
        report[2]
    assert "| ✅ pass | owner_accuracy may drop at most 0.02 | p | all | 1.000 | 1.000 |" in "\n".join(report)
    shared_wrong = write_run(tmp_path / "wrong", *run_frames([0] * 10 + [5] * 10, ids=ids), dataset_hash="bbbb")
    assert gate(tmp_path, base, shared_wrong, "--allow-different-inputs") == 1


def test_a_case_whose_content_changed_is_not_shared(tmp_path: Path, capsys):
    hashes = {f"d/c{i:02d}": f"h{i}" for i in range(N_CASES)}
    base = write_run(tmp_path / "base", *run_frames(PERFECT), case_hashes=hashes)
    cur = write_run(tmp_path / "cur", *run_frames([0] + [5] * (N_CASES - 1)), dataset_hash="h2",
                    case_hashes=hashes | {"d/c00": "edited"})
    assert gate(tmp_path, base, cur) == 2
    assert "1 changed (e.g. d/c00)" in capsys.readouterr().err
    assert gate(tmp_path, base, cur, "--allow-different-inputs") == 0  # the edited case, now wrong, is left out
    assert "Only the 19 cases in both runs are gated" in capsys.readouterr().out


@pytest.mark.parametrize(("a", "b", "code"), [(("sweep", 3), ("random:0.2", 3), 2), (("random:0.2", 3), ("random:0.2", 4), 2),
                                              (("sweep", 3), ("sweep", 4), 0), (("none", 1), ("none", 2), 0)])
def test_runs_of_different_fault_plans_are_refused(tmp_path: Path, capsys, a, b, code):
    base = write_run(tmp_path / "base", *run_frames(PERFECT), faults=a[0], seed=a[1])
    cur = write_run(tmp_path / "cur", *run_frames(PERFECT), faults=b[0], seed=b[1])
    assert gate(tmp_path, base, cur) == code
    if code == 2:
        assert "the fault plans differ" in capsys.readouterr().err
        assert gate(tmp_path, base, cur, "--allow-different-inputs") == 0
        assert "**Different inputs: the fault plans differ" in (cur / "gate.md").read_text()


# ---- errors never flatter (issue 17.7) ---------------------------------------------------------------------


def _with(frames: tuple[list[tuple], list[tuple]], metric: str, per_case: list[tuple[float, float]],
          n: int | None = None) -> tuple[list[tuple], list[tuple]]:
    """Frames plus one more metric, from per-case (num, den); n defaults to the cases that scored it."""
    metrics, cases = frames
    cases = cases + [("p", "d", f"c{i:02d}", metric, num, den) for i, (num, den) in enumerate(per_case)]
    value = sum(x for x, _ in per_case) / sum(d for _, d in per_case)
    metrics = metrics + [("p", "all", metric, value, value, value, n or sum(d > 0 for _, d in per_case), None)]
    return metrics, cases


def test_any_rise_of_the_infra_error_rate_fails(tmp_path: Path, capsys):
    clean = [(0.0, 5.0)] * N_CASES
    base = write_run(tmp_path / "base", *_with(run_frames(PERFECT), "infra_error_rate", clean))
    one = write_run(tmp_path / "one", *_with(run_frames(PERFECT), "infra_error_rate", [(1.0, 5.0)] + clean[1:]))
    assert gate(tmp_path, base, base) == 0
    assert gate(tmp_path, base, one) == 1  # one unit of 100: a paired CI would call it noise
    assert "| ❌ fail | infra_error_rate may increase at most 0 | p | all | 0.000 | 0.010 | Δ +0.01" in \
        capsys.readouterr().out


def test_a_metric_that_vanished_or_lost_cases_fails_even_without_a_rule(tmp_path: Path, capsys):
    kept = [(1.0, 1.0)] * N_CASES
    base = write_run(tmp_path / "base", *_with(run_frames(PERFECT), "separate_kept_rate", kept))
    vanished = write_run(tmp_path / "vanished", *run_frames(PERFECT))
    assert gate(tmp_path, base, vanished) == 1
    assert ("| ❌ fail | every metric the baseline measured is measured | p | all | 1.000 | — | separate_kept_rate: "
            f"measured in the baseline (n={N_CASES}) but not in the current run |") in capsys.readouterr().out
    dropped = [(1.0, 1.0)] * (N_CASES - 3) + [(0.0, 0.0)] * 3  # three cases fell out (an engine error, say)
    fewer = write_run(tmp_path / "fewer", *_with(run_frames(PERFECT), "separate_kept_rate", dropped))
    assert gate(tmp_path, base, fewer) == 1
    out = capsys.readouterr().out
    assert f"separate_kept_rate: n {N_CASES - 3} < baseline n {N_CASES}" in out
    assert "| ✅ pass | every metric the baseline measured is measured |" in out
    relaxed = tmp_path / "relaxed.toml"
    relaxed.write_text("require_baseline_n = false\n[[rule]]\nmetric = 'owner_accuracy'\nmax_drop = 0.02\n")
    assert gate(tmp_path, base, fewer, "--rules", str(relaxed)) == 0


def _two_datasets(d2_nums: list[int]) -> tuple[list[tuple], list[tuple]]:
    """owner_accuracy over 100 cases of d1 (all right) and 10 of d2; metrics pooled and per dataset."""
    cases = [("p", "d1", f"a{i:03d}", "owner_accuracy", 5.0, 5.0) for i in range(100)]
    cases += [("p", "d2", f"b{i:03d}", "owner_accuracy", float(x), 5.0) for i, x in enumerate(d2_nums)]
    metrics = []
    for scope in ("all", "d1", "d2"):
        mine = [c for c in cases if scope in ("all", c[1])]
        value = sum(c[4] for c in mine) / sum(c[5] for c in mine)
        metrics.append(("p", scope, "owner_accuracy", value, value, value, len(mine), None))
    return metrics, cases


def test_rules_apply_per_dataset_as_well_as_pooled(tmp_path: Path, capsys):
    """A regression confined to a small dataset hides in the pooled value (Δ −0.018) but not in its own."""
    base = write_run(tmp_path / "base", *_two_datasets([5] * 10))
    cur = write_run(tmp_path / "cur", *_two_datasets([4] * 10))
    assert gate(tmp_path, base, cur) == 1
    out = capsys.readouterr().out
    assert "| ✅ pass | owner_accuracy may drop at most 0.02 | p | all |" in out
    assert "| ✅ pass | owner_accuracy may drop at most 0.02 | p | d1 |" in out
    assert "| ❌ fail | owner_accuracy may drop at most 0.02 | p | d2 | 1.000 | 0.800 | paired Δ -0.200" in out
    pooled_only = tmp_path / "pooled.toml"
    pooled_only.write_text("[[rule]]\nmetric = 'owner_accuracy'\nmax_drop = 0.02\ndataset = 'all'\n")
    assert gate(tmp_path, base, cur, "--rules", str(pooled_only)) == 0


def test_the_shipped_rules_cover_infra_errors_and_the_profile():
    by_metric = {r.metric: r for r in load_rules().rule}
    assert by_metric["infra_error_rate"].kind == "max_increase"
    assert {"profile_leak_rate", "profile_name_accuracy", "no_memory_accuracy"} <= by_metric.keys()
    assert all(r.dataset is None for r in by_metric.values())  # pooled and per dataset


def test_a_count_averaged_over_epochs_is_never_printed_as_zero(tmp_path: Path, capsys):
    """With 2 epochs a count is per epoch: one anomaly in one epoch is 0.5. The gate fails on it and every report
    must show 0.50, not a rounded 0 beside 'violates == 0'."""
    from evals.report.compare import show

    base = write_run(tmp_path / "base", *run_frames(PERFECT), epochs=2)
    cur = write_run(tmp_path / "cur", *run_frames(PERFECT, anomalies=0.5), epochs=2)
    assert gate(tmp_path, base, cur) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if "anomaly_count == 0" in line)
    assert "| 0 | 0.50 | 0.50 violates == 0 |" in row, row
    shown = next(line for line in show(cur).splitlines() if line.startswith("anomaly_count"))
    assert shown.split() == ["anomaly_count", "0.50"], shown
    assert main(["compare", str(base), str(cur), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert "| anomaly_count | 0 | 0.50 | +0.50 |" in md


# ---- case by case with a deterministic model (evals.report.gate_reference) ----

OFFLINE = {"providers": ("offline",), "provider_specs": {"offline": {"model": "offline"}}}
ONE_CASE_WORSE = [5] * (N_CASES - 1) + [4]  # one fact of one case misfiled: the drop rule calls it noise


def _deterministic(path: Path, owner_nums: list[int], **manifest) -> Path:
    fields = {**OFFLINE, **manifest}
    return write_run(path, *run_frames(owner_nums, provider="offline"), providers=fields.pop("providers"), **fields)


def test_one_case_worse_with_a_deterministic_model_fails_and_names_the_case(tmp_path: Path, capsys):
    base = _deterministic(tmp_path / "base", PERFECT)
    cur = _deterministic(tmp_path / "cur", ONE_CASE_WORSE)
    assert gate(tmp_path, base, cur) == 1
    report = (cur / "gate.md").read_text()
    failed = [c for c in ET.parse(cur / "gate.xml").getroot().iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["no case worse with a deterministic model"]
    assert "owner_accuracy: 1 case(s) worse with a deterministic model" in report and "c19 1.000 → 0.800" in report
    [drop] = evaluate_rules(rules({"metric": "owner_accuracy", "max_drop": 0.02}), load_run(base), load_run(cur))
    assert drop.status == "pass"  # the same change, judged by the CI of the mean: within tolerance


def test_a_better_case_passes_and_says_the_baseline_is_due_a_re_record(tmp_path: Path):
    base = _deterministic(tmp_path / "base", ONE_CASE_WORSE)
    cur = _deterministic(tmp_path / "cur", PERFECT)
    assert gate(tmp_path, base, cur) == 0
    assert "none worse; 1 better (re-record the baseline to keep them)" in (cur / "gate.md").read_text()


@pytest.mark.parametrize("change, reason", [
    ({"provider_specs": {"offline": {"model": "openai/gpt-4o-mini"}}}, "a sampled model"),
    ({"seed": 4}, "different seeds (3 and 4)"),
    ({"embedder": "minilm"}, "different embedders (hash and minilm)"),
    ({"matcher_spec": "text"}, "different matchers"),
])
def test_runs_that_need_not_repeat_are_not_compared_case_by_case(tmp_path: Path, change, reason):
    """A sampled model, or another seed, embedder or matcher: a case may move without a bug, so only the rules gate."""
    base = _deterministic(tmp_path / "base", PERFECT, matcher_spec="semantic")
    cur = _deterministic(tmp_path / "cur", ONE_CASE_WORSE, **{"matcher_spec": "semantic", **change})
    assert gate(tmp_path, base, cur) == 0
    assert f"not compared case by case: {reason}" in (cur / "gate.md").read_text()
