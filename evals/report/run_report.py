"""The report: a projection of the run record (`units.jsonl`) into Parquet tables, metrics and summary.md.

Nothing here re-runs anything. Each table's columns are declared once, below, as a
pyarrow schema, so an empty table keeps its types. A unit whose fault did not fire,
or that hit an infra error, is counted as such and never as a pass; its checker
findings are listed but are not evidence either way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from evals.arms.base import DEFAULT_SYSTEM
from evals.arms.registry import SYSTEMS, site_kinds
from evals.faults.adversarial import ADVERSARIAL_KINDS
from evals.faults.plan import SITES, kinds_for, wire_kinds_for
from evals.record import (
    CODE_KINDS,
    RETRY_KINDS,
    STATE_KINDS,
    UNITS_FILE,
    AnomalyKind,
    CaseMetricRow,
    CaseRun,
    Codes,
    FaultRecord,
    Manifest,
    MetricRow,
    WriteRecord,
    atomic_write_text,
    frame,
    read_units,
    write_table,
)
from evals.record.catalogue import FAILURE_CAUSES, HEADLINE, REPEAT_METRICS, format_value, metric
from evals.record.tally import CaseTally
from evals.scoring.aggregate import aggregate, rate
from evals.scoring.agreement import card_line
from evals.scoring.epochs import epoch_metrics, fact_flips, flaky_cases, stability_frame

NOT_REACHED = AnomalyKind.FAULT_NOT_REACHED

# ---- tables -----------------------------------------------------------------------------------------------


def _checked(record: FaultRecord) -> bool:
    return record.checked


def _kinds(record: FaultRecord) -> set[AnomalyKind]:
    return record.kinds


def cases_frame(runs: list[CaseRun]) -> pd.DataFrame:
    """One row per (provider, case) unit."""
    return frame("cases", [{
        "provider": r.provider, "system": r.system, "dataset": r.dataset, "case_id": r.case_id, "epoch": r.epoch,
        "lang": r.lang,
        "tags": list(r.tags),
        "status": r.status, "error": r.error, "n_writes": len(r.writes), "n_memories": len(r.memories),
        "n_faults": len(r.faults), "n_anomalies": sum(len(f.anomalies) for f in r.faults) + len(r.findings),
        "seconds": r.seconds,
    } for r in runs])


def faults_frame(runs: list[CaseRun], seed: int) -> pd.DataFrame:
    """One row per faulted run of one write, with what was expected, what happened and which checks held."""
    rows = []
    for r in runs:
        for f in r.faults:
            kinds, checked = _kinds(f), _checked(f)
            rows.append({
                "provider": r.provider, "system": r.system, "dataset": r.dataset, "case_id": r.case_id,
                "write": f.write, "path": f.path,
                "site": f.site, "kind": f.kind, "occurrence": f.occurrence, "fired": f.fired, "seed": seed,
                **{f"expected_{k}": getattr(f.expected, k) for k in _CODE_FIELDS},
                **{f"actual_{k}": getattr(f.actual, k) for k in _CODE_FIELDS},
                "retry_success": f.retry_success, "outcome": f.outcome,
                "code_ok": not (kinds & CODE_KINDS) if checked else None,
                "rollback_ok": not (kinds & STATE_KINDS) if checked else None,
                "retry_ok": not (kinds & RETRY_KINDS) if checked else None,
                "n_anomalies": len(f.anomalies),
                "error": f.actual.exception if f.outcome == "infra_error" else None,
                "wire_log": json.dumps(f.wire, ensure_ascii=False) if f.wire else None,
                "seconds": f.seconds, "epoch": r.epoch,
            })
    return frame("faults", rows)


def anomalies_frame(runs: list[CaseRun], seed: int) -> pd.DataFrame:
    """One row per anomaly, with its witness."""
    rows = []
    for r in runs:
        for f in r.faults:
            for a in f.anomalies:
                rows.append({"kind": str(a.kind), "provider": r.provider, "system": r.system, "dataset": r.dataset,
                             "case_id": r.case_id, "write": f.write, "path": f.path, "site": f.site, "fault": f.kind,
                             "seed": seed, "expected": _json(f.expected), "actual": _json(f.actual),
                             "witness": a.witness, "outcome": f.outcome, "epoch": r.epoch})
        for finding in r.findings:  # write-contract checks outside a faulted write: site = the check, no fault
            rows.append({"kind": str(finding.kind), "provider": r.provider, "system": r.system, "dataset": r.dataset,
                         "case_id": r.case_id, "write": finding.write, "path": finding.path, "site": finding.check,
                         "fault": None, "seed": seed, "expected": "", "actual": "", "witness": finding.witness,
                         "outcome": "wrong", "epoch": r.epoch})
    return frame("anomalies", rows)


def write_failures_frame(runs: list[CaseRun]) -> pd.DataFrame:
    """One row per fault-free write that failed: a natural failure (no fault injected; the model's reply or its
    provider broke it) or the engine's own, with the reply's cause, the codes it called for and got, and what the
    write-contract check on it found (its anomalies are the unit's findings of check `natural`)."""
    rows = []
    for r in runs:
        for w in r.writes:
            if w.success:
                continue
            failure = w.failure
            found = r.failure_findings(w.index)
            expected = failure.expected if failure is not None else None
            rows.append({
                "provider": r.provider, "system": r.system, "dataset": r.dataset, "case_id": r.case_id,
                "epoch": r.epoch, "write": w.index, "path": w.path, "injected": False,
                "cause": failure_cause(w), "site": failure.site if failure is not None else None,
                "detail": failure.detail if failure is not None else w.codes.exception,
                "reply": failure.reply if failure is not None else None,
                **{f"expected_{k}": getattr(expected, k) if expected is not None else None for k in _CODE_FIELDS},
                **{f"actual_{k}": getattr(w.codes, k) for k in _CODE_FIELDS},
                "checked": failure.checked if failure is not None else False,
                "retry_success": failure.retry_success if failure is not None else None,
                "n_anomalies": len(found), "anomalies": sorted({str(f.kind) for f in found}),
            })
    return frame("write_failures", rows)


_CODE_FIELDS = ("success", "error_code", "agent_error_code", "reconcile_error_code")


def _json(codes: Codes) -> str:
    return json.dumps(codes.model_dump(), sort_keys=True, ensure_ascii=False, default=str)


# An LM site that only one write path reaches: it applies to a run only when some write took that path.
_PATH_SITES = {"lm.extract": "chat", "lm.extract_working": "working"}


def applicable_pairs(system: str, transport: str, paths: set[str]) -> list[tuple[str, str]]:
    """The (site, kind) pairs a sweep can reach for this engine, fault transport and set of write paths.

    hymem in-process: the engine's kinds at every site; over the wire (an HTTP provider): the wire kinds at
    the LM sites, in-process kinds for embedding and store. An extraction site whose path no write took does
    not apply. Another engine: its own table, narrowed to the sites its writes could reach.
    """
    if system != DEFAULT_SYSTEM:
        return site_kinds(system, paths)
    kinds = wire_kinds_for if transport == "wire" else kinds_for

    def applies(site: str) -> bool:
        path = _PATH_SITES.get(site)
        return bool(paths) and (path is None or path in paths)

    return [(site, kind) for site in SITES if applies(site) for kind in kinds(site)]


def coverage_frame(runs: list[CaseRun], providers: list[str]) -> pd.DataFrame:
    """Every (site, kind) pair that applies to each provider's transport, with the units that exercised it
    (unreached: zeros). A pair that was exercised but does not apply is listed too, never hidden."""
    system_of = _systems_of(runs)
    rows = []
    for provider in providers:
        system = system_of(provider)
        mine = [r for r in runs if r.provider == provider]
        transport = "wire" if any(r.transport == "wire" for r in mine) else "in-process"
        paths = {w.path for r in mine for w in r.writes}
        # An adversarial kind applies only where a control write offered the chance (evals.faults.adversarial).
        chances = {tuple(key.split("#")[:2]) for r in mine for w in r.writes for key in w.reached if "#" in key}
        pairs = [(site, kind) for site, kind in applicable_pairs(system, transport, paths)
                 if kind not in ADVERSARIAL_KINDS or (site, kind) in chances]
        counts: dict[tuple[str, str], Counter] = {}
        for r in mine:
            for f in r.faults:
                counts.setdefault((f.site, f.kind), Counter())[f.outcome] += 1
        extra = sorted(set(counts) - set(pairs))  # a site or kind the table above does not know: still listed
        for site, kind in pairs + extra:
            c = counts.get((site, kind), Counter())
            faulted = c["ok"] + c["wrong"]
            rows.append({"provider": provider, "system": system, "site": site, "kind": kind, "faulted_units": faulted,
                         "ok_units": c["ok"], "wrong_units": c["wrong"], "indeterminate_units": c["indeterminate"],
                         "infra_error_units": c["infra_error"], "reached": faulted > 0})
    return frame("coverage", rows)


def unreached_pairs(coverage: pd.DataFrame) -> dict[str, list[str]]:
    """provider → the `site×kind` pairs that apply to it and that no checked faulted unit reached."""
    out: dict[str, list[str]] = {}
    for row in coverage[~coverage["reached"]].itertuples():
        out.setdefault(row.provider, []).append(f"{row.site}×{row.kind}")
    return out


# ---- metrics ----------------------------------------------------------------------------------------------

def _rate(name: str, ok: Callable[[FaultRecord], bool]) -> tuple[str, Callable[[CaseRun], tuple[float, float]]]:
    """A share of checked (fired, not infra_error) faulted units; numerator and denominator per case."""
    def per_case(run: CaseRun) -> tuple[float, float]:
        checked = [f for f in run.faults if _checked(f)]
        return sum(1 for f in checked if ok(f)), len(checked)
    return name, per_case


def infra_errors(run: CaseRun) -> tuple[float, float]:
    """infra_error_rate's per-case (numerator, denominator): the case itself and each faulted run are units.

    The one computation of infra_error_rate; scorers leave infra-error cases out of their plain metrics.
    """
    return (run.status == "infra_error") + sum(f.outcome == "infra_error" for f in run.faults), 1 + len(run.faults)


def write_failures(cause: str | None = None) -> Callable[[CaseRun], tuple[float, float]]:
    """write_failure_rate's per-case (numerator, denominator), or one cause's: the case's fault-free writes that
    failed, of all its fault-free writes. A case lost to an infra error has no writes to judge (0, 0)."""
    def per_case(run: CaseRun) -> tuple[float, float]:
        if run.status == "infra_error":
            return 0, 0
        failed = [w for w in run.writes if not w.success and (cause is None or failure_cause(w) == cause)]
        return len(failed), len(run.writes)
    return per_case


def failure_cause(write: WriteRecord) -> str:
    """Why a failed write failed (`engine` for a record that names no cause: the engine raised)."""
    return write.failure.cause if write.failure is not None else "engine"


RATES: list[tuple[str, Callable[[CaseRun], tuple[float, float]]]] = [
    ("write_failure_rate", write_failures()),
    *((f"write_failure_{cause}_rate", write_failures(cause)) for cause in FAILURE_CAUSES),
    _rate("rollback_correct_rate", lambda f: not (_kinds(f) & STATE_KINDS)),
    _rate("error_code_accuracy", lambda f: not (_kinds(f) & CODE_KINDS)),
    _rate("retry_equivalence_rate", lambda f: not (_kinds(f) & RETRY_KINDS)),
    ("infra_error_rate", infra_errors),
]
COUNTS: list[tuple[str, Callable[[CaseRun], int]]] = [
    ("degraded_success_count",
     lambda r: sum(_checked(f) and AnomalyKind.DEGRADED_SUCCESS in _kinds(f) for f in r.faults)),
    ("anomaly_count", lambda r: sum(len(f.anomalies) for f in r.faults if _checked(f)) + len(r.findings)),
    ("faulted_units", lambda r: sum(_checked(f) for f in r.faults)),
    ("indeterminate_units", lambda r: sum(f.outcome == "indeterminate" for f in r.faults)),
]


def rate_tallies(runs: list[CaseRun]) -> list[CaseTally]:
    """Each unit's numerator and denominator of every fault and write rate (denominator 0 included: the case was
    looked at and had nothing to judge); also the case_metrics rows, so `compare` and `gate` can pair runs by case."""
    return [CaseTally(provider=r.provider, dataset=r.dataset, case_id=r.case_id, metric=name, num=float(num),
                      den=float(den), epoch=r.epoch)
            for r in runs for name, per_case in RATES for num, den in [per_case(r)]]


def count_tallies(runs: list[CaseRun]) -> list[CaseTally]:
    """Each unit's fault counts (anomalies, faulted and indeterminate units)."""
    return [CaseTally(provider=r.provider, dataset=r.dataset, case_id=r.case_id, metric=name, num=float(count(r)),
                      epoch=r.epoch) for r in runs for name, count in COUNTS]


# Fault and write rates: n counts units (per epoch), and a run whose faults did not fire still has the row (NaN).
_REDUCERS = {name: rate(n="units") for name, _ in RATES}


def metrics_frame(runs: list[CaseRun], seed: int,
                  extra_metrics: Iterable[MetricRow | dict[str, Any]] | None = None) -> pd.DataFrame:
    """Long-form metrics per provider × dataset and per provider over all datasets ("all"), then `extra_metrics`.

    Rates resample cases with all their epochs (a cluster bootstrap); n and counts are per epoch, so K epochs
    never pass for K times the data."""
    rows = aggregate([*rate_tallies(runs), *count_tallies(runs)], seed=seed, reducers=_REDUCERS)
    rows += [MetricRow.model_validate(extra) for extra in extra_metrics or []]
    return frame("metrics", [row.model_dump() for row in rows])


def case_metrics_frame(runs: list[CaseRun],
                       extra_case_rows: Iterable[CaseMetricRow | dict[str, Any]] | None = None) -> pd.DataFrame:
    """Per-case numerator and denominator of every rate, so `compare` and `gate` can pair runs by case."""
    rows = [t.case_row() for t in rate_tallies(runs)]
    rows += [CaseMetricRow.model_validate(extra) for extra in extra_case_rows or []]
    return frame("case_metrics", [row.model_dump() for row in rows])


def _ordered(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _systems_of(runs: list[CaseRun]) -> Callable[[str], str]:
    """The system of each arm label: from its units, else from its `SYSTEM/` prefix (hymem without one)."""
    known = {r.provider: r.system for r in runs}

    def system_of(label: str | None) -> str:
        if label in known:
            return known[label]
        head = str(label or "").split("/", 1)[0]
        return head if head in SYSTEMS else DEFAULT_SYSTEM

    return system_of


# ---- verdict ----------------------------------------------------------------------------------------------


def verdict_of(runs: list[CaseRun], unreached: dict[str, list[str]] | None = None) -> tuple[str, list[str]]:
    """valid | invalid | unknown, and why.

    invalid: an anomaly on a unit whose fault fired, or a write-contract finding. unknown: otherwise, any infra error,
    any fault that did not fire, nothing checked at all, or (`unreached`: provider → pairs) a
    (site, kind) pair that applies to a provider's transport and was never reached.
    valid: every unit checked clean and every applicable pair reached.
    """
    faults = [f for r in runs for f in r.faults]
    units = _units(runs)
    wrong = Counter(str(a.kind) for f in faults if _checked(f) for a in f.anomalies if a.kind != NOT_REACHED)
    wrong.update(str(finding.kind) for r in runs for finding in r.findings)
    checked = sum(_checked(f) for f in faults)
    natural = [w for r in runs for w in r.writes if w.failure is not None and w.failure.cause != "engine"]
    natural_checked = sum(w.failure is not None and w.failure.checked for w in natural)
    reasons = []
    if wrong:
        wrong_units = sum(f.outcome == "wrong" for f in faults)
        cases = sum(bool(r.findings) for r in runs)
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(wrong.items()))
        reasons.append(f"{sum(wrong.values())} anomalies on {wrong_units} of {checked} faulted units and in the "
                       f"write-contract checks of {cases} of {units}: {kinds}{_by_arm(runs)}")
    case_errors = sum(r.status == "infra_error" for r in runs)
    fault_errors = sum(f.outcome == "infra_error" for f in faults)
    indeterminate = sum(f.outcome == "indeterminate" for f in faults)
    if case_errors:
        reasons.append(f"{case_errors} of {units} failed with an infra error")
    if fault_errors:
        reasons.append(f"{fault_errors} of {len(faults)} faulted runs failed with an infra error")
    if indeterminate:
        reasons.append(f"{indeterminate} of {len(faults)} faults did not fire (indeterminate)")
    if not checked and not natural_checked:
        reasons.append("no faulted unit ran and fired, and no write failed on its own, so no rollback was checked"
                       if runs else "no units ran")
    elif checked and unreached:
        for provider, pairs in unreached.items():
            reasons.append(f"{provider}: {len(pairs)} (site, kind) pairs that apply to its transport were never "
                           f"reached: {', '.join(pairs)}")
    natural_line = _natural_line(natural, natural_checked)
    if wrong:
        return "invalid", reasons + natural_line
    if reasons:
        return "unknown", reasons + natural_line
    clean = [f"all {checked} faulted units in {units} were checked with no anomaly"] if checked else \
        [f"no fault was injected in {units}; the write contract was checked on the writes that failed on their own"]
    return "valid", clean + natural_line


def _natural_line(natural: list[WriteRecord], checked: int) -> list[str]:
    """The natural failures a verdict rests on too: writes the model's own replies failed, each checked as an
    injected fault is (the store as it was, the failure table's codes, a clean retry)."""
    if not natural:
        return []
    causes = Counter(failure_cause(w) for w in natural)
    split = ", ".join(f"{cause} ×{n}" for cause, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))
    return [f"{len(natural)} fault-free writes failed on the model's own replies ({split}); the write contract "
            f"was checked on {checked} of them"]


