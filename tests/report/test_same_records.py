"""`python -m evals.bench.same_records`: the check that a speed change moved no record (issue 35)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from evals.bench.same_records import main


def _run(path, score: float) -> None:
    path.mkdir()
    pd.DataFrame({"gold_text": ["likes tea", "lives in Oslo"], "match_score": [score, None]}).to_parquet(
        path / "facts.parquet")
    pd.DataFrame({"metric": ["fact_recall"], "num": [1.0], "den": [2.0]}).to_parquet(path / "case_metrics.parquet")


def test_two_runs_with_equal_tables_pass(tmp_path, capsys):
    _run(tmp_path / "a", 0.8125)
    _run(tmp_path / "b", 0.8125)
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "facts: equal (2 rows)" in capsys.readouterr().out


def test_a_match_score_one_bit_apart_fails(tmp_path, capsys):
    _run(tmp_path / "a", 0.8125)
    _run(tmp_path / "b", float(np.nextafter(0.8125, 1.0)))  # the last bit: what a batch change would move
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "facts: DIFFERS" in out and "case_metrics: equal" in out


def test_a_table_missing_from_one_side_fails(tmp_path, capsys):
    _run(tmp_path / "a", 0.8125)
    _run(tmp_path / "b", 0.8125)
    (tmp_path / "b" / "case_metrics.parquet").unlink()
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert "case_metrics: DIFFERS: only in" in capsys.readouterr().out


def test_directories_without_tables_fail(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
