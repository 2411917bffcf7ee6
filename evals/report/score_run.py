"""Score a run's units and write its report: the step between the record and the tables a user reads.

Why here, not in the runner: the run stage replays and records; scoring and the report read that record, so the
same function serves a fresh run, a re-scored one (`evals.report.rescore`) and the pipeline (`evals.pipeline`).
Every unit is scored against the gold its record carries (`CaseRun.gold`), never against the dataset files: a run
directory is scored the same wherever its datasets went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals.cases.audit import flagged_label_tallies
from evals.record import CaseGold, CaseRun, Manifest
from evals.report.run_report import write_report
from evals.scoring import DEFAULT_MATCHER, attribution_metrics, case_rows, facts_frame, ops_frame, score_pairs
from evals.scoring.aggregate import aggregate
from evals.scoring.usage import attempts_frame, usage_metrics


class NoGoldError(ValueError):
    """Units whose records carry no gold (written before schema v5) and were given none from their dataset."""


def gold_pairs(runs: list[CaseRun]) -> list[tuple[CaseGold, CaseRun]]:
    """(gold, unit) for every unit, from its own record; NoGoldError naming the units that carry none."""
    missing = [f"{r.provider}/{r.dataset}/{r.case_id}" for r in runs if r.gold is None]
    if missing:
        raise NoGoldError(f"{len(missing)} unit(s) carry no gold (records older than schema v5), e.g. "
                          f"{', '.join(missing[:3])}: give them their cases' gold first (evals.cases.gold.with_gold)")
    return [(r.gold, r) for r in runs if r.gold is not None]


def report_run(run_dir: Path, manifest: Manifest, runs: list[CaseRun], matcher: Any = None) -> str:
    """Score every unit against the gold it recorded and write the report; returns the verdict."""
    matcher = matcher or DEFAULT_MATCHER
    pairs = gold_pairs(runs)
    once = score_pairs(pairs, matcher)
    scored = attribution_metrics(pairs, manifest.seed, matcher, once)
    labels = aggregate(flagged_label_tallies(runs, list(dict.fromkeys(r.provider for r in runs))), seed=manifest.seed)
    attempts = attempts_frame(runs)
    if (health := getattr(matcher, "health", None)) is not None:  # the judge's failed calls, said in the report
        manifest.matcher = {**(manifest.matcher or {"spec": matcher.spec}), **health()}
    judge = getattr(matcher, "attempts_frame", None)
    if judge is not None:  # the LLM judge's own calls, site `judge`
        import pandas as pd

        attempts = pd.concat([attempts, judge()], ignore_index=True) if len(attempts) else judge()
    return write_report(run_dir, manifest, runs, extra_metrics=[*scored, *usage_metrics(runs), *labels],
                        extra_case_rows=case_rows(pairs, matcher, once),
                        extra_tables={"facts": facts_frame(pairs, matcher, once), "ops": ops_frame(pairs),
                                      "attempts": attempts})