def _units(runs: list[CaseRun]) -> str:
    """`N cases`, or with epochs `N units (M cases × K epochs)`: a repeated case is not another case."""
    epochs = len({r.epoch for r in runs})
    if epochs < 2:
        return f"{len(runs)} cases"
    cases = len({(r.provider, r.dataset, r.case_id) for r in runs})
    return f"{len(runs)} units ({cases} cases × {epochs} epochs)"


def _by_arm(runs: list[CaseRun]) -> str:
    """Where the anomalies are, per arm, when a run has several (engines or providers side by side): the run's
    verdict pools them, and a clean arm must not read as the one that broke."""
    arms = _ordered(r.provider for r in runs)
    if len(arms) < 2:
        return ""
    parts = []
    for arm in arms:
        mine = [r for r in runs if r.provider == arm]
        faults = [f for r in mine for f in r.faults]
        found = sum(a.kind != NOT_REACHED for f in faults if _checked(f) for a in f.anomalies)
        found += sum(len(r.findings) for r in mine)
        wrong = sum(f.outcome == "wrong" for f in faults)
        parts.append(f"{arm} {found} on {wrong} of {sum(_checked(f) for f in faults)} faulted units")
    return "; by arm: " + ", ".join(parts)


def run_verdict(runs: list[CaseRun], manifest: Manifest, coverage: pd.DataFrame | None = None) -> tuple[str, list[str]]:
    """The verdict of a run and why, counting the applicable (site, kind) pairs its fault plan left unreached."""
    if coverage is None:
        coverage = coverage_frame(runs, _ordered(r.provider for r in runs) or list(manifest.providers))
    return verdict_of(runs, unreached_pairs(coverage) if manifest.faults != "none" else {})


