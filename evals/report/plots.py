"""PNG plots of a finished run, readable in a pull request: projections of its Parquet tables.

matplotlib is imported here only, lazily, and drives the Agg canvas directly (no pyplot, so
no global backend is switched and no window can open). Each figure is laid out once from its measured labels
(`plot_layout`), not by a layout engine on every draw: that engine was most of a run's plot time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from evals.faults.plan import SITES, WIRE_KINDS, wire_kinds_for
from evals.record.catalogue import HEADLINE, Kind, find, format_value, metric
from evals.report.compare import Run, load_run, metric_row
from evals.report.plot_layout import (
    LABEL_PAD,
    PAD,
    PNG_COMPRESSION,
    TICK,
    TITLE_PAD,
    Sheet,
    line_height,
    lines,
    rotated_size,
    text_size,
    wrap,
)

CLASSES = ("user", "named", "assistant")  # subject classes of facts.parquet, in matrix order
STAGES = ("stored", "proposed")
PLOTS_DIR = "plots"
_NA = "#e6e6e6"


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


def _save(sheet: Sheet, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.figure.savefig(path, format="png", pil_kwargs={"compress_level": PNG_COMPRESSION})
    return path


_AXIS = {Kind.RATE: ("share, with its 95% CI over cases", 1.0), Kind.COUNT: ("count", 1.0),
         Kind.DURATION: ("milliseconds", 1000.0), Kind.TOKENS: ("tokens", 1.0), Kind.COST: ("USD", 1.0)}
_SMALL = 8  # points: the bar panels' tick labels, axis labels, notes and legend
_SUPTITLE = 12


def _unmeasured(rows: pd.DataFrame, names: list[str]) -> bool:
    """True when no provider has a nonzero value for any of `names` (a panel of empty bars)."""
    values = rows.loc[rows["metric"].isin(names), "value"]
    return not (values.notna() & (values != 0)).any()


def _zero_note(rows: pd.DataFrame, names: list[str]) -> str:
    """The line that stands for a panel of zeros: each metric's zero as the reports print it."""
    values = rows.loc[rows["metric"].isin(names), "value"]
    some = " that measured it" if values.isna().any() else ""
    return f"{', '.join(f'{n} = {format_value(n, 0.0)}' for n in names)} for every provider{some} (no panel)"


def providers_plot(run: Run, path: Path) -> Path | None:
    """Horizontal bars per metric, one per provider, with the value written out (a 0 bar is invisible
    otherwise); None when nothing was measured. Rates share one axis (with 95% CI whiskers); counts,
    durations, tokens and costs each get their own panel and scale, from the catalogue's kinds, so a
    7.9 M token total never flattens the rates. (↓) marks metrics where lower is better. A panel whose
    every value is 0 or n/a (the offline model's cost) is a line of text under the panels instead."""
    panels = _panel_metrics(run.metrics)
    if not panels:
        return None
    providers = run.providers
    rows = run.metrics[run.metrics["dataset"] == "all"]
    empty = [names for kind, names in panels.items() if kind is not Kind.RATE and _unmeasured(rows, names)]
    drawn = {kind: names for kind, names in panels.items() if names not in empty} or panels
    empty = [names for names in empty if names not in drawn.values()]
    labels = {n: f"{n} (↓)" if metric(n).lower_is_better else n for names in drawn.values() for n in names}
    width = 9.0
    left = PAD + max(text_size(label, _SMALL)[0] for label in labels.values()) + TICK + 0.05
    right = PAD + 0.35  # the last x tick label's half
    title = wrap(f"{run.label}: metrics per provider (all datasets)", width - 2 * PAD, _SUPTITLE)
    notes = [wrap(_zero_note(rows, names), width - 2 * PAD, _SMALL) for names in empty]
    legend = _legend_layout(providers, width - 2 * PAD) if len(providers) > 1 else None
    spread = max(1, len(providers)) ** 0.6
    heights = [0.2 + 0.3 * len(names) * spread for names in drawn.values()]
    below = TICK + line_height(_SMALL) + LABEL_PAD + line_height(_SMALL) + 0.3  # tick labels, axis label, gap
    top = PAD + line_height(_SUPTITLE, lines(title)) + 0.15
    notes_height = sum(line_height(_SMALL, lines(note)) + 0.05 for note in notes)
    height = top + sum(heights) + below * len(heights) + notes_height + (legend[2] if legend else 0.0) + PAD
    sheet = Sheet(width, height)
    sheet.text(width / 2, PAD, title, ha="center", fontsize=_SUPTITLE)
    y = top
    handles: list[Any] = []
    for h, (kind, names) in zip(heights, drawn.items(), strict=True):
        ax = sheet.axes(left, y, width - left - right, h)
        handles = _bars(ax, run, providers, kind, names, labels)
        y += h + below
    y -= 0.2
    for note in notes:
        sheet.text(PAD, y, note, fontsize=_SMALL, color="#444444")
        y += line_height(_SMALL, lines(note)) + 0.05
    if legend is not None:
        names, ncols, _ = legend
        sheet.figure.legend(handles, names, loc="upper center", bbox_to_anchor=sheet.point(width / 2, y),
                            ncols=ncols, fontsize=_SMALL)
    return _save(sheet, path)


