"""The optimiser's metric: the harness's own scorer on one case, plus text feedback for GEPA.

Extractor score on a case = mean of the defined parts among fact F1, subject accuracy and owner
accuracy of the proposed facts (the scorer's `proposed_*` tallies; accuracies are undefined when
no prediction matched a gold fact; F1 is 1 when nothing was expected and nothing proposed).

Reconciler score on a case = (right decisions - cross-subject merges - unsupported deletes) / new
facts, floored at 0. A decision is the first non-DELETE op naming a new fact: an expected ADD
needs ADD; an expected SUPERSEDE of id k accepts SUPERSEDE/UPDATE of k, or ADD plus DELETE of k;
an expected NOOP of k accepts NOOP/UPDATE/SUPERSEDE of k. A cross-subject merge both gets its
fact's decision wrong and is subtracted again.

A prediction that failed (the student reports `error`) scores 0 for the optimiser and is counted
in an `ErrorLog`; the tuning report carries the count.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy
from pydantic import BaseModel, Field

from evals.cases.dataset import Case
from evals.record import CaseRun, Codes, WriteRecord
from evals.scoring import DEFAULT_MATCHER, Matcher, facts_frame, score_pairs
from evals.scoring.matcher import same_subject, subject_text_mismatch
from evals.scoring.merges import MERGE_OPS


class ErrorSummary(BaseModel):
    """Failed predictions during one phase of tuning (never folded into a score silently)."""

    runs: int = 0  # predictions scored
    errors: int = 0  # of which failed (model error, unparseable or invalid reply)
    by_kind: dict[str, int] = Field(default_factory=dict)  # failure class -> count
    samples: list[str] = Field(default_factory=list)  # first few "case_id: message" witnesses


class ErrorLog:
    """Thread-safe tally of scored and failed predictions."""

    def __init__(self, keep: int = 5):
        self._lock = threading.Lock()
        self._runs = 0
        self._kinds: Counter[str] = Counter()
        self._samples: list[str] = []
        self._keep = keep

    def record(self, case_id: str, error: str | None, kind: str | None) -> None:
        with self._lock:
            self._runs += 1
            if error is not None:
                self._kinds[kind or "other"] += 1
                if len(self._samples) < self._keep:
                    self._samples.append(f"{case_id}: {error}")

    def summary(self) -> ErrorSummary:
        with self._lock:
            return ErrorSummary(runs=self._runs, errors=sum(self._kinds.values()), by_kind=dict(self._kinds),
                                samples=list(self._samples))


@dataclass
class Judgement:
    """One case's score, what went into it, and feedback naming what was wrong."""

    score: float
    feedback: str
    error: str | None = None
    parts: dict[str, float] = field(default_factory=dict)