# ---- summary ----------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub markdown table (tabulate is not a dependency)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _one_line(text: Any, limit: int = 300) -> str:
    if not isinstance(text, str) or not text.strip():
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _worst_cases(facts: pd.DataFrame, limit: int = 8, stability: pd.DataFrame | None = None) -> list[str]:
    """The cases with the most wrong stored facts (per epoch, with several), the query that lists their
    rows, and whether each is flaky (right in some epochs, wrong in others)."""
    stored = facts[facts["stage"] == "stored"]
    if stored.empty:
        return []
    wrong = stored.assign(bad=~(stored["matched"] & stored["subject_ok"].fillna(False) & stored["owner_ok"].fillna(False)))
    epochs = max(1, int(wrong["epoch"].nunique())) if "epoch" in wrong.columns else 1
    worst = (wrong.groupby(["provider", "dataset", "case_id"])["bad"].sum() / epochs).sort_values(ascending=False)
    worst = worst[worst > 0].head(limit)
    out = ["## Worst cases", ""]
    if worst.empty:
        return out + ["Every stored fact matched its gold with the right subject and owner.", ""]
    flaky = flaky_cases(stability) if stability is not None and epochs > 1 else {}
    flips = fact_flips(facts) if epochs > 1 else {}
    for (provider, dataset, case_id), bad in worst.items():
        per = f"{bad:.1f} wrong or missing fact(s) per epoch over {epochs}" if epochs > 1 \
            else f"{int(bad)} wrong or missing fact(s)"
        metrics = flaky.get((provider, dataset, case_id))
        mark = (f" — **flaky** on {', '.join(metrics[:3])}{' …' if len(metrics) > 3 else ''}" if metrics
                else " — wrong in every epoch (stable-fail)" if epochs > 1 else "")
        flipped, decided = flips.get((provider, dataset, case_id), (0, 0))
        mark += f"; {flipped} of {decided} gold-fact decisions flip between epochs" if flipped else ""
        out.append(f"- {provider} `{case_id}`: {per}{mark} — "
                   f"`facts.parquet` rows where case_id == '{case_id}' and stage == 'stored'")
    return out + [""]