def _legend_layout(providers: list[str], width: float) -> tuple[list[str], int, float]:
    """The legend's labels (wrapped when one would not fit), its columns (up to 3, as many as fit) and its
    height in inches."""
    em = _SMALL / 72
    handle = (2.0 + 0.8) * em  # the patch and its pad before the label
    frame = 2 * 0.4 * em + 0.05  # border pad and frame
    labels = [wrap(p, width - handle - frame, _SMALL) for p in providers]
    entries = sorted((handle + text_size(label, _SMALL)[0] for label in labels), reverse=True)
    ncols = 1
    while ncols < min(len(labels), 3) and sum(entries[:ncols + 1]) + 2.0 * em * ncols + frame <= width:
        ncols += 1
    rows = math.ceil(len(labels) / ncols)
    tallest = max(lines(label) for label in labels)
    return labels, ncols, rows * (line_height(_SMALL, tallest) + 0.5 * em) + frame


def _bars(ax: Any, run: Run, providers: list[str], kind: Kind, names: list[str], labels: dict[str, str]) -> list[Any]:
    """One panel: the metrics of one kind on a shared scale (durations drawn in ms); returns the legend handles."""
    from matplotlib.ticker import EngFormatter

    label, scale = _AXIS[kind]
    height = 0.8 / len(providers)
    rows = run.metrics[run.metrics["metric"].isin(names) & (run.metrics["dataset"] == "all")]
    tops = [v * scale for v in [*rows["ci_high"], *rows["value"]] if not math.isnan(v)]
    right = max([1.0 if kind is Kind.RATE else 0.0, *tops]) or 1.0
    handles = []
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
        handles.append(ax.barh(ys, values, height=height * 0.9, xerr=[lows, highs] if kind is Kind.RATE else None,
                               capsize=2, label=provider, error_kw={"elinewidth": 1}))
    ax.set_yticks(range(len(names)), [labels[n] for n in names], fontsize=_SMALL)
    ax.set_ylim(len(names) - 0.5, -0.5)  # top down, every row's bars (and its n/a) inside
    ax.set_xlim(0, right * 1.15)
    if kind in (Kind.COUNT, Kind.TOKENS) and right >= 10_000:
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 12M, not a 1e7 offset in the corner
    ax.tick_params(axis="x", labelsize=_SMALL)
    ax.set_xlabel(f"{kind}: {label}", fontsize=_SMALL)
    ax.grid(axis="x", alpha=0.3)
    return handles


def _ordered(present: list[str], known: tuple[str, ...]) -> list[str]:
    return [k for k in known if k in present] + sorted(set(present) - set(known))


def _colorbar(sheet: Sheet, image: Any, left: float, top: float, span: float, label: str, size: float) -> None:
    """A colorbar `left` inches from the figure's left, centred on the `span` inches of axes below `top`."""
    length = max(0.8 * span, 1.4)
    cax = sheet.axes(left, top + (span - length) / 2, 0.18, length)
    bar = sheet.figure.colorbar(image, cax=cax)
    bar.ax.tick_params(labelsize=size)
    bar.set_label(wrap(label, length, size), fontsize=size)


def _colorbar_width(label: str, span: float, size: float, gap: float = 0.3) -> float:
    """Inches a `_colorbar` takes right of its axes, its `gap` and its labels included."""
    length = max(0.8 * span, 1.4)
    return gap + 0.18 + TICK + text_size("0.0", size)[0] + LABEL_PAD + line_height(size, lines(wrap(label, length, size)))


