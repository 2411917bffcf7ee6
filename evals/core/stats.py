"""Confidence intervals that resample cases, not units.

Faulted units of one case share its store and its model replies, so they are not
independent; resampling whole cases (a cluster bootstrap) keeps that dependence in
the interval. Degenerate inputs return exact answers instead of warnings.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

NAN = float("nan")


CaseKey = TypeVar("CaseKey", bound=Hashable)  # what pairs two runs' values: a case id, (dataset, case_id)


def bootstrap_ci(per_case_num: Sequence[float], per_case_den: Sequence[float] | None = None, *, seed: int,
                 n_resamples: int = 2000, confidence: float = 0.95) -> tuple[float, float, float]:
    """(value, ci_low, ci_high) of sum(num)/sum(den), or of mean(num) when `den` is None.

    A percentile bootstrap over cases, seeded. Cases with a zero denominator carry no
    units and are left out of the resampling; no cases (or no units) give NaNs.
    """
    num = np.asarray(per_case_num, dtype=float)
    if per_case_den is None:
        if num.size == 0:
            return NAN, NAN, NAN
        value = float(num.mean())
        if num.size == 1 or np.all(num == num[0]):
            return value, value, value
        return (value, *_percentile_ci((num,), _mean, seed, n_resamples, confidence))
    den = np.asarray(per_case_den, dtype=float)
    if num.shape != den.shape:
        raise ValueError(f"numerators and denominators differ in length: {num.size} != {den.size}")
    keep = den != 0
    num, den = num[keep], den[keep]
    if num.size == 0:
        return NAN, NAN, NAN
    value = float(num.sum() / den.sum())
    ratios = num / den
    if num.size == 1 or np.all(ratios == ratios[0]):  # every resample gives the same ratio
        return value, value, value
    return (value, *_percentile_ci((num, den), _ratio, seed, n_resamples, confidence))


def paired_bootstrap_delta(a_by_case: Mapping[CaseKey, float], b_by_case: Mapping[CaseKey, float], *, seed: int,
                           n_resamples: int = 2000, confidence: float = 0.95) -> tuple[float, float, float, int]:
    """(mean of b - a, ci_low, ci_high, n) over the cases scored in both runs.

    Pairing by case removes the between-case spread from the interval; a case missing
    or NaN on either side is left out, and n says how many cases remained.
    """
    keys = sorted((k for k in a_by_case.keys() & b_by_case.keys()
                   if not _nan(a_by_case[k]) and not _nan(b_by_case[k])), key=repr)
    deltas = [float(b_by_case[k]) - float(a_by_case[k]) for k in keys]
    return (*bootstrap_ci(deltas, seed=seed, n_resamples=n_resamples, confidence=confidence), len(keys))


def _nan(x: float | None) -> bool:
    return x is None or math.isnan(float(x))


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.mean(axis=axis)


def _ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    return num.sum(axis=axis) / den.sum(axis=axis)


def _percentile_ci(data: tuple[np.ndarray, ...], statistic, seed: int, n_resamples: int,
                   confidence: float) -> tuple[float, float]:
    from scipy import stats

    rng = np.random.default_rng(seed)
    # scipy >= 1.15 takes `rng`; older releases only `random_state`.
    seeding = {"rng": rng} if "rng" in inspect.signature(stats.bootstrap).parameters else {"random_state": rng}
    result = stats.bootstrap(data, statistic, paired=len(data) > 1, vectorized=True, axis=-1,
                             n_resamples=n_resamples, confidence_level=confidence, method="percentile", **seeding)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


__all__ = ["bootstrap_ci", "paired_bootstrap_delta"]
