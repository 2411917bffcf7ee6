"""Plots of a small hand-written run directory: the files exist, are PNGs and open as images."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from PIL import Image

from evals.cli.main import main
from evals.report.plots import write_plots
from evals.run.provenance import Manifest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(path: Path, *, facts: bool = True) -> Path:
    path.mkdir(parents=True)
    manifest = Manifest(run_id="r", datasets=["d"], dataset_hash="h", n_cases=2, providers=["p", "q"],
                        embedder="hash", faults="sweep", seed=0, concurrency=1, engine_version="0.1.0",
                        prompt_hash="x", verdict="invalid")
    (path / "manifest.json").write_text(manifest.model_dump_json())
    metrics = [(p, "all", m, v, v - 0.1, min(v + 0.05, 1.0), 10, None) for p in ("p", "q")
               for m, v in (("rollback_correct_rate", 0.9), ("owner_accuracy", 0.7), ("fact_f1", float("nan")))]
    metrics += [("p", "all", "anomaly_count", 3.0, 3.0, 3.0, 2, None)]
    pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame([("p", "d", "c1", "owner_accuracy", 1.0, 1.0)],
                 columns=["provider", "dataset", "case_id", "metric", "num", "den"]).to_parquet(
        path / "case_metrics.parquet")
    faults = [("p", "lm.reconcile", "garbage", "ok", True), ("p", "lm.reconcile", "garbage", "wrong", False),
              ("p", "embed", "embed_nan", "ok", True), ("q", "store.commit", "store_error", "indeterminate", None)]
    pd.DataFrame(faults, columns=["provider", "site", "kind", "outcome", "rollback_ok"]).to_parquet(
        path / "faults.parquet")
    if facts:
        rows = [(p, stage, g, pr, True) for p in ("p", "q") for stage in ("stored", "proposed")
                for g, pr in (("user", "user"), ("named", "user"), ("named", "named"), ("assistant", "assistant"))]
        rows += [("p", "stored", "user", None, False)]  # a missed gold fact is not in the matrix
        pd.DataFrame(rows, columns=["provider", "stage", "gold_class", "pred_class", "matched"]).to_parquet(
            path / "facts.parquet")
    return path


def assert_png(path: Path) -> None:
    assert path.stat().st_size > 0 and path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100


def test_every_plot_is_written_as_a_png(tmp_path: Path):
    run = write_run(tmp_path / "run")
    paths = write_plots(run)
    assert [p.relative_to(run).as_posix() for p in paths] == [
        "plots/providers.png", "plots/subject_confusion.png", "plots/fault_matrix.png"]
    for path in paths:
        assert_png(path)


def test_the_confusion_plot_is_skipped_without_facts(tmp_path: Path):
    run = write_run(tmp_path / "run", facts=False)
    assert [p.name for p in write_plots(run)] == ["providers.png", "fault_matrix.png"]
    assert not (run / "plots" / "subject_confusion.png").exists()


def test_cli_plots_lists_the_files(tmp_path: Path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["plots", str(run)]) == 0
    assert capsys.readouterr().out.split() == [str(run / "plots" / n) for n in
                                               ("providers.png", "subject_confusion.png", "fault_matrix.png")]
    assert main(["plots", str(tmp_path / "missing")]) == 2
