"""Whether two runs were fed the same inputs, and the two runs cut down to the cases they share.

Why: a gate over runs of different datasets or fault plans compares different things (a 151-case
sweep once passed against a 65-case `random:0.2` run). Inputs are the cases (by per-case content
hash when both manifests carry one, else by `(dataset, case_id)` and the dataset hash) and the
fault plan (the plan, and its seed when the plan draws with it). `restrict` recomputes the pooled
and per-dataset values of both runs over the shared cases only, from the per-case tables, so every
value the gate reads covers the same cases on both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from evals.report.compare import METRICS_COLUMNS, Run

CaseKey = tuple[str, str]  # (dataset, case_id)
_CHECKED = ("ok", "wrong")  # fault outcomes whose state was checked (evals.report.run_report.CHECKED)


@dataclass
class InputDiff:
    """What differs between the inputs of a baseline and a current run."""

    shared: set[CaseKey]
    only_baseline: set[CaseKey] = field(default_factory=set)
    only_current: set[CaseKey] = field(default_factory=set)
    changed: set[CaseKey] = field(default_factory=set)  # same id, different content
    dataset_hashes: tuple[str, str] = ("", "")
    plans: tuple[str, str] = ("", "")
    contents_compared: bool = True  # False when a manifest predates per-case hashes

    @property
    def datasets_differ(self) -> bool:
        return (self.dataset_hashes[0] != self.dataset_hashes[1] or bool(self.only_baseline or self.only_current
                                                                          or self.changed))

    @property
    def plans_differ(self) -> bool:
        return self.plans[0] != self.plans[1]

    @property
    def differ(self) -> bool:
        return self.datasets_differ or self.plans_differ

    def describe(self) -> str:
        """One sentence: what differs, with counts and a few examples."""
        parts = []
        if self.datasets_differ:
            base, cur = self.dataset_hashes
            detail = [f"{len(self.shared)} shared"]
            for label, keys in (("only in the baseline", self.only_baseline), ("only in the current run",
                                                                                self.only_current),
                                ("changed", self.changed)):
                if keys:
                    examples = ", ".join(f"{d}/{c}" for d, c in sorted(keys)[:3])
                    detail.append(f"{len(keys)} {label} (e.g. {examples})")
            if not self.contents_compared:
                detail.append("case contents not compared: a manifest has no per-case hashes")
            parts.append(f"the datasets differ (hash {base[:12]} vs {cur[:12]}; cases: {'; '.join(detail)})")
        if self.plans_differ:
            parts.append(f"the fault plans differ ({self.plans[0]} vs {self.plans[1]})")
        return " and ".join(parts)


def plan_of(run: Run) -> str:
    """The fault plan as it decides which faults run: the seed only matters to a random plan."""
    m = run.manifest
    if m is None:
        return "unknown"
    return f"{m.faults} seed {m.seed}" if m.faults.startswith("random") else m.faults


def _case_key(key: str) -> CaseKey:
    """The manifest's `dataset/case_id` key as (dataset, case_id); case ids may hold "/" themselves."""
    dataset, _, case_id = key.partition("/")
    return dataset, case_id


def case_hashes(run: Run) -> dict[CaseKey, str | None]:
    """(dataset, case_id) -> content hash, or None per case when the manifest carries no hashes."""
    if run.manifest is not None and run.manifest.case_hashes:
        return {_case_key(key): h for key, h in run.manifest.case_hashes.items()}
    cases = run.table("cases")
    frame = cases if cases is not None and len(cases) else run.case_metrics
    return {(str(d), str(c)): None for d, c in zip(frame["dataset"], frame["case_id"], strict=True)}


def dataset_hash_of(run: Run) -> str:
    return run.manifest.dataset_hash if run.manifest else ""


def compare_inputs(baseline: Run, current: Run) -> InputDiff:
    base, cur = case_hashes(baseline), case_hashes(current)
    compared = all(h is not None for h in base.values()) and all(h is not None for h in cur.values())
    both = base.keys() & cur.keys()
    changed = {k for k in both if compared and base[k] != cur[k]}
    hashes = (dataset_hash_of(baseline), dataset_hash_of(current))
    return InputDiff(shared=both - changed, only_baseline=base.keys() - cur.keys(), only_current=cur.keys() - base.keys(),
                     changed=changed, dataset_hashes=hashes, plans=(plan_of(baseline), plan_of(current)),
                     contents_compared=compared)


