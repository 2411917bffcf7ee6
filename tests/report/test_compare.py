"""compare and show on small hand-written run directories: pairing by case, flips both ways, files out."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.report.compare import Run, compare_runs, load_run, lower_is_better
from evals.run.provenance import Manifest

METRIC_COLUMNS = ["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
CASE_COLUMNS = ["provider", "dataset", "case_id", "metric", "num", "den"]


def write_run(path: Path, case_rows: list[tuple], providers: tuple[str, ...] = ("p",),
              counts: dict[str, float] | None = None, **manifest_fields) -> Path:
    """A finished run directory whose metrics.parquet pools its case rows (num/den) per provider and metric."""
    path.mkdir(parents=True)
    fields = {"embedder": "hash", "finished": time.time(), "verdict": "valid"} | manifest_fields
    manifest = Manifest(run_id=path.name, datasets=["d1"], dataset_hash="h", n_cases=4, providers=list(providers),
                        faults="sweep", seed=1, concurrency=1, engine_version="0.1.0", prompt_hash="x", **fields)
    (path / "manifest.json").write_text(manifest.model_dump_json())
    cases = pd.DataFrame(case_rows, columns=CASE_COLUMNS)
    metrics = []
    for (provider, metric), group in cases.groupby(["provider", "metric"], sort=False):
        value = group["num"].sum() / group["den"].sum()
        metrics.append((provider, "all", metric, value, value - 0.1, value + 0.1, len(group), None))
    for provider in providers:
        metrics += [(provider, "all", name, v, v, v, len(cases), None) for name, v in (counts or {}).items()]
    pd.DataFrame(metrics, columns=METRIC_COLUMNS).to_parquet(path / "metrics.parquet")
    cases.to_parquet(path / "case_metrics.parquet")
    return path


def owner(provider: str, *values: tuple[str, float, float]) -> list[tuple]:
    return [(provider, "d1", cid, "owner_accuracy", num, den) for cid, num, den in values]


RUN_A = owner("p", ("c1", 2, 2), ("c2", 1, 2), ("c3", 2, 2), ("c4", 2, 2)) + [
    ("p", "d1", "c1", "third_party_to_user_rate", 0, 1), ("p", "d1", "c2", "third_party_to_user_rate", 0, 1)]
# c1 right -> wrong, c2 wrong -> right, c3 unchanged, c4 only in A, c5 only in B; rows in another order
RUN_B = owner("p", ("c5", 2, 2), ("c3", 2, 2), ("c2", 2, 2), ("c1", 1, 2)) + [
    ("p", "d1", "c1", "third_party_to_user_rate", 1, 1), ("p", "d1", "c2", "third_party_to_user_rate", 0, 0)]


def test_flips_both_ways_are_listed_and_cases_pair_by_id(tmp_path: Path):
    a, b = load_run(write_run(tmp_path / "a", RUN_A)), load_run(write_run(tmp_path / "b", RUN_B))
    cases = compare_runs([a, b]).cases
    flips = cases[cases["metric"].notna()].sort_values(["metric", "case_id"])
    assert flips[["case_id", "dataset", "metric", "a_value", "b_value", "change"]].values.tolist() == [
        ["c1", "d1", "owner_accuracy", 1.0, 0.5, "right_to_wrong"],
        ["c2", "d1", "owner_accuracy", 0.5, 1.0, "wrong_to_right"],
        ["c1", "d1", "third_party_to_user_rate", 0.0, 1.0, "right_to_wrong"],  # lower is better: right at 0
    ]
    unpaired = cases[cases["metric"].isna()]
    assert unpaired[["case_id", "change"]].values.tolist() == [["c4", "only_a"], ["c5", "only_b"]]


def test_the_delta_is_paired_over_cases_in_both_runs(tmp_path: Path):
    a, b = load_run(write_run(tmp_path / "a", RUN_A)), load_run(write_run(tmp_path / "b", RUN_B))
    deltas = compare_runs([a, b]).deltas
    row = deltas[(deltas["metric"] == "owner_accuracy") & (deltas["dataset"] == "all")].iloc[0]
    assert (row["a"], row["b"]) == ("a/p", "b/p")
    assert row["n_paired"] == 3 and row["delta"] == pytest.approx((-0.5 + 0.5 + 0.0) / 3)
    assert row["a_value"] == pytest.approx(7 / 8) and row["b_value"] == pytest.approx(7 / 8)
    tp = deltas[deltas["metric"] == "third_party_to_user_rate"].iloc[0]
    assert tp["n_paired"] == 1  # c2 has no unit in b (den 0): left out, not counted as 0


def test_counts_without_case_values_compare_their_values(tmp_path: Path):
    a = load_run(write_run(tmp_path / "a", RUN_A, counts={"anomaly_count": 1}))
    b = load_run(write_run(tmp_path / "b", RUN_B, counts={"anomaly_count": 4}))
    row = compare_runs([a, b]).deltas.set_index("metric").loc["anomaly_count"]
    assert row["delta"] == 3 and not row["paired"]


def test_one_run_with_two_providers_pairs_its_providers():
    rows = owner("p", ("c1", 1, 1), ("c2", 1, 1)) + owner("q", ("c2", 0, 1), ("c1", 1, 1))
    cases = pd.DataFrame(rows, columns=CASE_COLUMNS)
    metrics = pd.DataFrame([(p, "all", "owner_accuracy", v, v, v, 2, None) for p, v in (("p", 1.0), ("q", 0.5))],
                           columns=METRIC_COLUMNS)
    comparison = compare_runs([Run(metrics=metrics, case_metrics=cases)])
    assert comparison.labels == [("p", "q")]
    assert comparison.cases[["case_id", "change"]].values.tolist() == [["c2", "right_to_wrong"]]


def test_lower_is_better_is_the_catalogues_direction_for_error_shares_and_off_diagonal_confusion():
    assert [lower_is_better(m) for m in ("third_party_to_user_rate", "cross_subject_merge_applied_rate_with_errors",
                                         "owner_accuracy_with_errors", "error_code_accuracy", "infra_error_rate",
                                         "subject_confusion_named_to_user", "subject_confusion_user_to_user")] == [
        True, True, False, False, True, True, False]


def test_cli_compare_writes_markdown_and_parquet_next_to_the_last_run(tmp_path: Path, capsys):
    a, b = write_run(tmp_path / "a", RUN_A), write_run(tmp_path / "b", RUN_B)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "## a/p → b/p" in out and "### Flipped cases: 2 right → wrong, 1 wrong → right" in out
    assert "| owner_accuracy | 0.875 [0.775, 0.975] n=4 | 0.875 [0.775, 0.975] n=4 | +0.000 |" in out
    assert "Only in a/p (not paired): `c4` (d1)" in out
    assert (b / "compare.md").read_text() == out
    assert set(pd.read_parquet(b / "compare.parquet")["metric"]) == {"owner_accuracy", "third_party_to_user_rate"}
    assert len(pd.read_parquet(b / "compare_cases.parquet")) == 5
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "compare.md").is_file()


def test_cli_compare_says_when_the_runs_used_different_embedders(tmp_path: Path, capsys):
    minilm = write_run(tmp_path / "minilm", RUN_A, embedder="minilm")
    hashed, also_hashed = write_run(tmp_path / "hash", RUN_B), write_run(tmp_path / "hash2", RUN_B)
    assert main(["compare", str(minilm), str(hashed)]) == 0
    assert capsys.readouterr().out.startswith("**The runs used different embedders (minilm, hash)")
    assert main(["compare", str(hashed), str(also_hashed)]) == 0
    assert "embedder" not in capsys.readouterr().out


def test_cli_compare_refuses_a_single_provider_run_or_a_missing_one(tmp_path: Path, capsys):
    a = write_run(tmp_path / "a", RUN_A)
    assert main(["compare", str(a)]) == 2
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_cli_show_prints_the_headline_with_ci_and_n(tmp_path: Path, capsys):
    run = write_run(tmp_path / "r", RUN_A + owner("q", ("c1", 1, 2)), providers=("p", "q"),
                    counts={"anomaly_count": 2, "custom_score": 0.5})
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run r: verdict valid")
    line = next(x for x in out.splitlines() if x.startswith("owner_accuracy"))
    assert "0.875 [0.775, 0.975] n=4" in line and "0.500 [0.400, 0.600] n=1" in line
    assert next(x for x in out.splitlines() if x.startswith("anomaly_count")).split()[1:] == ["2", "2"]
    assert "1 more metrics" in out  # custom_score is not a headline metric
    assert main(["show", str(tmp_path / "missing")]) == 2


def test_an_unfinished_run_is_shown_as_unfinished_and_refused_by_compare(tmp_path: Path, capsys):
    """A run killed while writing its report has its tables but no verdict: nothing to judge it by."""
    done = write_run(tmp_path / "done", RUN_A)
    killed = write_run(tmp_path / "killed", RUN_B, finished=None, verdict=None)
    assert main(["show", str(killed)]) == 0
    assert capsys.readouterr().out.startswith("run killed: UNFINISHED, no verdict")
    for runs in ([done, killed], [killed, done]):
        assert main(["compare", *map(str, runs)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"hymem-eval compare: {killed}: the run has not finished (its manifest has no finished time: " \
            "it was stopped while running or writing its report); continue it with --resume"
    assert not (done / "compare.md").exists()


@pytest.mark.parametrize("command", ["show", "compare", "gate"])
def test_a_metrics_table_with_strings_for_values_is_one_line_and_exit_2(tmp_path: Path, capsys, command):
    """Right column names, wrong types: show and compare raised deep in pandas, and the gate passed."""
    good = write_run(tmp_path / "good", RUN_A)
    bad = write_run(tmp_path / "bad", RUN_A)
    metrics = pd.read_parquet(bad / "metrics.parquet")
    metrics.assign(value=metrics["value"].astype(str)).to_parquet(bad / "metrics.parquet")
    argv = {"show": ["show", str(bad)], "compare": ["compare", str(good), str(bad)],
            "gate": ["gate", "--baseline", str(good), "--current", str(bad)]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()  # pandas writes the strings as string or large_string
    assert err.startswith(f"hymem-eval {command}: {bad / 'metrics.parquet'}: schema mismatch, value is ")
    assert err.endswith("string, declared float64") and len(err.splitlines()) == 1


@pytest.mark.parametrize("damage", ["empty", "repeated"])
def test_a_metrics_table_empty_or_with_a_repeated_row_is_one_line_and_exit_2(tmp_path: Path, capsys, damage):
    """A repeated (provider, dataset, metric) row: the gate read the first and could pass a regression."""
    good = write_run(tmp_path / "good", RUN_A)
    bad = write_run(tmp_path / "bad", RUN_A)
    metrics = pd.read_parquet(bad / "metrics.parquet")
    changed = metrics.iloc[:0] if damage == "empty" else pd.concat([metrics.iloc[:1].assign(value=0.0), metrics])
    changed.to_parquet(bad / "metrics.parquet")
    assert main(["gate", "--baseline", str(good), "--current", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hymem-eval gate: {bad / 'metrics.parquet'}: ") and len(err.splitlines()) == 1
    assert ("no metrics" if damage == "empty" else "2 rows repeat a key") in err