def _colorbar_overhang(span: float) -> float:
    return max(0.0, (max(0.8 * span, 1.4) - span) / 2)


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
    size, side, gap = 10, 0.75 * len(classes), 0.35  # points of its labels; inches of a matrix, between columns
    deco = line_height(size) + LABEL_PAD + max(text_size(c, size)[0] for c in classes) + TICK  # left of a matrix
    below = TICK + line_height(size) + LABEL_PAD + line_height(size) + 0.25
    titles = {(p, s): wrap(p + (f" · {s}" if s else ""), side + deco, 9) for p in providers for s in stages}
    title_heights = [line_height(9, max(lines(titles[p, s]) for s in stages)) + TITLE_PAD for p in providers]
    span = sum(title_heights) - title_heights[0] + len(providers) * side + (len(providers) - 1) * below
    bar_label, bar_gap = "share of the gold row", deco / 2 + 0.15  # clear of a title as wide as side + deco
    bar_width = _colorbar_width(bar_label, span, size, bar_gap)
    width = PAD + len(stages) * (deco + side) + (len(stages) - 1) * gap + bar_width + PAD
    title = wrap(f"{run.label}: subject confusion of matched facts", width - 2 * PAD, _SUPTITLE)
    top = PAD + line_height(_SUPTITLE, lines(title)) + 0.1 + _colorbar_overhang(span)
    height = top + sum(title_heights) + len(providers) * (side + below) - 0.25 + _colorbar_overhang(span) + PAD
    sheet = Sheet(width, height)
    sheet.text(width / 2, PAD, title, ha="center", fontsize=_SUPTITLE)
    image = None
    y = top
    for provider, title_height in zip(providers, title_heights, strict=True):
        y += title_height
        for c, stage in enumerate(stages):
            ax = sheet.axes(PAD + deco + c * (deco + side + gap), y, side, side)
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
            ax.set_xticks(range(len(classes)), classes, fontsize=size)
            ax.set_yticks(range(len(classes)), classes, fontsize=size)
            ax.set_xlabel("predicted subject", fontsize=size)
            ax.set_ylabel("gold subject", fontsize=size)
            ax.set_title(titles[provider, stage], fontsize=9)
        y += side + below
    axes_top = top + title_heights[0]
    _colorbar(sheet, image, width - PAD - bar_width + bar_gap, axes_top,
              y - below - axes_top, bar_label, size)
    return _save(sheet, path)


