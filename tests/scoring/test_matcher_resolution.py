"""compare and the gate say how much of a difference in matched-fact metrics the matcher's own error could explain."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.run.provenance import Manifest
from evals.scoring.matcher_resolution import error_rates, explainable_gap, within

CARD = {"spec": "semantic", "fingerprint": "semantic:x", "heldout_agreement": 0.91, "ci_low": 0.89, "ci_high": 0.93,
        "n": 1288, "groups": {"group:same": 0.90, "group:different": 0.93}}


def test_a_perfect_matcher_explains_nothing_and_an_unmeasured_one_is_unknown():
    assert explainable_gap("fact_recall", 0.8, 0.78, (0.0, 0.0)) == 0.0
    assert error_rates([{"groups": {}}]) is None and explainable_gap("fact_recall", 0.8, 0.7, None) is None
    assert explainable_gap("owner_accuracy", 0.8, 0.7, (0.1, 0.07)) is None  # not decided fact by fact


def test_the_worse_card_sets_the_error_rates():
    worse = {"groups": {"group:same": 0.80, "group:different": 0.97}}
    assert error_rates([CARD, worse]) == pytest.approx((0.20, 0.07))


def test_the_bound_covers_the_gap_the_matchers_error_makes_between_equal_providers():
    """Two providers with the same true recall; the matcher's error falls on one side each (it accepts A's
    near-misses and misses B's paraphrases), at the card's rates. The measured gap stays within the bound computed
    from the measured values, and a real difference far beyond the error is resolved."""
    rng = random.Random(7)
    miss, accept = 0.10, 0.07
    for truth in (0.3, 0.6, 0.9):
        n = 20_000
        stated = [rng.random() < truth for _ in range(n)]
        a = sum(1 if s else rng.random() < accept for s in stated) / n  # A: near-misses accepted
        b = sum(rng.random() >= miss if s else 0 for s in stated) / n  # B: paraphrases missed
        gap = explainable_gap("fact_recall", a, b, (miss, accept))
        assert gap is not None and abs(a - b) <= gap + 0.01
        assert within(a - b, gap + 0.01)
    assert not within(0.5, explainable_gap("fact_f1", 0.9, 0.4, (miss, accept)))


def _run(path: Path, recall: float, f1: float) -> Path:
    """A finished run directory with fact_recall and fact_f1 over 20 cases and a matcher card."""
    path.mkdir(parents=True)
    manifest = Manifest(run_id=path.name, datasets=["d"], dataset_hash="h", n_cases=20, providers=["p"], faults="none",
                        seed=1, concurrency=1, engine_version="0.1.0", prompt_hash="x", embedder="hash",
                        finished=time.time(), verdict="valid", matcher_spec="semantic", matcher=CARD)
    (path / "manifest.json").write_text(manifest.model_dump_json())
    cases, metrics = [], []
    for metric, value in (("fact_recall", recall), ("fact_f1", f1)):
        cases += [("p", "d", f"c{i:02d}", metric, value * 10, 10.0) for i in range(20)]
        metrics.append(("p", "all", metric, value, value - 0.05, value + 0.05, 20, None))
    pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame(cases, columns=["provider", "dataset", "case_id", "metric", "num", "den"]
                 ).to_parquet(path / "case_metrics.parquet")
    return path


def test_compare_prints_the_matchers_bound_next_to_each_matched_metric(tmp_path: Path):
    a = _run(tmp_path / "a", recall=0.80, f1=0.80)
    b = _run(tmp_path / "b", recall=0.82, f1=0.40)
    assert main(["compare", str(a), str(b)]) == 0
    text = (b / "compare.md").read_text()
    assert "matcher could explain" in text and "cannot resolve a gap" in text
    recall = next(line for line in text.splitlines() if line.startswith("| fact_recall"))
    f1 = next(line for line in text.splitlines() if line.startswith("| fact_f1"))
    bound = explainable_gap("fact_recall", 0.80, 0.82, error_rates([CARD]))
    assert f"±{bound:.3f} (Δ within: not resolved)" in recall  # a 0.02 gap is not a win
    assert "±" in f1 and "not resolved" not in f1  # a 0.40 gap is


def test_the_gate_says_whether_a_matched_metrics_shift_is_beyond_the_matchers_error(tmp_path: Path):
    base = _run(tmp_path / "base", recall=0.80, f1=0.80)
    cur = _run(tmp_path / "cur", recall=0.79, f1=0.79)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nmetric = "fact_f1"\nmax_drop = 0.05\n')
    assert main(["gate", "--baseline", str(base), "--current", str(cur), "--rules", str(rules)]) == 0
    summary = (cur / "gate.md").read_text()
    assert "the matcher's error could explain a gap up to" in summary and "within it: not resolved" in summary
    assert "cannot resolve a gap in fact_recall" in summary
