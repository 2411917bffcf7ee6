"""Cross-subject merges and what the turns left behind: separate facts, updates, silence.

The reconcile model may propose to UPDATE, SUPERSEDE or DELETE a memory about someone else
("John likes coffee" overwriting "The user likes coffee"); the engine must refuse it. Both sides
are measured: how often the model proposed such a merge, and how often one was applied (must be 0).
A target's subject is looked up as it was when the op was proposed: the subjects that earlier
writes' applied ops gave each memory id, then the live memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from evals.core.subject_reading import read_subject as subject_of
from evals.core.subject_reading import same_person as same_subject
from evals.faults.adversarial import CROSS_SUBJECT_ADVERSARIAL
from evals.record import CaseGold, CaseRun, OpRow, WriteRecord, columns, pandas_dtypes
from evals.scoring.matcher import DEFAULT_MATCHER, Matcher

Tally = tuple[float, float]  # (numerator, denominator) of one case
MERGE_OPS = ("UPDATE", "SUPERSEDE", "DELETE")
OPS_SCHEMA = pandas_dtypes("ops")  # ops.parquet: columns declared in evals.record
OPS_COLUMNS = columns("ops")


def seed_request_id(run: CaseRun) -> str | None:
    """Request id of the write that seeded the case's memories (write 0 on the extracted path)."""
    first = run.writes[0] if run.writes else None
    return first.request_id if first is not None and first.path == "extracted" else None


def turn_writes(run: CaseRun) -> list[WriteRecord]:
    return [w for w in run.writes if w.path != "extracted"]


def turn_memories(run: CaseRun) -> list[dict[str, Any]]:
    """Live memories that the turns wrote or updated; a seeded memory left untouched never counts."""
    seed = seed_request_id(run)
    return [m for m in run.memories if seed is None or m.get("request_id") != seed]


def _cross(name: str | None, fact_subject: str | None, target: dict | None, write_facts: list[dict]) -> bool | None:
    """Whether a merge op crosses subjects; None when it is no merge or the target is unknown.
    A DELETE without a fact is judged as the engine judges it: against every fact of its write."""
    if name not in MERGE_OPS or target is None:
        return None
    if fact_subject is not None:
        return not same_subject(fact_subject, target.get("subject"))
    if name == "DELETE" and write_facts:
        return not any(same_subject(f.get("subject"), target.get("subject")) for f in write_facts)
    return None


def op_rows(run: CaseRun) -> list[OpRow]:
    """Every proposed and applied op of the run, with the fact and target subjects it involved."""
    live = {m["id"]: m for m in run.memories if "id" in m}
    history: dict[int | str, dict[str, Any]] = {}
    rows: list[OpRow] = []
    for write in run.writes:
        def known(target_id: Any) -> dict | None:
            return history.get(target_id) or live.get(target_id)

        facts = write.proposed_facts
        for op in write.proposed_ops:
            name, index, target_id = op.get("op"), op.get("fact"), op.get("id")
            fact = facts[index] if isinstance(index, int) and 0 <= index < len(facts) else None
            target = known(target_id)
            rows.append(_row(run, write.index, "proposed", name, fact, target_id, target,
                             _cross(name, fact.get("subject") if fact else None, target, facts), None))
        for applied in write.ops:
            fact = {"text": applied.text, "subject": applied.subject} if applied.text is not None else None
            target = known(applied.target_id)
            merge = applied.op if applied.refused is None else None  # a refused op was rewritten to ADD/NOOP
            rows.append(_row(run, write.index, "applied", applied.op, fact, applied.target_id, target,
                             _cross(merge or "", fact.get("subject") if fact else None, target, facts),
                             applied.refused))
        for applied in write.ops:
            if applied.op in ("ADD", "SUPERSEDE", "UPDATE") and applied.memory_id is not None:
                history[applied.memory_id] = {"text": applied.text, "subject": applied.subject}
    return rows


def _row(run: CaseRun, write: int, source: str, name: Any, fact: dict | None, target_id: Any, target: dict | None,
         cross: bool | None, refused: str | None) -> OpRow:
    return OpRow(provider=run.provider, dataset=run.dataset, case_id=run.case_id, write=write, source=source, op=name,
                 fact_text=fact.get("text") if fact else None, fact_subject=fact.get("subject") if fact else None,
                 target_id=target_id, target_text=target.get("text") if target else None,
                 target_subject=target.get("subject") if target else None, cross_subject=cross, refused=refused)


