"""Cost, latency and token usage: a projection of every unit's attempt rows.

`attempts.parquet` has one row per LM or embedding attempt (retries included, cache hits
marked), and the usage metrics per provider come from those rows, so every number here can be
traced to the calls that made it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evals.record import CaseRun, MetricRow, columns
from evals.record.catalogue import note

COLUMNS = columns("attempts")


def attempts_frame(runs: list[CaseRun]) -> pd.DataFrame:
    """One row per attempt of every unit, with its dataset."""
    rows = [{"dataset": r.dataset, **a.model_dump(exclude={"schema_version"})} for r in runs for a in r.attempts]
    return pd.DataFrame(rows, columns=COLUMNS).astype({"latency_s": "float64", "cache_hit": "bool"})


def usage_metrics(runs: list[CaseRun], frame: pd.DataFrame | None = None) -> list[MetricRow]:
    """latency_p50/p95, tokens_total, cost_total and call counts per provider × dataset and "all".

    `frame`: `attempts_frame(runs)` when the caller already built it (it is also written as a table).
    """
    frame = attempts_frame(runs) if frame is None else frame
    out: list[MetricRow] = []
    for provider in dict.fromkeys(r.provider for r in runs):
        mine = frame[frame["provider"] == provider]
        cases = [r for r in runs if r.provider == provider]
        out += _group(provider, "all", mine, _n_cases(cases))
        for dataset in sorted({r.dataset for r in cases}):
            out += _group(provider, dataset, mine[mine["dataset"] == dataset],
                          _n_cases([r for r in cases if r.dataset == dataset]))
    return out


def _n_cases(runs: list[CaseRun]) -> int:
    """The cases among `runs`: with K epochs a case has K units, and n counts it once, as every other metric does
    (else a 1-epoch run gated against a K-epoch baseline would look like it lost cases)."""
    return len({(r.dataset, r.case_id) for r in runs})


def _group(provider: str, dataset: str, frame: pd.DataFrame, n_cases: int) -> list[MetricRow]:
    lm = frame[frame["site"] != "embed"]
    called = lm[~lm["cache_hit"]]
    latency = called["latency_s"].to_numpy(dtype=float)
    tokens = (called["prompt_tokens"].fillna(0).astype(float) + called["completion_tokens"].fillna(0).astype(float))
    costs = called["cost_usd"].dropna().astype(float)
    values = {
        "latency_p50": (float(np.percentile(latency, 50)) if len(latency) else float("nan"), len(latency)),
        "latency_p95": (float(np.percentile(latency, 95)) if len(latency) else float("nan"), len(latency)),
        "tokens_total": (float(tokens.sum()), len(called)),
        "cost_total": (float(costs.sum()) if len(costs) else float("nan"), len(costs)),
        "lm_attempts": (float(len(called)), n_cases),
        "lm_retries": (float((called["attempt"] > 1).sum()), n_cases),
        "lm_cache_hits": (float(lm["cache_hit"].sum()), n_cases),
        "embed_attempts": (float((frame["site"] == "embed").sum()), n_cases),
    }
    return [MetricRow(provider=provider, dataset=dataset, metric=name, value=value, ci_low=value, ci_high=value,
                      n=int(n), note=note(name)) for name, (value, n) in values.items()]
