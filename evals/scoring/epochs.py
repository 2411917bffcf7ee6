"""Repeats (run --epochs K): how stable each case is over its epochs, flaky cases and decision flips.

Why: a real provider does not answer twice alike. A case right in one epoch and wrong in another is
flaky: a gate or a comparison must not read it as a regression or a fix. Every figure here resamples
cases with all their epochs (the cluster bootstrap of `evals.scoring.aggregate`), so
K epochs never pass for K times the data: `n` counts cases.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pandas as pd

from evals.record import MetricRow, frame
from evals.record.catalogue import find
from evals.record.tally import CaseTally
from evals.scoring.aggregate import aggregate, rate

STABLE_PASS, STABLE_FAIL, FLAKY = "stable-pass", "stable-fail", "flaky"
_KEY = ["provider", "dataset", "case_id"]


def _right(metric: str, value: float) -> bool | None:
    """Whether a per-case value is the metric's right value; None for a metric without one."""
    m = find(metric)
    if m is None or not m.is_rate:
        return None
    return math.isclose(value, m.right_value, abs_tol=1e-9)


def stability_frame(case_metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (provider, dataset, case, metric): its value in each epoch that scored it, summarised.

    stable-pass: right in every epoch; stable-fail: right in none; flaky: right in some and not others.
    """
    rows = []
    scored = case_metrics[case_metrics["den"] > 0]
    epoch = scored["epoch"] if "epoch" in scored.columns else pd.Series(0, index=scored.index)
    values = scored.assign(value=scored["num"] / scored["den"], epoch=epoch)
    for (provider, dataset, case_id, metric), group in values.groupby([*_KEY, "metric"], sort=False):
        per_epoch = group.drop_duplicates("epoch", keep="last")["value"]
        right = [_right(metric, v) for v in per_epoch]
        if None in right:
            continue
        passes = sum(1 for r in right if r)
        stability = STABLE_PASS if passes == len(right) else STABLE_FAIL if passes == 0 else FLAKY
        rows.append({"provider": provider, "dataset": dataset, "case_id": case_id, "metric": metric,
                     "epochs": len(per_epoch), "mean": float(per_epoch.mean()), "min": float(per_epoch.min()),
                     "max": float(per_epoch.max()), "passes": int(passes), "stability": stability})
    return frame("stability", rows)


def flaky_cases(stability: pd.DataFrame) -> dict[tuple[str, str, str], list[str]]:
    """(provider, dataset, case_id) -> the metrics it is flaky on (plain metrics; `_with_errors` twins left out)."""
    out: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    flaky = stability[(stability["stability"] == FLAKY) & ~stability["metric"].str.endswith("_with_errors")]
    for provider, dataset, case_id, metric in zip(flaky["provider"], flaky["dataset"], flaky["case_id"],
                                                  flaky["metric"], strict=True):
        out[(provider, dataset, case_id)].append(metric)
    return dict(out)


def _fact_decisions(facts: pd.DataFrame) -> pd.DataFrame:
    """Per (provider, dataset, case, gold fact, epoch): was the gold fact stored right (text, subject, owner)?"""
    gold = facts[(facts["stage"] == "stored") & facts["gold_text"].notna()]
    gold = gold[gold["note"].isna() | (gold["note"] != "infra_error")]  # a lost epoch decides nothing
    if gold.empty:
        return pd.DataFrame(columns=[*_KEY, "fact", "epoch", "right"])
    epoch = gold["epoch"] if "epoch" in gold.columns else pd.Series(0, index=gold.index)
    gold = gold.assign(epoch=epoch)
    # Gold rows come in the case's gold order in every epoch: their position names the fact.
    fact = gold.groupby([*_KEY, "epoch"], sort=False).cumcount()
    right = (gold["matched"].fillna(False) & gold["subject_ok"].fillna(False) & gold["owner_ok"].fillna(False))
    return pd.DataFrame({**{k: gold[k] for k in _KEY}, "fact": fact, "epoch": gold["epoch"],
                         "right": right.astype(bool)})


def fact_flips(facts: pd.DataFrame) -> dict[tuple[str, str, str], tuple[int, int]]:
    """Per case: (gold facts whose decision differs between epochs, gold facts decided in two or more epochs)."""
    decisions = _fact_decisions(facts)
    out: dict[tuple[str, str, str], tuple[int, int]] = {}
    if decisions.empty:
        return out
    per_fact = decisions.groupby([*_KEY, "fact"], sort=False)["right"].agg(["nunique", "size"]).reset_index()
    per_fact = per_fact[per_fact["size"] >= 2]
    for key, group in per_fact.groupby(_KEY, sort=False):
        out[tuple(key)] = (int((group["nunique"] > 1).sum()), len(group))
    return out


def epoch_tallies(stability: pd.DataFrame, facts: pd.DataFrame | None) -> list[CaseTally]:
    """Per repeated case: flaky (1 of 1) or not, and its gold-fact decisions that flip (of those decided twice)."""
    flaky = flaky_cases(stability)
    repeated = stability[stability["epochs"] >= 2]
    out = [CaseTally(provider=p, dataset=d, case_id=c, metric="flaky_case_rate", num=float((p, d, c) in flaky))
           for p, d, c in dict.fromkeys(zip(repeated["provider"], repeated["dataset"], repeated["case_id"],
                                            strict=True))]
    flips = fact_flips(facts if facts is not None else pd.DataFrame())
    return out + [CaseTally(provider=p, dataset=d, case_id=c, metric="decision_flip_rate", num=n_flip, den=n_fact)
                  for (p, d, c), (n_flip, n_fact) in flips.items()]


def epoch_metrics(stability: pd.DataFrame, facts: pd.DataFrame | None, seed: int) -> list[MetricRow]:
    """flaky_case_rate and decision_flip_rate per provider x dataset and per provider over all datasets: one
    metric after the other, groups sorted by (provider, dataset)."""
    rows = aggregate(epoch_tallies(stability, facts), seed=seed, reducers=rate(n="cases"))
    order = {"flaky_case_rate": 0, "decision_flip_rate": 1}
    return sorted(rows, key=lambda r: (order[r.metric], r.provider, r.dataset))


__all__ = ["FLAKY", "STABLE_FAIL", "STABLE_PASS", "epoch_metrics", "epoch_tallies", "fact_flips", "flaky_cases",
           "stability_frame"]