# ---- one run over a subset of its cases -------------------------------------------------------------------


def _counts_by_case(run: Run) -> pd.DataFrame:
    """Per case, the counts of metrics.parquet (evals.report.run_report.COUNTS), from faults.parquet and anomalies.parquet:
    anomaly_count counts the control run's write-contract findings (anomalies with no fault) too. A case of K
    epochs has K units: its counts are per epoch, as the report's."""
    faults = run.table("faults")
    key = ["provider", "dataset", "case_id"]
    columns = [*key, "faulted_units", "indeterminate_units", "anomaly_count", "degraded_success_count"]
    if faults is None:
        return pd.DataFrame(columns=columns)
    f = faults.copy()
    checked = f["outcome"].isin(_CHECKED)
    f["faulted_units"] = checked.astype(float)
    f["indeterminate_units"] = (f["outcome"] == "indeterminate").astype(float)
    f["anomaly_count"] = f["n_anomalies"].where(checked, 0).astype(float)
    f["degraded_success_count"] = 0.0
    per_case = f.groupby(key, as_index=False)[columns[3:]].sum()
    cases = run.table("cases")  # a case without faulted runs counts zeros
    units = cases.groupby(key, as_index=False).size() if cases is not None else per_case[key].assign(size=1)
    per_case = units.merge(per_case, how="left").fillna(0.0)
    anomalies = run.table("anomalies")
    if anomalies is not None and len(anomalies):
        keys = list(zip(per_case["provider"], per_case["dataset"], per_case["case_id"], strict=True))
        degraded = anomalies[(anomalies["kind"] == "DEGRADED_SUCCESS") & anomalies["outcome"].isin(_CHECKED)]
        tally = degraded.groupby(key).size()  # a unit has at most one DEGRADED_SUCCESS (evals.check.checker)
        per_case["degraded_success_count"] = [float(tally.get(k, 0)) for k in keys]
        findings = anomalies[anomalies["fault"].isna()].groupby(key).size()
        per_case["anomaly_count"] += [float(findings.get(k, 0)) for k in keys]
    per_case[columns[3:]] = per_case[columns[3:]].div(per_case["size"], axis=0)
    return per_case[columns]


def _only(frame: pd.DataFrame, keys: set[CaseKey]) -> pd.DataFrame:
    mask = [(str(d), str(c)) in keys for d, c in zip(frame["dataset"], frame["case_id"], strict=True)]
    return frame[pd.Series(mask, index=frame.index, dtype=bool)]


def restrict(run: Run, keys: set[CaseKey]) -> Run:
    """`run` with only the cases in `keys`: case_metrics filtered, metrics recomputed pooled ("all") and per
    dataset. A rate is sum(num)/sum(den) over the kept cases and its n the cases that scored it; a count is
    summed over the kept cases (per epoch with several), n the kept cases. Metrics with no per-case record (usage,
    the repeat metrics) are left out."""
    kept = _only(run.case_metrics, keys)
    rows = []
    scored = kept[kept["den"] != 0]
    for dataset_scope in ("all", *sorted(scored["dataset"].unique())):
        part = scored if dataset_scope == "all" else scored[scored["dataset"] == dataset_scope]
        for (provider, metric), group in part.groupby(["provider", "metric"], sort=False):
            value = float(group["num"].sum() / group["den"].sum())  # pooled over cases and their epochs
            n = len(group.drop_duplicates(["dataset", "case_id"]))  # cases, not case x epoch
            rows.append([provider, dataset_scope, metric, value, math.nan, math.nan, n, "shared cases only"])
    counts = _counts_by_case(run)
    counts = _only(counts, keys)
    for dataset_scope in ("all", *sorted(counts["dataset"].unique())):
        part = counts if dataset_scope == "all" else counts[counts["dataset"] == dataset_scope]
        for provider, group in part.groupby("provider", sort=False):
            for metric in counts.columns[3:]:
                value = float(group[metric].sum())
                rows.append([provider, dataset_scope, metric, value, value, value, len(group), "shared cases only"])
    metrics = pd.DataFrame(rows, columns=METRICS_COLUMNS)
    return Run(metrics=metrics, case_metrics=kept.reset_index(drop=True), manifest=run.manifest, path=run.path)


__all__ = ["InputDiff", "compare_inputs", "plan_of", "restrict"]
