"""Reconcile: decide how new facts change a user's memories, and refuse unsafe decisions.

The model proposes ops; the engine validates them strictly (an id not among
the candidates is a parse failure, never a silent ADD) and refuses any
UPDATE/SUPERSEDE/DELETE across subjects in code, whatever the prompt said.
Both the proposal and what was applied are returned for the trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import dspy

from hymem.chain import ChainError, Round, run_round
from hymem.models import Memory
from hymem.subjects import canonical_subject as canonical_subject  # re-exported: the rule lives in hymem.subjects
from hymem.subjects import fact_subject, same_subject


@dataclass
class NewFact:
    """A fact about to be written, with its vector computed before any row is."""

    text: str
    subject: str
    owner: str
    kind: str = "fact"
    vector: Any = None


@dataclass
class PlannedOp:
    """An op the engine will apply. `fact` indexes the new facts, `target_id` an existing memory."""

    op: str
    fact: int | None = None
    target_id: int | None = None
    refused: str | None = None  # set when the model's op was refused or rewritten


@dataclass
class ReconcilePlan:
    proposed: list[dict[str, Any]]
    ops: list[PlannedOp]
    candidates: list[Memory] = field(default_factory=list)
    round: Round | None = None


def direct_plan(facts: list[NewFact]) -> ReconcilePlan:
    """RECONCILE_ENABLED=false: every extracted fact is written as it is."""
    ops = [PlannedOp("ADD", fact=i) for i in range(len(facts))]
    return ReconcilePlan(proposed=[], ops=ops)


def reconcile(predictor: dspy.Predict, lm: dspy.BaseLM, facts: list[NewFact], candidates: list[Memory]) -> ReconcilePlan:
    """One reconcile round over `facts` and their retrieved `candidates`; raises ChainError."""
    new_facts = [{"index": i, "text": f.text, "subject": f.subject, "owner": f.owner} for i, f in enumerate(facts)]
    existing = [{"id": m.id, "text": m.text, "subject": m.subject, "owner": m.owner} for m in candidates]
    round_ = run_round(
        "reconcile",
        predictor,
        lm,
        new_facts=json.dumps(new_facts, ensure_ascii=False),
        existing=json.dumps(existing, ensure_ascii=False),
    )
    raw_ops = round_.outputs["ops"]
    if not isinstance(raw_ops, list):
        raise ChainError("reconcile", "parse", f"ops is {type(raw_ops).__name__}, not a list")
    proposed = [op.model_dump() if hasattr(op, "model_dump") else dict(op) for op in raw_ops]
    ops = validate_ops(proposed, facts, candidates)
    return ReconcilePlan(proposed=proposed, ops=ops, candidates=candidates, round=round_)


def validate_ops(proposed: list[dict[str, Any]], facts: list[NewFact], candidates: list[Memory]) -> list[PlannedOp]:
    """Check every op against the facts and candidates; apply the cross-subject guard.

    Raises ChainError(kind="parse") for an op that names an unknown id or fact index or
    lacks a required reference. Returns the ops to apply, in the model's order.
    """
    by_id = {m.id: m for m in candidates}
    used_facts: set[int] = set()
    changed_targets: set[int] = set()
    planned: list[PlannedOp] = []

    def bad(i: int, why: str) -> ChainError:
        return ChainError("reconcile", "parse", f"ops[{i}]: {why}")

    for i, op in enumerate(proposed):
        name = op.get("op")
        fact = op.get("fact")
        target = op.get("id")
        if fact is not None and not (0 <= fact < len(facts)):
            raise bad(i, f"fact index {fact} is not among the {len(facts)} new facts")
        if target is not None and target not in by_id:
            raise bad(i, f"id {target} is not among the candidates {sorted(by_id)}")
        if name in ("ADD", "UPDATE", "SUPERSEDE", "NOOP") and fact is None:
            raise bad(i, f"{name} needs a fact index")
        if name in ("UPDATE", "SUPERSEDE", "DELETE") and target is None:
            raise bad(i, f"{name} needs an existing id")

        if fact is not None and fact in used_facts and name != "DELETE":
            planned.append(PlannedOp("NOOP", fact=fact, target_id=target, refused=f"fact {fact} already decided"))
            continue
        if name == "ADD" or name == "NOOP":
            planned.append(PlannedOp(name, fact=fact, target_id=target if name == "NOOP" else None))
        elif name in ("UPDATE", "SUPERSEDE"):
            assert fact is not None and target is not None  # both required above
            existing = by_id[target]
            if not same_subject(fact_subject(facts[fact].text, facts[fact].subject), fact_subject(existing.text, existing.subject)):
                planned.append(PlannedOp("ADD", fact=fact, refused=f"cross-subject {name} of {target} refused"))
            elif target in changed_targets:
                planned.append(PlannedOp("ADD", fact=fact, refused=f"{name} of {target} already changed"))
            else:
                planned.append(PlannedOp(name, fact=fact, target_id=target))
                changed_targets.add(target)
        elif name == "DELETE":
            assert target is not None  # required above
            existing = by_id[target]
            subjects = [fact_subject(f.text, f.subject) for f in ([facts[fact]] if fact is not None else facts)]
            if not any(same_subject(s, fact_subject(existing.text, existing.subject)) for s in subjects):
                planned.append(PlannedOp("NOOP", fact=fact, target_id=target, refused="cross-subject DELETE refused"))
            elif target in changed_targets:
                planned.append(PlannedOp("NOOP", fact=fact, target_id=target, refused=f"{target} already changed"))
            else:
                planned.append(PlannedOp("DELETE", fact=fact, target_id=target))
                changed_targets.add(target)
        else:  # pydantic already restricts names; kept for dict input
            raise bad(i, f"unknown op {name!r}")
        if fact is not None and name != "DELETE":
            used_facts.add(fact)
    return planned
