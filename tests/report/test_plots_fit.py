"""Every plot keeps its text inside the figure and its panels apart, with short and long provider and run names,
one provider or many: what a reader of a PR's plots relies on now that each figure is laid out from its measured
labels (no layout engine re-measures every artist on each draw)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib.figure
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.transforms import Bbox

from evals.report.plots import write_plots
from evals.run.provenance import Manifest

LONG = ["offline", "oracle:flip_owner=0.3,drop=0.2,swap_subject=0.1,seed=7",
        "qwen2.5-7b-instruct-q4_k_m@http://127.0.0.1:18080/v1/a/very/long/path/to/the/endpoint",
        "a_provider_name_from_a_providers_file_that_nobody_thought_to_keep_short_at_all", "x"]
LONG_RUN = "2026-12-06T20-34-22_" + "a-run-label-long-enough-to-run-off-any-of-the-figures-if-it-were-not-wrapped" * 2
SITES = ("lm.extract", "lm.reconcile", "embed", "store.commit", "a.custom_call_site_with_a_rather_long_name")


def write_run(path: Path, run_id: str, providers: list[str]) -> Path:
    path.mkdir(parents=True)
    manifest = Manifest(run_id=run_id, datasets=["d"], dataset_hash="h", n_cases=2, providers=providers,
                        embedder="hash", faults="sweep", seed=0, concurrency=1, engine_version="0.1.0",
                        prompt_hash="x", verdict="invalid", epochs=2)
    (path / "manifest.json").write_text(manifest.model_dump_json())
    values = {"rollback_correct_rate": 0.9, "owner_accuracy": 0.7, "fact_f1": float("nan"),
              "cross_subject_merge_proposed_rate": 0.25, "anomaly_count": 3.0, "tokens_total": 12_188_379.0,
              "cost_total": 0.0}
    metrics = [(p, "all", m, v, v - 0.1, v + 0.05, 10, None) for p in providers for m, v in values.items()]
    pd.DataFrame(metrics, columns=["provider", "dataset", "metric", "value", "ci_low", "ci_high", "n", "note"]
                 ).to_parquet(path / "metrics.parquet")
    pd.DataFrame([(providers[0], "d", "c1", "owner_accuracy", 1.0, 1.0)],
                 columns=["provider", "dataset", "case_id", "metric", "num", "den"]).to_parquet(
        path / "case_metrics.parquet")
    faults = [(p, site, kind, outcome, ok) for p in providers for site, kind, outcome, ok in (
        ("lm.extract", "garbage", "ok", True), ("lm.reconcile", "garbage", "wrong", False),
        ("embed", "embed_nan", "ok", True), ("store.commit", "store_error", "indeterminate", None),
        (SITES[-1], "a_custom_fault_kind_with_a_long_name", "ok", True))]
    pd.DataFrame(faults, columns=["provider", "site", "kind", "outcome", "rollback_ok"]).to_parquet(
        path / "faults.parquet")
    facts = [(p, stage, g, pr, True) for p in providers for stage in ("stored", "proposed")
             for g, pr in (("user", "user"), ("named", "user"), ("assistant", "assistant"))]
    pd.DataFrame(facts, columns=["provider", "stage", "gold_class", "pred_class", "matched"]).to_parquet(
        path / "facts.parquet")
    stability = [(p, "d", f"c{i}", m, 2, s) for p in providers for i, s in enumerate(("stable-pass", "flaky"))
                 for m in ("rollback_correct_rate", "owner_accuracy", "cross_subject_merge_proposed_rate")]
    pd.DataFrame(stability, columns=["provider", "dataset", "case_id", "metric", "epochs", "stability"]).to_parquet(
        path / "stability.parquet")
    return path


def drawn_figures(run: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, matplotlib.figure.Figure]:
    """The figures `write_plots` saves, by file name, kept for a look at where their text landed."""
    figures: dict[str, matplotlib.figure.Figure] = {}
    save = matplotlib.figure.Figure.savefig

    def keep(fig: matplotlib.figure.Figure, path, *args, **kwargs):
        figures[Path(path).name] = fig
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    assert [p.name for p in write_plots(run)] == [
        "providers.png", "subject_confusion.png", "fault_matrix.png", "stability.png"]
    return figures


@pytest.fixture(scope="module")
def figures_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, list[str]], dict[str, matplotlib.figure.Figure]]:
    """The figures of a run with these names, each drawn once for the module: the tests only read them (the long
    names with many providers are read by two)."""
    drawn: dict[tuple[str, tuple[str, ...]], dict[str, matplotlib.figure.Figure]] = {}

    def figures(run_id: str, providers: list[str]) -> dict[str, matplotlib.figure.Figure]:
        key = (run_id, tuple(providers))
        if key not in drawn:
            with pytest.MonkeyPatch.context() as patch:
                drawn[key] = drawn_figures(write_run(tmp_path_factory.mktemp("run") / "run", run_id, providers), patch)
        return drawn[key]

    return figures


def overlap(a: Bbox, b: Bbox) -> float:
    """Shared area in square pixels (0 when the boxes only touch)."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def pieces(ax, renderer) -> list[Bbox]:
    """Where an axes draws: its plotting area, each axis with its tick labels and label, and its title."""
    boxes = [ax.bbox, ax.xaxis.get_tightbbox(renderer), ax.yaxis.get_tightbbox(renderer)]
    if ax.get_title():
        boxes.append(ax.title.get_window_extent(renderer))
    return [box for box in boxes if box is not None]


@pytest.mark.parametrize(("run_id", "providers"), [("r", ["p"]), ("r", ["p", "q"]), (LONG_RUN, LONG[:1]),
                                                    (LONG_RUN, LONG)], ids=["one", "two", "long-one", "long-many"])
def test_every_label_stays_inside_its_figure_and_clear_of_other_panels(figures_of, run_id, providers):
    figures = figures_of(run_id, providers)
    for name, fig in figures.items():
        assert isinstance(fig.canvas, FigureCanvasAgg)  # drawn by Agg, as the PNG is
        renderer = fig.canvas.get_renderer()
        inside = fig.get_tightbbox(renderer)  # inches: every drawn artist, tick labels and titles included
        width, height = fig.get_size_inches()
        assert inside.x0 >= 0 and inside.y0 >= 0 and inside.x1 <= width and inside.y1 <= height, (name, inside)
        panels = [pieces(ax, renderer) for ax in fig.axes]
        loose = [t.get_window_extent(renderer) for t in fig.texts] + [g.get_window_extent(renderer)
                                                                      for g in fig.legends]
        for i, mine in enumerate(panels):
            others = [box for theirs in panels[i + 1:] for box in theirs] + loose
            for box in mine:
                for other in others:
                    assert overlap(box, other) < 1.0, (name, box, other)
        for i, box in enumerate(loose):
            for other in loose[i + 1:]:
                assert overlap(box, other) < 1.0, (name, box, other)


def test_a_long_provider_name_is_wrapped_not_cut(figures_of):
    figures = figures_of(LONG_RUN, LONG)
    titles = [ax.get_title() for ax in figures["fault_matrix.png"].axes if ax.get_title()]
    assert [t.replace("\n", "") for t in titles] == LONG  # every character kept, in order
    assert any("\n" in t for t in titles)
