"""Attribution: did the turns leave the gold facts, each under the right subject and owner?

Predictions are scored twice: as the extractor proposed them and as they were stored. They are
matched one-to-one to the gold on text alone; subject and owner are then judged on the matched
pairs, so "John is a nurse" filed as "The user is a nurse" is counted as a third party's fact
given to the user, not as a missing fact plus an extra one. Seeded memories are never predictions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd
from pydantic import BaseModel, Field

from evals.cases.dataset import Case
from evals.cases.gold import as_gold
from evals.core.subject_reading import person_class as subject_class
from evals.core.subject_reading import read_subject as subject_of
from evals.core.subject_reading import same_person as same_subject
from evals.record import CaseGold, CaseMetricRow, CaseRun, FactRow, GoldStatement, MetricRow, columns, pandas_dtypes
from evals.record.tally import CaseTally
from evals.scoring.aggregate import aggregate, rate
from evals.scoring.matcher import DEFAULT_MATCHER, Matcher, subject_text_mismatch
from evals.scoring.merges import Tally, merge_error_tallies, merge_tallies, turn_memories, turn_writes

CLASSES = ("user", "named", "assistant")
STAGES = {"stored": "", "proposed": "proposed_"}  # stage -> metric-name prefix
FACTS_SCHEMA = pandas_dtypes("facts")  # facts.parquet: columns declared in evals.record
FACTS_COLUMNS = columns("facts")
JUDGE_ERROR = "judge_error: undecided, counted as not matched"  # the note of a fact a failed judge call touched
GoldSource = Case | CaseGold  # what a unit is scored against: its record's gold, or a case a caller holds


class Preparer(Protocol):
    """What `prepare_case` hands a case's texts to: a `Matcher`, or anything that collects them."""

    def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None: ...


class CaseScores(BaseModel):
    """One (provider, case): per-metric (numerator, denominator); an infra-error case holds all-wrong units."""

    case_id: str
    dataset: str
    provider: str
    lang: str
    epoch: int = 0  # the repeat of the case (run --epochs)
    infra_error: bool  # status was infra_error: excluded from plain metrics, all wrong in *_with_errors
    tallies: dict[str, tuple[float, float]] = Field(default_factory=dict)  # metric -> (numerator, denominator)
    notes: dict[str, int] = Field(default_factory=dict)  # metric -> units skipped (e.g. unknown merge targets)


def _predictions(run: CaseRun, stage: str) -> list[dict[str, Any]]:
    if stage == "stored":
        return turn_memories(run)
    seen: set[tuple[str, str]] = set()
    out: list[dict[str, Any]] = []
    for write in turn_writes(run):
        for fact in write.proposed_facts:
            key = (" ".join(str(fact.get("text", "")).split()).casefold(), subject_class(fact.get("subject")))
            if key not in seen:
                seen.add(key)
                out.append({**fact, "write": write.index})
    return out


def _replaced_later(run: CaseRun, fact: dict[str, Any]) -> bool:
    """A proposed fact whose memory a later write replaced: right when proposed, so not an extra."""
    ids = {op.memory_id for w in run.writes if w.index == fact.get("write") for op in w.ops
           if op.op in ("ADD", "SUPERSEDE", "UPDATE") and op.text == fact.get("text")}
    return any(op.target_id in ids and op.op in ("UPDATE", "SUPERSEDE", "DELETE") and not op.refused
               for w in run.writes if w.index > fact.get("write", 0) for op in w.ops)


def _exclusion(gold: CaseGold, run: CaseRun, fact: dict[str, Any], matcher: Matcher) -> str | None:
    """Why an unmatched proposed fact is left out of precision, if it is."""
    if any(matcher.same_fact(m.text, m.subject, fact["text"], fact.get("subject")) for m in gold.seeds):
        return "restates a seeded memory"
    if _replaced_later(run, fact):
        return "replaced by a later write"
    return None


