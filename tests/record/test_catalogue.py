"""The metric catalogue: every metric a run writes is declared once, and the README's table is current."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline import run_eval
from evals.record.catalogue import (
    HEADLINE,
    METRICS,
    Direction,
    Kind,
    UnknownMetricError,
    format_value,
    metric,
    readme_block,
    undeclared,
)
from evals.report.compare import is_count, lower_is_better
from evals.run.runner import RunConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """The bundled suites, two cases each, with a random fault plan: every family of metric is written."""
    out = tmp_path_factory.mktemp("catalogue") / "run"
    run_eval(RunConfig(limit=2, faults="random:0.5", seed=3, embedder="hash", out=out, progress=False,
                       concurrency=2))
    return out


def test_every_metric_a_run_writes_is_in_the_catalogue(small_run: Path):
    written = set(pd.read_parquet(small_run / "metrics.parquet")["metric"])
    written |= set(pd.read_parquet(small_run / "case_metrics.parquet")["metric"])
    assert undeclared(written) == []
    assert {"tokens_total", "rollback_correct_rate", "proposed_fact_f1_with_errors"} <= written


def test_the_readme_metric_table_is_generated_from_the_catalogue():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_block() in readme, "run `python -m evals.record.catalogue --write README.md`"


def test_an_undeclared_metric_is_named_with_where_to_declare_it():
    assert undeclared({"fact_f1", "made_up_rate"}) == ["made_up_rate"]
    with pytest.raises(UnknownMetricError, match="made_up_rate.*catalogue.py"):
        metric("made_up_rate")


def test_kinds_and_directions_are_declared_not_guessed_from_names():
    assert metric("tokens_total").kind is Kind.TOKENS and is_count("tokens_total")
    assert metric("latency_p95").kind is Kind.DURATION and metric("cost_total").kind is Kind.COST
    assert metric("proposed_third_party_to_user_rate_with_errors").direction is Direction.LOWER
    assert metric("subject_confusion_named_to_named").direction is Direction.HIGHER
    assert lower_is_better("subject_confusion_named_to_user") and not lower_is_better("faulted_units")
    assert not is_count("infra_error_rate")


def test_headline_is_one_ordered_list_of_declared_metrics():
    assert len(HEADLINE) == len(set(HEADLINE)) and all(name in METRICS for name in HEADLINE)
    # a model that breaks its output format shows before its attribution is read
    assert HEADLINE[:2] == ("write_failure_rate", "fact_f1") and "tokens_total" in HEADLINE


def test_values_are_formatted_by_kind():
    assert [format_value("latency_p50", 0.0012), format_value("cost_total", 0.5), format_value("tokens_total", 7.9e6),
            format_value("fact_f1", 0.86), format_value("fact_f1", float("nan"))] == [
        "1.2 ms", "$0.5000", "7900000", "0.860", "n/a"]


def test_the_providers_plot_puts_each_kind_on_its_own_panel(small_run: Path):
    from evals.report.compare import load_run
    from evals.report.plots import _panel_metrics

    panels = _panel_metrics(load_run(small_run).metrics)
    assert "tokens_total" in panels[Kind.TOKENS] and "tokens_total" not in panels[Kind.RATE]
    assert all(metric(name).kind is kind for kind, names in panels.items() for name in names)
    assert list(panels)[0] is Kind.RATE
    assert json.loads((small_run / "manifest.json").read_text())["verdict"] in ("valid", "invalid", "unknown")
