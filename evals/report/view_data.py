"""What `hymem-eval view` shows, projected from the run record alone (manifest, units.jsonl, Parquet tables).

Why a module of its own: the page (`evals.report.view`) only lays out what is here, so the same projection can be
checked in Python without a browser, and a new table (e.g. natural failures) changes one function.
Two levels, so a large run stays usable in a browser: a short summary per case (the list, its filters and
sorts) and each unit's full detail, which the page parses only when the case is opened.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evals.record import UNITS_FILE, CaseRun, Manifest, read_units
from evals.record.catalogue import HEADLINE, REPEAT_METRICS, find, format_ci, format_value
from evals.report.compare import Run, RunInputError, compare_runs, load_run
from evals.report.in_flight import unfinished_lines
from evals.report.run_report import run_verdict
from evals.scoring.agreement import card_line
from evals.scoring.epochs import flaky_cases
from evals.scoring.merges import op_rows

PLOT_NAMES = ("providers", "subject_confusion", "fault_matrix", "stability")


@dataclass
class LoadedRun:
    """One run directory as the page reads it."""

    run: Run  # metrics, case_metrics and the other tables on demand
    units: list[CaseRun] | None  # None: the directory keeps no units.jsonl (a committed baseline): tables only
    label: str

    @property
    def manifest(self) -> Manifest:
        assert self.run.manifest is not None  # load_run always reads it
        return self.run.manifest

    @property
    def path(self) -> Path:
        assert self.run.path is not None
        return self.run.path


def load(path: Path) -> LoadedRun:
    """A run directory, finished or not (the page says which); RunInputError when it cannot be read."""
    run = load_run(Path(path), allow_unfinished=True)
    units = read_units(Path(path)) if (Path(path) / UNITS_FILE).is_file() else None
    return LoadedRun(run=run, units=units, label=run.label)


def run_labels(runs: list[LoadedRun]) -> list[str]:
    """The runs' labels as `compare` names its arms: the run id, `#i` added when two runs share one."""
    labels = [r.label for r in runs]
    return [f"{label}#{i + 1}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]


@dataclass(frozen=True)
class Arm:
    """One column of the page: a provider of a run (`RUN/provider` when several runs are shown)."""

    label: str
    run: int  # index into the runs
    provider: str


def _unit_providers(loaded: LoadedRun) -> list[str]:
    if loaded.units is not None:
        return [u.provider for u in loaded.units]
    cases = loaded.run.table("cases")
    return [] if cases is None else list(cases["provider"])


def arms_of(runs: list[LoadedRun]) -> list[Arm]:
    labels = run_labels(runs)
    arms = []
    for i, loaded in enumerate(runs):
        providers = list(dict.fromkeys([*loaded.run.providers, *_unit_providers(loaded)]))
        arms += [Arm(label=p if len(runs) == 1 else f"{labels[i]}/{p}", run=i, provider=p) for p in providers]
    return arms


# ---- values that JSON.parse reads ---------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A value JSON can carry: NaN and pandas' NA as null, numpy scalars as Python ones, containers walked."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if value is pd.NA or value is pd.NaT:
        return None
    if getattr(value, "ndim", 0) > 0:  # a numpy array (list cells of a Parquet table)
        return plain(value.tolist())
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item):
        return plain(item())
    return str(value)


# ---- natural failures ---------------------------------------------------------------------------------------


def failed_writes(unit: CaseRun) -> list[dict[str, Any]]:
    """Fault-free (control) writes that failed: which write, why (the cause the harness read off the model's reply,
    at which call site, with the reply's excerpt), its codes and message, and whether the write contract held.

    Why here: a write that fails on the model's own reply is kept and the case goes on (natural failures); its
    contract check's anomalies are the unit's findings of check `natural`, listed with the other anomalies.
    """
    out = []
    for w in unit.writes:
        if w.success:
            continue
        failure = w.failure
        found = [f.kind for f in unit.failure_findings(w.index)]
        why = (f"{failure.cause} at {failure.site or 'the engine'}: {failure.detail}" if failure is not None
               else "the engine raised")
        out.append({"write": w.index, "path": w.path, "request_id": w.request_id, "codes": w.codes.model_dump(),
                    "message": f"{why}" + (f" — reply: {failure.reply}" if failure is not None and failure.reply
                                           else "") + (f" — {w.message}" if w.message else ""),
                    "cause": failure.cause if failure is not None else "engine",
                    "contract": "anomalies: " + ", ".join(str(k) for k in found) if found
                    else ("held" if failure is not None and failure.checked else "not checked")})
    return out