def _stage(case: CaseGold, run: CaseRun, stage: str, matcher: Matcher) -> tuple[dict[str, Tally], list[FactRow]]:
    """Tallies and per-fact rows of one stage."""
    gold = case.facts
    preds = _predictions(run, stage)
    prefix = STAGES[stage]
    tallies: dict[str, Tally] = {}
    mismatched = sum(subject_text_mismatch(p["text"], p.get("subject"), p.get("kind", "fact")) for p in preds)
    tallies[f"{prefix}subject_text_mismatch_rate"] = (mismatched, len(preds))
    if gold is None:
        return tallies, []
    pairs = matcher.assign([(g.text, g.subject) for g in gold], [(p["text"], p.get("subject")) for p in preds])
    rows: list[FactRow] = []
    by_gold = {gi: (pi, score) for gi, pi, score in pairs}
    matched_preds = {pi for _, pi, _ in pairs}
    confusion: dict[tuple[str, str], int] = defaultdict(int)
    subject_ok = owner_ok = 0
    for gi, g in enumerate(gold):
        pi, score = by_gold.get(gi, (None, None))
        p = preds[pi] if pi is not None else None
        undecided = any(matcher.undecided(g.text, q["text"]) for q in preds)
        row = _fact_row(run, stage, g, p, score, JUDGE_ERROR if undecided else None)
        if p is not None:
            confusion[(subject_class(g.subject), subject_class(p.get("subject")))] += 1  # the row's classes
            subject_ok += bool(row["subject_ok"])
            owner_ok += bool(row["owner_ok"])
        rows.append(row)
    excluded = 0
    for pi, p in enumerate(preds):
        if pi not in matched_preds:
            note = _exclusion(case, run, p, matcher) if stage == "proposed" else None
            excluded += note is not None
            if note is None and any(matcher.undecided(g.text, p["text"]) for g in gold):
                note = JUDGE_ERROR
            rows.append(_fact_row(run, stage, None, p, None, note))
    tp = len(pairs)
    n_pred = len(preds) - excluded
    tallies[f"{prefix}fact_precision"] = (tp, n_pred)
    tallies[f"{prefix}fact_recall"] = (tp, len(gold))
    tallies[f"{prefix}fact_f1"] = (2 * tp, n_pred + len(gold))
    tallies[f"{prefix}subject_accuracy"] = (subject_ok, tp)
    tallies[f"{prefix}owner_accuracy"] = (owner_ok, tp)
    for gold_class in CLASSES:
        row_total = sum(confusion[(gold_class, pred_class)] for pred_class in CLASSES)
        for pred_class in CLASSES:
            tallies[f"{prefix}subject_confusion_{gold_class}_to_{pred_class}"] = (
                confusion[(gold_class, pred_class)], row_total)
    named = sum(confusion[("named", pred_class)] for pred_class in CLASSES)
    assistant = sum(confusion[("assistant", pred_class)] for pred_class in CLASSES)
    tallies[f"{prefix}third_party_to_user_rate"] = (confusion[("named", "user")], named)
    tallies[f"{prefix}ai_to_user_rate"] = (confusion[("assistant", "user")], assistant)
    return tallies, rows


def _fact_row(run: CaseRun, stage: str, gold: GoldStatement | None, pred: dict | None, score: float | None,
              note: str | None = None) -> FactRow:
    matched = pred if gold is not None else None  # the prediction paired with a gold fact, if any
    return FactRow(
        provider=run.provider, dataset=run.dataset, case_id=run.case_id, epoch=run.epoch, stage=stage,
        gold_text=gold.text if gold else None, gold_subject=gold.subject if gold else None,
        gold_owner=gold.owner if gold else None,
        pred_text=pred.get("text") if pred else None, pred_subject=pred.get("subject") if pred else None,
        pred_owner=pred.get("owner") if pred else None, match_score=score, matched=matched is not None,
        subject_ok=same_subject(gold.subject, matched.get("subject")) if gold and matched is not None else None,
        owner_ok=gold.owner == matched.get("owner") if gold and matched is not None else None,
        gold_class=subject_class(gold.subject) if gold is not None else None,
        pred_class=subject_class(pred.get("subject")) if pred is not None else None,
        note=note)


def _case_tallies(expect: CaseGold, run: CaseRun, matcher: Matcher) -> dict[str, Tally]:
    """Tallies that do not depend on the stage: profile and absent statements."""
    tallies: dict[str, Tally] = {}
    if run.profile is not None:
        tallies.update(_profile_tallies(expect, run.profile))
    if expect.absent:
        violated = sum(any(matcher.same_fact(text, subject_of(text), m["text"], m.get("subject"))
                           for m in run.memories) for text in expect.absent)
        tallies["absent_violation_rate"] = (violated, len(expect.absent))
    return tallies


