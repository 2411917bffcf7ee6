"""Reading finished run directories back, and comparing them case by case.

A comparison pairs two arms (a provider in a run) by (dataset, case_id): each metric gets
the two pooled values from metrics.parquet side by side and a paired-bootstrap delta over
the cases scored in both, and every case whose per-case value flipped between fully right
and not is listed. Cases present in only one arm are reported, never paired. `show` is the
same projection for one run: its headline table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from evals.core.redact import write_parquet, write_text
from evals.core.stats import paired_bootstrap_delta
from evals.record import Manifest, RunDirError, columns, read_manifest, read_table
from evals.record.catalogue import HEADLINE, REPEAT_METRICS, find, format_ci, format_value
from evals.report.in_flight import unfinished_lines, unfinished_text
from evals.report.rescore import RescoreError, rescore
from evals.report.run_report import markdown_table
from evals.scoring.matcher_resolution import MATCHED_METRICS, error_rates, explainable_gap, rates_sentence, within

METRICS_COLUMNS = columns("metrics")
CASE_METRICS_COLUMNS = columns("case_metrics")
RIGHT_TO_WRONG, WRONG_TO_RIGHT, ONLY_A, ONLY_B = "right_to_wrong", "wrong_to_right", "only_a", "only_b"
FLAKY = "flaky"  # the case changed, but it is right in some epochs and wrong in others of a run: noise, not a flip
MD_FLIP_LIMIT = 200  # flips listed in compare.md per pair; all of them are in compare_cases.parquet


RunInputError = RunDirError  # a run directory that cannot be read: missing, unfinished, or of another schema


@dataclass(frozen=True, eq=False)
class Run:
    """The tables of a finished run that compare, gate and show read; built by `load_run` or by hand."""

    metrics: pd.DataFrame  # metrics.parquet
    case_metrics: pd.DataFrame  # case_metrics.parquet
    manifest: Manifest | None = None
    path: Path | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # other tables by stem, read on first use

    def table(self, name: str) -> pd.DataFrame | None:
        """Another table of the run (cases, faults, facts, ...), or None when the run has none."""
        if name not in self.tables and self.path is not None:
            table = read_table(self.path, name, required=False, check_columns=False)  # readers use what is there
            if table is not None:
                self.tables[name] = table
        return self.tables.get(name)

    @property
    def label(self) -> str:
        if self.manifest is not None:
            return self.manifest.run_id
        return self.path.name if self.path is not None else "run"

    @property
    def providers(self) -> list[str]:
        return list(dict.fromkeys(self.metrics["provider"]))

    @cached_property
    def metric_index(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        """(provider, dataset, metric) -> its metrics.parquet row; the first row wins."""
        index: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in self.metrics.to_dict("records"):
            index.setdefault((row["provider"], row["dataset"], row["metric"]), row)
        return index

    @cached_property
    def case_index(self) -> dict[tuple[str, str], dict[tuple[str, str], float]]:
        """(provider, metric) -> {(dataset, case_id): num/den over the case's epochs, NaN when den == 0}.

        A case repeated in epochs is one value: its epochs' numerators over their denominators (for a
        fixed denominator, the mean over epochs), so pairing by case never counts an epoch as a case.
        The first row of each (case, epoch) wins."""
        pooled: dict[tuple[str, str], dict[tuple[str, str], dict[int, tuple[float, float]]]] = {}
        c = self.case_metrics
        epochs = c["epoch"] if "epoch" in c.columns else [0] * len(c)
        for provider, dataset, case_id, metric, num, den, epoch in zip(
                c["provider"], c["dataset"], c["case_id"], c["metric"], c["num"], c["den"], epochs, strict=True):
            pooled.setdefault((provider, metric), {}).setdefault((dataset, case_id), {}).setdefault(
                int(epoch), (float(num), float(den)))
        index: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
        for key, cases in pooled.items():
            index[key] = {}
            for case, by_epoch in cases.items():
                num, den = sum(v[0] for v in by_epoch.values()), sum(v[1] for v in by_epoch.values())
                index[key][case] = num / den if den else math.nan
        return index

    @cached_property
    def flaky(self) -> set[tuple[str, str, str, str]]:
        """(provider, metric, dataset, case_id) of the case-metrics flaky over this run's epochs."""
        table = self.table("stability")
        if table is None or table.empty:
            return set()
        rows = table[table["stability"] == "flaky"]
        return set(zip(rows["provider"], rows["metric"], rows["dataset"], rows["case_id"], strict=True))