# ---- the facts of one unit ----------------------------------------------------------------------------------


def _fact_row(row: dict[str, Any]) -> dict[str, Any]:
    """One gold/stored pair as the page shows it, with what was right and wrong about it."""
    matched, gold, pred = bool(row.get("matched")), row.get("gold_text"), row.get("pred_text")
    if gold is None:
        verdict = "extra"  # a stored fact no gold fact matched
    elif not matched:
        verdict = "missed"
    elif not (row.get("subject_ok") and row.get("owner_ok")):
        verdict = "wrong"  # matched, with the wrong subject or owner (or one not judged: as summary.md counts it)
    else:
        verdict = "right"
    return {"verdict": verdict, "gold": gold, "gold_subject": row.get("gold_subject"),
            "gold_owner": row.get("gold_owner"), "pred": pred, "pred_subject": row.get("pred_subject"),
            "pred_owner": row.get("pred_owner"), "score": row.get("match_score"),
            "subject_ok": row.get("subject_ok"), "owner_ok": row.get("owner_ok"), "note": row.get("note")}


def facts_by_unit(facts: pd.DataFrame | None) -> dict[tuple[str, str, str, int], dict[str, list[dict[str, Any]]]]:
    """(provider, dataset, case_id, epoch) -> {stage: its fact rows}, in facts.parquet's order."""
    out: dict[tuple[str, str, str, int], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    if facts is None or facts.empty:
        return out
    epochs = facts["epoch"] if "epoch" in facts.columns else pd.Series(0, index=facts.index)
    for row, epoch in zip(plain(facts.to_dict("records")), plain(epochs.tolist()), strict=True):
        key = (row["provider"], row["dataset"], row["case_id"], int(epoch or 0))
        out[key][row["stage"]].append(_fact_row(row))
    return out


def wrong_facts(rows: list[dict[str, Any]]) -> int:
    """Stored facts not right (missed gold, extra, wrong subject or owner): the summary's worst-case count."""
    return sum(r["verdict"] != "right" for r in rows)


# ---- one unit's detail -------------------------------------------------------------------------------------


def counted_anomalies(unit: CaseRun) -> list[dict[str, Any]]:
    """The anomalies `anomaly_count` counts: on checked faulted runs, and the write-contract findings."""
    found = [{"kind": str(a.kind), "where": f"write {f.write} {f.site}×{f.kind}", "witness": a.witness}
             for f in unit.faults if f.checked for a in f.anomalies]
    return found + [{"kind": str(x.kind), "where": f"{x.check} check" + (f", write {x.write}" if x.write >= 0 else ""),
                     "witness": x.witness} for x in unit.findings]


def _ops_by_write(unit: CaseRun) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in op_rows(unit):
        out[row["write"]].append({k: row[k] for k in ("source", "op", "fact_text", "fact_subject", "target_id",
                                                      "target_text", "target_subject", "cross_subject", "refused")})
    return out


def _codes(codes: Any) -> dict[str, Any]:
    return {k: v for k, v in codes.model_dump().items() if v is not None}


def _attempt_summary(unit: CaseRun) -> list[dict[str, Any]]:
    """Attempts per (run of the write, site, status): a sweep makes hundreds per case, the page shows tallies."""
    tally: dict[tuple[str, str, str], dict[str, Any]] = {}
    for a in unit.attempts:
        row = tally.setdefault((a.unit, a.site, a.status), {"unit": a.unit, "site": a.site, "status": a.status,
                                                            "attempts": 0, "retries": 0, "cache_hits": 0,
                                                            "tokens": 0, "seconds": 0.0, "injected": 0})
        row["attempts"] += 1
        row["retries"] += a.attempt > 1
        row["cache_hits"] += a.cache_hit
        row["tokens"] += (a.prompt_tokens or 0) + (a.completion_tokens or 0)
        row["seconds"] += a.latency_s
        row["injected"] += a.injected is not None
    return list(tally.values())


def unit_detail(unit: CaseRun, arm: str, facts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Everything the page shows for one (arm, case, epoch) unit."""
    ops = _ops_by_write(unit)
    writes = [{"index": w.index, "path": w.path, "request_id": w.request_id, "success": w.success,
               "codes": _codes(w.codes), "message": w.message, "payload": w.payload, "calls": w.calls,
               "proposed_facts": w.proposed_facts, "ops": ops.get(w.index, []), "seconds": w.seconds}
              for w in unit.writes]
    faults = [{"write": f.write, "path": f.path, "site": f.site, "kind": f.kind, "occurrence": f.occurrence,
               "fired": f.fired, "outcome": f.outcome, "expected": _codes(f.expected), "actual": _codes(f.actual),
               "retry_success": f.retry_success, "injected": f.injected,
               "anomalies": [{"kind": str(a.kind), "witness": a.witness} for a in f.anomalies]}
              for f in unit.faults]
    return plain({
        "arm": arm, "dataset": unit.dataset, "case_id": unit.case_id, "epoch": unit.epoch, "lang": unit.lang,
        "tags": unit.tags, "system": unit.system, "status": unit.status, "error": unit.error,
        "seconds": unit.seconds, "n_writes": len(unit.writes), "failed_writes": failed_writes(unit), "facts": dict(facts),
        "memories": unit.memories, "profile": unit.profile, "writes": writes, "faults": faults,
        "anomalies": counted_anomalies(unit), "attempts": _attempt_summary(unit), "record": True, "ops": [],
    })


# ---- a unit from the tables alone ---------------------------------------------------------------------------


def _by_unit(table: pd.DataFrame | None, epochs: bool = True) -> dict[tuple, list[dict[str, Any]]]:
    """A table's rows by (provider, dataset, case_id[, epoch]), in the table's order."""
    out: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    if table is None or table.empty:
        return out
    for row in plain(table.to_dict("records")):
        key = (row["provider"], row["dataset"], row["case_id"])
        out[(*key, int(row.get("epoch") or 0)) if epochs else key].append(row)
    return out


def _codes_of(row: dict[str, Any], prefix: str) -> dict[str, Any]:
    names = ("success", "error_code", "agent_error_code", "reconcile_error_code")
    return {name: row[f"{prefix}_{name}"] for name in names if row.get(f"{prefix}_{name}") is not None}


def table_details(loaded: LoadedRun, facts: dict) -> list[tuple[str, dict[str, Any]]]:
    """(provider, detail) of every unit of a run directory without units.jsonl, from its tables: facts, faults,
    anomalies and (one epoch) ops; the conversation, model calls, memories and failed writes are not in them."""
    run = loaded.run
    faults, anomalies = _by_unit(run.table("faults")), _by_unit(run.table("anomalies"))
    ops = _by_unit(run.table("ops"), epochs=False) if loaded.manifest.epochs == 1 else {}  # ops has no epoch
    out = []
    cases = run.table("cases")
    for row in plain(cases.to_dict("records") if cases is not None else []):
        key = (row["provider"], row["dataset"], row["case_id"], int(row.get("epoch") or 0))
        found = [a for a in anomalies.get(key, []) if a["outcome"] != "indeterminate"]

        def where(a: dict[str, Any]) -> str:
            if a.get("fault"):
                return f"write {a['write']} {a['site']}×{a['fault']}"
            return f"{a['site']} check" + (f", write {a['write']}" if (a.get("write") or 0) >= 0 else "")

        out.append((row["provider"], {
            "arm": row["provider"], "dataset": row["dataset"], "case_id": row["case_id"], "epoch": key[3],
            "lang": row["lang"], "tags": row.get("tags") or [], "system": row.get("system") or "hymem",
            "status": row["status"], "error": row.get("error"), "seconds": row.get("seconds") or 0.0,
            "n_writes": row.get("n_writes") or 0,
            "failed_writes": [], "facts": dict(facts.get(key, {})), "memories": [], "profile": None, "writes": [],
            "faults": [{"write": f["write"], "path": f["path"], "site": f["site"], "kind": f["kind"],
                        "occurrence": f.get("occurrence") or 0, "fired": bool(f.get("fired")), "outcome": f["outcome"],
                        "expected": _codes_of(f, "expected"), "actual": _codes_of(f, "actual"),
                        "retry_success": f.get("retry_success"), "injected": {},
                        "anomalies": [{"kind": a["kind"], "witness": a["witness"]} for a in anomalies.get(key, [])
                                      if a.get("fault") == f["kind"] and a["site"] == f["site"]
                                      and a["write"] == f["write"]]}
                       for f in faults.get(key, [])],
            "anomalies": [{"kind": a["kind"], "where": where(a), "witness": a["witness"]} for a in found],
            "attempts": [], "record": False,
            "ops": [{k: o.get(k) for k in ("write", "source", "op", "fact_text", "fact_subject", "target_id",
                                           "target_text", "target_subject", "cross_subject", "refused")}
                    for o in ops.get(key[:3], [])],
        }))
    return out


def _details(loaded: LoadedRun, facts: dict | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(provider, detail) of every unit of a run, by dataset, case and epoch: from units.jsonl, else the tables."""
    facts = facts if facts is not None else {}
    if loaded.units is None:
        pairs = table_details(loaded, facts)
    else:
        pairs = [(u.provider, unit_detail(u, u.provider, facts.get((u.provider, u.dataset, u.case_id, u.epoch), {})))
                 for u in loaded.units]
    return sorted(pairs, key=lambda pair: (pair[1]["dataset"], pair[1]["case_id"], pair[1]["epoch"]))


# ---- the page's data ----------------------------------------------------------------------------------------


@dataclass
class PageData:
    """What the template lays out: run headers, headline tables, plots, and the cases with their units."""

    runs: list[dict[str, Any]]  # per run: label, path, manifest (as a dict), verdict, reasons, card, headline, ...
    arms: list[Arm]
    cases: list[dict[str, Any]]  # one per (dataset, case_id): summary per arm, for the list
    units: list[dict[str, Any]]  # unit detail, indexed by the cases' `units` entries
    comparison: list[dict[str, Any]] = field(default_factory=list)  # per arm pair: headline deltas
    anomaly_kinds: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _cell(run: Run, provider: str, dataset: str, name: str) -> dict[str, Any] | None:
    row = run.metric_index.get((provider, dataset, name))
    if row is None:
        return None
    entry = find(name)
    value = row["value"]
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    rate = entry is not None and entry.is_rate and not missing
    return {"value": format_value(name, value), "n": plain(row["n"]), "missing": missing,
            "ci": f"[{format_value(name, row['ci_low'])}, {format_value(name, row['ci_high'])}]" if rate else ""}


def headline(loaded: LoadedRun) -> dict[str, dict[str, Any]]:
    """Per dataset ("all" first): the providers and, per headline metric any of them has, each one's value with
    its CI and n (None where a provider has no such metric)."""
    run = loaded.run
    datasets = ["all", *sorted(set(run.metrics["dataset"]) - {"all"})]
    names = [*HEADLINE, *(REPEAT_METRICS if loaded.manifest.epochs > 1 else ())]
    out = {}
    for dataset in datasets:
        rows = []
        for name in names:
            cells = [_cell(run, p, dataset, name) for p in run.providers]
            if all(c is None for c in cells):
                continue
            entry = find(name)
            better = "" if entry is None else "↓" if entry.lower_is_better else "↑" if entry.direction == "higher" else ""
            rows.append({"metric": name, "better": better, "meaning": entry.meaning if entry else "", "cells": cells})
        out[dataset] = {"providers": run.providers, "rows": rows}
    return out


def verdict_and_reasons(loaded: LoadedRun) -> tuple[str, list[str]]:
    """The recorded verdict and the reasons for it, from the units (as `run` prints them)."""
    coverage = loaded.run.table("coverage")
    if loaded.units is None:
        verdict, reasons = loaded.manifest.verdict or "unknown", [
            f"this run directory keeps no {UNITS_FILE}, which the reasons are read from: see its summary.md"]
    else:
        verdict, reasons = run_verdict(loaded.units, loaded.manifest, coverage)
    recorded = loaded.manifest.verdict
    if loaded.manifest.finished is None:
        return "unfinished", ["the run has not finished (stopped while running or writing its report): the tables "
                              "may be partial; continue it with --resume",
                              *unfinished_lines(loaded.path, loaded.manifest), *reasons]
    return recorded or verdict, reasons


def coverage_lines(loaded: LoadedRun) -> list[dict[str, Any]]:
    coverage = loaded.run.table("coverage")
    if coverage is None or coverage.empty or loaded.manifest.faults == "none":  # no fault planned: nothing to reach
        return []
    out = []
    for provider in dict.fromkeys(coverage["provider"]):
        mine = coverage[coverage["provider"] == provider]
        unreached = mine[~mine["reached"].astype(bool)]
        out.append({"provider": provider, "reached": int(mine["reached"].astype(bool).sum()), "total": len(mine),
                    "unreached": [f"{s}×{k}" for s, k in zip(unreached["site"], unreached["kind"], strict=True)]})
    return out


def _flaky(loaded: LoadedRun) -> dict[tuple[str, str, str], list[str]]:
    table = loaded.run.table("stability")
    if table is None or table.empty:
        return {}

    return flaky_cases(table)


def _unmeasured(row: dict[str, Any], prefix: str) -> bool:
    """No value and no unit counted: the arm has nothing for this metric."""
    value, n = row[f"{prefix}_value"], row[f"{prefix}_n"]
    return (value is None or math.isnan(value)) and (n is None or math.isnan(n) or n == 0)


def _flips(runs: list[LoadedRun], arms: list[Arm]) -> tuple[list[dict[str, Any]], dict[tuple[str, str], list[dict]],
                                                            list[str]]:
    """Headline deltas per arm pair and each case's flipped metrics, as `compare` finds them (none for one arm)."""
    if len(arms) < 2:
        return [], {}, []
    try:
        comparison = compare_runs([r.run for r in runs])
    except RunInputError as exc:
        return [], {}, [f"no comparison: {exc}"]
    labels = {a.label for a in arms}
    pairs = []
    for a_label, b_label in comparison.labels:
        d = comparison.deltas
        rows = d[(d["a"] == a_label) & (d["b"] == b_label) & (d["dataset"] == "all") & d["metric"].isin(HEADLINE)]
        table = []
        for row in rows.to_dict("records"):
            def side(prefix: str, row: dict = row) -> str:
                values = {k: row[f"{prefix}_{k}"] for k in ("value", "ci_low", "ci_high", "n")}
                if values["n"] is None or (isinstance(values["n"], float) and math.isnan(values["n"])):
                    return "—"
                return format_ci(row["metric"], values["value"], values["ci_low"], values["ci_high"], int(values["n"]))

            if _unmeasured(row, "a") and _unmeasured(row, "b"):
                continue  # measured in neither arm (e.g. the fault rates of a run without faults)
            name, delta = row["metric"], row["delta"]
            table.append({"metric": name, "a": side("a"), "b": side("b"),
                          "delta": format_value(name, delta, signed=True),
                          "ci": (f"[{format_value(name, row['delta_ci_low'], signed=True)}, "
                                 f"{format_value(name, row['delta_ci_high'], signed=True)}]"
                                 if row["paired"] and not math.isnan(row["delta_ci_low"]) else ""),
                          "n_paired": int(row["n_paired"]) if row["paired"] else ""})
        pairs.append({"a": a_label, "b": b_label, "rows": table})
    flips: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in comparison.cases.to_dict("records"):
        if row["a"] in labels and row["b"] in labels:
            flips[(row["dataset"], row["case_id"])].append(
                {"a": row["a"], "b": row["b"], "metric": plain(row["metric"]), "change": row["change"],
                 "a_value": plain(row["a_value"]), "b_value": plain(row["b_value"])})
    return pairs, flips, []


def page_data(runs: list[LoadedRun]) -> PageData:
    """Project the runs into the page's data: one case row per (dataset, case_id), its units' details apart."""
    arms = arms_of(runs)
    arm_index = {(a.run, a.provider): i for i, a in enumerate(arms)}
    comparison, flips, notes = _flips(runs, arms)
    cases: dict[tuple[str, str], dict[str, Any]] = {}
    units: list[dict[str, Any]] = []
    kinds: dict[str, int] = defaultdict(int)
    counted = [0] * len(runs)  # units per run
    for r, loaded in enumerate(runs):
        facts = facts_by_unit(loaded.run.table("facts"))
        flaky = _flaky(loaded)
        for provider, detail in _details(loaded, facts):
            a = arm_index[(r, provider)]
            detail["arm"] = arms[a].label
            units.append(detail)
            counted[r] += 1
            dataset, case_id = detail["dataset"], detail["case_id"]
            case = cases.setdefault((dataset, case_id), {
                "dataset": dataset, "case_id": case_id, "lang": detail["lang"], "tags": list(detail["tags"]),
                "arms": {}, "flips": flips.get((dataset, case_id), [])})
            cell = case["arms"].setdefault(str(a), {"units": [], "epochs": 0, "wrong": 0, "gold": 0, "anomalies": 0,
                                                    "kinds": [], "failed": 0, "infra_error": False,
                                                    "flaky": flaky.get((provider, dataset, case_id), [])})
            cell["units"].append(len(units) - 1)
            cell["epochs"] += 1
            stored = detail["facts"].get("stored", [])
            cell["wrong"] += wrong_facts(stored)
            cell["gold"] += sum(f["gold"] is not None for f in stored)
            cell["anomalies"] += len(detail["anomalies"])
            cell["kinds"] = sorted({*cell["kinds"], *(x["kind"] for x in detail["anomalies"])})
            cell["failed"] += len(detail["failed_writes"])
            cell["infra_error"] |= detail["status"] == "infra_error"
            for x in detail["anomalies"]:
                kinds[x["kind"]] += 1
    for case in cases.values():  # per epoch, as the summary's worst cases: K epochs are not K times the faults
        for cell in case["arms"].values():
            for key in ("wrong", "gold", "anomalies", "failed"):
                cell[key] = round(cell[key] / max(1, cell["epochs"]), 2)
    headers = []
    for r, (loaded, label) in enumerate(zip(runs, run_labels(runs), strict=True)):
        verdict, reasons = verdict_and_reasons(loaded)
        headers.append({"label": label, "path": str(loaded.path), "manifest": plain(loaded.manifest.model_dump()),
                        "verdict": verdict, "reasons": reasons, "card": card_line(loaded.manifest.matcher),
                        "headline": headline(loaded), "coverage": coverage_lines(loaded), "units": counted[r]})
    return PageData(runs=headers, arms=arms, cases=list(cases.values()), units=units, comparison=comparison,
                    anomaly_kinds=dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))), notes=notes)