def _profile_tallies(expect: CaseGold, profile: dict[str, Any]) -> dict[str, Tally]:
    """The profile metrics, for an engine that keeps a profile (one that keeps none is not measured on them)."""
    tallies: dict[str, Tally] = {}
    values = [str(v).casefold() for v in profile.values() if v is not None]
    must_be_empty = [key for key, value in expect.profile.items() if value is None]  # e.g. an unnamed user's name
    if expect.profile_excludes or must_be_empty:
        leak = any(banned.casefold() in v for banned in expect.profile_excludes for v in values)
        leak = leak or any(str(profile.get(key) or "").strip() for key in must_be_empty)
        tallies["profile_leak_rate"] = (float(leak), 1)
    if "name" in expect.profile:
        got = str(profile.get("name") or "").strip().casefold()
        want = (expect.profile["name"] or "").strip().casefold()
        tallies["profile_name_accuracy"] = (float(got == want), 1)
    fields = _profile_fields(expect)
    if fields:
        right = sum(str(profile.get(key) or "").strip().casefold() == str(want).strip().casefold()
                    for key, want in fields.items())
        tallies["profile_field_accuracy"] = (right, len(fields))
    return tallies


def _profile_fields(expect: CaseGold) -> dict[str, str]:
    """The profile values the case expects at its end, besides the name (scored on its own): e.g. the city the
    user last moved to. A field expected empty (None) is profile_leak_rate's."""
    return {key: value for key, value in expect.profile.items() if key != "name" and value is not None}


def _error_tallies(expect: CaseGold, keeps_profile: bool = True) -> dict[str, Tally]:
    """An infra-error case counted as all wrong, in the units its gold implies (at least one); the profile
    metrics only for an engine that keeps a profile."""
    tallies: dict[str, Tally] = {}
    for prefix in STAGES.values():
        tallies[f"{prefix}subject_text_mismatch_rate"] = (1, 1)
        if expect.facts is None:
            continue
        n_gold = len(expect.facts)
        classes = [subject_class(f.subject) for f in expect.facts]
        tallies[f"{prefix}fact_precision"] = (0, max(n_gold, 1))
        tallies[f"{prefix}fact_recall"] = (0, n_gold)
        tallies[f"{prefix}fact_f1"] = (0, 2 * max(n_gold, 1))
        tallies[f"{prefix}subject_accuracy"] = (0, n_gold)
        tallies[f"{prefix}owner_accuracy"] = (0, n_gold)
        tallies[f"{prefix}third_party_to_user_rate"] = (classes.count("named"), classes.count("named"))
        tallies[f"{prefix}ai_to_user_rate"] = (classes.count("assistant"), classes.count("assistant"))
    if keeps_profile and (expect.profile_excludes or None in expect.profile.values()):
        tallies["profile_leak_rate"] = (1, 1)
    if keeps_profile and "name" in expect.profile:
        tallies["profile_name_accuracy"] = (0, 1)
    if keeps_profile and (fields := _profile_fields(expect)):
        tallies["profile_field_accuracy"] = (0, len(fields))
    if expect.absent:
        tallies["absent_violation_rate"] = (len(expect.absent), len(expect.absent))
    return {**tallies, **merge_error_tallies(expect)}


@dataclass
class ScoredCase:
    """A case scored once: its tallies and its facts.parquet rows (both stages)."""

    scores: CaseScores
    rows: list[FactRow] = field(default_factory=list)


def prepare_case(case: GoldSource, run: CaseRun, matcher: Preparer) -> None:
    """Hand the matcher every text of the case at once: gold side (facts, absent statements, seeds,
    separate/update statements) and prediction side (proposed and stored facts, live memories)."""
    expect = as_gold(case)
    gold = [f.text for f in expect.facts or []] + list(expect.absent) + [m.text for m in expect.seeds]
    gold += [t for pair in expect.separate for t in pair] + [t for u in expect.updates for t in (u.old, u.new)]
    pred = [p["text"] for stage in STAGES for p in _predictions(run, stage)] + [m["text"] for m in run.memories]
    matcher.prepare(list(dict.fromkeys(gold)), list(dict.fromkeys(pred)))