def summary_markdown(manifest: Manifest, verdict: str, reasons: list[str], cases: pd.DataFrame,
                     faults: pd.DataFrame, anomalies: pd.DataFrame, coverage: pd.DataFrame,
                     metrics: pd.DataFrame, facts: pd.DataFrame | None = None,
                     stability: pd.DataFrame | None = None, failures: pd.DataFrame | None = None) -> str:
    out = [f"# Run {manifest.run_id}: verdict **{verdict}**", ""]
    out += [f"- {reason}" for reason in reasons] + [""]
    git = f"{manifest.git_commit[:12]}{' (dirty)' if manifest.git_dirty else ''}" if manifest.git_commit else "n/a"
    repeats = f"{manifest.epochs} epochs per case" + (f" at temperature {manifest.temperature:g}"
                                                      if manifest.temperature is not None else "") + " · "
    out += [f"faults `{manifest.faults}` · seed {manifest.seed} · {repeats if manifest.epochs > 1 else ''}providers {', '.join(manifest.providers)} · "
            f"{len(cases)} units of {manifest.n_cases} cases · engine {manifest.engine_version} · "
            f"embedder {manifest.embedder} · git {git}", ""]

    out += [card_line(manifest.matcher), ""]
    for provider in _ordered(metrics["provider"]):
        rows = metrics[(metrics["provider"] == provider) & (metrics["dataset"] == "all")]
        shown = [*HEADLINE, *(REPEAT_METRICS if manifest.epochs > 1 else ())]
        rows = rows[rows["metric"].isin(shown)]
        rows = rows.assign(order=rows["metric"].map(shown.index))
        rows = rows.sort_values("order")
        out += [f"## {provider}", ""]
        table = []
        for m in rows.itertuples():
            rate = metric(m.metric).is_rate
            ci = f"[{format_value(m.metric, m.ci_low)}, {format_value(m.metric, m.ci_high)}]" if rate else ""
            table.append([m.metric, format_value(m.metric, m.value), ci, m.n])
        out += [markdown_table(["metric", "value", "95% CI", "n"], table), "",
                "What each n counts is in metrics.parquet `note` and the README's metric table.", ""]
    out += ["Every metric (per dataset, proposed vs stored stage, `_with_errors` twins that count infra errors "
            "as wrong, the subject confusion) is in `metrics.parquet`.", ""]
    if facts is not None and len(facts):
        out += _worst_cases(facts, stability=stability)
    out += ["## Coverage", ""]
    for provider in _ordered(coverage["provider"]):
        cov = coverage[coverage["provider"] == provider]
        unreached = cov[~cov["reached"]]
        out.append(f"- {provider}: {int(cov['reached'].sum())}/{len(cov)} (site, kind) pairs reached")
        if len(unreached):
            pairs = zip(unreached["site"], unreached["kind"], strict=True)
            out.append("  - unreached: " + ", ".join(f"{s}×{k}" for s, k in pairs))
        natural = failures[(failures["provider"] == provider) & (failures["cause"] != "engine")] \
            if failures is not None and manifest.faults != "none" else None
        if natural is not None and len(natural):
            out.append(f"  - {len(natural)} writes failed on the model's own replies: their faults were planned "
                       "only at the sites each reached before its reply broke it, and only faults that must fail it")
    out.append("")
    repeated = manifest.epochs > 1  # say which epoch: the same case and write recur once per epoch
    out += _anomaly_section(anomalies[anomalies["outcome"] != "indeterminate"], "## Anomalies", repeated)
    out += _anomaly_section(anomalies[anomalies["outcome"] == "indeterminate"],
                            "## Findings on indeterminate units (fault did not fire; not counted)", repeated)
    if failures is not None:
        out += _failure_section(failures, repeated)
    errors = [(r.provider, r.case_id, _in_epoch("case", r, repeated), r.error)
              for r in cases.itertuples() if r.status == "infra_error"]
    errors += [(r.provider, r.case_id, _in_epoch(f"write {r.write} {r.site}×{r.kind}", r, repeated), r.error)
               for r in faults.itertuples() if r.outcome == "infra_error"]
    out += ["## Infra errors", ""]
    out += [f"- {p} `{c}` ({where}): {_one_line(e)}" for p, c, where, e in errors] or ["None."]
    return "\n".join(out) + "\n"


