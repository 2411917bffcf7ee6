"""Score a run's units and write its report: the step between the record and the tables a user reads.

Why here, not in the runner: the run stage replays and records; scoring and the report read that record, so the
same function serves a fresh run, a re-scored one (`evals.report.rescore`) and the pipeline (`evals.pipeline`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evals.cases.audit import flagged_label_tallies
from evals.cases.dataset import Case
from evals.record import CaseRun, Manifest
from evals.report.run_report import write_report
from evals.scoring import DEFAULT_MATCHER, attribution_metrics, case_rows, facts_frame, ops_frame, score_pairs
from evals.scoring.aggregate import aggregate
from evals.scoring.usage import attempts_frame, usage_metrics


def report_run(run_dir: Path, manifest: Manifest, cases: list[Case], runs: list[CaseRun], matcher: Any = None) -> str:
    """Score every unit against its case's gold (each case once) and write the report; returns the verdict."""
    matcher = matcher or DEFAULT_MATCHER
    by_id = {c.id: c for c in cases}
    pairs = [(by_id[r.case_id], r) for r in runs if r.case_id in by_id]
    once = score_pairs(pairs, matcher)
    scored = attribution_metrics(pairs, manifest.seed, matcher, once)
    labels = aggregate(flagged_label_tallies(cases, list(dict.fromkeys(r.provider for r in runs))), seed=manifest.seed)
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