def score_one(case: GoldSource, run: CaseRun, matcher: Matcher = DEFAULT_MATCHER) -> ScoredCase:
    """Tallies and fact rows of one (gold, run), each matrix built once."""
    gold = as_gold(case)

    def scores(tallies: dict[str, Tally], notes: dict[str, int] | None = None) -> CaseScores:
        return CaseScores(case_id=run.case_id, dataset=run.dataset, provider=run.provider, lang=run.lang,
                          epoch=run.epoch, infra_error=run.status == "infra_error", tallies=tallies, notes=notes or {})

    rows: list[FactRow] = []
    if run.status == "infra_error":
        rows = [_fact_row(run, stage, g, None, None, "infra_error") for stage in STAGES for g in gold.facts or []]
        return ScoredCase(scores=scores(_error_tallies(gold, run.profile is not None)), rows=rows)
    prepare_case(gold, run, matcher)
    tallies: dict[str, Tally] = {}
    for stage in STAGES:
        stage_tallies, stage_rows = _stage(gold, run, stage, matcher)
        tallies.update(stage_tallies)
        rows += stage_rows
    tallies.update(_case_tallies(gold, run, matcher))
    merges, notes = merge_tallies(gold, run, matcher)
    return ScoredCase(scores=scores({**tallies, **merges}, notes), rows=rows)


def score_pairs(pairs: Sequence[tuple[GoldSource, CaseRun]], matcher: Matcher = DEFAULT_MATCHER) -> list[ScoredCase]:
    return [score_one(case, run, matcher) for case, run in pairs]


def score_case(case: GoldSource, run: CaseRun, matcher: Matcher = DEFAULT_MATCHER) -> CaseScores:
    """Pure: the case's per-metric numerators and denominators."""
    return score_one(case, run, matcher).scores


def facts_frame(pairs: Sequence[tuple[GoldSource, CaseRun]], matcher: Matcher = DEFAULT_MATCHER,
                scored: list[ScoredCase] | None = None) -> pd.DataFrame:
    """One row per gold fact (matched or missed) and per unmatched prediction, for each stage."""
    scored = scored if scored is not None else score_pairs(pairs, matcher)
    rows = [{**row, "matcher": matcher.spec} for one in scored for row in one.rows]
    return pd.DataFrame(rows, columns=FACTS_COLUMNS).astype(FACTS_SCHEMA)


def _is_confusion(metric: str) -> bool:
    return "subject_confusion_" in metric


SKIPPED = "op(s) skipped: target subject unknown"  # what a CaseScores note counts, said in the metric's row


def case_tallies(scored: list[ScoredCase]) -> list[CaseTally]:
    """Every scored case's tallies: each metric, then its `_with_errors` twin (infra-error cases count only there,
    as all wrong; the subject confusion has no twin). A denominator of 0 is kept: the case was scored for it."""
    out = []
    for one in scored:
        s = one.scores
        for metric, (num, den) in s.tallies.items():
            names = [] if s.infra_error else [metric]
            names += [] if _is_confusion(metric) else [f"{metric}_with_errors"]
            out += [CaseTally(provider=s.provider, dataset=s.dataset, case_id=s.case_id, metric=name,
                              num=float(num), den=float(den), epoch=s.epoch, skipped=s.notes.get(metric, 0),
                              skip_reason=SKIPPED) for name in names]
    return out


def case_rows(pairs: Sequence[tuple[GoldSource, CaseRun]], matcher: Matcher = DEFAULT_MATCHER,
              scored: list[ScoredCase] | None = None) -> list[CaseMetricRow]:
    """Per-case numerator and denominator of every metric ({provider, dataset, case_id, metric, num, den}),
    for the report's case_metrics table; an infra-error case appears only under `*_with_errors`."""
    return [t.case_row() for t in case_tallies(scored if scored is not None else score_pairs(pairs, matcher))
            if t.den > 0]


def attribution_metrics(pairs: Sequence[tuple[GoldSource, CaseRun]], seed: int,
                        matcher: Matcher = DEFAULT_MATCHER, scored: list[ScoredCase] | None = None
                        ) -> list[MetricRow]:
    """Metric rows per provider x dataset and per provider over all datasets (dataset="all"); a
    metric no case of a group contributes to has no row. Infra errors are counted once, by the report
    (`infra_error_rate`). Groups come sorted by (provider, dataset)."""
    rows = aggregate(case_tallies(scored if scored is not None else score_pairs(pairs, matcher)), seed=seed,
                     reducers=rate(n="cases"))
    return sorted(rows, key=lambda r: (r.provider, r.dataset))


__all__ = ["CLASSES", "FACTS_COLUMNS", "FACTS_SCHEMA", "CaseScores", "GoldSource", "ScoredCase", "attribution_metrics",
           "case_rows", "case_tallies", "facts_frame", "prepare_case", "score_case", "score_one", "score_pairs"]