def rescored_dirs(run_dirs: list[Path], matcher: str | None) -> list[Path]:
    """The runs' directories, or their copies re-scored with `matcher` (`evals.report.rescore`)."""
    if matcher is None:
        return list(run_dirs)

    for path in run_dirs:
        if not (Path(path) / "manifest.json").is_file():
            raise RunInputError(f"{path}: no manifest.json, not a run directory")
    try:
        return [rescore(Path(p), matcher) for p in run_dirs]
    except (RescoreError, ValueError) as exc:
        raise RunInputError(str(exc)) from exc


def matcher_note(runs: list[Run]) -> str:
    """A warning when the runs were scored by different matchers."""
    specs = [r.manifest.matcher_spec if r.manifest is not None else "text" for r in runs]
    if len(set(specs)) <= 1:
        return ""
    return (f"The runs were scored by different matchers ({', '.join(specs)}): their attribution metrics are not "
            "comparable; pass --matcher SPEC to re-score them all with one.")


def embedder_note(runs: list[Run]) -> str:
    """A warning when the runs embedded with different models: retrieval, and what the engine merges, differ."""
    names = [r.manifest.embedder for r in runs if r.manifest is not None]
    if len(set(names)) <= 1:
        return ""
    return (f"The runs used different embedders ({', '.join(names)}): what the engine retrieved and merged differs, "
            "so a change between them may be the embedder's, not the code's.")


def load_run(path: Path, allow_unfinished: bool = False) -> Run:
    """Read a finished run directory (migrating an older schema); RunInputError on anything a comparison
    cannot trust. A run stopped before its report was complete (no `finished` in its manifest) may have
    partial tables, so it is refused unless `allow_unfinished` (show, and the plots the report draws)."""
    path = Path(path)
    if not path.is_dir():
        raise RunInputError(f"{path}: no such run directory")
    manifest = read_manifest(path)
    if manifest.finished is None and not allow_unfinished:
        raise RunInputError(f"{path}: the run has not finished (its manifest has no finished time: it was stopped "
                            "while running or writing its report); continue it with --resume")
    metrics, case_metrics = read_table(path, "metrics"), read_table(path, "case_metrics")
    assert metrics is not None and case_metrics is not None  # required tables: read_table raised otherwise
    if metrics.empty:
        raise RunInputError(f"{path / 'metrics.parquet'}: no metrics (a run always writes them)")
    for table, frame, key in (("metrics", metrics, ["provider", "dataset", "metric"]),
                              ("case_metrics", case_metrics, ["provider", "dataset", "case_id", "metric", "epoch"])):
        repeated = frame[frame.duplicated(key, keep=False)]
        if not repeated.empty:  # which row would a comparison read? The first could hide a regression
            first = repeated.iloc[0]
            raise RunInputError(f"{path / (table + '.parquet')}: {len(repeated)} rows repeat a key ("
                                + ", ".join(f"{k}={first[k]!r}" for k in key) + ", ...)")
    return Run(metrics=metrics, case_metrics=case_metrics, manifest=manifest, path=path)


# ---- per-metric lookups -----------------------------------------------------------------------------------


def metric_row(run: Run, provider: str, dataset: str, metric: str) -> dict[str, Any] | None:
    """The metrics.parquet row, or None when the run has no such metric."""
    return run.metric_index.get((provider, dataset, metric))


def case_values(run: Run, provider: str, dataset: str, metric: str) -> dict[tuple[str, str], float]:
    """(dataset, case_id) -> num/den (NaN when den == 0); dataset "all" takes every dataset."""
    values = run.case_index.get((provider, metric), {})
    return dict(values) if dataset == "all" else {k: v for k, v in values.items() if k[0] == dataset}


