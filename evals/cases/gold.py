"""A case's gold as the run record keeps it (`evals.record.CaseGold`): built here, where cases are known.

Why a projection and not the case itself: the record must not grow with what scoring never reads (the turns,
which `WriteRecord.payload` keeps already, the adapter's free-form meta), and it must carry what scoring does
read, so a run is re-scored from its own directory (`evals.report.rescore`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evals.cases.adapters import dataset_name
from evals.cases.dataset import Case, ExpectedFact, SeedMemory
from evals.record import CaseGold, CaseRun, FlaggedLabels, GoldStatement, GoldUpdate

MISATTRIBUTED = "evidence_spoken_by_other_speaker"  # the audit reason counted as gold_labels_misattributed


def _statement(item: ExpectedFact | SeedMemory) -> GoldStatement:
    return GoldStatement(text=item.text, subject=item.subject, owner=item.owner, kind=item.kind)


def _flagged(meta: Any) -> FlaggedLabels:
    """The adapter's flagged labels of one case, counted as the run report states them."""
    flagged = meta.get("flagged", []) if isinstance(meta, dict) else []
    if not flagged:
        return FlaggedLabels()
    return FlaggedLabels(flagged=len(flagged),
                         misattributed=sum(MISATTRIBUTED in f.get("reasons", []) for f in flagged),
                         left_out=sum(bool(f.get("clean_drop")) and meta.get("gold") == "clean" for f in flagged))


def case_gold(case: Case) -> CaseGold:
    """What `evals.scoring` and the report read from `case`, for its units' records."""
    expect = case.expect
    return CaseGold(facts=None if expect.facts is None else [_statement(f) for f in expect.facts],
                    seeds=[_statement(m) for m in case.memories], turns=len(case.turns),
                    profile={str(k): v for k, v in expect.profile.items()}, profile_excludes=list(expect.profile_excludes),
                    separate=[(a, b) for a, b in expect.separate],
                    updates=[GoldUpdate(old=u.old, new=u.new) for u in expect.updates],
                    absent=list(expect.absent), no_memory=expect.no_memory, flagged_labels=_flagged(case.meta))


def as_gold(case: Case | CaseGold) -> CaseGold:
    """The gold to score against, given a case (a caller scoring cases it holds) or a record's gold."""
    return case if isinstance(case, CaseGold) else case_gold(case)


def with_gold(runs: Iterable[CaseRun], cases: Iterable[Case]) -> list[CaseRun]:
    """`runs`, each record without its gold (written before v5) given its case's: for a run directory whose
    older units are scored from the dataset files (a --resume of it, or `rescore`)."""
    by_key = {(dataset_name(c), c.id): c for c in cases}
    out = []
    for run in runs:
        case = by_key.get((run.dataset, run.case_id)) if run.gold is None else None
        out.append(run.model_copy(update={"gold": case_gold(case)}) if case is not None else run)
    return out


__all__ = ["MISATTRIBUTED", "as_gold", "case_gold", "with_gold"]
