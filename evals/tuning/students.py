"""The modules an optimiser tunes: a MemoryProgram's own predictors, called as the engine calls them.

Each student holds the tuned `MemoryProgram` predictors under their program names, so a compiled
student maps straight back (`apply_to_program`) and `MemoryProgram.load` reads the result. Calls
go through the engine's `run_round` / `reconcile`, so prompts, strict parsing and failure classes
are the engine's. A failed call is returned as `error` in the prediction (never raised), so the
metric sees and counts every failure instead of the optimiser silently scoring it 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import dspy

from hymem.chain import ChainError, run_round
from hymem.models import Memory
from hymem.program import MemoryProgram
from hymem.reconciler import NewFact, reconcile


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
                if name == "extract_working":
                    out = run_round("extract_working", predictor, lm, trajectory=text).outputs
                    facts = [_fact(f, "experience") for f in out["experiences"]] + [_fact(f) for f in out["facts"]]
                else:
                    out = run_round("extract", predictor, lm, conversation=text).outputs
                    facts = [_fact(f) for f in out["facts"]]
                    profile.update(_profile(out.get("profile")))
                turn_facts.append(facts)
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


def _fact(fact: Any, kind: str = "fact") -> dict[str, str]:
    """An extracted fact as the engine stores it; empty text fails the write there, so it fails here too."""
    text = " ".join(str(fact.text).split())
    if not text:
        raise ChainError("extract", "parse", "an extracted fact has empty text")
    return {"text": text, "subject": str(fact.subject).strip() or "user", "owner": fact.owner, "kind": kind}


def _profile(profile: Any) -> dict[str, Any]:
    if profile is None:
        return {}
    data = profile.model_dump() if hasattr(profile, "model_dump") else dict(profile)
    return {k: v for k, v in data.items() if v not in (None, "")}


__all__ = ["ExtractorStudent", "ReconcilerStudent", "apply_to_program", "make_student"]