def _failure_section(failures: pd.DataFrame, repeated: bool, limit: int = 5) -> list[str]:
    """Fault-free writes that failed, by cause, with a few examples each: a model that breaks its output format
    shows here before its attribution is read."""
    out = ["## Writes that failed without a fault", ""]
    if failures.empty:
        return out + ["None.", ""]
    for (provider, cause), group in failures.groupby(["provider", "cause"], sort=False):
        wrong = int((group["n_anomalies"] > 0).sum())
        out.append(f"### {provider}: {cause} ({len(group)}; {FAILURE_CAUSES.get(str(cause), '')}; "
                   f"{wrong} with a write-contract anomaly)")
        out += [f"- `{f.case_id}` {_in_epoch(f'write {f.write}', f, repeated)} ({f.path}) at {f.site}: "
                f"{_one_line(f.detail, 160)}" + (f" — reply: {_one_line(_flat(f.reply), 160)!r}" if f.reply else "")
                for f in group.head(limit).itertuples()]
        out.append("")
    out.append("Every one is in `write_failures.parquet`; its gold facts count as misses.")
    return out + [""]


def _flat(text: Any) -> str:
    """A reply on one line (a model's JSON spans many)."""
    return " ".join(str(text).split())


def _in_epoch(where: str, row: Any, repeated: bool) -> str:
    return f"{where}, epoch {row.epoch}" if repeated else where


