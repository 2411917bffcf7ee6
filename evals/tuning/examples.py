"""Training data for prompt tuning: one `dspy.Example` per case, split by case id.

An extractor example holds the rendered turns exactly as the engine would send them (which
predictor, which text); a reconciler example holds the new facts and existing memories as the
engine's reconcile round formats them, built from the case's gold, with the ops a careful
engine would choose. The gold itself stays in the case; metrics look it up by `case_id`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from typing import Literal, get_args

import dspy
from pydantic import BaseModel, Field

from evals.cases.dataset import Case
from evals.scoring.matcher import DEFAULT_MATCHER
from hymem.messages import normalize_messages
from hymem.render import conversation_language, render_conversation, render_working

ProgramKind = Literal["extractor", "reconciler"]
PROGRAM_KINDS: tuple[str, ...] = get_args(ProgramKind)


class Split(BaseModel):
    """Train and dev cases; no case id, and no write (turn), is in both."""

    train: list[Case]
    dev: list[Case]
    seeded: bool  # dev was drawn from train with the seed (no --dev given)
    overlap_removed: list[str] = Field(default_factory=list)  # train ids given in dev too, or sharing a write with it


def split_cases(train: Sequence[Case], dev: Sequence[Case] | None, *, seed: int, dev_fraction: float = 0.3) -> Split:
    """Train/dev by conversation. Cases that share a write (the same turn, e.g. one conversation under two ids)
    are one conversation: without `dev`, a seeded shuffle of conversations gives about a `dev_fraction` share
    of the cases; with `dev`, a train case that is, or shares a write with, a dev case is left out of train."""
    _check_unique(train, "train")
    if dev is not None:
        _check_unique(dev, "dev")
        dev_ids = {c.id for c in dev}
        dev_writes = {w for c in dev for w in turn_keys(c)}
        overlap = sorted(c.id for c in train if c.id in dev_ids or not turn_keys(c).isdisjoint(dev_writes))
        kept = [c for c in train if c.id not in overlap]
        if not kept:
            raise ValueError("every train case is also in the dev set (or shares a turn with a dev case): "
                             "nothing left to train on")
        return Split(train=kept, dev=list(dev), seeded=False, overlap_removed=overlap)
    if not 0 < dev_fraction < 1:
        raise ValueError(f"dev fraction must be between 0 and 1, got {dev_fraction}")
    if len(train) < 2:
        raise ValueError(f"a seeded split needs at least 2 cases, got {len(train)}")
    groups = _conversations(train)
    if len(groups) < 2:
        raise ValueError(f"a seeded split needs at least 2 conversations; these {len(train)} cases share turns")
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    target = min(len(train) - 1, max(1, round(len(train) * dev_fraction)))
    chosen: set[str] = set()
    for key in keys[:-1]:  # the last conversation always trains
        if len(chosen) >= target:
            break
        chosen |= groups[key]
    return Split(train=[c for c in train if c.id not in chosen], dev=[c for c in train if c.id in chosen],
                 seeded=True)


def turn_keys(case: Case) -> set[str]:
    """Each turn of a case as canonical JSON: two cases holding the same turn hold the same conversation."""
    return {json.dumps(turn, sort_keys=True, ensure_ascii=False) for turn in case.turns}


def _conversations(cases: Sequence[Case]) -> dict[str, set[str]]:
    """Case ids grouped into conversations (cases linked by a shared write), keyed by their first id."""
    parent = {c.id: c.id for c in cases}

    def root(i: str) -> str:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, str] = {}
    for case in cases:
        for write in turn_keys(case):
            if write in first:
                a, b = root(first[write]), root(case.id)
                parent[max(a, b)] = min(a, b)
            else:
                first[write] = case.id
    groups: dict[str, set[str]] = {}
    for case in cases:
        groups.setdefault(root(case.id), set()).add(case.id)
    return {min(ids): ids for ids in groups.values()}


def _check_unique(cases: Sequence[Case], which: str) -> None:
    counts = Counter(c.id for c in cases)
    dupes = sorted(i for i, n in counts.items() if n > 1)
    if dupes:
        raise ValueError(f"{which}: case ids must be unique across files; repeated: {', '.join(dupes)}")


def eligible(kind: ProgramKind, case: Case) -> str | None:
    """Why a case cannot train `kind` (None when it can)."""
    if case.expect.facts is None:
        return "expect.facts is not given: nothing to score against"
    if kind == "reconciler":
        if not case.memories:
            return "no seeded memories: reconcile has nothing to decide against"
        if not case.expect.facts:
            return "no expected facts: reconcile has nothing to decide"
    return None


def extractor_turns(case: Case) -> list[tuple[str, str]]:
    """(predictor name, rendered input) per turn, as the engine's chat or working chain builds them."""
    turns = []
    for turn in case.turns:
        msgs = normalize_messages(turn)
        if case.path == "working":
            turns.append(("extract_working", render_working(msgs)))
        else:
            name = "extract_zh" if conversation_language(msgs) == "zh" else "extract_en"
            turns.append((name, render_conversation(msgs)))
    return turns