def lower_is_better(metric: str) -> bool:
    """Whether lower is better (a share of mistakes is right at 0), as the catalogue declares it.

    A metric the catalogue does not declare (a hand-built table) is taken as higher-is-better.
    """
    entry = find(metric)
    return entry is not None and entry.lower_is_better


def is_count(metric: str) -> bool:
    """Not a rate: a count, a duration, tokens or a cost, which has no CI (the catalogue's kind)."""
    entry = find(metric)
    return entry is not None and not entry.is_rate


def shown(row: dict[str, Any] | None) -> str:
    """A metrics.parquet row as every report prints it (`evals.record.catalogue.format_ci`); — when absent."""
    if row is None:
        return "—"
    return format_ci(row["metric"], row["value"], row["ci_low"], row["ci_high"], row["n"])


# ---- comparison -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    run: Run
    provider: str
    label: str


def arm_pairs(runs: list[Run]) -> list[tuple[Arm, Arm]]:
    """Who is compared with whom.

    One run: its first provider against each other. Several runs: the first run against each
    later one, provider by provider for the providers they share, else in listed order.
    """
    if not runs:
        raise RunInputError("nothing to compare: no run given")
    if len(runs) == 1:
        run = runs[0]
        arms = [Arm(run, p, p) for p in run.providers]
        if len(arms) < 2:
            raise RunInputError(f"{run.label}: one provider only; give a second run to compare with")
        return [(arms[0], other) for other in arms[1:]]
    labels = _run_labels(runs)
    pairs = []
    first = runs[0]
    for run, label in zip(runs[1:], labels[1:], strict=True):
        shared = [p for p in first.providers if p in run.providers]
        matched = [(p, p) for p in shared] or list(zip(first.providers, run.providers, strict=False))
        if not matched:
            raise RunInputError(f"{label}: no provider with metrics to compare")
        pairs += [(Arm(first, a, f"{labels[0]}/{a}"), Arm(run, b, f"{label}/{b}")) for a, b in matched]
    return pairs


