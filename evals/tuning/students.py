"""The modules an optimiser tunes: a MemoryProgram's own predictors, called as the engine calls them.

Each student holds the tuned `MemoryProgram` predictors under their program names, so a compiled
student maps straight back (`apply_to_program`) and `MemoryProgram.load` reads the result. Calls
go through the engine's `run_round` / `reconcile`, and extracted facts through the engine's own
checks and subject filing (`hymem.client.extracted_facts`), so prompts, strict parsing, failure
classes and the facts scored are the engine's: a reply that would fail a write fails here too. A failed call is returned as `error` in the prediction (never raised), so the
metric sees and counts every failure instead of the optimiser silently scoring it 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import dspy

from hymem.chain import ChainError, run_round
from hymem.client import extracted_facts, extracted_profile
from hymem.models import Memory
from hymem.program import MemoryProgram
from hymem.reconciler import NewFact, reconcile
from hymem.render import parse_history


class ExtractorStudent(dspy.Module):
    """Extraction predictors (`extract_en`, `extract_zh`, `extract_working`) over all turns of one case."""

    def __init__(self, program: MemoryProgram, names: Sequence[str]):
        super().__init__()
        self.names = list(names)
        for name in self.names:
            setattr(self, name, getattr(program, name))

    def forward(self, turns: Sequence[tuple[str, str]]) -> dspy.Prediction:
        lm = dspy.settings.lm
        turn_facts: list[list[dict[str, str]]] = []
        profile: dict[str, Any] = {}
        try:
            for name, text in turns:
                predictor = getattr(self, name, None)
                if not isinstance(predictor, dspy.Predict):
                    raise ChainError(name, "other", f"this student holds no predictor {name!r}")
                msgs = parse_history(text, history_limit=len(text) + 1)  # the turn's messages, as rendered
                if name == "extract_working":
                    out = run_round("extract_working", predictor, lm, trajectory=text).outputs
                    facts = extracted_facts(out, msgs, ("experiences", "experience"), ("facts", "fact"))
                else:
                    out = run_round("extract", predictor, lm, conversation=text).outputs
                    facts = extracted_facts(out, msgs, ("facts", "fact"))
                    profile.update(extracted_profile(out.get("profile"), msgs))
                turn_facts.append([_fact_dict(f) for f in facts])
        except ChainError as exc:
            return dspy.Prediction(turn_facts=turn_facts, profile=profile, error=str(exc), error_kind=exc.kind)
        return dspy.Prediction(turn_facts=turn_facts, profile=profile, error=None, error_kind=None)


class ReconcilerStudent(dspy.Module):
    """The `reconcile` predictor over one set of new facts and existing memories, validated as the engine does."""

    def __init__(self, program: MemoryProgram):
        super().__init__()
        self.reconcile = program.reconcile

    def forward(self, new_facts: str, existing: str) -> dspy.Prediction:
        facts = [NewFact(text=f["text"], subject=f["subject"], owner=f["owner"]) for f in json.loads(new_facts)]
        candidates = [Memory(id=m["id"], user_id="tune", text=m["text"], subject=m["subject"], owner=m["owner"])
                      for m in json.loads(existing)]
        try:
            plan = reconcile(self.reconcile, dspy.settings.lm, facts, candidates)
        except ChainError as exc:  # includes ops naming unknown ids: the engine fails such a write
            return dspy.Prediction(ops=[], applied=[], error=str(exc), error_kind=exc.kind)
        return dspy.Prediction(ops=plan.proposed, applied=[asdict(op) for op in plan.ops], error=None,
                               error_kind=None)


def make_student(kind: str, program: MemoryProgram, names: Sequence[str]) -> dspy.Module:
    """A student over `program`'s predictors `names` (the reconciler has exactly one)."""
    if kind == "reconciler":
        return ReconcilerStudent(program)
    return ExtractorStudent(program, names)


def apply_to_program(student: dspy.Module, program: MemoryProgram) -> int:
    """Copy each tuned predictor's instructions and demos onto `program`; returns demos dropped.

    A demo carrying none of its predictor's fields (a labelled case-level example) never reaches
    the prompt, so it is dropped rather than saved.
    """
    dropped = 0
    for name, tuned in student.named_predictors():
        target = getattr(program, name)
        fields = set(tuned.signature.fields)
        demos = [d for d in tuned.demos if fields & set(d.keys())]
        dropped += len(tuned.demos) - len(demos)
        target.signature = tuned.signature
        target.demos = demos
    return dropped


def _fact_dict(fact: NewFact) -> dict[str, str]:
    return {"text": fact.text, "subject": fact.subject, "owner": fact.owner, "kind": fact.kind}


__all__ = ["ExtractorStudent", "ReconcilerStudent", "apply_to_program", "make_student"]