class CaseMetric:
    """`metric(gold, pred, trace=None, pred_name=None, pred_trace=None)` for every DSPy optimiser.

    Returns a float, or `dspy.Prediction(score=, feedback=)` when `feedback=True` (GEPA). Only
    whole-program calls (`pred_name is None`) are counted, since GEPA re-asks per predictor.
    """

    def __init__(self, kind: str, cases: Mapping[str, Case], errors: ErrorLog, feedback: bool = False,
                 matcher: Matcher | None = None):
        self.kind, self.cases, self.errors, self.feedback = kind, dict(cases), errors, feedback
        self.matcher = matcher or DEFAULT_MATCHER  # tune --matcher: how proposed facts are matched to gold

    def judge(self, gold: dspy.Example, pred: Any) -> Judgement:
        case = self.cases[gold.case_id]
        if pred is None or getattr(pred, "error", None) is not None:
            message = getattr(pred, "error", None) or "the program returned nothing"
            kind = getattr(pred, "error_kind", None) or "other"
            return Judgement(0.0, f"The reply was rejected ({kind}): {message}. Answer with exactly one JSON object "
                                  "holding every output field, with valid values.", error=message)
        if self.kind == "reconciler":
            return judge_reconcile(gold, pred)
        return judge_extraction(case, pred, self.matcher)

    def __call__(self, gold: dspy.Example, pred: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> float | dspy.Prediction:
        judged = self.judge(gold, pred)
        if pred_name is None:
            self.errors.record(gold.case_id, judged.error, getattr(pred, "error_kind", None))
        if self.feedback:
            return dspy.Prediction(score=judged.score, feedback=judged.feedback)
        return judged.score


# ---------------------------------------------------------------------------------------------- extractor

def extraction_run(case: Case, pred: Any) -> CaseRun:
    """The prediction as a CaseRun the scorer reads: one write per turn carrying its proposed facts."""
    offset = 1 if case.memories else 0
    path = "working" if case.path == "working" else "chat"
    writes = [WriteRecord(index=i + offset, path=path, request_id=f"{case.id}/w{i + offset}", success=True, codes=Codes(),
                          proposed_facts=facts) for i, facts in enumerate(pred.turn_facts)]
    return CaseRun(case_id=case.id, dataset="tune", provider="tune", lang=case.lang, tags=list(case.tags), status="ok",
                   writes=writes, profile=dict(pred.profile or {}))


def _ratio(tally: tuple[float, float] | None) -> float | None:
    if tally is None or tally[1] == 0:
        return None
    return tally[0] / tally[1]


def judge_extraction(case: Case, pred: Any, matcher: Matcher | None = None) -> Judgement:
    run = extraction_run(case, pred)
    matcher = matcher or DEFAULT_MATCHER
    scored = score_pairs([(case, run)], matcher)
    tallies = scored[0].scores.tallies
    f1 = _ratio(tallies.get("proposed_fact_f1"))
    parts = {"fact_f1": 1.0 if f1 is None else f1}
    for name in ("subject_accuracy", "owner_accuracy"):
        value = _ratio(tallies.get(f"proposed_{name}"))
        if value is not None:
            parts[name] = value
    score = sum(parts.values()) / len(parts)
    head = f"Score {score:.2f}: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in parts.items())
    lines = _extraction_problems(case, run, facts_frame([(case, run)], matcher, scored))
    if not lines:
        lines = ["Every expected fact was found with the right subject and owner, and nothing extra."]
    return Judgement(score, "\n".join([head + ".", *lines]), parts=parts)


def _extraction_problems(case: Case, run: CaseRun, frame: Any) -> list[str]:
    lines: list[str] = []
    for row in frame[frame["stage"] == "proposed"].to_dict("records"):
        gold, pred = row["gold_text"], row["pred_text"]
        if _given(gold) and _given(pred):
            if row["subject_ok"] is False:
                lines.append(f'expected "{gold}" (subject {row["gold_subject"]}), got "{pred}" with subject '
                             f'{row["pred_subject"]}')
            if row["owner_ok"] is False:
                lines.append(f'expected "{gold}" with owner {row["gold_owner"]}, got owner {row["pred_owner"]}')
        elif _given(gold):
            lines.append(f'missed "{gold}" (subject {row["gold_subject"]}, owner {row["gold_owner"]})')
        elif _given(pred) and not _given(row["note"]):
            lines.append(f'extra "{pred}" (subject {row["pred_subject"]}): not a fact the case expects')
    for write in run.writes:
        for fact in write.proposed_facts:
            if subject_text_mismatch(fact["text"], fact.get("subject"), fact.get("kind", "fact")):
                lines.append(f'"{fact["text"]}" is filed under subject {fact.get("subject")}, but the sentence '
                             "does not name that subject")
    values = [str(v).casefold() for v in (run.profile or {}).values() if v is not None]
    for banned in case.expect.profile_excludes:
        if any(banned.casefold() in v for v in values):
            lines.append(f'the profile holds "{banned}", which is not about the current user')
    return lines


def _given(value: Any) -> bool:
    """A frame cell holds a value (not None / NA)."""
    return value is not None and value == value and str(value) != "<NA>"


# --------------------------------------------------------------------------------------------- reconciler

def judge_reconcile(gold: dspy.Example, pred: Any) -> Judgement:
    facts = json.loads(gold.new_facts)
    existing = {m["id"]: m for m in json.loads(gold.existing)}
    expected = {op["fact"]: op for op in gold.ops}
    proposed = [dict(op) for op in pred.ops]
    deletes = {op.get("id") for op in proposed if op.get("op") == "DELETE"}
    decision: dict[int, dict] = {}
    for op in proposed:
        if op.get("op") != "DELETE" and op.get("fact") is not None:
            decision.setdefault(op["fact"], op)
    lines: list[str] = []
    right = 0
    for i, fact in enumerate(facts):
        want, got = expected[i], decision.get(i)
        ok = _decision_ok(want, got, deletes)
        right += ok
        if not ok:
            lines.append(f'new fact {i} "{fact["text"]}" (subject {fact["subject"]}): expected '
                         f"{_describe(want, existing)}, got {_describe(got, existing)}")
    to_go = {op["id"] for op in gold.ops if op["op"] == "SUPERSEDE"}
    cross = stray = 0
    for op in proposed:
        name, target = op.get("op"), existing.get(op.get("id"))
        if name not in MERGE_OPS or target is None:
            continue
        index = op.get("fact")
        subjects = [facts[index]["subject"]] if isinstance(index, int) and 0 <= index < len(facts) else \
            [f["subject"] for f in facts]
        if not any(same_subject(s, target["subject"]) for s in subjects):
            cross += 1
            lines.append(f'{name} of id {target["id"]} ("{target["text"]}", subject {target["subject"]}) crosses '
                         "subjects: never UPDATE, SUPERSEDE or DELETE a memory about someone else")
        elif name == "DELETE" and target["id"] not in to_go:
            stray += 1
            lines.append(f'DELETE of id {target["id"]} ("{target["text"]}") is not supported by any new fact')
    n = max(len(facts), 1)
    score = max(0.0, (right - cross - stray) / n)
    parts = {"decision_accuracy": right / n, "cross_subject_merges": float(cross), "unsupported_deletes": float(stray)}
    head = f"Score {score:.2f}: {right}/{len(facts)} decisions right, {cross} cross-subject merge(s), " \
           f"{stray} unsupported delete(s)."
    return Judgement(score, "\n".join([head, *(lines or ["Every decision was right."])]), parts=parts)


def _decision_ok(want: dict, got: dict | None, deletes: set) -> bool:
    if got is None:
        return False
    if want["op"] == "ADD":
        return got.get("op") == "ADD"
    if want["op"] == "SUPERSEDE":
        return (got.get("op") in ("SUPERSEDE", "UPDATE") and got.get("id") == want["id"]) or \
            (got.get("op") == "ADD" and want["id"] in deletes)
    return got.get("op") in ("NOOP", "UPDATE", "SUPERSEDE") and got.get("id") == want["id"]


def _describe(op: dict | None, existing: Mapping[int, dict]) -> str:
    if op is None:
        return "no op (the fact would be lost)"
    target_id = op.get("id")
    target = existing.get(target_id) if isinstance(target_id, int) else None
    if op.get("op") == "ADD" or target is None:
        return str(op.get("op"))
    return f'{op.get("op")} of id {target["id"]} ("{target["text"]}", subject {target["subject"]})'


__all__ = ["CaseMetric", "ErrorLog", "ErrorSummary", "Judgement", "extraction_run", "judge_extraction",
           "judge_reconcile"]
