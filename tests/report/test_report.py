"""The report is a projection of hand-built run records: pinned columns, known metric values, the verdict rules."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evals.core.stats import bootstrap_ci, paired_bootstrap_delta
from evals.faults.adversarial import ADVERSARIAL_KINDS
from evals.faults.plan import SITES, expected_outcome, kinds_for
from evals.record import Anomaly, CaseRun, FaultRecord, WriteRecord
from evals.report.run_report import load_runs, metrics_frame, verdict_of, write_report
from evals.run.provenance import Manifest

# The in-process pairs that apply to a run whose writes all take the chat path (no lm.extract_working).
# Adversarial kinds apply only where a control write offered the chance; these synthetic units offer none.
TOTAL_PAIRS = sum(len([k for k in kinds_for(site) if k not in ADVERSARIAL_KINDS])
                  for site in SITES if site != "lm.extract_working")


def manifest(seed: int = 7, faults: str = "sweep") -> Manifest:
    return Manifest(run_id="run-1", datasets=["d1", "d2"], dataset_hash="h", n_cases=3, providers=["p"],
                    embedder="hash", faults=faults, seed=seed, concurrency=1, engine_version="0.1.0",
                    prompt_hash="x")


def fault(site: str = "lm.reconcile", kind: str = "garbage", *, write: int = 0, outcome: str = "ok",
          anomalies: list[tuple[str, str]] | None = None, actual: dict | None = None) -> FaultRecord:
    expected = expected_outcome(site, kind).model_dump()
    return FaultRecord(write=write, path="chat", site=site, kind=kind, fired=outcome in ("ok", "wrong"),
                       expected=expected, actual=dict(expected) if actual is None else actual,
                       retry_success=True, outcome=outcome,
                       anomalies=[Anomaly(kind=k, witness=w) for k, w in anomalies or []])


def case(case_id: str, faults: list[FaultRecord] = (), *, dataset: str = "d1", provider: str = "p",
         status: str = "ok", error: str | None = None) -> CaseRun:
    writes = [WriteRecord(index=0, path="chat", request_id=f"{case_id}/w0", success=True, codes={})]
    return CaseRun(case_id=case_id, dataset=dataset, provider=provider, lang="en", tags=["t1", "t2"], status=status,
                   error=error, writes=writes if status == "ok" else [], faults=list(faults))


def known_history() -> list[CaseRun]:
    """3 cases, one fault each; c3's fault left a partial write behind."""
    return [
        case("c1", [fault()]),
        case("c2", [fault("embed", "embed_nan")]),
        case("c3", [fault(outcome="wrong", anomalies=[("PARTIAL_WRITE", "memories: +1 -0 e.g. {'text': 'x'}")])],
             dataset="d2"),
    ]


