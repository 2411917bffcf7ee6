"""PNG plots of a finished run, readable in a pull request: projections of its Parquet tables.

matplotlib is imported here only, lazily, and drives the Agg canvas directly (no pyplot, so
no global backend is switched and no window can open).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from evals.faults.plan import SITES, WIRE_KINDS, wire_kinds_for
from evals.record.catalogue import HEADLINE, Kind, find, format_value, metric
from evals.report.compare import Run, load_run, metric_row

CLASSES = ("user", "named", "assistant")  # subject classes of facts.parquet, in matrix order
STAGES = ("stored", "proposed")
PLOTS_DIR = "plots"
_NA = "#e6e6e6"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _panel_metrics(metrics: pd.DataFrame) -> dict[Kind, list[str]]:
    """The metrics to draw, by kind, that have a value for some provider: every rate (headline first; no
    `_with_errors`, `proposed_` or confusion cells), and the headline counts, durations, tokens and costs."""
    rows = metrics[(metrics["dataset"] == "all") & metrics["value"].notna()]
    present = [m for m in dict.fromkeys(rows["metric"]) if find(m) is not None]
    panels: dict[Kind, list[str]] = {}
    for name in [m for m in HEADLINE if m in present] + [m for m in present if m not in HEADLINE]:
        entry = metric(name)
        if entry.kind is Kind.RATE:
            if name.endswith("_with_errors") or "subject_confusion_" in name or name.startswith("proposed_"):
                continue
        elif entry.headline is None:
            continue
        panels.setdefault(entry.kind, []).append(name)
    return {kind: panels[kind] for kind in Kind if kind in panels}  # rates first, in the catalogue's kind order


_AXIS = {Kind.RATE: ("share, with its 95% CI over cases", 1.0), Kind.COUNT: ("count", 1.0),
         Kind.DURATION: ("milliseconds", 1000.0), Kind.TOKENS: ("tokens", 1.0), Kind.COST: ("USD", 1.0)}


def providers_plot(run: Run, path: Path) -> Path | None:
    """Horizontal bars per metric, one per provider, with the value written out (a 0 bar is invisible
    otherwise); None when nothing was measured. Rates share one axis (with 95% CI whiskers); counts,
    durations, tokens and costs each get their own panel and scale, from the catalogue's kinds, so a
    7.9 M token total never flattens the rates. (↓) marks metrics where lower is better."""
    panels = _panel_metrics(run.metrics)
    if not panels:
        return None
    providers = run.providers
    spread = max(1, len(providers)) ** 0.6
    heights = [0.6 + 0.3 * len(names) * spread for names in panels.values()]
    fig = _figure(9.0, 0.8 + sum(heights))
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)
    for ax, (kind, names) in zip((row[0] for row in axes), panels.items(), strict=True):
        _bars(ax, run, providers, kind, names)
    fig.suptitle(f"{run.label}: metrics per provider (all datasets)")
    if len(providers) > 1:
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(providers), 3), fontsize="small")
    return _save(fig, path)


def _bars(ax: Any, run: Run, providers: list[str], kind: Kind, names: list[str]) -> None:
    """One panel: the metrics of one kind on a shared scale (durations drawn in ms)."""
    label, scale = _AXIS[kind]
    height = 0.8 / len(providers)
    rows = run.metrics[run.metrics["metric"].isin(names) & (run.metrics["dataset"] == "all")]
    tops = [v * scale for v in [*rows["ci_high"], *rows["value"]] if not math.isnan(v)]
    right = max([1.0 if kind is Kind.RATE else 0.0, *tops]) or 1.0
    for i, provider in enumerate(providers):
        ys, values, lows, highs = [], [], [], []
        for j, name in enumerate(names):
            row = metric_row(run, provider, "all", name)
            y = j + (i - (len(providers) - 1) / 2) * height
            if row is None or math.isnan(row["value"]):
                ax.text(0.005 * right, y, "n/a", va="center", fontsize=6, color="#666666")
                continue
            value = row["value"] * scale
            low = row["ci_low"] * scale if not math.isnan(row["ci_low"]) else value
            high = row["ci_high"] * scale if not math.isnan(row["ci_high"]) else value
            ys.append(y)
            values.append(value)
            lows.append(max(value - low, 0.0))
            highs.append(max(high - value, 0.0))
            ax.text(max(high, value) + 0.01 * right, y, format_value(name, row["value"]), va="center", fontsize=6)
        ax.barh(ys, values, height=height * 0.9, xerr=[lows, highs] if kind is Kind.RATE else None, capsize=2,
                label=provider, error_kw={"elinewidth": 1})
    ax.set_yticks(range(len(names)), [f"{n} (↓)" if metric(n).lower_is_better else n for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, right * 1.15)
    ax.set_xlabel(f"{kind}: {label}", fontsize=8)
    ax.grid(axis="x", alpha=0.3)


def _ordered(present: list[str], known: tuple[str, ...]) -> list[str]:
    return [k for k in known if k in present] + sorted(set(present) - set(known))


def confusion_plot(run: Run, path: Path) -> Path | None:
    """Gold subject class × predicted class of matched facts, per provider and stage; None without facts."""
    facts = run.table("facts")
    if facts is None or facts.empty:
        return None
    facts = facts[facts["gold_class"].notna() & facts["pred_class"].notna()]
    if "matched" in facts.columns:
        facts = facts[facts["matched"].fillna(False).astype(bool)]
    if facts.empty:
        return None
    stages = _ordered(list(facts["stage"].unique()), STAGES) if "stage" in facts.columns else [None]
    providers = list(dict.fromkeys(facts["provider"]))
    classes = _ordered(list(set(facts["gold_class"]) | set(facts["pred_class"])), CLASSES)
    fig = _figure(1.2 + 3.4 * len(stages), 0.6 + 3.0 * len(providers))
    axes = fig.subplots(len(providers), len(stages), squeeze=False)
    image = None
    for r, provider in enumerate(providers):
        for c, stage in enumerate(stages):
            ax = axes[r][c]
            mine = facts[facts["provider"] == provider]
            if stage is not None:
                mine = mine[mine["stage"] == stage]
            counts = pd.crosstab(mine["gold_class"], mine["pred_class"]).reindex(index=classes, columns=classes,
                                                                                  fill_value=0)
            totals = counts.sum(axis=1).to_numpy()[:, None]
            shares = counts.to_numpy() / totals.clip(min=1)
            image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
            for i in range(len(classes)):
                for j in range(len(classes)):
                    n = int(counts.iat[i, j])
                    ax.text(j, i, f"{shares[i, j]:.2f}\n({n})" if totals[i, 0] else "—", ha="center", va="center",
                            fontsize=8, color="white" if shares[i, j] > 0.6 else "black")
            ax.set_xticks(range(len(classes)), classes)
            ax.set_yticks(range(len(classes)), classes)
            ax.set_xlabel("predicted subject")
            ax.set_ylabel("gold subject")
            ax.set_title(f"{provider}" + (f" · {stage}" if stage else ""), fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.7, label="share of the gold row")
    fig.suptitle(f"{run.label}: subject confusion of matched facts")
    return _save(fig, path)


def fault_plot(run: Run, path: Path) -> Path | None:
    """Call site × fault kind, coloured by the share of checked units rolled back correctly; None without faults.

    Every known (site, kind) pair gets a cell: k/n when checked, "not fired" when its units were
    indeterminate or infra errors, "not run" when the plan never injected it; blank when it does not apply.
    """
    faults = run.table("faults")
    if faults is None or faults.empty:
        return None
    from matplotlib.patches import Rectangle

    providers = list(dict.fromkeys(faults["provider"]))
    grids = {p: _site_grid(faults, p) for p in providers}  # each engine has its own call sites
    kinds = list(dict.fromkeys(k for grid in grids.values() for applies in grid.values() for k in applies))
    kinds += sorted(set(faults["kind"]) - set(kinds))
    checked = faults[faults["outcome"].isin(["ok", "wrong"]) & faults["rollback_ok"].notna()]
    rows = max(len(g) for g in grids.values())
    fig = _figure(1.8 + 0.6 * len(kinds), 0.8 + (0.42 * rows + 1.1) * len(providers))
    axes = fig.subplots(len(providers), 1, squeeze=False)
    image = None
    for r, provider in enumerate(providers):
        ax = axes[r][0]
        grid = grids[provider]
        sites = list(grid)
        ran = set(zip(*(faults.loc[faults["provider"] == provider, c] for c in ("site", "kind")), strict=True))
        grouped = checked[checked["provider"] == provider].groupby(["site", "kind"])["rollback_ok"].agg(["sum", "count"])
        shares = [[math.nan] * len(kinds) for _ in sites]
        for i, site in enumerate(sites):
            applies = set(grid[site])
            for j, kind in enumerate(kinds):
                if (site, kind) in grouped.index:
                    ok, n = (int(x) for x in grouped.loc[(site, kind)])
                    shares[i][j] = ok / n
                    ax.text(j, i, f"{ok}/{n}", ha="center", va="center", fontsize=7)
                elif kind in applies or (site, kind) in ran:
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color=_NA))
                    label = "not\nfired" if (site, kind) in ran else "not\nrun"
                    ax.text(j, i, label, ha="center", va="center", fontsize=6, color="#666666")
        image = ax.imshow(shares, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(kinds)), kinds, rotation=40, ha="right", fontsize=8)
        ax.set_yticks(range(len(sites)), sites, fontsize=8)
        ax.set_title(provider, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label="correct rollback share (k/n checked units)")
    fig.suptitle(f"{run.label}: rollback under injected faults (blank: kind does not apply)")
    return _save(fig, path)


def _site_grid(faults: Any, provider: str) -> dict[str, list[str]]:
    """site → applicable kinds for the engine behind `provider`, plus any site its faults show."""
    # lazy: only the coverage plot needs the arms' site table (it loads the providers, and dspy)
    from evals.arms.registry import site_kinds

    mine = faults[faults["provider"] == provider]
    system = str(mine["system"].iloc[0]) if "system" in mine.columns and len(mine) else "hymem"
    grid: dict[str, list[str]] = {}
    pairs = site_kinds(system)
    if system == "hymem" and set(mine["kind"]) & set(WIRE_KINDS):  # an HTTP provider: LM faults on the wire
        pairs = [(site, kind) for site in SITES for kind in wire_kinds_for(site)]
    for site, kind in pairs:
        grid.setdefault(site, []).append(kind)
    for site in sorted(set(mine["site"]) - set(grid)):
        grid[site] = []
    return grid


_STABILITY = (("stable-pass", "#4c9a5b"), ("flaky", "#e3a21a"), ("stable-fail", "#c0504d"))


def stability_plot(run: Run, path: Path) -> Path | None:
    """Per provider and headline rate, the share of cases stable-pass, flaky and stable-fail over the run's
    epochs (stability.parquet); None for a run of one epoch."""
    table = run.table("stability")
    if table is None or table.empty or int(table["epochs"].max()) < 2:
        return None
    table = table[table["epochs"] >= 2]
    present = set(table["metric"])
    names = [m for m in HEADLINE if m in present and metric(m).is_rate]
    providers = list(dict.fromkeys(table["provider"]))
    fig = _figure(3.0 + 3.0 * len(providers), 1.2 + 0.25 * len(names))
    axes = fig.subplots(1, len(providers), squeeze=False, sharey=True)[0]
    for ax, provider in zip(axes, providers, strict=True):
        mine = table[table["provider"] == provider]
        shares = (mine.groupby("metric")["stability"].value_counts(normalize=True).unstack(fill_value=0.0)
                  .reindex(index=names, fill_value=0.0))
        left = [0.0] * len(names)
        for cls, colour in _STABILITY:
            values = shares[cls].tolist() if cls in shares.columns else [0.0] * len(names)
            ax.barh(range(len(names)), values, left=left, color=colour, label=cls)
            left = [a + b for a, b in zip(left, values, strict=True)]
        counts = mine.groupby("metric")["case_id"].nunique().reindex(names, fill_value=0)
        ax.set_yticks(range(len(names)), [f"{m} (n={int(counts[m])})" for m in names], fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of cases")
        ax.set_title(provider, fontsize=9)
    axes[0].invert_yaxis()  # shared by every panel: the headline order, top down
    axes[0].legend(loc="lower left", fontsize=7, bbox_to_anchor=(0, 1.02), ncols=3, frameon=False)
    epochs = int(table["epochs"].max())
    fig.suptitle(f"{run.label}: per-case stability over {epochs} epochs (flaky: right in some, wrong in others)",
                 fontsize=10)
    return _save(fig, path)


def write_plots(run_dir: Path) -> list[Path]:
    """Write plots/providers.png, plots/subject_confusion.png (needs facts.parquet), plots/fault_matrix.png
    (needs faults.parquet) and plots/stability.png (runs of several epochs) into the run directory; return the
    files written."""
    run = load_run(run_dir, allow_unfinished=True)  # the report draws them before it marks the run finished
    out = Path(run_dir) / PLOTS_DIR
    made = [providers_plot(run, out / "providers.png"), confusion_plot(run, out / "subject_confusion.png"),
            fault_plot(run, out / "fault_matrix.png"), stability_plot(run, out / "stability.png")]
    return [p for p in made if p is not None]


__all__ = ["confusion_plot", "fault_plot", "providers_plot", "stability_plot", "write_plots"]