def reconcile_inputs(case: Case) -> tuple[str, str, list[dict]]:
    """(new_facts JSON, existing JSON, gold ops): seeds are the existing memories (ids 1..n, as the store
    numbers them), the expected facts are the new facts. An expected update is a SUPERSEDE of its seed,
    a fact restating a seed is a NOOP of it, anything else an ADD."""
    seeds = case.memories
    facts = case.expect.facts or []
    existing = [{"id": i + 1, "text": m.text, "subject": m.subject, "owner": m.owner} for i, m in enumerate(seeds)]
    new_facts = [{"index": i, "text": f.text, "subject": f.subject, "owner": f.owner} for i, f in enumerate(facts)]
    seed_id = {m.text: i + 1 for i, m in enumerate(seeds)}
    replaces = {u.new: seed_id[u.old] for u in case.expect.updates if u.old in seed_id}
    ops = []
    for i, fact in enumerate(facts):
        if fact.text in replaces:
            ops.append({"op": "SUPERSEDE", "fact": i, "id": replaces[fact.text]})
            continue
        same = next((j + 1 for j, m in enumerate(seeds)
                     if DEFAULT_MATCHER.same_fact(fact.text, fact.subject, m.text, m.subject)), None)
        ops.append({"op": "NOOP", "fact": i, "id": same} if same is not None else {"op": "ADD", "fact": i, "id": None})
    return json.dumps(new_facts, ensure_ascii=False), json.dumps(existing, ensure_ascii=False), ops


def make_examples(kind: ProgramKind, cases: Sequence[Case]) -> tuple[list[dspy.Example], dict[str, str]]:
    """Examples for the eligible cases, and {case_id: why it was left out} for the others."""
    examples: list[dspy.Example] = []
    skipped: dict[str, str] = {}
    for case in cases:
        why = eligible(kind, case)
        if why is None:
            try:
                examples.append(_example(kind, case))
            except ValueError as exc:  # a turn the engine itself would refuse
                why = f"turn does not normalise: {exc}"
        if why is not None:
            skipped[case.id] = why
    return examples, skipped


def _example(kind: ProgramKind, case: Case) -> dspy.Example:
    if kind == "extractor":
        return dspy.Example(case_id=case.id, turns=extractor_turns(case)).with_inputs("turns")
    new_facts, existing, ops = reconcile_inputs(case)
    return dspy.Example(case_id=case.id, new_facts=new_facts, existing=existing, ops=ops).with_inputs(
        "new_facts", "existing")


def predictor_names(kind: ProgramKind, examples: Sequence[dspy.Example]) -> list[str]:
    """The MemoryProgram predictors these examples exercise, in program order."""
    if kind == "reconciler":
        return ["reconcile"]
    used = {name for ex in examples for name, _ in ex.turns}
    return [n for n in ("extract_en", "extract_zh", "extract_working") if n in used]


__all__ = ["PROGRAM_KINDS", "ProgramKind", "Split", "eligible", "extractor_turns", "make_examples",
           "predictor_names", "reconcile_inputs", "split_cases", "turn_keys"]
