"""The report: a projection of the run record (`units.jsonl`) into Parquet tables, metrics and summary.md.

Nothing here re-runs anything. Each table's columns are declared once, below, as a
pyarrow schema, so an empty table keeps its types. A unit whose fault did not fire,
or that hit an infra error, is counted as such and never as a pass; its checker
findings are listed but are not evidence either way.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from evals.checker import Anomaly
from evals.faults import SITES, WIRE_KINDS, kinds_for, wire_kinds_for
from evals.manifest import Manifest
from evals.replay import CaseRun, FaultRecord
from evals.stats import bootstrap_ci
from evals.systems import DEFAULT_SYSTEM, SYSTEMS, site_kinds
from evals.usage import USAGE_METRICS

UNITS_FILE = "units.jsonl"
NOT_REACHED = "FAULT_NOT_REACHED"
# Which anomaly kinds break each property of a faulted write.
CODE_KINDS = frozenset({"WRONG_ERROR_CODE", "DEGRADED_SUCCESS"})
STATE_KINDS = frozenset({"PARTIAL_WRITE", "L1_NOT_ROLLED_BACK", "EPISODE_ADVANCED", "TRACE_APPENDED",
                         "VECTORLESS_NODE", "ORPHAN_VECTOR", "DEGRADED_SUCCESS"})
RETRY_KINDS = frozenset({"RETRY_DIVERGED", "DOUBLE_WRITE"})
CHECKED = ("ok", "wrong")  # fault outcomes of a unit whose fault fired and whose state was checked

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()
CASES_SCHEMA = pa.schema([
    ("provider", _S),  # the arm: the provider name, prefixed SYSTEM/ for an engine other than hymem
    ("system", _S),  # the engine under test: hymem | mem0
    ("dataset", _S), ("case_id", _S), ("lang", _S), ("tags", pa.list_(_S)),
    ("status", _S),  # ok | infra_error
    ("error", _S),  # the infra error with its traceback, else null
    ("n_writes", _I), ("n_memories", _I), ("n_faults", _I), ("n_anomalies", _I), ("seconds", _F),
])
FAULTS_SCHEMA = pa.schema([
    ("provider", _S), ("system", _S), ("dataset", _S), ("case_id", _S), ("write", _I), ("path", _S), ("site", _S),
    ("kind", _S),
    ("occurrence", _I), ("fired", _B), ("seed", _I),
    ("expected_success", _B), ("expected_error_code", _S), ("expected_agent_error_code", _S),
    ("expected_reconcile_error_code", _S),
    ("actual_success", _B), ("actual_error_code", _S), ("actual_agent_error_code", _S),
    ("actual_reconcile_error_code", _S),
    ("retry_success", _B),
    ("outcome", _S),  # ok | wrong | indeterminate | infra_error
    ("code_ok", _B), ("rollback_ok", _B), ("retry_ok", _B),  # null unless the unit was checked (ok | wrong)
    ("n_anomalies", _I),
    ("error", _S),  # the harness exception of an infra_error unit
    ("wire_log", _S),  # JSON: the fault proxy's log lines for this unit (HTTP providers), else null
    ("seconds", _F),
])
ANOMALIES_SCHEMA = pa.schema([
    ("kind", _S), ("provider", _S), ("system", _S), ("dataset", _S), ("case_id", _S), ("write", _I), ("path", _S),
    ("site", _S),
    ("fault", _S), ("seed", _I), ("expected", _S), ("actual", _S), ("witness", _S),
    ("outcome", _S),  # the unit's outcome: wrong (counted) | indeterminate (fault did not fire; not counted)
])
COVERAGE_SCHEMA = pa.schema([
    ("provider", _S), ("system", _S), ("site", _S), ("kind", _S),
    ("faulted_units", _I),  # the fault fired and the unit was checked
    ("ok_units", _I), ("wrong_units", _I), ("indeterminate_units", _I), ("infra_error_units", _I),
    ("reached", _B),  # faulted_units > 0; an unreached pair is listed, never a pass
])
METRICS_SCHEMA = pa.schema([
    ("provider", _S), ("dataset", _S), ("metric", _S), ("value", _F), ("ci_low", _F), ("ci_high", _F), ("n", _I),
    ("note", _S),
])


class MetricRow(BaseModel):
    """One row of metrics.parquet; extra metrics from other scorers are validated against it."""

    provider: str
    dataset: str  # a dataset name, or "all"
    metric: str
    value: float  # NaN when nothing was measured
    ci_low: float
    ci_high: float
    n: int  # cases or units, as `note` says
    note: str | None = None


# ---- tables -----------------------------------------------------------------------------------------------


def _frame(rows: list[dict[str, Any]], schema: pa.Schema) -> pd.DataFrame:
    return pa.Table.from_pylist(rows, schema=schema).to_pandas()


def _checked(record: FaultRecord) -> bool:
    return record.outcome in CHECKED


def _kinds(record: FaultRecord) -> set[str]:
    return {kind for kind, _ in record.anomalies}


def cases_frame(runs: list[CaseRun]) -> pd.DataFrame:
    """One row per (provider, case) unit."""
    return _frame([{
        "provider": r.provider, "system": r.system, "dataset": r.dataset, "case_id": r.case_id, "lang": r.lang,
        "tags": list(r.tags),
        "status": r.status, "error": r.error, "n_writes": len(r.writes), "n_memories": len(r.memories),
        "n_faults": len(r.faults), "n_anomalies": sum(len(f.anomalies) for f in r.faults), "seconds": r.seconds,
    } for r in runs], CASES_SCHEMA)


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
                **{f"expected_{k}": f.expected.get(k) for k in ("success", "error_code", "agent_error_code",
                                                                  "reconcile_error_code")},
                **{f"actual_{k}": f.actual.get(k) for k in ("success", "error_code", "agent_error_code",
                                                              "reconcile_error_code")},
                "retry_success": f.retry_success, "outcome": f.outcome,
                "code_ok": not (kinds & CODE_KINDS) if checked else None,
                "rollback_ok": not (kinds & STATE_KINDS) if checked else None,
                "retry_ok": not (kinds & RETRY_KINDS) if checked else None,
                "n_anomalies": len(f.anomalies),
                "error": f.actual.get("exception") if f.outcome == "infra_error" else None,
                "wire_log": json.dumps(f.wire, ensure_ascii=False) if f.wire else None,
                "seconds": f.seconds,
            })
    return _frame(rows, FAULTS_SCHEMA)


def anomalies_frame(runs: list[CaseRun], seed: int) -> pd.DataFrame:
    """One row per anomaly, with its witness."""
    rows = []
    for r in runs:
        for f in r.faults:
            for kind, witness in f.anomalies:
                anomaly = Anomaly(kind=kind, case_id=r.case_id, provider=r.provider, write=f.write, path=f.path,
                                  site=f.site, fault=f.kind, seed=seed, expected=_json(f.expected),
                                  actual=_json(f.actual), witness=witness)
                rows.append({**anomaly.model_dump(), "system": r.system, "dataset": r.dataset, "outcome": f.outcome})
    return _frame(rows, ANOMALIES_SCHEMA)


def _json(codes: dict[str, Any]) -> str:
    return json.dumps(codes, sort_keys=True, ensure_ascii=False, default=str)


def coverage_frame(runs: list[CaseRun], providers: list[str]) -> pd.DataFrame:
    """Every (site, kind) pair of its system, per provider, with the units that exercised it (unreached: zeros)."""
    system_of = _systems_of(runs)
    rows = []
    for provider in providers:
        system = system_of(provider)
        on_wire = any(f.kind in WIRE_KINDS for r in runs if r.provider == provider for f in r.faults)
        hymem_kinds = wire_kinds_for if on_wire else kinds_for  # an HTTP provider's LM faults are on the wire
        pairs = [(site, kind) for site in SITES for kind in hymem_kinds(site)] if system == DEFAULT_SYSTEM \
            else site_kinds(system)
        counts: dict[tuple[str, str], Counter] = {}
        for r in runs:
            if r.provider == provider:
                for f in r.faults:
                    counts.setdefault((f.site, f.kind), Counter())[f.outcome] += 1
        extra = sorted(set(counts) - set(pairs))  # a site or kind the table above does not know: still listed
        for site, kind in pairs + extra:
            c = counts.get((site, kind), Counter())
            faulted = c["ok"] + c["wrong"]
            rows.append({"provider": provider, "system": system, "site": site, "kind": kind, "faulted_units": faulted,
                         "ok_units": c["ok"], "wrong_units": c["wrong"], "indeterminate_units": c["indeterminate"],
                         "infra_error_units": c["infra_error"], "reached": faulted > 0})
    return _frame(rows, COVERAGE_SCHEMA)


# ---- metrics ----------------------------------------------------------------------------------------------

_UNIT_NOTE = "n = fired faulted units; 95% CI resamples cases"


def _rate(metric: str, ok: Callable[[FaultRecord], bool]):
    """A share of checked (fired, not infra_error) faulted units; numerator and denominator per case."""
    def per_case(run: CaseRun) -> tuple[float, float]:
        checked = [f for f in run.faults if _checked(f)]
        return sum(1 for f in checked if ok(f)), len(checked)
    return metric, per_case, _UNIT_NOTE


def _infra(run: CaseRun) -> tuple[float, float]:
    return (run.status == "infra_error") + sum(f.outcome == "infra_error" for f in run.faults), 1 + len(run.faults)


RATES = [
    _rate("rollback_correct_rate", lambda f: not (_kinds(f) & STATE_KINDS)),
    _rate("error_code_accuracy", lambda f: not (_kinds(f) & CODE_KINDS)),
    _rate("retry_equivalence_rate", lambda f: not (_kinds(f) & RETRY_KINDS)),
    ("infra_error_rate", _infra, "n = units (cases + faulted runs); 95% CI resamples cases"),
]
COUNTS = [
    ("degraded_success_count", lambda r: sum(_checked(f) and "DEGRADED_SUCCESS" in _kinds(f) for f in r.faults),
     "fired faulted units that reported success under a fault that must fail; n = cases"),
    ("anomaly_count", lambda r: sum(len(f.anomalies) for f in r.faults if _checked(f)),
     f"anomalies on fired faulted units ({NOT_REACHED} is counted in indeterminate_units); n = cases"),
    ("faulted_units", lambda r: sum(_checked(f) for f in r.faults), "faulted runs that fired and were checked; n = cases"),
    ("indeterminate_units", lambda r: sum(f.outcome == "indeterminate" for f in r.faults),
     "faulted runs whose fault did not fire (unknown, not a pass); n = cases"),
]
COUNT_METRICS = frozenset(name for name, _, _ in COUNTS)


def _group_metrics(provider: str, dataset: str, runs: list[CaseRun], seed: int) -> list[MetricRow]:
    rows = []
    for metric, per_case, note in RATES:
        pairs = [per_case(r) for r in runs]
        num, den = [p[0] for p in pairs], [p[1] for p in pairs]
        value, low, high = bootstrap_ci(num, den, seed=seed)
        rows.append(MetricRow(provider=provider, dataset=dataset, metric=metric, value=value, ci_low=low,
                              ci_high=high, n=int(sum(den)), note=note))
    for metric, count, note in COUNTS:
        value = float(sum(count(r) for r in runs))
        rows.append(MetricRow(provider=provider, dataset=dataset, metric=metric, value=value, ci_low=value,
                              ci_high=value, n=len(runs), note=note))
    return rows


def metrics_frame(runs: list[CaseRun], seed: int, extra_metrics: list[dict] | None = None) -> pd.DataFrame:
    """Long-form metrics per provider × dataset and per provider over all datasets ("all"), then `extra_metrics`."""
    rows: list[MetricRow] = []
    for provider in _ordered(r.provider for r in runs):
        mine = [r for r in runs if r.provider == provider]
        rows += _group_metrics(provider, "all", mine, seed)
        for dataset in sorted({r.dataset for r in mine}):
            rows += _group_metrics(provider, dataset, [r for r in mine if r.dataset == dataset], seed)
    rows += [MetricRow.model_validate(extra) for extra in extra_metrics or []]
    return _frame([row.model_dump() for row in rows], METRICS_SCHEMA)


CASE_METRICS_SCHEMA = pa.schema([
    ("provider", pa.string()), ("dataset", pa.string()), ("case_id", pa.string()), ("metric", pa.string()),
    ("num", pa.float64()), ("den", pa.float64()),
])


def case_metrics_frame(runs: list[CaseRun], extra_case_rows: list[dict] | None = None) -> pd.DataFrame:
    """Per-case numerator and denominator of every rate, so `compare` and `gate` can pair runs by case."""
    rows = []
    for run in runs:
        for metric, per_case, _ in RATES:
            num, den = per_case(run)
            rows.append({"provider": run.provider, "dataset": run.dataset, "case_id": run.case_id,
                         "metric": metric, "num": float(num), "den": float(den)})
    rows += list(extra_case_rows or [])
    return _frame(rows, CASE_METRICS_SCHEMA)


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


def verdict_of(runs: list[CaseRun]) -> tuple[str, list[str]]:
    """valid | invalid | unknown, and why.

    invalid: an anomaly on a unit whose fault fired. unknown: otherwise, any infra error,
    any fault that did not fire, or nothing checked at all. valid: every unit checked clean.
    """
    faults = [f for r in runs for f in r.faults]
    wrong = Counter(kind for f in faults if _checked(f) for kind, _ in f.anomalies if kind != NOT_REACHED)
    checked = sum(_checked(f) for f in faults)
    reasons = []
    if wrong:
        units = sum(f.outcome == "wrong" for f in faults)
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(wrong.items()))
        reasons.append(f"{sum(wrong.values())} anomalies on {units} of {checked} faulted units: {kinds}")
    case_errors = sum(r.status == "infra_error" for r in runs)
    fault_errors = sum(f.outcome == "infra_error" for f in faults)
    indeterminate = sum(f.outcome == "indeterminate" for f in faults)
    if case_errors:
        reasons.append(f"{case_errors} of {len(runs)} cases failed with an infra error")
    if fault_errors:
        reasons.append(f"{fault_errors} of {len(faults)} faulted runs failed with an infra error")
    if indeterminate:
        reasons.append(f"{indeterminate} of {len(faults)} faults did not fire (indeterminate)")
    if not checked:
        reasons.append("no faulted unit ran and fired, so no rollback was checked" if runs else "no units ran")
    if wrong:
        return "invalid", reasons
    if reasons:
        return "unknown", reasons
    return "valid", [f"all {checked} faulted units in {len(runs)} cases were checked with no anomaly"]


# ---- summary ----------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub markdown table (tabulate is not a dependency)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(x: float, count: bool) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.0f}" if count else f"{x:.3f}"


def _usage(metric: str, value: float) -> str | None:
    """Units for the usage metrics: latency in ms, cost in USD."""
    if value is None or math.isnan(value):
        return None
    if metric.startswith("latency_"):
        return f"{value * 1000:.1f} ms"
    if metric == "cost_total":
        return f"${value:.4f}"
    return None


def _one_line(text: Any, limit: int = 300) -> str:
    if not isinstance(text, str) or not text.strip():
        return ""
    line = text.strip().splitlines()[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


HEADLINE = ["fact_f1", "fact_precision", "fact_recall", "subject_accuracy", "owner_accuracy",
            "third_party_to_user_rate", "ai_to_user_rate", "profile_leak_rate", "profile_name_accuracy",
            "cross_subject_merge_proposed_rate", "cross_subject_merge_applied_rate", "separate_kept_rate",
            "same_subject_update_recall", "no_memory_accuracy", "rollback_correct_rate", "error_code_accuracy",
            "retry_equivalence_rate", "infra_error_rate", "degraded_success_count", "anomaly_count", "faulted_units",
            "indeterminate_units", "latency_p50", "latency_p95", "tokens_total", "cost_total", "lm_attempts",
            "lm_retries", "gold_labels_flagged", "gold_labels_misattributed", "gold_labels_left_out"]


def _worst_cases(facts: pd.DataFrame, limit: int = 8) -> list[str]:
    """The cases with the most wrong stored facts, with the query that lists their rows."""
    stored = facts[facts["stage"] == "stored"]
    if stored.empty:
        return []
    wrong = stored.assign(bad=~(stored["matched"] & stored["subject_ok"].fillna(False) & stored["owner_ok"].fillna(False)))
    worst = (wrong.groupby(["provider", "case_id"])["bad"].sum().sort_values(ascending=False))
    worst = worst[worst > 0].head(limit)
    out = ["## Worst cases", ""]
    if worst.empty:
        return out + ["Every stored fact matched its gold with the right subject and owner.", ""]
    for (provider, case_id), bad in worst.items():
        out.append(f"- {provider} `{case_id}`: {int(bad)} wrong or missing fact(s) — "
                   f"`facts.parquet` rows where case_id == '{case_id}' and stage == 'stored'")
    return out + [""]


def summary_markdown(manifest: Manifest, verdict: str, reasons: list[str], cases: pd.DataFrame,
                     faults: pd.DataFrame, anomalies: pd.DataFrame, coverage: pd.DataFrame,
                     metrics: pd.DataFrame, facts: pd.DataFrame | None = None) -> str:
    out = [f"# Run {manifest.run_id}: verdict **{verdict}**", ""]
    out += [f"- {reason}" for reason in reasons] + [""]
    git = f"{manifest.git_commit[:12]}{' (dirty)' if manifest.git_dirty else ''}" if manifest.git_commit else "n/a"
    out += [f"faults `{manifest.faults}` · seed {manifest.seed} · providers {', '.join(manifest.providers)} · "
            f"{len(cases)} units of {manifest.n_cases} cases · engine {manifest.engine_version} · "
            f"embedder {manifest.embedder} · git {git}", ""]
    if manifest.matcher:
        m = manifest.matcher
        out += [f"Facts are matched to gold by {m['kind']} (threshold {m['threshold']}), which agrees with "
                f"{m['agreement']:.0%} of {m['labelled_pairs']} hand-labelled pairs.", ""]
    for provider in _ordered(metrics["provider"]):
        rows = metrics[(metrics["provider"] == provider) & (metrics["dataset"] == "all")]
        rows = rows[rows["metric"].isin(HEADLINE)].assign(order=lambda f: f["metric"].map(HEADLINE.index))
        rows = rows.sort_values("order")
        out += [f"## {provider}", ""]
        table = []
        for m in rows.itertuples():
            count = m.metric in COUNT_METRICS or m.metric in USAGE_METRICS or m.metric.startswith("gold_labels_")
            ci = "" if count else f"[{_num(m.ci_low, False)}, {_num(m.ci_high, False)}]"
            table.append([m.metric, _usage(m.metric, m.value) or _num(m.value, count), ci, m.n])
        out += [markdown_table(["metric", "value", "95% CI", "n"], table), "",
                "n is units for a rate (its CI resamples cases) and cases for a count; see metrics.parquet `note`.", ""]
    out += ["Every metric (per dataset, proposed vs stored stage, `_with_errors` twins that count infra errors "
            "as wrong, the subject confusion) is in `metrics.parquet`.", ""]
    if facts is not None and len(facts):
        out += _worst_cases(facts)
    out += ["## Coverage", ""]
    for provider in _ordered(coverage["provider"]):
        cov = coverage[coverage["provider"] == provider]
        unreached = cov[~cov["reached"]]
        out.append(f"- {provider}: {int(cov['reached'].sum())}/{len(cov)} (site, kind) pairs reached")
        if len(unreached):
            pairs = zip(unreached["site"], unreached["kind"], strict=True)
            out.append("  - unreached: " + ", ".join(f"{s}×{k}" for s, k in pairs))
    out.append("")
    out += _anomaly_section(anomalies[anomalies["outcome"] != "indeterminate"], "## Anomalies")
    out += _anomaly_section(anomalies[anomalies["outcome"] == "indeterminate"],
                            "## Findings on indeterminate units (fault did not fire; not counted)")
    errors = [(r.provider, r.case_id, "case", r.error) for r in cases.itertuples() if r.status == "infra_error"]
    errors += [(r.provider, r.case_id, f"write {r.write} {r.site}×{r.kind}", r.error)
               for r in faults.itertuples() if r.outcome == "infra_error"]
    out += ["## Infra errors", ""]
    out += [f"- {p} `{c}` ({where}): {_one_line(e)}" for p, c, where, e in errors] or ["None."]
    return "\n".join(out) + "\n"


def _anomaly_section(anomalies: pd.DataFrame, title: str) -> list[str]:
    if title != "## Anomalies" and anomalies.empty:
        return []
    out = [title, ""]
    if anomalies.empty:
        return out + ["None.", ""]
    for kind, group in sorted(anomalies.groupby("kind"), key=lambda kg: (-len(kg[1]), kg[0])):
        out.append(f"### {kind} ({len(group)})")
        out += [f"- {a.provider} `{a.case_id}` write {a.write} ({a.path}), {a.site}×{a.fault}: {_one_line(a.witness)}"
                for a in group.head(3).itertuples()]
        out.append("")
    return out


# ---- files ------------------------------------------------------------------------------------------------


def _atomic(run_dir: Path, name: str, write: Callable[[Path], None]) -> None:
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is for reading
        os.replace(tmp, run_dir / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_parquet(run_dir: Path, name: str, frame: pd.DataFrame, schema: pa.Schema) -> None:
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    _atomic(run_dir, name, lambda tmp: pq.write_table(table, tmp))


def write_report(run_dir: Path, manifest: Manifest, runs: list[CaseRun], *,
                 extra_metrics: list[dict] | None = None, extra_case_rows: list[dict] | None = None,
                 extra_tables: dict[str, pd.DataFrame] | None = None) -> str:
    """Write cases/faults/anomalies/coverage/metrics.parquet and summary.md into `run_dir`; return the verdict."""
    run_dir = Path(run_dir)
    providers = _ordered(r.provider for r in runs) or list(manifest.providers)
    cases, faults = cases_frame(runs), faults_frame(runs, manifest.seed)
    anomalies, coverage = anomalies_frame(runs, manifest.seed), coverage_frame(runs, providers)
    metrics = metrics_frame(runs, manifest.seed, extra_metrics)
    verdict, reasons = verdict_of(runs)
    for name, frame, schema in (("cases", cases, CASES_SCHEMA), ("faults", faults, FAULTS_SCHEMA),
                                ("anomalies", anomalies, ANOMALIES_SCHEMA), ("coverage", coverage, COVERAGE_SCHEMA),
                                ("metrics", metrics, METRICS_SCHEMA),
                                ("case_metrics", case_metrics_frame(runs, extra_case_rows), CASE_METRICS_SCHEMA)):
        _write_parquet(run_dir, f"{name}.parquet", frame, schema)
    for name, frame in (extra_tables or {}).items():  # e.g. facts / ops from the scorers
        _write_parquet(run_dir, f"{name}.parquet", frame, pa.Schema.from_pandas(frame, preserve_index=False))
    text = summary_markdown(manifest, verdict, reasons, cases, faults, anomalies, coverage, metrics,
                            (extra_tables or {}).get("facts"))
    _atomic(run_dir, "summary.md", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return verdict


def load_runs(run_dir: Path) -> list[CaseRun]:
    """The units of a run, last record per (provider, case_id).

    A record cut short by a crash (the last line, or a line a resumed run started after)
    is skipped: its unit never finished and is redone. Any other bad line raises.
    """
    lines = (Path(run_dir) / UNITS_FILE).read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    runs: dict[tuple[str, str], CaseRun] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            run = CaseRun.model_validate_json(line)
        except ValidationError as exc:
            if lineno == len(lines) or "EOF while parsing" in str(exc):
                continue
            raise ValueError(f"{UNITS_FILE}:{lineno}: not a CaseRun record: {exc}") from exc
        runs[(run.provider, run.case_id)] = run
    return list(runs.values())


__all__ = ["ANOMALIES_SCHEMA", "CASES_SCHEMA", "COVERAGE_SCHEMA", "FAULTS_SCHEMA", "METRICS_SCHEMA", "MetricRow",
           "anomalies_frame", "cases_frame", "coverage_frame", "faults_frame", "load_runs", "markdown_table",
           "metrics_frame", "summary_markdown", "verdict_of", "write_report"]