def _anomaly_section(anomalies: pd.DataFrame, title: str, repeated: bool = False) -> list[str]:
    if title != "## Anomalies" and anomalies.empty:
        return []
    out = [title, ""]
    if anomalies.empty:
        return out + ["None.", ""]
    for kind, group in sorted(anomalies.groupby("kind"), key=lambda kg: (-len(kg[1]), kg[0])):
        out.append(f"### {kind} ({len(group)})")
        out += [f"- {a.provider} `{a.case_id}` {_in_epoch(f'write {a.write}', a, repeated)} ({a.path}), "
                f"{a.site + '×' + a.fault if isinstance(a.fault, str) else a.site + ' check'}: {_one_line(a.witness)}"
                for a in group.head(3).itertuples()]
        out.append("")
    return out


# ---- files ------------------------------------------------------------------------------------------------


def write_report(run_dir: Path, manifest: Manifest, runs: list[CaseRun], *,
                 extra_metrics: Iterable[MetricRow | dict[str, Any]] | None = None,
                 extra_case_rows: Iterable[CaseMetricRow | dict[str, Any]] | None = None,
                 extra_tables: dict[str, pd.DataFrame] | None = None) -> str:
    """Write cases/faults/anomalies/coverage/metrics.parquet and summary.md into `run_dir`; return the verdict.

    `extra_tables`: other declared tables (facts, ops, attempts) already built by their projections.
    """
    run_dir = Path(run_dir)
    providers = _ordered(r.provider for r in runs) or list(manifest.providers)
    cases, faults = cases_frame(runs), faults_frame(runs, manifest.seed)
    anomalies, coverage = anomalies_frame(runs, manifest.seed), coverage_frame(runs, providers)
    case_metrics = case_metrics_frame(runs, extra_case_rows)
    stability = stability_frame(case_metrics) if manifest.epochs > 1 else None  # one epoch: today's tables
    repeats = epoch_metrics(stability, (extra_tables or {}).get("facts"), manifest.seed) \
        if stability is not None else []
    metrics = metrics_frame(runs, manifest.seed, [*(extra_metrics or []), *repeats])
    verdict, reasons = run_verdict(runs, manifest, coverage)
    failures = write_failures_frame(runs)
    tables = {"cases": cases, "faults": faults, "anomalies": anomalies, "coverage": coverage, "metrics": metrics,
              "case_metrics": case_metrics, "write_failures": failures,
              **({"stability": stability} if stability is not None else {}), **(extra_tables or {})}
    for name, data in tables.items():
        write_table(run_dir, name, data)
    text = summary_markdown(manifest, verdict, reasons, cases, faults, anomalies, coverage, metrics,
                            (extra_tables or {}).get("facts"), stability, failures)
    atomic_write_text(run_dir / "summary.md", text)
    return verdict


def load_runs(run_dir: Path) -> list[CaseRun]:
    """The units of a run (see `evals.record.read_units`)."""
    return read_units(run_dir)


__all__ = ["COUNTS", "RATES", "UNITS_FILE", "anomalies_frame", "case_metrics_frame", "cases_frame", "count_tallies",
           "coverage_frame", "rate_tallies",
           "faults_frame", "failure_cause", "infra_errors", "load_runs", "markdown_table", "write_failures",
           "write_failures_frame",
           "metrics_frame", "summary_markdown", "verdict_of", "write_report", "applicable_pairs", "run_verdict",
           "unreached_pairs"]