def plot_images(loaded: LoadedRun) -> list[tuple[str, bytes]]:
    """The run's PNG plots as (name, bytes): the ones `run` wrote into RUN/plots/, else drawn now in a scratch
    directory (a view never writes into the run it reads)."""
    from evals.report.plots import PLOTS_DIR  # lazy: matplotlib loads only when the page embeds plots

    folder = loaded.path / PLOTS_DIR
    found = [(name, (folder / f"{name}.png").read_bytes()) for name in PLOT_NAMES if (folder / f"{name}.png").is_file()]
    if found:
        return found
    import tempfile

    # lazy: matplotlib loads only when the page embeds plots
    from evals.report.plots import confusion_plot, fault_plot, providers_plot, stability_plot

    with tempfile.TemporaryDirectory(prefix="hymem-view-") as tmp:
        out = Path(tmp)
        drawn = [("providers", providers_plot(loaded.run, out / "providers.png")),
                 ("subject_confusion", confusion_plot(loaded.run, out / "subject_confusion.png")),
                 ("fault_matrix", fault_plot(loaded.run, out / "fault_matrix.png")),
                 ("stability", stability_plot(loaded.run, out / "stability.png"))]
        return [(name, path.read_bytes()) for name, path in drawn if path is not None]


__all__ = ["Arm", "LoadedRun", "PageData", "arms_of", "counted_anomalies", "facts_by_unit", "failed_writes", "load",
           "page_data", "plain", "plot_images", "unit_detail", "wrong_facts"]
