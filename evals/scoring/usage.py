"""Cost, latency and token usage: a projection of every unit's attempt rows.

`attempts.parquet` has one row per LM or embedding attempt (retries included, cache hits
marked), and the usage metrics per provider come from those rows, so every number here can be
traced to the calls that made it.
"""

from __future__ import annotations

import math

import pandas as pd

from evals.record import CaseRun, MetricRow, columns
from evals.record.tally import CaseTally
from evals.scoring.aggregate import Reducer, aggregate, percentile, sample_sum, total

COLUMNS = columns("attempts")


def attempts_frame(runs: list[CaseRun]) -> pd.DataFrame:
    """One row per attempt of every unit, with its dataset."""
    rows = [{"dataset": r.dataset, **a.model_dump(exclude={"schema_version"})} for r in runs for a in r.attempts]
    return pd.DataFrame(rows, columns=COLUMNS).astype({"latency_s": "float64", "cache_hit": "bool"})


# latency and sums over attempts: n counts attempts; call counts: n counts cases (not units: with K epochs a case
# has K units, and a 1-epoch run gated against a K-epoch baseline must not look as if it lost cases).
REDUCERS: dict[str, Reducer] = {
    "latency_p50": percentile(50), "latency_p95": percentile(95), "tokens_total": sample_sum(),
    "cost_total": sample_sum(empty=float("nan")), "lm_attempts": total(), "lm_retries": total(),
    "lm_cache_hits": total(), "embed_attempts": total(),
}


def usage_tallies(runs: list[CaseRun]) -> list[CaseTally]:
    """Per unit: its LM attempts' latencies, tokens and known costs (cache hits excluded) as samples, and its call
    counts (the attempts it logged under its own arm)."""
    out = []
    for r in runs:
        mine = [a for a in r.attempts if a.provider == r.provider]
        lm = [a for a in mine if a.site != "embed"]
        called = [a for a in lm if not a.cache_hit]
        latency = tuple(float(a.latency_s) for a in called)
        values: dict[str, tuple[float, tuple[float, ...]]] = {
            "latency_p50": (0.0, latency),
            "latency_p95": (0.0, latency),
            "tokens_total": (0.0, tuple(float(a.prompt_tokens or 0) + float(a.completion_tokens or 0)
                                        for a in called)),
            "cost_total": (0.0, tuple(float(a.cost_usd) for a in called
                                      if a.cost_usd is not None and not math.isnan(a.cost_usd))),
            "lm_attempts": (float(len(called)), ()),
            "lm_retries": (float(sum(a.attempt > 1 for a in called)), ()),
            "lm_cache_hits": (float(sum(a.cache_hit for a in lm)), ()),
            "embed_attempts": (float(sum(a.site == "embed" for a in mine)), ()),
        }
        out += [CaseTally(provider=r.provider, dataset=r.dataset, case_id=r.case_id, metric=name, num=num,
                          epoch=r.epoch, samples=samples) for name, (num, samples) in values.items()]
    return out


def usage_metrics(runs: list[CaseRun]) -> list[MetricRow]:
    """latency_p50/p95, tokens_total, cost_total and call counts per provider × dataset and "all"."""
    return aggregate(usage_tallies(runs), seed=0, reducers=REDUCERS)


__all__ = ["COLUMNS", "REDUCERS", "attempts_frame", "usage_metrics", "usage_tallies"]
