"""Corpus adapters through the runner: a sampled LoCoMo run finishes and its report counts flagged labels."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline import run_eval
from evals.run.runner import RunConfig

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "locomo" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.exists(), reason="../shared/datasets/locomo is not on this machine")
@pytest.mark.ci_heavy  # a run of 19 LoCoMo sessions each (run by `nox -s heavy`); the adapters' own tests: tests/cases
@pytest.mark.parametrize("gold", ["all", "clean"])
def test_a_locomo_sample_runs_and_the_report_counts_misattributed_labels(tmp_path, gold):
    # the first 19 sessions: the smallest prefix holding two labels the adapter flags (its 17th and 19th sessions)
    outcome = run_eval(RunConfig(datasets=[f"locomo:{LOCOMO}"], limit=19, gold=gold, embedder="hash",
                                 faults="none", out=tmp_path / "run", progress=False))
    cases = pd.read_parquet(outcome.run_dir / "cases.parquet")
    assert len(cases) == 19 and (cases.status == "ok").all()
    metrics = pd.read_parquet(outcome.run_dir / "metrics.parquet").set_index(["dataset", "metric"])["value"]
    assert metrics[("locomo", "gold_labels_misattributed")] > 0
    left_out = metrics[("locomo", "gold_labels_left_out")]
    assert (left_out > 0) if gold == "clean" else (left_out == 0)
    assert ("locomo", "fact_recall") in metrics.index