def metric(frame, name: str, dataset: str = "all", provider: str = "p"):
    rows = frame[(frame.metric == name) & (frame.dataset == dataset) & (frame.provider == provider)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_every_parquet_file_has_its_pinned_columns(tmp_path: Path):
    write_report(tmp_path, manifest(), known_history())
    columns = {
        "cases": ["provider", "system", "dataset", "case_id", "lang", "tags", "status", "error", "n_writes",
                  "n_memories", "n_faults", "n_anomalies", "seconds", "epoch"],
        "faults": ["provider", "system", "dataset", "case_id", "write", "path", "site", "kind", "occurrence", "fired",
                   "seed",
                   "expected_success", "expected_error_code", "expected_agent_error_code",
                   "expected_reconcile_error_code", "actual_success", "actual_error_code", "actual_agent_error_code",
                   "actual_reconcile_error_code", "retry_success", "outcome", "code_ok", "rollback_ok", "retry_ok",
                   "n_anomalies", "error", "wire_log", "seconds", "epoch"],
        "anomalies": ["kind", "provider", "system", "dataset", "case_id", "write", "path", "site", "fault", "seed",
                      "expected", "actual", "witness", "outcome", "epoch"],
        "coverage": ["provider", "system", "site", "kind", "faulted_units", "ok_units", "wrong_units",
                     "indeterminate_units", "infra_error_units", "reached"],
        "metrics": ["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"],
        "case_metrics": ["provider", "dataset", "case_id", "metric", "num", "den", "epoch"],
        "write_failures": ["provider", "system", "dataset", "case_id", "epoch", "write", "path", "injected", "cause",
                           "site", "detail", "reply", "expected_success", "expected_error_code",
                           "expected_agent_error_code", "expected_reconcile_error_code", "actual_success",
                           "actual_error_code", "actual_agent_error_code", "actual_reconcile_error_code", "checked",
                           "retry_success", "n_anomalies", "anomalies"],
    }
    for name, expected in columns.items():
        assert pq.read_schema(tmp_path / f"{name}.parquet").names == expected, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{n}.parquet" for n in columns] + ["summary.md"])


def test_tables_project_each_record(tmp_path: Path):
    write_report(tmp_path, manifest(), known_history())
    cases = pq.read_table(tmp_path / "cases.parquet").to_pylist()
    assert [c["case_id"] for c in cases] == ["c1", "c2", "c3"]
    assert cases[0]["tags"] == ["t1", "t2"] and cases[2]["n_anomalies"] == 1 and cases[0]["n_faults"] == 1
    faults = pq.read_table(tmp_path / "faults.parquet").to_pylist()
    assert [(f["rollback_ok"], f["code_ok"], f["retry_ok"]) for f in faults] == [(True, True, True)] * 2 + [
        (False, True, True)]
    assert faults[0]["expected_reconcile_error_code"] == "JSON_PARSE_FAILED" and faults[0]["seed"] == 7
    anomalies = pq.read_table(tmp_path / "anomalies.parquet").to_pylist()
    assert len(anomalies) == 1
    a = anomalies[0]
    assert (a["kind"], a["case_id"], a["dataset"], a["site"], a["fault"], a["seed"]) == (
        "PARTIAL_WRITE", "c3", "d2", "lm.reconcile", "garbage", 7)
    assert a["witness"].startswith("memories: +1") and '"agent_error_code": "RECONCILE_FAILED"' in a["expected"]


def test_rollback_metrics_on_a_known_history():
    runs = known_history() + [case("c4", [fault(), fault("lm.extract", "timeout", outcome="wrong", anomalies=[
        ("DEGRADED_SUCCESS", "success=true under a fault that must fail; ops=1"),
        ("PARTIAL_WRITE", "memories: +1 -0"), ("DOUBLE_WRITE", "re-sending changed the store")])])]
    frame = metrics_frame(runs, seed=7)
    assert metric(frame, "rollback_correct_rate").value == pytest.approx(3 / 5)
    assert metric(frame, "rollback_correct_rate").n == 5
    assert metric(frame, "error_code_accuracy").value == pytest.approx(4 / 5)
    assert metric(frame, "retry_equivalence_rate").value == pytest.approx(4 / 5)
    assert metric(frame, "degraded_success_count").value == 1
    assert metric(frame, "anomaly_count").value == 4
    assert metric(frame, "faulted_units").value == 5
    assert metric(frame, "indeterminate_units").value == 0
    infra = metric(frame, "infra_error_rate")
    assert (infra.value, infra.n) == (0.0, 4 + 5)
    assert metric(frame, "rollback_correct_rate", "d2").value == 0.0
    assert metric(frame, "rollback_correct_rate", "d1").value == pytest.approx(3 / 4)
    count = metric(frame, "anomaly_count", "d1")
    assert (count.value, count.ci_low, count.ci_high, count.n) == (3, 3, 3, 3)


def test_a_rate_with_no_units_is_nan_with_n_zero_not_zero():
    frame = metrics_frame([case("c1"), case("c2")], seed=0)
    for name in ("rollback_correct_rate", "error_code_accuracy", "retry_equivalence_rate"):
        row = metric(frame, name)
        assert math.isnan(row.value) and math.isnan(row.ci_low) and math.isnan(row.ci_high) and row.n == 0
    assert metric(frame, "faulted_units").value == 0
    assert metric(frame, "infra_error_rate").value == 0.0 and metric(frame, "infra_error_rate").n == 2


def test_infra_errors_and_unfired_faults_are_not_counted_as_checked_units():
    runs = [case("c1", [fault(), fault(outcome="infra_error", actual={"exception": "OSError: disk"}),
                        fault(outcome="indeterminate", anomalies=[("FAULT_NOT_REACHED", "not called")])]),
            case("c2", status="infra_error", error="RuntimeError: provider down\nTraceback ...")]
    frame = metrics_frame(runs, seed=0)
    assert metric(frame, "rollback_correct_rate").value == 1.0 and metric(frame, "rollback_correct_rate").n == 1
    assert metric(frame, "infra_error_rate").value == pytest.approx(2 / 5)
    assert metric(frame, "indeterminate_units").value == 1 and metric(frame, "anomaly_count").value == 0


def test_rate_cis_contain_the_value_and_are_seeded():
    runs = [case(f"c{i}", [fault(), fault(outcome="wrong", anomalies=[("PARTIAL_WRITE", "x")])] if i % 2 else
                 [fault()]) for i in range(8)]
    first, again = metrics_frame(runs, seed=3), metrics_frame(runs, seed=3)
    row = metric(first, "rollback_correct_rate")
    assert row.ci_low < row.value < row.ci_high
    assert (row.ci_low, row.ci_high) == (metric(again, "rollback_correct_rate").ci_low,
                                         metric(again, "rollback_correct_rate").ci_high)


def test_bootstrap_ci_copes_with_degenerate_inputs_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(math.isnan(x) for x in bootstrap_ci([], seed=0))
        assert all(math.isnan(x) for x in bootstrap_ci([0, 0], [0, 0], seed=0))
        assert bootstrap_ci([0.5], seed=0) == (0.5, 0.5, 0.5)
        assert bootstrap_ci([2, 1, 3], [2, 1, 3], seed=0) == (1.0, 1.0, 1.0)
        value, low, high = bootstrap_ci([1, 0, 5, 1], [1, 0, 5, 2], seed=0)  # a case with no units
        assert value == pytest.approx(7 / 8) and low <= value <= high <= 1.0
    assert bootstrap_ci([1, 2, 3, 9], seed=1) == bootstrap_ci([1, 2, 3, 9], seed=1)


def test_paired_delta_uses_only_cases_scored_in_both():
    a = {"c1": 0.5, "c2": 1.0, "c3": float("nan"), "only_a": 0.0}
    b = {"c1": 1.0, "c2": 1.0, "c3": 1.0, "only_b": 1.0}
    delta, low, high, n = paired_bootstrap_delta(a, b, seed=0)
    assert (delta, n) == (0.25, 2) and low <= delta <= high
    assert paired_bootstrap_delta({"c1": 1.0}, {"c2": 1.0}, seed=0)[3] == 0


def test_verdict_is_valid_only_when_every_unit_was_checked_clean():
    assert verdict_of([case("c1", [fault()]), case("c2", [fault("embed", "embed_error")])])[0] == "valid"


def test_verdict_is_invalid_on_any_anomaly_even_with_infra_errors():
    verdict, reasons = verdict_of(known_history() + [case("c9", status="infra_error", error="boom")])
    assert verdict == "invalid"
    assert any("PARTIAL_WRITE" in r for r in reasons) and any("infra error" in r for r in reasons)


def test_an_invalid_verdict_says_which_arm_the_anomalies_are_on_when_arms_sit_side_by_side():
    runs = [case("c1", [fault()], provider="offline"), case("c2", [fault()], provider="offline"),
            case("c1", [fault(outcome="wrong", anomalies=[("PARTIAL_WRITE", "memories: +1 -0"),
                                                           ("DOUBLE_WRITE", "messages: +1 -0")])],
                 provider="mem0/offline")]
    verdict, reasons = verdict_of(runs)
    assert verdict == "invalid"
    assert reasons[0].endswith("; by arm: offline 0 on 0 of 2 faulted units, mem0/offline 2 on 1 of 1 faulted units")
    assert "by arm" not in verdict_of(known_history())[1][0]  # one arm: nothing to tell apart


@pytest.mark.parametrize("runs", [
    [case("c1", [fault()]), case("c2", status="infra_error", error="RuntimeError: down")],
    [case("c1", [fault(), fault(outcome="infra_error", actual={"exception": "OSError: x"})])],
    [case("c1", [fault(), fault(outcome="indeterminate", anomalies=[("FAULT_NOT_REACHED", "not called")])])],
    # a fault that did not fire makes the write succeed: the checker's findings there are no evidence
    [case("c1", [fault(outcome="indeterminate", anomalies=[("DEGRADED_SUCCESS", "success"),
                                                            ("FAULT_NOT_REACHED", "not called")])])],
    [case("c1"), case("c2")],  # --faults none: nothing was checked
    [],
], ids=["case-infra-error", "fault-infra-error", "not-reached", "unfired-findings", "faults-none", "empty"])
def test_verdict_is_unknown_when_something_was_not_checked(runs):
    verdict, reasons = verdict_of(runs)
    assert verdict == "unknown" and reasons


def test_write_report_returns_the_verdict_for_faults_none(tmp_path: Path):
    assert write_report(tmp_path, manifest(faults="none"), [case("c1"), case("c2")]) == "unknown"
    coverage = pq.read_table(tmp_path / "coverage.parquet").to_pylist()
    assert len(coverage) == TOTAL_PAIRS and not any(row["reached"] for row in coverage)
    assert "no faulted unit" in (tmp_path / "summary.md").read_text()


def test_unreached_pairs_are_listed_with_reached_false(tmp_path: Path):
    runs = [case("c1", [fault(), fault("embed", "embed_nan", outcome="indeterminate",
                                       anomalies=[("FAULT_NOT_REACHED", "not called")])])]
    write_report(tmp_path, manifest(), runs)
    coverage = {(r["site"], r["kind"]): r for r in pq.read_table(tmp_path / "coverage.parquet").to_pylist()}
    assert len(coverage) == TOTAL_PAIRS
    assert coverage[("lm.reconcile", "garbage")]["reached"] and coverage[("lm.reconcile", "garbage")]["ok_units"] == 1
    nan = coverage[("embed", "embed_nan")]
    assert (nan["reached"], nan["faulted_units"], nan["indeterminate_units"]) == (False, 0, 1)
    assert sum(r["reached"] for r in coverage.values()) == 1
    summary = (tmp_path / "summary.md").read_text()
    assert f"1/{TOTAL_PAIRS} (site, kind) pairs reached" in summary and "embed×embed_nan" in summary


def test_summary_names_the_verdict_every_anomaly_kind_and_infra_errors(tmp_path: Path):
    runs = known_history() + [
        case("c4", [fault("lm.extract", "timeout", outcome="wrong", anomalies=[("DEGRADED_SUCCESS", "ok=true"),
                                                                             ("RETRY_DIVERGED", "retry failed")])]),
        case("c5", status="infra_error", error="RuntimeError: provider down\nTraceback (most recent call last):"),
    ]
    assert write_report(tmp_path, manifest(), runs) == "invalid"
    summary = (tmp_path / "summary.md").read_text()
    assert "verdict **invalid**" in summary
    for kind in ("PARTIAL_WRITE", "DEGRADED_SUCCESS", "RETRY_DIVERGED"):
        assert f"### {kind} (1)" in summary
    assert "RuntimeError: provider down" in summary and "most recent call" not in summary
    assert "| rollback_correct_rate | 0.500 |" in summary


def test_extra_metrics_are_appended_as_given(tmp_path: Path):
    extra = [{"provider": "p", "dataset": "all", "metric": "attribution_f1", "value": 0.8, "ci_low": 0.7,
              "ci_high": 0.9, "n": 3, "note": "n = cases"}]
    write_report(tmp_path, manifest(), known_history(), extra_metrics=extra)
    rows = pq.read_table(tmp_path / "metrics.parquet").to_pylist()
    assert rows[-1] == extra[0]
    with pytest.raises(ValueError):
        metrics_frame(known_history(), seed=0, extra_metrics=[{"provider": "p", "metric": "x"}])


def test_load_runs_skips_a_torn_last_line_and_keeps_the_last_record(tmp_path: Path):
    first, retried, other = case("c1", status="infra_error", error="x"), case("c1", [fault()]), case("c2")
    lines = [first.model_dump_json(), other.model_dump_json(), retried.model_dump_json()]
    (tmp_path / "units.jsonl").write_text("\n".join(lines) + "\n" + case("c3").model_dump_json()[:40])
    runs = load_runs(tmp_path)
    assert [(r.case_id, r.status) for r in runs] == [("c1", "ok"), ("c2", "ok")]
    torn = lines[0][:50]  # a crash cut this record short; the resumed run started a new line after it
    (tmp_path / "units.jsonl").write_text(torn + "\n" + lines[1] + "\n")
    assert [r.case_id for r in load_runs(tmp_path)] == ["c2"]


def test_load_runs_refuses_a_corrupt_line_in_the_middle(tmp_path: Path):
    corrupt = case("c1").model_dump_json().replace('"case_id":"c1"', '"case_id":42')  # whole, but not a CaseRun
    (tmp_path / "units.jsonl").write_text(corrupt + "\n" + case("c2").model_dump_json() + "\n")
    with pytest.raises(ValueError, match="units.jsonl:1"):
        load_runs(tmp_path)
