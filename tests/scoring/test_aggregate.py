"""The one aggregator (per-case tallies -> metrics rows) and the one number formatter every report prints with."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd

from evals.core.stats import bootstrap_ci
from evals.record.catalogue import format_ci, format_value
from evals.record.tally import CaseTally
from evals.report.compare import compare_runs, comparison_markdown, load_run, show
from evals.run.provenance import Manifest
from evals.scoring.aggregate import aggregate, mean_count, percentile, rate, sample_sum


def tally(case: str, metric: str, num: float, den: float = 1.0, *, dataset: str = "d1", provider: str = "p",
          epoch: int = 0, **extra) -> CaseTally:
    return CaseTally(provider=provider, dataset=dataset, case_id=case, metric=metric, num=num, den=den, epoch=epoch,
                     **extra)


def rows_by(rows) -> dict[tuple[str, str, str], object]:
    return {(r.provider, r.dataset, r.metric): r for r in rows}


# ---- grouping ---------------------------------------------------------------------------------------------


def test_each_provider_gets_all_first_then_its_datasets_sorted_and_all_pools_every_case():
    tallies = [tally("c1", "fact_recall", 1, 2, dataset="zeta", provider="q"),
               tally("c1", "fact_recall", 2, 2, dataset="d2"), tally("c2", "fact_recall", 0, 2, dataset="d1"),
               tally("c3", "fact_recall", 1, 1, dataset="d1")]
    rows = aggregate(tallies, seed=0)
    assert [(r.provider, r.dataset) for r in rows] == [("q", "all"), ("q", "zeta"), ("p", "all"), ("p", "d1"),
                                                       ("p", "d2")]
    by = rows_by(rows)
    assert by[("p", "all", "fact_recall")].value == 3 / 5 and by[("p", "all", "fact_recall")].n == 3
    assert by[("p", "d1", "fact_recall")].value == 1 / 3 and by[("p", "d2", "fact_recall")].value == 1.0
    assert by[("q", "all", "fact_recall")].value == 0.5
    assert by[("p", "all", "fact_recall")].note == "n = cases with gold facts"  # the catalogue's note


def test_a_metric_twin_follows_its_metric_whatever_case_came_first():
    tallies = [tally("c1", "fact_f1_with_errors", 0, 2), tally("c1", "fact_recall_with_errors", 0, 1),
               tally("c2", "fact_f1", 2, 2), tally("c2", "fact_f1_with_errors", 2, 2),
               tally("c2", "fact_recall", 1, 1), tally("c2", "fact_recall_with_errors", 1, 1)]
    names = [r.metric for r in aggregate(tallies, seed=0) if r.dataset == "all"]
    assert names == ["fact_f1", "fact_f1_with_errors", "fact_recall", "fact_recall_with_errors"]


# ---- the bootstrap ----------------------------------------------------------------------------------------


def test_the_ci_is_the_case_bootstrap_with_epochs_pooled_per_case():
    tallies = [tally("c1", "owner_accuracy", 1, 2, epoch=0), tally("c1", "owner_accuracy", 2, 2, epoch=1),
               tally("c2", "owner_accuracy", 0, 3, epoch=0), tally("c2", "owner_accuracy", 1, 3, epoch=1),
               tally("c3", "owner_accuracy", 4, 4, epoch=0), tally("c3", "owner_accuracy", 3, 4, epoch=1)]
    row = rows_by(aggregate(tallies, seed=11))[("p", "all", "owner_accuracy")]
    # each case is one cluster: its epochs summed, then whole cases resampled
    assert (row.value, row.ci_low, row.ci_high) == bootstrap_ci([3, 1, 7], [4, 6, 8], seed=11)
    assert row.ci_low < row.value < row.ci_high and row.n == 3  # n counts cases, not units
    assert aggregate(tallies, seed=11) == aggregate(tallies, seed=11)  # seeded


def test_fault_rates_count_units_per_epoch():
    tallies = [tally("c1", "rollback_correct_rate", 2, 2, epoch=0), tally("c1", "rollback_correct_rate", 1, 2, epoch=1),
               tally("c2", "rollback_correct_rate", 4, 4, epoch=0), tally("c2", "rollback_correct_rate", 4, 4, epoch=1)]
    row = aggregate(tallies, seed=0, reducers={"rollback_correct_rate": rate(n="units")})[0]
    assert row.value == 11 / 12 and row.n == 6  # 12 faulted units over 2 epochs


# ---- a metric no case measured ------------------------------------------------------------------------------


def test_a_metric_with_no_cases_has_no_row_or_a_nan_row_as_its_reducer_says():
    tallies = [tally("c1", "absent_violation_rate", 0, 0), tally("c1", "rollback_correct_rate", 0, 0)]
    rows = aggregate(tallies, seed=0,
                     reducers={"absent_violation_rate": rate(), "rollback_correct_rate": rate("units")})
    assert {r.metric for r in rows} == {"rollback_correct_rate"}  # measured, found nothing: a NaN row, n = 0
    (row, *_) = rows
    assert math.isnan(row.value) and math.isnan(row.ci_low) and row.n == 0
    assert aggregate([], seed=0) == []


def test_counts_are_per_epoch_and_sums_of_nothing_are_nan_or_zero_as_declared():
    tallies = [tally("c1", "anomaly_count", 1, epoch=0), tally("c1", "anomaly_count", 0, epoch=1),
               tally("c1", "cost_total", 0, samples=()), tally("c1", "tokens_total", 0, samples=()),
               tally("c1", "latency_p50", 0, samples=(0.1, 0.3, 0.2))]
    by = rows_by(aggregate(tallies, seed=0, reducers={
        "anomaly_count": mean_count(), "cost_total": sample_sum(empty=math.nan), "tokens_total": sample_sum(),
        "latency_p50": percentile(50)}))
    assert by[("p", "all", "anomaly_count")].value == 0.5 and by[("p", "all", "anomaly_count")].n == 1
    assert math.isnan(by[("p", "all", "cost_total")].value) and by[("p", "all", "cost_total")].n == 0
    assert by[("p", "all", "tokens_total")].value == 0.0
    assert by[("p", "all", "latency_p50")].value == 0.2 and by[("p", "all", "latency_p50")].n == 3


def test_ops_a_scorer_skipped_are_said_in_the_note():
    tallies = [tally("c1", "cross_subject_merge_applied_rate", 1, 2, skipped=2, skip_reason="op(s) skipped: why"),
               tally("c2", "cross_subject_merge_applied_rate", 0, 0, skipped=1, skip_reason="op(s) skipped: why")]
    (row, *_) = aggregate(tallies, seed=0)
    assert row.note == "3 op(s) skipped: why" and row.n == 1


# ---- the formatter ----------------------------------------------------------------------------------------


def test_a_rate_prints_to_three_places_and_a_tiny_difference_never_as_zero():
    assert format_value("fact_f1", 0.85672) == "0.857"
    assert format_value("fact_f1", 0.012, signed=True) == "+0.012"
    assert format_value("infra_error_rate", 0.0004, signed=True) == "+0.0004"
    assert format_ci("fact_f1", 0.5, 0.25, 0.75, 12) == "0.500 [0.250, 0.750] n=12"
    assert format_value("fact_f1", float("nan")) == "n/a"


def test_a_count_prints_whole_unless_a_mean_over_epochs():
    assert format_value("anomaly_count", 3.0) == "3"
    assert format_value("anomaly_count", 1 / 3) == "0.33"
    assert format_value("anomaly_count", 2.0, signed=True) == "+2"
    assert format_ci("anomaly_count", 3.0, 3.0, 3.0, 9) == "3"  # no interval for a count


def test_a_duration_prints_in_ms():
    assert format_value("latency_p95", 0.1234) == "123.4 ms"
    assert format_value("latency_p95", -0.0223, signed=True) == "-22.3 ms"


def test_a_cost_prints_in_usd():
    assert format_value("cost_total", 0.5) == "$0.5000"
    assert format_value("cost_total", 0.0012, signed=True) == "+$0.0012"
    assert format_value("cost_total", -0.0012, signed=True) == "-$0.0012"


def _run(path: Path, latency: float) -> Path:
    path.mkdir(parents=True)
    manifest = Manifest(run_id=path.name, datasets=["d1"], dataset_hash="h", n_cases=1, providers=["p"],
                        faults="none", seed=1, concurrency=1, engine_version="0.1.0", prompt_hash="x",
                        embedder="hash", finished=time.time(), verdict="valid")
    (path / "manifest.json").write_text(manifest.model_dump_json())
    pd.DataFrame([("p", "all", "latency_p50", latency, latency, latency, 4, None)],
                 columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame([("p", "d1", "c1", "fact_f1", 1.0, 1.0)],
                 columns=["provider", "dataset", "case_id", "metric", "num", "den"]).to_parquet(
        path / "case_metrics.parquet")
    return path


def test_compare_and_show_print_a_duration_as_summary_does(tmp_path: Path):
    a, b = load_run(_run(tmp_path / "a", 0.1234)), load_run(_run(tmp_path / "b", 0.1))
    markdown = comparison_markdown(compare_runs([a, b]))
    assert "| latency_p50 | 123.4 ms | 100.0 ms | -23.4 ms |" in markdown
    line = next(x for x in show(tmp_path / "a").splitlines() if x.startswith("latency_p50"))
    assert line.split(maxsplit=1)[1].strip() == format_value("latency_p50", 0.1234) == "123.4 ms"
