"""The label audit of a dataset spec: how many labels, which look wrong and why, what was skipped.

Public corpora carry machine-made or conversation-level labels; before their scores mean anything
one has to know how many labels are suspect. The audit is a projection of what the adapters
already record per case (`meta.flagged`, `meta.excluded`) plus the records they skipped; it judges
nothing itself. `write_audit` stores one Parquet row per (flagged label, reason).
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import combinations
from pathlib import Path

from pydantic import BaseModel, Field

from evals.cases.adapters import CLEAN_DROPS, Gold, Skipped, dataset_name, iter_items, select_cases
from evals.cases.dataset import Case
from evals.core.redact import write_parquet, write_text
from evals.record import CaseRun
from evals.record.tally import CaseTally

SCHEMA_VERSION = 1
AUDIT_FILE = "audit.parquet"
SUMMARY_FILE = "audit.json"
_COLUMNS = (  # (name, pyarrow type name): the Parquet schema, declared once
    ("dataset", "string"), ("case_id", "string"), ("label_text", "string"), ("original_text", "string"),
    ("subject", "string"), ("reason", "string"), ("evidence", "string"), ("dropped_by_clean", "bool_"),
)


class FlaggedLabel(BaseModel):
    """One suspicious label and one reason (a label with two reasons is two of these)."""

    dataset: str  # adapter name, e.g. "locomo"
    case_id: str  # the case the label belongs to
    label_text: str  # the gold sentence as the adapter wrote it ("The user lost …")
    original_text: str  # the corpus' own text of the label
    subject: str  # "user" or the named human
    reason: str  # e.g. "evidence_spoken_by_other_speaker"
    evidence: str  # where the corpus grounds it (dia ids, utterance numbers, persona list)
    dropped_by_clean: bool  # `--gold clean` leaves this label out of the gold


class AuditReport(BaseModel):
    """What `hymem-eval datasets audit` prints and stores."""

    schema_version: int = SCHEMA_VERSION
    spec: str  # the dataset spec as given
    gold: str  # "all" | "clean": which gold the counted cases carry
    counts: dict[str, int] = Field(default_factory=dict)  # cases, skipped, labels, gold_facts, flagged_labels, ...
    by_reason: dict[str, int] = Field(default_factory=dict)  # flagged labels per reason
    overlaps: dict[str, int] = Field(default_factory=dict)  # "a & b": labels flagged with both reasons
    clean_reasons: list[str] = Field(default_factory=list)  # reasons whose labels `--gold clean` leaves out
    flagged: list[FlaggedLabel] = Field(default_factory=list)
    skipped: list[tuple[str, str]] = Field(default_factory=list)  # (record id, why no case was made)


def audit(spec: str, *, gold: Gold = "all", limit: int | None = None, sample: int | None = None,
          seed: int = 0) -> AuditReport:
    """Read the spec as `load_spec` would (same selection) and tally its labels."""
    skipped: list[Skipped] = []

    def cases():
        for item in iter_items(spec, gold=gold):
            if isinstance(item, Case):
                yield item
            else:
                skipped.append(item)

    counts: Counter[str] = Counter()
    datasets: set[str] = set()
    by_reason: Counter[str] = Counter()
    overlaps: Counter[str] = Counter()
    flagged: list[FlaggedLabel] = []
    for case in select_cases(cases(), limit=limit, sample=sample, seed=seed):
        meta = case.meta
        dataset = dataset_name(case)
        datasets.add(dataset)
        counts["cases"] += 1
        counts["labels"] += int(meta.get("n_labels", len(case.expect.facts or [])))
        counts["gold_facts"] += len(case.expect.facts or [])
        for key in ("duplicate_labels", "facts_truncated"):
            counts[key] += int(meta.get(key, 0))
        for what, n in (meta.get("excluded") or {}).items():
            counts[f"excluded:{what}"] += int(n)
        for label in meta.get("flagged") or []:
            reasons = sorted(label.get("reasons") or [])
            counts["flagged_labels"] += 1
            counts["dropped_by_clean"] += bool(label.get("clean_drop"))
            by_reason.update(reasons)
            overlaps.update(f"{a} & {b}" for a, b in combinations(reasons, 2))
            flagged.extend(FlaggedLabel(dataset=dataset, case_id=case.id, label_text=str(label.get("text", "")),
                                        original_text=str(label.get("original", "")),
                                        subject=str(label.get("subject", "")), reason=reason,
                                        evidence=str(label.get("evidence", "")),
                                        dropped_by_clean=bool(label.get("clean_drop")))
                           for reason in reasons)
    counts["skipped"] = len(skipped)
    return AuditReport(spec=str(spec), gold=gold, counts=dict(counts), by_reason=dict(by_reason.most_common()),
                       overlaps=dict(overlaps), flagged=flagged,
                       clean_reasons=sorted({r for d in datasets for r in CLEAN_DROPS.get(d, ())}),
                       skipped=[(s.id, s.reason) for s in skipped])


def write_audit(report: AuditReport, out_dir: str | Path) -> Path:
    """DIR/audit.parquet (one row per flagged label and reason) and DIR/audit.json (the whole report)."""
    import pyarrow as pa

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in _COLUMNS])
    path = out / AUDIT_FILE
    write_parquet([f.model_dump() for f in report.flagged], path, schema)  # evals.core.redact: redacted, whole-or-not
    summary = report.model_dump(exclude={"flagged"})
    write_text(out / SUMMARY_FILE, json.dumps(summary, ensure_ascii=False, indent=1) + "\n")
    return path


def format_audit(report: AuditReport, max_per_reason: int = 15) -> str:
    """The printed audit: counts, reasons (with overlaps), examples of each reason, skipped records."""
    c = report.counts
    lines = [f"label audit of {report.spec} (gold={report.gold})",
             f"cases {c.get('cases', 0)}   skipped {c.get('skipped', 0)}   labels {c.get('labels', 0)}   "
             f"gold facts {c.get('gold_facts', 0)}   flagged labels {c.get('flagged_labels', 0)}   "
             f"left out by --gold clean {c.get('dropped_by_clean', 0)}"]
    extra = {k: v for k, v in c.items() if v and (k.startswith("excluded:") or k in ("duplicate_labels",
                                                                                      "facts_truncated"))}
    if extra:
        lines.append("not in the gold: " + ", ".join(f"{k.removeprefix('excluded:')} {v}" for k, v in extra.items()))
    if report.by_reason:
        lines.append("")
        lines.append("reasons:")
        width = max(len(r) for r in report.by_reason)
        order = sorted(report.by_reason.items(), key=lambda kv: (kv[0] not in report.clean_reasons, -kv[1]))
        for reason, n in order:
            note = "  (left out by --gold clean)" if reason in report.clean_reasons else ""
            with_other = [f"{n2} also {other}" for pair, n2 in report.overlaps.items()
                          for first, other in (pair.split(" & "), pair.split(" & ")[::-1]) if first == reason]
            tail = f"; {', '.join(with_other)}" if with_other else ""
            lines.append(f"  {reason:<{width}}  {n:>6}{note}{tail}")
    by_reason: dict[str, list[FlaggedLabel]] = {}
    for f in report.flagged:
        by_reason.setdefault(f.reason, []).append(f)
    for reason, items in sorted(by_reason.items(), key=lambda kv: (kv[0] not in report.clean_reasons, -len(kv[1]))):
        lines.append("")
        lines.append(f"{reason} ({len(items)}):")
        for f in items[:max_per_reason]:
            lines.append(f"  {f.case_id}  [{f.subject}] {f.original_text!r}  evidence {f.evidence or '-'}")
        if len(items) > max_per_reason:
            lines.append(f"  … {len(items) - max_per_reason} more in {AUDIT_FILE}")
    if report.skipped:
        lines.append("")
        lines.append(f"skipped ({len(report.skipped)}):")
        lines.extend(f"  {rid}: {why}" for rid, why in report.skipped)
    return "\n".join(lines)


LABEL_METRICS = ("gold_labels_flagged", "gold_labels_misattributed", "gold_labels_left_out")


def flagged_label_tallies(runs: list[CaseRun], providers: list[str]) -> list[CaseTally]:
    """Per provider and case, the gold labels its adapter flagged, for the run report's counts (none at all when no
    case has a flagged label: curated suites have none): read from the gold each unit recorded
    (`evals.cases.gold`), each case once whatever its providers and epochs.

    `gold_labels_flagged`: any reason; `gold_labels_misattributed`: the evidence turn was spoken by the
    other person; `gold_labels_left_out`: dropped by `--gold clean`.
    """
    cases = {(run.dataset, run.case_id): run.gold.flagged_labels for run in runs if run.gold is not None}
    counts = [(dataset, case_id, (f.flagged, f.misattributed, f.left_out)) for (dataset, case_id), f in cases.items()]
    if not any(n for _, _, per in counts for n in per):
        return []
    return [CaseTally(provider=provider, dataset=dataset, case_id=case_id, metric=name, num=float(n))
            for provider in providers for dataset, case_id, per in counts
            for name, n in zip(LABEL_METRICS, per, strict=True)]


__all__ = ["AUDIT_FILE", "AuditReport", "FlaggedLabel", "LABEL_METRICS", "audit", "flagged_label_tallies",
           "format_audit", "write_audit"]