def _run_labels(runs: list[Run]) -> list[str]:
    labels = [run.label for run in runs]
    return [f"{label}#{i + 1}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]


@dataclass
class Comparison:
    """What `compare` found: one row per (pair, dataset, metric), and the flipped and unpaired cases."""

    deltas: pd.DataFrame  # DELTA_COLUMNS
    cases: pd.DataFrame  # CASE_COLUMNS
    labels: list[tuple[str, str]]  # (a, b) arm labels, in order
    runs: list[Run]


DELTA_COLUMNS = ["a", "b", "a_run", "a_provider", "b_run", "b_provider", "dataset", "metric",
                 "a_value", "a_ci_low", "a_ci_high", "a_n", "b_value", "b_ci_low", "b_ci_high", "b_n",
                 "delta", "delta_ci_low", "delta_ci_high", "n_paired", "paired"]
CASE_COLUMNS = ["a", "b", "dataset", "case_id", "metric", "a_value", "b_value", "change"]


def _metric_fields(prefix: str, row: dict[str, Any] | None) -> dict[str, Any]:
    keys = ("value", "ci_low", "ci_high", "n")
    return {f"{prefix}_{k}": (row[k] if row is not None else math.nan) for k in keys}


def _pair_deltas(a: Arm, b: Arm, seed: int, confidence: float) -> list[dict[str, Any]]:
    ma = a.run.metrics[a.run.metrics["provider"] == a.provider]
    mb = b.run.metrics[b.run.metrics["provider"] == b.provider]
    metrics = list(dict.fromkeys([*ma["metric"], *mb["metric"]]))
    datasets = ["all"] + sorted((set(ma["dataset"]) | set(mb["dataset"])) - {"all"})
    rows = []
    for dataset in datasets:
        for metric in metrics:
            ra, rb = (metric_row(arm.run, arm.provider, dataset, metric) for arm in (a, b))
            if ra is None and rb is None:
                continue
            va, vb = (case_values(arm.run, arm.provider, dataset, metric) for arm in (a, b))
            if va or vb:
                delta, low, high, n = paired_bootstrap_delta(va, vb, seed=seed, confidence=confidence)
                paired = True
            else:  # a count or a metric without per-case values: the difference of the two values
                delta = (rb["value"] - ra["value"]) if ra is not None and rb is not None else math.nan
                low = high = math.nan
                n, paired = 0, False
            rows.append({"a": a.label, "b": b.label, "a_run": a.run.label, "a_provider": a.provider,
                         "b_run": b.run.label, "b_provider": b.provider, "dataset": dataset, "metric": metric,
                         **_metric_fields("a", ra), **_metric_fields("b", rb), "delta": delta,
                         "delta_ci_low": low, "delta_ci_high": high, "n_paired": n, "paired": paired})
    return rows


def _right(value: float, metric: str) -> bool:
    return math.isclose(value, 0.0 if lower_is_better(metric) else 1.0, abs_tol=1e-9)


def _pair_cases(a: Arm, b: Arm) -> list[dict[str, Any]]:
    ca = a.run.case_metrics[a.run.case_metrics["provider"] == a.provider]
    cb = b.run.case_metrics[b.run.case_metrics["provider"] == b.provider]
    keys_a = list(dict.fromkeys(zip(ca["dataset"], ca["case_id"], strict=True)))
    keys_b = list(dict.fromkeys(zip(cb["dataset"], cb["case_id"], strict=True)))
    rows = []
    for metric in dict.fromkeys([*ca["metric"], *cb["metric"]]):
        va, vb = (case_values(arm.run, arm.provider, "all", metric) for arm in (a, b))
        for key in keys_a:
            x, y = va.get(key, math.nan), vb.get(key, math.nan)
            if math.isnan(x) or math.isnan(y) or _right(x, metric) == _right(y, metric):
                continue
            change = RIGHT_TO_WRONG if _right(x, metric) else WRONG_TO_RIGHT
            if (a.provider, metric, *key) in a.run.flaky or (b.provider, metric, *key) in b.run.flaky:
                change = FLAKY
            rows.append({"a": a.label, "b": b.label, "dataset": key[0], "case_id": key[1], "metric": metric,
                         "a_value": x, "b_value": y, "change": change})
    in_a, in_b = set(keys_a), set(keys_b)
    only = [(k, ONLY_A) for k in keys_a if k not in in_b] + [(k, ONLY_B) for k in keys_b if k not in in_a]
    rows += [{"a": a.label, "b": b.label, "dataset": k[0], "case_id": k[1], "metric": None, "a_value": math.nan,
              "b_value": math.nan, "change": change} for k, change in only]
    return rows


def compare_runs(runs: list[Run], *, seed: int | None = None, confidence: float = 0.95) -> Comparison:
    """Pure: side-by-side values, paired deltas and flipped cases for every arm pair of `runs`."""
    pairs = arm_pairs(runs)
    if seed is None:
        seed = runs[0].manifest.seed if runs[0].manifest is not None else 0
    deltas, cases = [], []
    for a, b in pairs:
        deltas += _pair_deltas(a, b, seed, confidence)
        cases += _pair_cases(a, b)
    return Comparison(deltas=pd.DataFrame(deltas, columns=DELTA_COLUMNS),
                      cases=pd.DataFrame(cases, columns=CASE_COLUMNS),
                      labels=[(a.label, b.label) for a, b in pairs], runs=runs)


# ---- markdown ---------------------------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[Any]]) -> str:
    return markdown_table(header, rows)


def _side(row: Any, prefix: str) -> str:
    if math.isnan(row[f"{prefix}_value"]) and math.isnan(row[f"{prefix}_ci_low"]):
        return "—" if math.isnan(row[f"{prefix}_n"]) else "n/a"
    return shown({k: row[f"{prefix}_{k}"] for k in ("value", "ci_low", "ci_high")}
                 | {"n": int(row[f"{prefix}_n"]), "metric": row["metric"]})


def _delta(row: Any) -> list[str]:
    def signed(x: float) -> str:
        return format_value(row["metric"], x, signed=True)

    if not row["paired"]:
        return [signed(row["delta"]), "", "—"]
    return [signed(row["delta"]), f"[{signed(row['delta_ci_low'])}, {signed(row['delta_ci_high'])}]",
            str(row["n_paired"])]


def _matcher_bound(row: Any, rates: tuple[float, float] | None) -> str:
    """The largest gap the matcher's error could make between the two values (`evals.scoring.matcher_resolution`)."""
    gap = explainable_gap(row["metric"], row["a_value"], row["b_value"], rates)
    if gap is None:
        return ""
    return f"±{format_value(row['metric'], gap)}" + (" (Δ within: not resolved)" if within(row["delta"], gap) else "")


def comparison_markdown(comparison: Comparison) -> str:
    """compare.md: per pair, the dataset-"all" metrics side by side, the flipped cases and the unpaired ones."""
    out = ["# Comparison", ""]
    for run in comparison.runs:
        m = run.manifest
        about = f"verdict **{m.verdict}**, seed {m.seed}, faults `{m.faults}`, {m.n_cases} cases" if m else ""
        about += f", {m.epochs} epochs per case" if m is not None and m.epochs > 1 else ""
        out.append(f"- `{run.label}`: {about}" + (f" ({run.path})" if run.path else ""))
    epochs = {r.manifest.epochs for r in comparison.runs if r.manifest is not None}
    if len(epochs) > 1:
        out += ["", f"**The runs repeat their cases a different number of times ({', '.join(map(str, sorted(epochs)))} "
                "epochs): cases are paired on their values pooled over epochs, but flaky_case_rate and "
                "decision_flip_rate grow with the epoch count and are not comparable between them.**"]
    out += ["", "Δ is b − a averaged over the cases scored in both (each case weighs the same), with a paired "
            "bootstrap 95% CI, so it can differ from the difference of the pooled values; a count has no CI. "
            "Per-dataset rows are in compare.parquet.", ""]
    for a_label, b_label in comparison.labels:
        d = comparison.deltas
        rows = d[(d["a"] == a_label) & (d["b"] == b_label) & (d["dataset"] == "all")]
        out += [f"## {a_label} → {b_label}", ""]
        rates = error_rates(r.manifest.matcher for r in comparison.runs
                            if r.manifest is not None and r.label in {rows["a_run"].iloc[0], rows["b_run"].iloc[0]}) \
            if len(rows) else None
        table = []
        for _, row in rows.iterrows():
            table.append([row["metric"], _side(row, "a"), _side(row, "b"), *_delta(row),
                          _matcher_bound(row, rates)])
        out += [_table(["metric", a_label, b_label, "Δ", "95% CI", "n paired", "matcher could explain"], table), ""]
        if any(m in set(rows["metric"]) for m in MATCHED_METRICS):
            out += [rates_sentence(rates), ""]
        out += _flips_section(comparison.cases, a_label, b_label)
    return "\n".join(out) + "\n"


def _flips_section(cases: pd.DataFrame, a_label: str, b_label: str) -> list[str]:
    mine = cases[(cases["a"] == a_label) & (cases["b"] == b_label)]
    flips = mine[mine["change"].isin([RIGHT_TO_WRONG, WRONG_TO_RIGHT])]
    worse, better = (int((flips["change"] == c).sum()) for c in (RIGHT_TO_WRONG, WRONG_TO_RIGHT))
    out = [f"### Flipped cases: {worse} right → wrong, {better} wrong → right", ""]
    if flips.empty:
        out += ["None.", ""]
    else:
        ordered = flips.sort_values(["change", "metric", "dataset", "case_id"], kind="stable")
        table = [["right → wrong" if r.change == RIGHT_TO_WRONG else "wrong → right", r.case_id, r.dataset, r.metric,
                  format_value(r.metric, r.a_value), format_value(r.metric, r.b_value)]
                 for r in ordered.head(MD_FLIP_LIMIT).itertuples()]
        out += [_table(["change", "case", "dataset", "metric", a_label, b_label], table), ""]
        if len(flips) > MD_FLIP_LIMIT:
            out += [f"… and {len(flips) - MD_FLIP_LIMIT} more in compare_cases.parquet.", ""]
    flaky = mine[mine["change"] == FLAKY]
    if len(flaky):
        out += [f"### Flaky cases, not flips: {len(flaky)}", "",
                "Right in some epochs and wrong in others of one run, so the change may be noise; values are "
                "means over epochs.", ""]
        ordered = flaky.sort_values(["metric", "dataset", "case_id"], kind="stable").head(MD_FLIP_LIMIT)
        out += [_table(["case", "dataset", "metric", a_label, b_label],
                       [[r.case_id, r.dataset, r.metric, format_value(r.metric, r.a_value),
                         format_value(r.metric, r.b_value)] for r in ordered.itertuples()]),
                ""]
    for change, label in ((ONLY_A, a_label), (ONLY_B, b_label)):
        only = mine[mine["change"] == change]
        if len(only):
            listed = ", ".join(f"`{r.case_id}` ({r.dataset})" for r in only.itertuples())
            out += [f"Only in {label} (not paired): {listed}", ""]
    return out


def matcher_version_note(runs: list[Run]) -> str:
    """A warning when runs scored by the same matcher spec were scored by different versions of it (refitted
    parameters, another judge prompt): their recorded fingerprints differ."""
    specs = {r.manifest.matcher_spec for r in runs if r.manifest is not None}
    cards = [r.manifest.matcher or {} for r in runs if r.manifest is not None]
    prints = sorted({str(card["fingerprint"]) for card in cards if card.get("fingerprint")})
    if len(specs) != 1 or len(prints) <= 1:
        return ""
    spec = next(iter(specs))
    return (f"The runs were scored by different versions of the matcher `{spec}` ({', '.join(prints)}): their "
            f"attribution metrics are not comparable; pass --matcher {spec} to re-score them all with this one.")


def judge_note(runs: list[Run]) -> str:
    """A warning when a run's LLM judge failed on some of its calls (those facts count as not matched)."""
    cards = [(r.label, r.manifest.matcher or {}) for r in runs if r.manifest is not None]
    failed = [f"{label} ({card['judge_errors']} of {card.get('judge_calls', '?')} calls)"
              for label, card in cards if card.get("judge_errors")]
    if not failed:
        return ""
    return (f"The judge failed on some calls of {', '.join(failed)}: the facts it left undecided count as not "
            "matched, so those runs' attribution metrics are understated.")


def write_comparison(run_dirs: list[Path], out: Path | None = None, matcher: str | None = None
                     ) -> tuple[str, list[Path]]:
    """Load the runs (re-scored with `matcher` when given), compare them, write compare.md,
    compare.parquet and compare_cases.parquet into `out` (default: the last run's directory);
    return the markdown and the paths written."""
    runs = [load_run(p) for p in rescored_dirs(run_dirs, matcher)]
    comparison = compare_runs(runs)
    out = Path(out) if out is not None else Path(run_dirs[-1])
    out.mkdir(parents=True, exist_ok=True)

    text = comparison_markdown(comparison)
    for note in (embedder_note(runs), matcher_note(runs), matcher_version_note(runs), judge_note(runs)):
        if note:
            text = f"**{note}**\n\n{text}"
    paths = [out / "compare.md", out / "compare.parquet", out / "compare_cases.parquet"]
    write_text(paths[0], text)  # evals.core.redact: no key or URL credential in what is written
    write_parquet(comparison.deltas, paths[1])
    write_parquet(comparison.cases.astype({"metric": "string"}), paths[2])
    return text, paths


# ---- show -------------------------------------------------------------------------------------------------


def matcher_headline(spec: str, card: dict[str, Any] | None) -> str:
    """The matcher line of `show`: who decided every attribution figure below, and how far it agrees with people."""
    card = card or {}
    if card.get("heldout_agreement") is None:
        line = f"facts matched by {spec}: NO measured agreement with labelled pairs (attribution figures unverified)"
    else:
        line = (f"facts matched by {spec}: held-out agreement {card['heldout_agreement']:.3f} "
                f"[{card['ci_low']:.3f}, {card['ci_high']:.3f}] n={card['n']}")
    if card.get("judge_errors"):
        line += f"; the judge FAILED on {card['judge_errors']} of {card.get('judge_calls', '?')} calls"
    return line


def headline(run: Run, dataset: str = "all") -> str:
    """The terminal table of `show`: the verdict, then the headline metrics per provider with CI and n."""
    m = run.manifest
    lines = [f"run {run.label}: verdict {m.verdict}" if m else f"run {run.label}"]
    if m is not None and m.finished is None:
        lines[0] = (f"run {run.label}: UNFINISHED, no verdict (stopped while running or writing its report; the "
                    "tables may be partial): continue it with --resume")
    if m is not None:
        repeats = "" if m.epochs < 2 else f"{m.epochs} epochs per case" + (
            f" at temperature {m.temperature:g}" if m.temperature is not None else "") + " · "
        lines.append(f"seed {m.seed} · faults {m.faults} · {repeats}{m.n_cases} cases · embedder {m.embedder} · "
                     f"engine {m.engine_version}")
        lines.append(matcher_headline(m.matcher_spec, m.matcher))
    providers = run.providers
    present = set(run.metrics.loc[run.metrics["dataset"] == dataset, "metric"])
    names = [name for name in (*HEADLINE, *REPEAT_METRICS) if name in present]  # repeats: a K-epoch run's, as summary.md
    grid = [["metric", *providers]]
    for name in names:
        grid.append([name, *(shown(metric_row(run, p, dataset, name)) for p in providers)])
    widths = [max(len(row[i]) for row in grid) for i in range(len(grid[0]))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in grid]
    text.insert(1, "  ".join("-" * w for w in widths))
    rest = len(present) - len(names)
    footer = [f"({rest} more metrics in {run.path / 'metrics.parquet' if run.path else 'metrics.parquet'}; "
              "n is units for a fault rate, cases or facts otherwise: see its note)"] if rest else []
    return "\n".join(lines + [""] + (text if names else ["no headline metric in this run"]) + footer) + "\n"


def show(run_dir: Path) -> str:
    """The headline of a run, unfinished ones too (saying so first): show is for looking, not for judging.
    An unfinished run also lists its saved units and the units it left half done (`evals.report.in_flight`)."""
    return show_run(run_dir)[0]


def show_run(run_dir: Path) -> tuple[str, bool]:
    """`show`'s text, and whether the run has tables to show (False: stopped before it wrote any, so there is
    nothing measured yet; `hymem-eval show` then exits 1, as every subcommand that measured nothing does)."""
    try:
        text = headline(load_run(run_dir, allow_unfinished=True))
    except RunDirError:
        manifest = _manifest_or_none(run_dir)
        if manifest is None or manifest.finished is not None:
            raise
        return unfinished_text(run_dir, manifest), False  # stopped while running: units and journals, no tables
    manifest = _manifest_or_none(run_dir)
    if manifest is not None and manifest.finished is None:
        text += "\n".join(["", *unfinished_lines(run_dir, manifest)]) + "\n"
    return text, True


def _manifest_or_none(run_dir: Path) -> Manifest | None:
    try:
        return read_manifest(Path(run_dir))
    except RunDirError:
        return None


__all__ = ["CASE_COLUMNS", "CASE_METRICS_COLUMNS", "DELTA_COLUMNS", "HEADLINE", "METRICS_COLUMNS", "Arm",
           "Comparison", "Run", "RunInputError", "arm_pairs", "case_values", "compare_runs", "comparison_markdown",
           "embedder_note", "judge_note", "matcher_version_note", "headline", "is_count", "load_run", "lower_is_better", "metric_row", "show", "show_run", "shown",
           "write_comparison"]