def fault_plot(run: Run, path: Path) -> Path | None:
    """Call site × fault kind, coloured by the share of checked units rolled back correctly; None without faults.

    Every known (site, kind) pair gets a cell: k/n when checked, "not fired" when its units were
    indeterminate or infra errors, "not run" when the plan never injected it; blank when it does not apply.
    A kind no unit injected at any site is no column of "not run" cells but a line naming it under the matrix.
    """
    faults = run.table("faults")
    if faults is None or faults.empty:
        return None
    from matplotlib.patches import Rectangle

    providers = list(dict.fromkeys(faults["provider"]))
    grids = {p: _site_grid(faults, p) for p in providers}  # each engine has its own call sites
    known = list(dict.fromkeys(k for grid in grids.values() for applies in grid.values() for k in applies))
    known += sorted(set(faults["kind"]) - set(known))
    injected = set(faults["kind"])
    kinds = [k for k in known if k in injected]
    unused = [k for k in known if k not in injected]
    checked = faults[faults["outcome"].isin(["ok", "wrong"]) & faults["rollback_ok"].notna()]
    size, cell_w, cell_h = 8, 0.62, 0.34
    turned = [rotated_size(k, size, 40) for k in kinds]
    sites_width = max(text_size(s, size)[0] for grid in grids.values() for s in grid)
    left = PAD + max(sites_width + TICK, *(w - (j + 0.5) * cell_w for j, (w, _) in enumerate(turned)))
    matrix_width = len(kinds) * cell_w
    titles = [wrap(p, matrix_width, 9) for p in providers]
    title_heights = [line_height(9, lines(t)) + TITLE_PAD for t in titles]
    gap = 0.2
    span = sum(title_heights) - title_heights[0] + sum(len(g) for g in grids.values()) * cell_h + gap * (len(providers) - 1)
    bar_label = "correct rollback share (k/n checked units)"
    width = left + matrix_width + _colorbar_width(bar_label, span, size) + PAD
    title = wrap(f"{run.label}: rollback under injected faults (blank: kind does not apply)", width - 2 * PAD,
                 _SUPTITLE)
    note = wrap(f"not injected in any unit, so no column: {', '.join(unused)}", width - 2 * PAD, size) if unused else ""
    top = PAD + line_height(_SUPTITLE, lines(title)) + 0.1 + _colorbar_overhang(span)
    bottom = TICK + max(h for _, h in turned) + 0.1 + (line_height(size, lines(note)) if note else 0.0)
    height = top + title_heights[0] + span + max(bottom, _colorbar_overhang(span)) + PAD
    sheet = Sheet(width, height)
    sheet.text(width / 2, PAD, title, ha="center", fontsize=_SUPTITLE)
    image = None
    y = top
    for r, (provider, head) in enumerate(zip(providers, title_heights, strict=True)):
        grid = grids[provider]
        sites = list(grid)
        ax = sheet.axes(left, y + head, matrix_width, len(sites) * cell_h)
        y += head + len(sites) * cell_h + gap
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
        last = r == len(providers) - 1
        ax.set_xticks(range(len(kinds)), kinds if last else [], rotation=40, ha="right", fontsize=size)
        ax.set_yticks(range(len(sites)), sites, fontsize=size)
        ax.set_title(titles[r], fontsize=9)
    if note:
        sheet.text(PAD, height - PAD - line_height(size, lines(note)), note, fontsize=size, color="#444444")
    _colorbar(sheet, image, left + matrix_width + 0.3, top + title_heights[0], span, bar_label, size)
    return _save(sheet, path)


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
    epochs (stability.parquet); None for a run of one epoch (or with no headline rate over epochs)."""
    table = run.table("stability")
    if table is None or table.empty or int(table["epochs"].max()) < 2:
        return None
    table = table[table["epochs"] >= 2]
    present = set(table["metric"])
    names = [m for m in HEADLINE if m in present and metric(m).is_rate]
    if not names:
        return None
    providers = list(dict.fromkeys(table["provider"]))
    counts = table.groupby("metric")["case_id"].nunique().reindex(names, fill_value=0)
    labels = [f"{m} (n={int(counts[m])})" for m in names]
    size, panel, gap = 7, 2.6, 0.3
    left = PAD + max(text_size(label, size)[0] for label in labels) + TICK
    width = left + len(providers) * panel + (len(providers) - 1) * gap + 0.2 + PAD
    epochs = int(table["epochs"].max())
    title = wrap(f"{run.label}: per-case stability over {epochs} epochs (flaky: right in some, wrong in others)",
                 width - 2 * PAD, 10)
    titles = [wrap(p, panel, 9) for p in providers]
    legend_top = PAD + line_height(10, lines(title)) + 0.05
    top = legend_top + line_height(size) + 0.2 + line_height(9, max(lines(t) for t in titles)) + TITLE_PAD
    panel_height = 0.2 + 0.25 * len(names)
    height = top + panel_height + TICK + line_height(8) + LABEL_PAD + line_height(9) + PAD
    sheet = Sheet(width, height)
    sheet.text(width / 2, PAD, title, ha="center", fontsize=10)
    axes: list[Any] = []
    for k, provider in enumerate(providers):
        ax = sheet.axes(left + k * (panel + gap), top, panel, panel_height)
        mine = table[table["provider"] == provider]
        shares = (mine.groupby("metric")["stability"].value_counts(normalize=True).unstack(fill_value=0.0)
                  .reindex(index=names, fill_value=0.0))
        left_edges = [0.0] * len(names)
        for cls, colour in _STABILITY:
            values = shares[cls].tolist() if cls in shares.columns else [0.0] * len(names)
            ax.barh(range(len(names)), values, left=left_edges, color=colour, label=cls)
            left_edges = [a + b for a, b in zip(left_edges, values, strict=True)]
        ax.set_xlim(0, 1)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylim(len(names) - 0.5, -0.5)  # the headline order, top down, in every panel
        if axes:  # the rows line up with the first panel's labels; no ticks of its own to make and draw
            ax.set_yticks([])
        ax.set_xlabel("share of cases", fontsize=9)
        ax.set_title(titles[k], fontsize=9)
        axes.append(ax)
    axes[0].set_yticks(range(len(names)), labels, fontsize=size)
    axes[0].legend(loc="upper left", fontsize=size, bbox_to_anchor=sheet.point(left, legend_top),
                   bbox_transform=sheet.figure.transFigure, ncols=3, frameon=False, borderaxespad=0, borderpad=0)
    return _save(sheet, path)


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
