"""The one aggregator: per-case tallies in, metrics.parquet rows out (Inspect AI's `grouped()` is the model).

Every scorer (the report's fault rates and counts, attribution, usage, repeats, the label audit) returns
`CaseTally`s keyed by catalogue metric; `aggregate` groups them by (provider, dataset) and per provider over all
datasets ("all"), reduces each metric of each group with its reducer, and builds the `MetricRow`s with the
catalogue's note. A reducer is a function of a group's tallies that copes with an empty group; the catalogue's
kind picks the default one (a rate: the case-resampling bootstrap; a count: its mean per epoch).

A case is (dataset, case_id): its epochs and its several tallies are one cluster, summed before the bootstrap
resamples whole cases, so K epochs never pass for K times the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from evals.core.stats import bootstrap_ci
from evals.record import MetricRow
from evals.record.catalogue import find, note
from evals.record.tally import CaseTally

ALL = "all"  # the dataset of a provider's rows over every dataset
_TWIN = "_with_errors"  # a metric's twin that counts infra-error cases as wrong: its row follows the metric's


@dataclass(frozen=True)
class Stat:
    """A reduced metric: its value, CI (the value itself when there is none) and what its n counts."""

    value: float
    ci_low: float
    ci_high: float
    n: int


Reducer = Callable[[list[CaseTally], int], Stat | None]  # (a group's tallies of one metric, seed) -> Stat; None: no row


def _case(t: CaseTally) -> tuple[str, str]:
    return t.dataset, t.case_id


def _pooled(tallies: Iterable[CaseTally]) -> tuple[list[float], list[float]]:
    """Per-case (num, den) summed over the case's tallies, cases in order of first appearance."""
    sums: dict[tuple[str, str], list[float]] = {}
    for t in tallies:
        acc = sums.setdefault(_case(t), [0.0, 0.0])
        acc[0] += t.num
        acc[1] += t.den
    return [v[0] for v in sums.values()], [v[1] for v in sums.values()]


def _epochs(tallies: list[CaseTally]) -> int:
    return max(1, len({t.epoch for t in tallies}))


def _cases(tallies: list[CaseTally]) -> int:
    return len({_case(t) for t in tallies})


def rate(n: Literal["cases", "units"] = "cases") -> Reducer:
    """sum(num) / sum(den) with a bootstrap CI that resamples cases (`evals.core.stats.bootstrap_ci`).

    n="cases": n counts the cases with units, and a metric no case has units for has no row.
    n="units": n counts units per epoch (sum(den) / epochs), and an empty metric is a NaN row with n=0
    (the fault rates of a run whose faults did not fire: measured, found nothing).
    """
    def reduce(tallies: list[CaseTally], seed: int) -> Stat | None:
        if n == "cases":
            tallies = [t for t in tallies if t.den > 0]
            if not tallies:
                return None
        num, den = _pooled(tallies)
        value, low, high = bootstrap_ci(num, den, seed=seed)
        counted = len(num) if n == "cases" else round(sum(t.den for t in tallies) / _epochs(tallies))
        return Stat(value, low, high, counted)
    return reduce


def mean_count() -> Reducer:
    """A count per epoch (1 anomaly in 3 epochs is 0.33): sum(num) / epochs; n counts cases; no CI."""
    def reduce(tallies: list[CaseTally], seed: int) -> Stat | None:
        value = float(sum(t.num for t in tallies)) / _epochs(tallies)
        return Stat(value, value, value, _cases(tallies))
    return reduce


def total() -> Reducer:
    """A count over every epoch and call (LM attempts): sum(num); n counts cases; no CI."""
    def reduce(tallies: list[CaseTally], seed: int) -> Stat | None:
        value = float(sum(t.num for t in tallies))
        return Stat(value, value, value, _cases(tallies))
    return reduce


def sample_sum(empty: float = 0.0) -> Reducer:
    """The sum of every sample (tokens, USD); n counts samples; `empty` when there are none (NaN: not known)."""
    def reduce(tallies: list[CaseTally], seed: int) -> Stat | None:
        samples = [s for t in tallies for s in t.samples]
        value = float(pd.Series(samples, dtype="float64").sum()) if samples else empty
        return Stat(value, value, value, len(samples))
    return reduce


def percentile(q: float) -> Reducer:
    """The q-th percentile of every sample (latency); n counts samples; NaN when there are none."""
    def reduce(tallies: list[CaseTally], seed: int) -> Stat | None:
        samples = np.asarray([s for t in tallies for s in t.samples], dtype=float)
        value = float(np.percentile(samples, q)) if samples.size else math.nan
        return Stat(value, value, value, int(samples.size))
    return reduce


def default_reducer(metric: str) -> Reducer:
    """The catalogue's kind decides: a rate is bootstrapped over cases, anything else is a count per epoch."""
    entry = find(metric)
    return rate() if entry is None or entry.is_rate else mean_count()


def _order(tallies: list[CaseTally]) -> list[str]:
    """The group's metrics in order of first appearance, each `_with_errors` twin right after its metric."""
    first: dict[str, int] = {}
    for i, t in enumerate(tallies):
        first.setdefault(t.metric.removesuffix(_TWIN), i)
    names = dict.fromkeys(t.metric for t in tallies)
    return sorted(names, key=lambda m: (first[m.removesuffix(_TWIN)], m.endswith(_TWIN)))


def _groups(tallies: list[CaseTally]) -> list[tuple[str, str, list[CaseTally]]]:
    """(provider, dataset, tallies): providers in order of first appearance, each with "all" first, then its
    datasets sorted."""
    out = []
    for provider in dict.fromkeys(t.provider for t in tallies):
        mine = [t for t in tallies if t.provider == provider]
        out.append((provider, ALL, mine))
        out += [(provider, d, [t for t in mine if t.dataset == d]) for d in sorted({t.dataset for t in mine})]
    return out


def _note(metric: str, tallies: list[CaseTally]) -> str:
    skipped = sum(t.skipped for t in tallies)
    if skipped:
        return f"{skipped} {next(t.skip_reason for t in tallies if t.skipped)}"
    return note(metric)


def aggregate(tallies: Iterable[CaseTally], *, seed: int,
              reducers: Mapping[str, Reducer] | Reducer | None = None) -> list[MetricRow]:
    """Metric rows per provider x dataset and per provider over all datasets ("all").

    Every metric a group has a tally for is reduced by `reducers` (one for all metrics, or one per metric name;
    the catalogue's default otherwise); a reducer that returns None leaves the metric out of the group.
    """
    tallies = list(tallies)
    rows = []
    for provider, dataset, group in _groups(tallies):
        by_metric: dict[str, list[CaseTally]] = {}
        for t in group:
            by_metric.setdefault(t.metric, []).append(t)
        for metric in _order(group):
            reduce = reducers if callable(reducers) else (reducers or {}).get(metric) or default_reducer(metric)
            stat = reduce(by_metric[metric], seed)
            if stat is not None:
                rows.append(MetricRow(provider=provider, dataset=dataset, metric=metric, value=stat.value,
                                      ci_low=stat.ci_low, ci_high=stat.ci_high, n=stat.n,
                                      note=_note(metric, by_metric[metric])))
    return rows


__all__ = ["ALL", "Reducer", "Stat", "CaseTally", "aggregate", "default_reducer", "mean_count", "percentile", "rate",
           "sample_sum", "total"]