def _subject_of(gold: CaseGold, text: str) -> str | None:
    for item in [*(gold.facts or []), *gold.seeds]:
        if item.text == text:
            return item.subject
    return subject_of(text)


def _live_matches(gold: CaseGold, run: CaseRun, text: str, matcher: Matcher) -> set[int]:
    subject = _subject_of(gold, text)
    return {m["id"] for m in run.memories if matcher.same_fact(text, subject, m["text"], m.get("subject"))}


def _merges_possible(gold: CaseGold) -> bool:
    """A merge needs an existing memory: seeds, or an earlier turn."""
    return bool(gold.seeds) or gold.turns > 1


def merge_tallies(expect: CaseGold, run: CaseRun, matcher: Matcher = DEFAULT_MATCHER
                  ) -> tuple[dict[str, Tally], dict[str, int]]:
    """Per-case (numerator, denominator) of the merge metrics, and counts for notes."""
    tallies: dict[str, Tally] = {}
    notes: dict[str, int] = {}
    rows = op_rows(run)
    for source in ("proposed", "applied"):
        merges = [r for r in rows if r["source"] == source and r["op"] in MERGE_OPS and not r["refused"]]
        judged = [r for r in merges if r["cross_subject"] is not None]
        tallies[f"cross_subject_merge_{source}_rate"] = (sum(1 for r in judged if r["cross_subject"]), len(judged))
        notes[f"cross_subject_merge_{source}_rate"] = len(merges) - len(judged)
    # Adversarial reconcile replies (evals.faults.adversarial) each propose one cross-subject merge; one the guard let
    # through is an applied merge (and a CROSS_SUBJECT_MERGE_APPLIED anomaly), one it refused is not.
    injected = [f for f in run.faults
                if f.kind in CROSS_SUBJECT_ADVERSARIAL and f.injected and f.outcome in ("ok", "wrong")]
    let_through = sum(any(a.kind == "CROSS_SUBJECT_MERGE_APPLIED" for a in f.anomalies) for f in injected)
    num, den = tallies["cross_subject_merge_proposed_rate"]
    tallies["cross_subject_merge_proposed_rate"] = (num + len(injected), den + len(injected))
    num, den = tallies["cross_subject_merge_applied_rate"]
    tallies["cross_subject_merge_applied_rate"] = (num + let_through, den + let_through)
    if expect.separate:
        kept = 0
        for a, b in expect.separate:
            ma, mb = _live_matches(expect, run, a, matcher), _live_matches(expect, run, b, matcher)
            kept += any(x != y for x in ma for y in mb)
        tallies["separate_kept_rate"] = (kept, len(expect.separate))
    if expect.updates:
        done = sum(not _live_matches(expect, run, u.old, matcher) and bool(_live_matches(expect, run, u.new, matcher))
                   for u in expect.updates)
        tallies["same_subject_update_recall"] = (done, len(expect.updates))
    if expect.no_memory:
        tallies["no_memory_accuracy"] = (float(not turn_memories(run)), 1)
    return tallies, notes


def merge_error_tallies(expect: CaseGold) -> dict[str, Tally]:
    """An infra-error case counted as all wrong, in the units its gold implies."""
    tallies: dict[str, Tally] = {}
    if _merges_possible(expect):
        tallies["cross_subject_merge_proposed_rate"] = (1, 1)
        tallies["cross_subject_merge_applied_rate"] = (1, 1)
    if expect.separate:
        tallies["separate_kept_rate"] = (0, len(expect.separate))
    if expect.updates:
        tallies["same_subject_update_recall"] = (0, len(expect.updates))
    if expect.no_memory:
        tallies["no_memory_accuracy"] = (0, 1)
    return tallies


def ops_frame(pairs: Sequence[tuple[Any, CaseRun]]) -> pd.DataFrame:
    """One row per proposed or applied op of every run, so a merge rate can be traced to its ops."""
    rows = [row for _, run in pairs for row in op_rows(run)]
    return pd.DataFrame(rows, columns=OPS_COLUMNS).astype(OPS_SCHEMA)


__all__ = ["MERGE_OPS", "OPS_COLUMNS", "OPS_SCHEMA", "merge_error_tallies", "merge_tallies", "op_rows", "ops_frame",
           "seed_request_id", "turn_memories", "turn_writes"]
